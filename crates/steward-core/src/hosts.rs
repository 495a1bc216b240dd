//! `allowedHosts`: where a secret may be sent, as scheme, host and port.
//!
//! An entry is `host`, `host:port`, `.domain` (the domain and its subdomains) or `.domain:port`,
//! optionally prefixed by `https://` or `http://`; an IPv6 address is written in brackets
//! (`[::1]:8443`). An entry without a port allows only the scheme's default port (443 for https,
//! 80 for http); an entry without a scheme allows both schemes (each on its own default port when
//! no port is named). So `127.0.0.1` no longer covers a fixture on `127.0.0.1:4242`, nor another
//! service on the same machine: the port is part of the destination.

use std::fmt;
use std::net::{IpAddr, Ipv6Addr};

/// The longest host name, in bytes (RFC 1035's limit for a whole name).
const HOST_NAME_LEN_MAX: usize = 253;

/// The schemes Steward sends requests with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Scheme {
    Http,
    Https,
}

impl Scheme {
    pub fn parse(text: &str) -> Option<Scheme> {
        match text.to_ascii_lowercase().as_str() {
            "http" => Some(Scheme::Http),
            "https" => Some(Scheme::Https),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Scheme::Http => "http",
            Scheme::Https => "https",
        }
    }

    /// The port a URL of this scheme uses when it names none.
    pub fn default_port(self) -> u16 {
        match self {
            Scheme::Http => 80,
            Scheme::Https => 443,
        }
    }
}

/// Where one request goes: its URL's scheme, host and port (the scheme's default when the URL
/// names none).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Destination {
    pub scheme: Scheme,
    /// Lower case, without brackets or a trailing dot; an IP address in its canonical form.
    pub host: String,
    pub port: u16,
}

impl Destination {
    /// `None` for a scheme Steward does not send with or an empty host.
    pub fn new(scheme: &str, host: &str, port: u16) -> Option<Destination> {
        let host = host.trim_start_matches('[').trim_end_matches(']');
        if host.is_empty() {
            return None;
        }
        Some(Destination {
            scheme: Scheme::parse(scheme)?,
            host: canonical_host(host),
            port,
        })
    }
}

impl fmt::Display for Destination {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://", self.scheme.name())?;
        write_host(f, &self.host)?;
        write!(f, ":{}", self.port)
    }
}

/// Why an `allowedHosts` entry is not one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HostRuleError {
    #[error("is empty")]
    Empty,
    #[error("has a scheme other than https:// or http://")]
    BadScheme,
    #[error("has a path, query, fragment or user; write only [scheme://]host[:port]")]
    NotJustAHost,
    #[error("is not a host name, an IPv4 address or a bracketed IPv6 address")]
    BadHost,
    #[error("has a port that is not a number from 1 to 65535")]
    BadPort,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum HostPattern {
    /// Exactly this host (canonical form).
    Exact(String),
    /// This domain and every name under it.
    Domain(String),
}

impl HostPattern {
    fn matches(&self, host: &str) -> bool {
        match self {
            HostPattern::Exact(h) => host == h,
            HostPattern::Domain(d) => host == d || host.ends_with(&format!(".{d}")),
        }
    }

    /// True when every host this pattern allows, `wider` allows too.
    fn within(&self, wider: &HostPattern) -> bool {
        match (self, wider) {
            (HostPattern::Exact(h), w) => w.matches(h),
            (HostPattern::Domain(n), HostPattern::Domain(_)) => wider.matches(n),
            (HostPattern::Domain(_), HostPattern::Exact(_)) => false,
        }
    }
}

/// One parsed `allowedHosts` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostRule {
    scheme: Option<Scheme>,
    host: HostPattern,
    port: Option<u16>,
}

