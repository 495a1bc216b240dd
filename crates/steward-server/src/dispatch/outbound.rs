//! Outbound safety: where Steward may send a request at all.
//!
//! By default a destination must be `https` and must not resolve to a loopback, private,
//! link-local or otherwise internal address. `--allow-insecure-destinations` lifts both rules for
//! local fixtures. The check runs before an attempt is recorded (a refused destination is
//! `failed`, never sent), and again inside the HTTP client's resolver, so a name that resolves
//! differently at connect time still cannot reach an internal address.

use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use steward_core::Destination;
use url::Url;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutboundPolicy {
    pub allow_insecure: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OutboundError {
    #[error("the destination URL is not valid")]
    BadUrl,
    #[error("the destination must use https (start the server with --allow-insecure-destinations for local fixtures)")]
    NotHttps,
    #[error("the destination {host} is a loopback, private or internal address (start the server with --allow-insecure-destinations for local fixtures)")]
    Internal { host: String },
    #[error("the destination host {host} could not be resolved")]
    Unresolvable { host: String },
}

fn internal_v4(ip: Ipv4Addr) -> bool {
    let [a, b, ..] = ip.octets();
    ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_unspecified()
        || ip.is_broadcast()
        || ip.is_multicast()
        || ip.is_documentation()
        || a == 0
        || (a == 100 && (64..128).contains(&b)) // carrier-grade NAT
        || (a == 198 && (b == 18 || b == 19)) // benchmarking
        || a >= 240
}

/// The IPv4 address an IPv6 address carries, when it carries one that a network can route to:
/// IPv4-mapped `::ffff:a.b.c.d`, IPv4-compatible `::a.b.c.d` (deprecated, still routed by some
/// stacks), NAT64 `64:ff9b::/96` (RFC 6052) and local-use NAT64 `64:ff9b:1::/48` (RFC 8215, the
/// IPv4 address in the last 32 bits as with the well-known prefix), and 6to4 `2002:a.b.c.d::/48`
/// (RFC 3056). Such an address reaches whatever its IPv4 address reaches.
fn embedded_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = ip.segments();
    let last32 =
        |hi: u16, lo: u16| Ipv4Addr::new((hi >> 8) as u8, hi as u8, (lo >> 8) as u8, lo as u8);
    if let Some(v4) = ip.to_ipv4_mapped() {
        return Some(v4);
    }
    // `::` and `::1` are IPv6's own unspecified and loopback addresses, not IPv4-compatible ones.
    if s[..6] == [0; 6] && !ip.is_unspecified() && !ip.is_loopback() {
        return Some(last32(s[6], s[7]));
    }
    if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] || (s[0] == 0x64 && s[1] == 0xff9b && s[2] == 1) {
        return Some(last32(s[6], s[7]));
    }
    if s[0] == 0x2002 {
        return Some(last32(s[1], s[2]));
    }
    None
}

fn internal_v6(ip: Ipv6Addr) -> bool {
    if let Some(v4) = embedded_v4(ip) {
        return internal_v4(v4);
    }
    let first = ip.segments()[0];
    ip.is_loopback()
        || ip.is_unspecified()
        || ip.is_multicast()
        || (first & 0xfe00) == 0xfc00 // unique local
        || (first & 0xffc0) == 0xfe80 // link local
}

pub fn is_internal(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => internal_v4(v4),
        IpAddr::V6(v6) => internal_v6(v6),
    }
}

impl OutboundPolicy {
    /// Checks scheme and address before anything is recorded or sent. Returns where the request
    /// goes (scheme, host, port), for the secrets' `allowedHosts`.
    pub async fn check(&self, url: &str) -> Result<Destination, OutboundError> {
        let parsed = Url::parse(url).map_err(|_| OutboundError::BadUrl)?;
        let host = parsed
            .host_str()
            .ok_or(OutboundError::BadUrl)?
            .trim_matches(['[', ']'])
            .to_string();
        match parsed.scheme() {
            "https" => {}
            "http" if self.allow_insecure => {}
            _ => return Err(OutboundError::NotHttps),
        }
        let port = parsed
            .port_or_known_default()
            .ok_or(OutboundError::BadUrl)?;
        let destination =
            Destination::new(parsed.scheme(), &host, port).ok_or(OutboundError::BadUrl)?;
        if self.allow_insecure {
            return Ok(destination);
        }
        let addrs: Vec<IpAddr> = match host.parse::<IpAddr>() {
            Ok(ip) => vec![ip],
            Err(_) => tokio::net::lookup_host((host.as_str(), port))
                .await
                .map_err(|_| OutboundError::Unresolvable { host: host.clone() })?
                .map(|a| a.ip())
                .collect(),
        };
        if addrs.is_empty() || addrs.iter().any(|ip| is_internal(*ip)) {
            return Err(OutboundError::Internal { host });
        }
        Ok(destination)
    }
}

