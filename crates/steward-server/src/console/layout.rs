//! The page shell every console page shares, and the small answers (redirects, messages,
//! errors). Pages are maud templates: every interpolated value is HTML-escaped.

use super::session::{cleared_cookie, NotSignedIn, Operator};
use super::ConsoleMode;
use crate::error::ApiError;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use maud::{html, Markup, DOCTYPE};
use steward_core::scopes;

/// The only script a console page runs is the console's own file (`/console/live.js`, no inline
/// script, no `eval`), which talks only to this origin; no form posts anywhere else: a second
/// line behind the escaping, should a value ever slip through unescaped.
const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
    connect-src 'self'; style-src 'unsafe-inline'; img-src 'self'; form-action 'self'; \
    frame-ancestors 'none'; base-uri 'none'";

/// Where the console's one script is served (`live.rs`).
pub const LIVE_SCRIPT_PATH: &str = "/console/live.js";

const STYLE: &str = "
body{font-family:system-ui,sans-serif;margin:0;color:#1d232a;background:#f6f7f9;font-size:14px}
header{background:#1d2b3a;color:#fff;padding:.6rem 1rem;display:flex;gap:1rem;align-items:center;flex-wrap:wrap}
header a{color:#cfe3ff;text-decoration:none}header a:hover{text-decoration:underline}
header .who{margin-left:auto;color:#b8c4d0}
main{padding:1rem 1.4rem;max-width:1200px}
h1{font-size:1.3rem;margin:.2rem 0 1rem}h2{font-size:1.05rem;margin:1.2rem 0 .5rem}
table{border-collapse:collapse;width:100%;background:#fff;margin-bottom:1rem}
th,td{border:1px solid #d9dee4;padding:.35rem .5rem;text-align:left;vertical-align:top}
th{background:#eef1f4;font-weight:600}
pre{white-space:pre-wrap;word-break:break-word;margin:0;font-size:12px;max-width:420px}
.banner{padding:.6rem 1rem;margin-bottom:1rem;border-radius:4px}
.halted{background:#ffe1e1;border:1px solid #d33;color:#800}
.ok{background:#e3f6e8;border:1px solid #3a3}
.error{background:#fff0e0;border:1px solid #d80}
form.inline{display:inline-block;margin:.15rem 0}
input[type=text],input[type=password],textarea,select{font:inherit;padding:.25rem;border:1px solid #aab}
button{font:inherit;padding:.25rem .7rem;cursor:pointer}
button.danger{background:#b22;color:#fff;border:1px solid #900}
.muted{color:#667}.tag{display:inline-block;padding:0 .4rem;border-radius:3px;background:#e6e9ef}
header .live{color:#8fd19e;font-size:12px}
.cards{display:flex;gap:.8rem;flex-wrap:wrap;margin-bottom:1rem}
.card{background:#fff;border:1px solid #d9dee4;border-radius:6px;padding:.6rem 1rem;min-width:10rem;text-decoration:none;color:inherit}
.card .count{display:block;font-size:1.8rem;font-weight:600}.card.attention .count{color:#b25b00}
.card.halted .count{color:#b22}
form.filters{background:#fff;border:1px solid #d9dee4;padding:.5rem;margin-bottom:.8rem;display:flex;gap:.6rem;flex-wrap:wrap;align-items:end}
form.filters label{display:flex;flex-direction:column;font-size:12px;color:#445}
.pager{display:flex;gap:1rem;align-items:center}
ul.spans{list-style:none;padding-left:1.2rem;margin:0;border-left:1px dotted #aab}
ul.spans.root{border-left:none;padding-left:0}
ul.spans li{margin:.15rem 0}
details summary{cursor:pointer;color:#345}
";

/// An HTML answer with the console's headers: no caching (pages show live state and carry
/// a CSRF token), no framing, no script, and no referrer to other origins (`no-referrer` would
/// make Chromium send `Origin: null` with the console's own forms, which the guard refuses).
pub fn html(status: StatusCode, markup: Markup) -> Response {
    let mut response = (status, markup).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    response
}

/// `303 See Other` to `location`: after a form, the browser GETs the page it names.
pub fn see_other(location: &str) -> Response {
    let mut response = StatusCode::SEE_OTHER.into_response();
    if let Ok(value) = HeaderValue::from_str(location) {
        response.headers_mut().insert(header::LOCATION, value);
    }
    response
}

impl IntoResponse for NotSignedIn {
    fn into_response(self) -> Response {
        match self {
            NotSignedIn::NoCookie => see_other("/console/login"),
            NotSignedIn::SessionOver => {
                let mut answer = see_other("/console/login");
                answer
                    .headers_mut()
                    .insert(header::SET_COOKIE, cleared_cookie());
                answer
            }
            NotSignedIn::Unreadable(e) => error_page(&e),
        }
    }
}

/// A whole page: the navigation (when signed in), a halted-environment banner, and `body`.
pub fn page(title: &str, operator: Option<&Operator>, mode: ConsoleMode, body: Markup) -> Markup {
    shell(title, operator, mode, false, body)
}

/// [`page`], refreshed in place when the environment's event stream says something changed
/// (`live.rs`): for the pages a GET shows, never for an answer to a form.
pub fn live_page(title: &str, operator: &Operator, mode: ConsoleMode, body: Markup) -> Markup {
    shell(title, Some(operator), mode, true, body)
}

/// Whether the signed-in key holds `scope`: the navigation hides what the key cannot read.
pub fn can(operator: &Operator, scope: &str) -> bool {
    operator.caller.key.scopes.iter().any(|s| s == scope)
}

fn shell(
    title: &str,
    operator: Option<&Operator>,
    mode: ConsoleMode,
    live: bool,
    body: Markup,
) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · Steward console" }
                style { (maud::PreEscaped(STYLE)) }
                @if operator.is_some() {
                    script src=(LIVE_SCRIPT_PATH) defer {}
                }
            }
            body {
                header {
                    strong { "Steward" }
                    @if let Some(op) = operator {
                        a href="/console/" { "Overview" }
                        a href="/console/unknown" { "Unknown" }
                        a href="/console/invocations" { "Invocations" }
                        a href="/console/effects" { "Effects" }
                        @if can(op, scopes::RUNS_READ) { a href="/console/runs" { "Runs" } }
                        a href="/console/actions" { "Actions" }
                        a href="/console/policies" { "Policies" }
                        a href="/console/limits" { "Limits" }
                        a href="/console/keys" { "Keys" }
                        a href="/console/environment" { "Kill switch" }
                        a href="/console/holds" { "Holds" }
                        @if can(op, scopes::AUDIT_READ) { a href="/console/audit" { "Audit" } }
                        a href="/console/webhooks" { "Webhooks" }
                        span.live #live aria-live="polite" {}
                        span.who {
                            (op.caller.key.name) " (" (op.caller.key.id) ") in " (op.caller.env.name)
                            @if !mode.writable() { " · read-only" }
                            " "
                            form.inline method="post" action="/console/logout" {
                                (csrf_field(op))
                                button type="submit" { "Sign out" }
                            }
                        }
                    }
                }
                main data-live=[live.then_some("on")] {
                    @if let Some(op) = operator {
                        @if op.caller.env.halted {
                            div.banner.halted role="alert" {
                                strong { "This environment is halted." }
                                " Nothing is sent to any provider until it is resumed."
                                @if let Some(reason) = &op.caller.env.halt_reason {
                                    " Reason: " (reason)
                                }
                            }
                        }
                    }
                    h1 { (title) }
                    (body)
                }
            }
        }
    }
}

/// The hidden field every console form carries (`guard.rs` checks it).
pub fn csrf_field(operator: &Operator) -> Markup {
    html! { input type="hidden" name="csrf" value=(operator.csrf); }
}

/// A page with one message, signed in or not (refusals, errors).
pub fn message_page(status: StatusCode, title: &str, message: &str) -> Response {
    let body = html! {
        div.banner.error role="alert" { (message) }
        p { a href="/console/" { "Back to the console" } }
    };
    html(status, page(title, None, ConsoleMode::ReadOnly, body))
}

/// An API error as a page, with the API's status, code and message.
pub fn error_page(error: &ApiError) -> Response {
    message_page(
        error.status,
        "Refused",
        &format!("{} ({})", error.message, error.code),
    )
}

/// A banner saying what the last action did, or why it was refused (from `?done=` or an
/// error); shown above a page's content.
pub fn notice(done: Option<&str>, error: Option<&ApiError>) -> Markup {
    html! {
        @if let Some(error) = error {
            div.banner.error role="alert" { "Refused: " (error.message) " (" (error.code) ")" }
        }
        @if let Some(done) = done {
            div.banner.ok role="status" { (done) }
        }
    }
}

pub async fn not_found() -> Response {
    message_page(StatusCode::NOT_FOUND, "Not found", "no such console page")
}

/// A JSON value as indented text, for inputs, payloads and evidence data (escaped by maud).
pub fn json_text(value: &serde_json::Value) -> String {
    serde_json::to_string_pretty(value).unwrap_or_default()
}

/// A string field of a JSON object, or "" when absent.
pub fn text<'a>(value: &'a serde_json::Value, field: &str) -> &'a str {
    value.get(field).and_then(|v| v.as_str()).unwrap_or("")
}

/// The fixed message for a `?done=` code after a form succeeded; unknown codes show nothing,
/// so a crafted link cannot put words on the page.
pub fn done_message(code: &str) -> Option<&'static str> {
    Some(match code {
        "approved" => "Your approval was recorded.",
        "denied" => "Your denial was recorded; the agent sees it with your note.",
        "reconciled" => "Reconciled: the provider was asked (read-only) and the effect updated.",
        "resolved" => "Resolved by hand, with your evidence.",
        "halted" => "The environment is halted.",
        "resumed" => "The environment is resumed; parked work was dispatched once.",
        _ => return None,
    })
}

/// How long ago an RFC 3339 time of the API (`2026-12-02T11:17:44.123Z`) was, coarsely.
pub fn age(at: &str, now: steward_core::Millis) -> String {
    let Some(then) = parse_rfc3339_ms(at) else {
        return String::new();
    };
    let seconds = (now.0 - then).max(0) / 1000;
    match seconds {
        s if s < 120 => format!("{s} s"),
        s if s < 7200 => format!("{} min", s / 60),
        s if s < 172_800 => format!("{} h", s / 3600),
        s => format!("{} d", s / 86_400),
    }
}

/// A time as the console shows it: how long ago, with the exact UTC time on hover (`title`) and
/// in `datetime`; the time itself when it is not in the API's form, nothing when empty.
pub fn when(at: &str, now: steward_core::Millis) -> Markup {
    let ago = age(at, now);
    html! {
        @if ago.is_empty() { (at) } @else {
            time datetime=(at) title=(format!("{at} (UTC)")) { (ago) " ago" }
        }
    }
}

/// [`when`] for a time in milliseconds since the epoch.
pub fn when_ms(at: steward_core::Millis, now: steward_core::Millis) -> Markup {
    when(&at.to_rfc3339(), now)
}

/// The most bytes of a JSON value a list shows folded away; a larger one is cut there, with
/// its size, and read whole where the record is (the API, the timeline).
pub const FOLDED_JSON_BYTES_MAX: usize = 4 * 1024;

/// A JSON value folded under a one-line summary (`<details>`), at most
/// [`FOLDED_JSON_BYTES_MAX`] bytes of it.
pub fn folded_json(value: &serde_json::Value) -> Markup {
    let text = json_text(value);
    let size = text.len();
    let shown = if size > FOLDED_JSON_BYTES_MAX {
        let mut end = FOLDED_JSON_BYTES_MAX;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        &text[..end]
    } else {
        &text
    };
    html! {
        details.json {
            summary { (summary_of(value)) " · " (size) " bytes" }
            pre { (shown) @if shown.len() < size { "\n… cut at " (FOLDED_JSON_BYTES_MAX) " bytes" } }
        }
    }
}

/// A JSON value's first few fields, for a folded summary line: a scalar field with its value
/// (a long string cut), any other field by name.
fn summary_of(value: &serde_json::Value) -> String {
    /// How many fields a summary line names.
    const SUMMARY_FIELDS_MAX: usize = 4;
    /// How many characters of a string field a summary line shows.
    const SUMMARY_STRING_CHARS_MAX: usize = 40;
    use serde_json::Value;
    match value {
        Value::Object(map) => {
            let fields: Vec<String> = map
                .iter()
                .take(SUMMARY_FIELDS_MAX)
                .map(|(name, v)| match v {
                    Value::String(s) if s.chars().count() > SUMMARY_STRING_CHARS_MAX => {
                        let cut: String = s.chars().take(SUMMARY_STRING_CHARS_MAX).collect();
                        format!("{name}: \"{cut}…\"")
                    }
                    Value::String(_) | Value::Number(_) | Value::Bool(_) | Value::Null => {
                        format!("{name}: {v}")
                    }
                    _ => name.clone(),
                })
                .collect();
            let more = if map.len() > SUMMARY_FIELDS_MAX {
                ", …"
            } else {
                ""
            };
            format!("{{{}{more}}}", fields.join(", "))
        }
        Value::Array(items) => format!("[{} items]", items.len()),
        other => other
            .to_string()
            .chars()
            .take(SUMMARY_STRING_CHARS_MAX)
            .collect(),
    }
}

/// Milliseconds since the epoch of the API's own RFC 3339 form (UTC, milliseconds, `Z`).
pub fn parse_rfc3339_ms(at: &str) -> Option<i64> {
    let b = at.as_bytes();
    if b.len() != 24 || b[23] != b'Z' {
        return None;
    }
    let num = |from: usize, to: usize| at.get(from..to)?.parse::<i64>().ok();
    let (y, m, d) = (num(0, 4)?, num(5, 7)?, num(8, 10)?);
    let (hh, mm, ss, ms) = (num(11, 13)?, num(14, 16)?, num(17, 19)?, num(20, 23)?);
    // Howard Hinnant's days-from-civil, as steward-core's `time.rs`.
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some((((days * 24 + hh) * 60 + mm) * 60 + ss) * 1000 + ms)
}

#[cfg(test)]
mod tests {
    use super::*;
    use steward_core::Millis;

    #[test]
    fn ages_read_the_apis_own_times() {
        for ms in [0, 1_764_000_000_123, 951_782_400_000, 1_709_164_800_999] {
            let text = Millis(ms).to_rfc3339();
            assert_eq!(parse_rfc3339_ms(&text), Some(ms), "{text}");
        }
        let then = Millis(1_764_000_000_000);
        assert_eq!(age(&then.to_rfc3339(), then.plus_ms(65_000)), "65 s");
        assert_eq!(age(&then.to_rfc3339(), then.plus_ms(3 * 3_600_000)), "3 h");
        assert_eq!(age("yesterday", then), "");
    }

    #[test]
    fn a_time_shows_its_age_with_the_exact_utc_on_hover() {
        let then = Millis(1_764_000_000_000);
        let shown = when(&then.to_rfc3339(), then.plus_ms(3 * 60_000)).into_string();
        assert_eq!(
            shown,
            format!(
                "<time datetime=\"{at}\" title=\"{at} (UTC)\">3 min ago</time>",
                at = then.to_rfc3339()
            )
        );
        assert_eq!(when("<b>", then).into_string(), "&lt;b&gt;");
    }

    #[test]
    fn folded_json_is_cut_at_its_bound_and_escaped() {
        let big =
            serde_json::json!({"note": "<script>", "blob": "x".repeat(3 * FOLDED_JSON_BYTES_MAX)});
        let shown = folded_json(&big).into_string();
        assert!(
            shown.starts_with("<details class=\"json\"><summary>"),
            "{shown}"
        );
        assert!(shown.contains("cut at"));
        assert!(shown.len() < 2 * FOLDED_JSON_BYTES_MAX);
        assert!(!shown.contains("<script>") && shown.contains("&lt;script&gt;"));
        let halt = serde_json::json!({"halted": true, "reason": "incident 12"});
        assert!(folded_json(&halt)
            .into_string()
            .contains("reason: &quot;incident 12&quot;"));
    }

    #[test]
    fn only_known_done_codes_show_a_message() {
        assert!(done_message("approved").is_some());
        assert!(done_message("<script>").is_none());
    }
}