impl HostRule {
    /// Parses an entry (case-insensitive, surrounding spaces ignored).
    pub fn parse(text: &str) -> Result<HostRule, HostRuleError> {
        let text = text.trim().to_ascii_lowercase();
        if text.is_empty() {
            return Err(HostRuleError::Empty);
        }
        let (scheme, rest) = match text.split_once("://") {
            Some((scheme, rest)) => (
                Some(Scheme::parse(scheme).ok_or(HostRuleError::BadScheme)?),
                rest,
            ),
            None => (None, text.as_str()),
        };
        let rest = rest.strip_suffix('/').unwrap_or(rest);
        if rest.contains(['/', '?', '#', '@', '\\']) {
            return Err(HostRuleError::NotJustAHost);
        }
        let (host, port) = if let Some(after) = rest.strip_prefix('[') {
            let (v6, tail) = after.split_once(']').ok_or(HostRuleError::BadHost)?;
            let v6: Ipv6Addr = v6.parse().map_err(|_| HostRuleError::BadHost)?;
            let port = match tail {
                "" => None,
                _ => Some(parse_port(
                    tail.strip_prefix(':').ok_or(HostRuleError::BadPort)?,
                )?),
            };
            (HostPattern::Exact(v6.to_string()), port)
        } else if let Ok(v6) = rest.parse::<Ipv6Addr>() {
            (HostPattern::Exact(v6.to_string()), None)
        } else {
            let (host, port) = match rest.rsplit_once(':') {
                Some((host, port)) => (host, Some(parse_port(port)?)),
                None => (rest, None),
            };
            let host = host.strip_suffix('.').unwrap_or(host);
            let pattern = match host.strip_prefix('.') {
                Some(domain) if is_host_name(domain) => HostPattern::Domain(domain.to_string()),
                Some(_) => return Err(HostRuleError::BadHost),
                None if host.parse::<IpAddr>().is_ok() => HostPattern::Exact(canonical_host(host)),
                None if is_host_name(host) => HostPattern::Exact(host.to_string()),
                None => return Err(HostRuleError::BadHost),
            };
            (pattern, port)
        };
        Ok(HostRule { scheme, host, port })
    }

    /// The (scheme, port) pairs this entry allows.
    fn endpoints(&self) -> Vec<(Scheme, u16)> {
        let schemes = match self.scheme {
            Some(s) => vec![s],
            None => vec![Scheme::Http, Scheme::Https],
        };
        schemes
            .into_iter()
            .map(|s| (s, self.port.unwrap_or(s.default_port())))
            .collect()
    }

    pub fn matches(&self, destination: &Destination) -> bool {
        self.host.matches(&destination.host)
            && self
                .endpoints()
                .contains(&(destination.scheme, destination.port))
    }
}

impl fmt::Display for HostRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(s) = self.scheme {
            write!(f, "{}://", s.name())?;
        }
        match &self.host {
            HostPattern::Exact(h) => write_host(f, h)?,
            HostPattern::Domain(d) => write!(f, ".{d}")?,
        }
        if let Some(p) = self.port {
            write!(f, ":{p}")?;
        }
        Ok(())
    }
}

fn parse_port(text: &str) -> Result<u16, HostRuleError> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(HostRuleError::BadPort);
    }
    match text.parse::<u16>() {
        Ok(p) if p > 0 => Ok(p),
        _ => Err(HostRuleError::BadPort),
    }
}

/// A DNS name: labels of letters, digits and `-`, not starting or ending with `-`, the last
/// one not all digits (so that `.0.1` cannot stand for the end of an IPv4 address).
fn is_host_name(host: &str) -> bool {
    let labels: Vec<&str> = host.split('.').collect();
    !host.is_empty()
        && host.len() <= HOST_NAME_LEN_MAX
        && labels.iter().all(|l| {
            !l.is_empty()
                && !l.starts_with('-')
                && !l.ends_with('-')
                && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        })
        && !labels
            .last()
            .is_some_and(|l| l.bytes().all(|b| b.is_ascii_digit()))
}

/// Lower case, no trailing dot, an IP address in its canonical form.
fn canonical_host(host: &str) -> String {
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    match host.parse::<IpAddr>() {
        Ok(ip) => ip.to_string(),
        Err(_) => host,
    }
}