/// The HTTP client's resolver: drops internal addresses unless insecure destinations are allowed.
pub struct GuardedResolver {
    pub policy: OutboundPolicy,
}

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let allow = self.policy.allow_insecure;
        Box::pin(async move {
            let found: Vec<SocketAddr> =
                tokio::net::lookup_host((name.as_str(), 0)).await?.collect();
            let kept: Vec<SocketAddr> = found
                .into_iter()
                .filter(|a| allow || !is_internal(a.ip()))
                .collect();
            if kept.is_empty() {
                let err: Box<dyn std::error::Error + Send + Sync> =
                    format!("{} resolves only to internal addresses", name.as_str()).into();
                return Err(err);
            }
            let addrs: Addrs = Box::new(kept.into_iter());
            Ok(addrs)
        })
    }
}

/// The HTTP client Steward dispatches with: no redirects (a redirect could carry a credential to
/// another host), the guarded resolver, and no proxy from the environment.
pub fn http_client(policy: OutboundPolicy) -> reqwest::Result<reqwest::Client> {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .dns_resolver(std::sync::Arc::new(GuardedResolver { policy }))
        .no_proxy()
        .build()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn internal_addresses() {
        for ip in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "::1",
            "fd00::1",
            "fe80::1",
            "::ffff:127.0.0.1",
            "0.0.0.0",
        ] {
            assert!(is_internal(ip.parse().unwrap()), "{ip}");
        }
        for ip in ["93.184.216.34", "2606:4700::1111"] {
            assert!(!is_internal(ip.parse().unwrap()), "{ip}");
        }
    }

    #[test]
    fn ipv4_embedded_in_ipv6_is_judged_by_its_ipv4_address() {
        for ip in [
            // IPv4-compatible
            "::127.0.0.1",
            "::10.0.0.1",
            "::169.254.169.254",
            // NAT64, well-known prefix and local-use prefix
            "64:ff9b::127.0.0.1",
            "64:ff9b::a9fe:a9fe",
            "64:ff9b::192.168.0.1",
            "64:ff9b:1::10.1.2.3",
            "64:ff9b:1:abcd::7f00:1",
            // 6to4
            "2002:7f00:1::",
            "2002:a00:1::1",
            "2002:a9fe:a9fe:1::1",
        ] {
            assert!(is_internal(ip.parse().unwrap()), "{ip}");
        }
        for ip in [
            "::93.184.216.34",
            "64:ff9b::93.184.216.34",
            "64:ff9b:1::5db8:d822",
            "2002:5db8:d822::1",
        ] {
            assert!(!is_internal(ip.parse().unwrap()), "{ip}");
        }
    }

    #[tokio::test]
    async fn strict_policy_refuses_http_and_loopback() {
        let strict = OutboundPolicy {
            allow_insecure: false,
        };
        assert_eq!(
            strict.check("http://example.com/x").await,
            Err(OutboundError::NotHttps)
        );
        assert!(matches!(
            strict.check("https://127.0.0.1:9/x").await,
            Err(OutboundError::Internal { .. })
        ));
        assert!(matches!(
            strict.check("https://localhost/x").await,
            Err(OutboundError::Internal { .. })
        ));
        let open = OutboundPolicy {
            allow_insecure: true,
        };
        assert_eq!(
            open.check("http://127.0.0.1:9/x").await.unwrap(),
            Destination::new("http", "127.0.0.1", 9).unwrap()
        );
        assert_eq!(
            open.check("http://[::1]/x").await.unwrap(),
            Destination::new("http", "::1", 80).unwrap()
        );
    }
}