fn write_host(f: &mut fmt::Formatter<'_>, host: &str) -> fmt::Result {
    if host.contains(':') {
        write!(f, "[{host}]")
    } else {
        f.write_str(host)
    }
}

/// True when some entry of `allowed` allows `destination`. An entry that does not parse (one
/// stored before entries were checked) allows nothing.
pub fn host_allowed(allowed: &[String], destination: &Destination) -> bool {
    allowed
        .iter()
        .filter_map(|e| HostRule::parse(e).ok())
        .any(|r| r.matches(destination))
}

/// True when every destination that `narrower` allows is allowed by `wider`. `None` means
/// unrestricted. An entry of `narrower` that does not parse is never within.
pub fn hosts_within(narrower: Option<&[String]>, wider: Option<&[String]>) -> bool {
    let (narrow, wide) = match (narrower, wider) {
        (_, None) => return true,
        (None, Some(_)) => return false,
        (Some(n), Some(w)) => (n, w),
    };
    let wide: Vec<HostRule> = wide
        .iter()
        .filter_map(|w| HostRule::parse(w).ok())
        .collect();
    narrow.iter().all(|n| {
        let Ok(n) = HostRule::parse(n) else {
            return false;
        };
        n.endpoints().into_iter().all(|endpoint| {
            wide.iter()
                .any(|w| n.host.within(&w.host) && w.endpoints().contains(&endpoint))
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dest(url_scheme: &str, host: &str, port: u16) -> Destination {
        Destination::new(url_scheme, host, port).unwrap()
    }

    fn allowed(entries: &[&str], d: &Destination) -> bool {
        let list: Vec<String> = entries.iter().map(|s| s.to_string()).collect();
        host_allowed(&list, d)
    }

    fn canonical(text: &str) -> String {
        HostRule::parse(text).unwrap().to_string()
    }

    #[test]
    fn host_patterns() {
        let api = dest("https", "API.stripe.com", 443);
        assert!(allowed(&["api.stripe.com"], &api));
        assert!(!allowed(
            &["api.stripe.com"],
            &dest("https", "evil-api.stripe.com", 443)
        ));
        assert!(allowed(&[".stripe.com"], &api));
        assert!(allowed(&[".stripe.com"], &dest("https", "stripe.com", 443)));
        assert!(!allowed(
            &[".stripe.com"],
            &dest("https", "notstripe.com", 443)
        ));
    }

    #[test]
    fn an_entry_without_a_port_allows_only_the_default_port() {
        let other_port = dest("http", "127.0.0.1", 4242);
        assert!(!allowed(&["127.0.0.1"], &other_port));
        assert!(allowed(&["127.0.0.1:4242"], &other_port));
        assert!(!allowed(&["127.0.0.1:4243"], &other_port));
        assert!(allowed(&["127.0.0.1"], &dest("http", "127.0.0.1", 80)));
        assert!(allowed(
            &["api.stripe.com"],
            &dest("https", "api.stripe.com", 443)
        ));
        // 443 is https's default, not http's.
        assert!(!allowed(
            &["api.stripe.com"],
            &dest("http", "api.stripe.com", 443)
        ));
        assert!(!allowed(
            &["api.stripe.com"],
            &dest("https", "api.stripe.com", 80)
        ));
        assert!(allowed(
            &[".stripe.com:8443"],
            &dest("https", "a.stripe.com", 8443)
        ));
    }

    #[test]
    fn a_scheme_in_the_entry_allows_only_that_scheme() {
        assert!(allowed(
            &["https://api.stripe.com"],
            &dest("https", "api.stripe.com", 443)
        ));
        assert!(!allowed(
            &["https://api.stripe.com"],
            &dest("http", "api.stripe.com", 80)
        ));
        assert!(!allowed(
            &["https://api.stripe.com"],
            &dest("http", "api.stripe.com", 443)
        ));
        assert!(allowed(
            &["http://127.0.0.1:9"],
            &dest("http", "127.0.0.1", 9)
        ));
        assert!(!allowed(
            &["http://127.0.0.1:9"],
            &dest("https", "127.0.0.1", 9)
        ));
    }

    #[test]
    fn ipv6_entries_are_bracketed_and_canonical() {
        let d = dest("http", "[0:0::1]", 8080);
        assert_eq!(d.host, "::1");
        assert!(allowed(&["[::1]:8080"], &d));
        assert!(allowed(&["http://[0::1]:8080/"], &d));
        assert!(!allowed(&["[::1]"], &d));
        assert!(!allowed(&["[::2]:8080"], &d));
        assert_eq!(canonical("[0:0::1]:8080"), "[::1]:8080");
        assert_eq!(canonical("::1"), "[::1]");
    }

    #[test]
    fn entries_are_checked_and_written_canonically() {
        assert_eq!(canonical(" API.Stripe.com "), "api.stripe.com");
        assert_eq!(
            canonical("HTTPS://api.stripe.com:443/"),
            "https://api.stripe.com:443"
        );
        assert_eq!(canonical(".stripe.com"), ".stripe.com");
        assert_eq!(canonical("127.0.0.1:4242"), "127.0.0.1:4242");
        for (bad, why) in [
            ("", HostRuleError::Empty),
            ("ftp://x.example", HostRuleError::BadScheme),
            ("x.example/path", HostRuleError::NotJustAHost),
            ("user@x.example", HostRuleError::NotJustAHost),
            ("x.example:0", HostRuleError::BadPort),
            ("x.example:65536", HostRuleError::BadPort),
            ("x.example:", HostRuleError::BadPort),
            ("x.example:+1", HostRuleError::BadPort),
            ("[::1", HostRuleError::BadHost),
            ("[::1]8080", HostRuleError::BadPort),
            ("[nope]:1", HostRuleError::BadHost),
            ("x_y.example", HostRuleError::BadHost),
            ("a..example", HostRuleError::BadHost),
            (".0.1", HostRuleError::BadHost),
            ("-a.example", HostRuleError::BadHost),
            (".", HostRuleError::BadHost),
        ] {
            assert_eq!(HostRule::parse(bad), Err(why), "{bad:?}");
        }
    }

    fn within(narrow: &[&str], wide: &[&str]) -> bool {
        let n: Vec<String> = narrow.iter().map(|s| s.to_string()).collect();
        let w: Vec<String> = wide.iter().map(|s| s.to_string()).collect();
        hosts_within(Some(&n), Some(&w))
    }

    #[test]
    fn narrowing_and_widening() {
        let wide = vec![".stripe.com".to_string()];
        let narrow = vec!["api.stripe.com".to_string()];
        assert!(hosts_within(Some(&narrow), Some(&wide)));
        assert!(!hosts_within(Some(&wide), Some(&narrow)));
        assert!(!hosts_within(None, Some(&narrow)));
        assert!(hosts_within(Some(&narrow), None));
    }

    #[test]
    fn a_rotation_cannot_widen_the_ports_or_schemes() {
        assert!(within(&["127.0.0.1:4242"], &["127.0.0.1:4242"]));
        assert!(!within(&["127.0.0.1:4243"], &["127.0.0.1:4242"]));
        assert!(!within(&["127.0.0.1"], &["127.0.0.1:4242"]));
        assert!(!within(&["127.0.0.1:4242"], &["127.0.0.1"]));
        assert!(within(&["https://api.stripe.com"], &["api.stripe.com"]));
        assert!(within(&["https://api.stripe.com:443"], &["api.stripe.com"]));
        assert!(!within(&["api.stripe.com"], &["https://api.stripe.com"]));
        // Both schemes, from two entries together.
        assert!(within(
            &["api.stripe.com"],
            &["https://api.stripe.com", "http://api.stripe.com"]
        ));
        assert!(within(&["a.stripe.com:8443"], &[".stripe.com:8443"]));
        assert!(!within(&["a.stripe.com:8443"], &[".stripe.com"]));
        assert!(!within(&["not an entry"], &["api.stripe.com"]));
    }
}
