//! The filters of the console's lists (invocations, effects, audit): read from the page's query
//! string and checked (a refusal names the field), written back into the filter form and into
//! the paging links, and the time-range window over a newest-first list.
//!
//! The API lists invocations and effects newest first (`created_at`, then id), so the items
//! created in a time range sit together in that order: [`window`] finds where the range starts
//! and ends by bisection, reading one item per probe, and the page is read from inside it. A
//! range over a million items costs about forty one-item reads; items recorded while an
//! operator pages shift a page by as many (the same as the API's own offsets).

use super::layout::{parse_rfc3339_ms, text};
use super::records;
use super::session::Operator;
use crate::app::reads;
use crate::error::ApiError;
use crate::state::AppState;
use maud::{html, Markup};
use serde_json::Value;
use std::collections::HashMap;
use steward_core::{Millis, OperationKey};

/// How many items one page of a console list shows.
pub const PAGE_ITEMS: u32 = 50;

/// The largest offset a console list pages to: a million items back, far past what a person
/// pages through (a filter or a time range finds older items faster).
pub const OFFSET_MAX: u32 = 1_000_000;

/// The longest action name or text filter accepted, in bytes (action names are far shorter).
pub const FILTER_TEXT_BYTES_MAX: usize = 200;

/// A day, in milliseconds: a time range's `to` given as a date includes that whole day.
const DAY_MS: i64 = 86_400_000;

/// A list page's filters, checked.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Filters {
    /// One of the page's statuses (an invocation's status, an effect's outcome).
    pub status: Option<String>,
    /// An effect's stage (the effects page only).
    pub stage: Option<String>,
    /// An action's name or id; for the audit view, an event type or its prefix.
    pub action: Option<String>,
    pub operation_key: Option<OperationKey>,
    /// Created at or after (milliseconds since the epoch, UTC).
    pub from: Option<Millis>,
    /// Created at or before.
    pub to: Option<Millis>,
    /// How many items of the filtered list come before this page.
    pub offset: u32,
}

impl Filters {
    /// Reads the filters from a query string's fields. `statuses` and `stages` are the values
    /// the page accepts (empty: the field is not offered). Unknown fields are ignored.
    pub fn parse(
        params: &HashMap<String, String>,
        statuses: &[&str],
        stages: &[&str],
    ) -> Result<Self, ApiError> {
        let given = |name: &str| params.get(name).map(|v| v.trim()).filter(|v| !v.is_empty());
        let one_of = |name: &str, allowed: &[&str]| -> Result<Option<String>, ApiError> {
            match given(name) {
                None => Ok(None),
                Some(v) if allowed.contains(&v) => Ok(Some(v.to_string())),
                Some(_) => Err(ApiError::validation(
                    name,
                    format!("must be one of: {}", allowed.join(", ")),
                )),
            }
        };
        let action = match given("action") {
            Some(a) if a.len() > FILTER_TEXT_BYTES_MAX => {
                return Err(ApiError::validation(
                    "action",
                    format!("must be at most {FILTER_TEXT_BYTES_MAX} bytes"),
                ))
            }
            a => a.map(str::to_string),
        };
        let operation_key = given("operationKey")
            .map(|k| {
                OperationKey::parse(k)
                    .map_err(|e| ApiError::validation("operationKey", e.to_string()))
            })
            .transpose()?;
        let from = given("from").map(|t| time(t, "from", false)).transpose()?;
        let to = given("to").map(|t| time(t, "to", true)).transpose()?;
        if let (Some(from), Some(to)) = (from, to) {
            if from.0 > to.0 {
                return Err(ApiError::validation("to", "must not be before `from`"));
            }
        }
        let offset = match given("offset") {
            None => 0,
            Some(o) => o
                .parse::<u32>()
                .ok()
                .filter(|o| *o <= OFFSET_MAX)
                .ok_or_else(|| {
                    ApiError::validation(
                        "offset",
                        format!("must be a number from 0 to {OFFSET_MAX}"),
                    )
                })?,
        };
        Ok(Self {
            status: one_of("status", statuses)?,
            stage: one_of("stage", stages)?,
            action,
            operation_key,
            from,
            to,
            offset,
        })
    }

    /// The link to this list with these filters, at `offset`.
    pub fn link(&self, path: &str, offset: u32) -> String {
        let mut out = form_urlencoded::Serializer::new(String::new());
        let mut pair = |name: &str, value: Option<&str>| {
            if let Some(value) = value {
                out.append_pair(name, value);
            }
        };
        pair("status", self.status.as_deref());
        pair("stage", self.stage.as_deref());
        pair("action", self.action.as_deref());
        pair(
            "operationKey",
            self.operation_key.as_ref().map(OperationKey::as_str),
        );
        pair("from", self.from.map(|t| t.to_rfc3339()).as_deref());
        pair("to", self.to.map(|t| t.to_rfc3339()).as_deref());
        if offset > 0 {
            out.append_pair("offset", &offset.to_string());
        }
        let query = out.finish();
        if query.is_empty() {
            path.to_string()
        } else {
            format!("{path}?{query}")
        }
    }

    /// Whether an item created at `at` (the API's RFC 3339 form) is inside the time range.
    pub fn in_range(&self, at: &str) -> bool {
        let Some(at) = parse_rfc3339_ms(at) else {
            return self.from.is_none() && self.to.is_none();
        };
        self.from.is_none_or(|f| at >= f.0) && self.to.is_none_or(|t| at <= t.0)
    }

    /// The filter form (a GET to `path`). `action_label` names what `action` filters on.
    pub fn form(
        &self,
        path: &str,
        statuses: &[&str],
        stages: &[&str],
        action_label: &str,
    ) -> Markup {
        self.form_of(path, statuses, stages, action_label, true)
    }

    /// [`Filters::form`] for a list that has no operation keys (runs).
    pub fn form_without_operation_key(
        &self,
        path: &str,
        statuses: &[&str],
        action_label: &str,
    ) -> Markup {
        self.form_of(path, statuses, &[], action_label, false)
    }

    fn form_of(
        &self,
        path: &str,
        statuses: &[&str],
        stages: &[&str],
        action_label: &str,
        operation_key: bool,
    ) -> Markup {
        let time_value = |t: Option<Millis>| t.map(|t| t.to_rfc3339()).unwrap_or_default();
        html! {
            form.filters method="get" action=(path) role="search" {
                @if !statuses.is_empty() {
                    label { "Status" select name="status" {
                        option value="" { "any" }
                        @for s in statuses { option value=(s) selected[self.status.as_deref() == Some(*s)] { (s) } }
                    } }
                }
                @if !stages.is_empty() {
                    label { "Stage" select name="stage" {
                        option value="" { "any" }
                        @for s in stages { option value=(s) selected[self.stage.as_deref() == Some(*s)] { (s) } }
                    } }
                }
                label { (action_label) input type="text" name="action" size="16" value=[self.action.as_deref()]; }
                @if operation_key { label { "Operation key" input type="text" name="operationKey" size="22" value=[self.operation_key.as_ref().map(OperationKey::as_str)]; } }
                label { "From (UTC)" input type="text" name="from" size="22" placeholder="2026-12-01 or …T09:30" value=(time_value(self.from)); }
                label { "To (UTC)" input type="text" name="to" size="22" placeholder="2026-12-06" value=(time_value(self.to)); }
                button type="submit" { "Filter" }
                a href=(path) { "clear" }
            }
        }
    }
}

/// A time in a filter: a date (`2026-12-06`), a date and time (`2026-12-06T09:30`, seconds
/// optional, a space for the `T` allowed) or the API's own RFC 3339 form, always UTC. A date
/// alone as the range's end (`end_of_day`) means the end of that day.
pub fn time(value: &str, field: &str, end_of_day: bool) -> Result<Millis, ApiError> {
    let refused = || {
        ApiError::validation(
            field,
            "must be a UTC date or time: 2026-12-06, 2026-12-06T09:30 or 2026-12-06T09:30:00.000Z",
        )
    };
    let value = value.trim().replace(' ', "T");
    let value = value.strip_suffix('Z').unwrap_or(&value);
    let (full, date_only) = match value.len() {
        10 => (format!("{value}T00:00:00.000Z"), true),
        16 => (format!("{value}:00.000Z"), false),
        19 => (format!("{value}.000Z"), false),
        23 => (format!("{value}Z"), false),
        _ => return Err(refused()),
    };
    let b = full.as_bytes();
    let shape_ok = full.char_indices().all(|(i, c)| match i {
        4 | 7 => c == '-',
        10 => c == 'T',
        13 | 16 => c == ':',
        19 => c == '.',
        23 => c == 'Z',
        _ => c.is_ascii_digit(),
    });
    let num = |from: usize, to: usize| full[from..to].parse::<u32>().unwrap_or(u32::MAX);
    let in_bounds = b.len() == 24
        && shape_ok
        && (1..=12).contains(&num(5, 7))
        && (1..=31).contains(&num(8, 10))
        && num(11, 13) < 24
        && num(14, 16) < 60
        && num(17, 19) < 60;
    if !in_bounds {
        return Err(refused());
    }
    let at = parse_rfc3339_ms(&full).ok_or_else(refused)?;
    Ok(Millis(if date_only && end_of_day {
        at + DAY_MS - 1
    } else {
        at
    }))
}

/// A list the console pages through: one of the application layer's newest-first lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listing {
    /// `GET /api/v2/actions/invocations` (`status`, `action`).
    Invocations,
    /// `GET /api/v2/actions/effects` (`outcome`, `stage`, `action`).
    Effects,
}

/// One page as the API answered it: its items and the filtered list's total.
pub struct Read {
    pub items: Vec<Value>,
    pub total: u64,
}

impl Listing {
    /// `limit` items from `offset` of the filtered list, as the API lists them.
    pub async fn read(
        self,
        state: &AppState,
        op: &Operator,
        filters: &Filters,
        offset: u32,
        limit: u32,
    ) -> Result<Read, ApiError> {
        let answer = match self {
            Listing::Invocations => {
                let filters = reads::InvocationFilters {
                    action: filters.action.clone(),
                    status: filters.status.clone(),
                    page: reads::PageRequest {
                        limit: Some(limit),
                        offset: Some(offset),
                    },
                    cursor: None,
                };
                records::invocations(&reads::list_invocations(state, &op.caller, &filters).await?)?
            }
            Listing::Effects => {
                let filters = reads::EffectFilters {
                    action: filters.action.clone(),
                    outcome: filters.status.clone(),
                    stage: filters.stage.clone(),
                    page: reads::PageRequest {
                        limit: Some(limit),
                        offset: Some(offset),
                    },
                    ..reads::EffectFilters::default()
                };
                records::effects(&reads::list_effects(state, &op.caller, &filters).await?)?
            }
        };
        Ok(Read {
            items: answer
                .get("data")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default(),
            total: answer
                .pointer("/pagination/total")
                .and_then(Value::as_u64)
                .unwrap_or(0),
        })
    }

    /// The time at the item at `offset` of the filtered list, or `None` past its end.
    async fn created_at(
        self,
        state: &AppState,
        op: &Operator,
        filters: &Filters,
        offset: u64,
    ) -> Result<Option<i64>, ApiError> {
        let Ok(offset) = u32::try_from(offset) else {
            return Ok(None);
        };
        let read = self.read(state, op, filters, offset, 1).await?;
        Ok(read
            .items
            .first()
            .and_then(|i| parse_rfc3339_ms(text(i, "createdAt"))))
    }
}

/// Where the filtered list's items inside the time range start and end (`start..end`, offsets
/// into the newest-first list), found by bisection (see the module documentation).
pub async fn window(
    listing: Listing,
    state: &AppState,
    op: &Operator,
    filters: &Filters,
    total: u64,
) -> Result<(u64, u64), ApiError> {
    let start = match filters.to {
        None => 0,
        Some(to) => {
            first(total, |i| async move {
                Ok(listing
                    .created_at(state, op, filters, i)
                    .await?
                    .is_none_or(|at| at <= to.0))
            })
            .await?
        }
    };
    let end = match filters.from {
        None => total,
        Some(from) => {
            first(total, |i| async move {
                Ok(listing
                    .created_at(state, op, filters, i)
                    .await?
                    .is_none_or(|at| at < from.0))
            })
            .await?
        }
    };
    Ok((start, end.max(start)))
}

/// The first index in `0..total` where `holds` is true, given that it is false up to some index
/// and true from there on (`total` when it never holds).
async fn first<F, Fut>(total: u64, holds: F) -> Result<u64, ApiError>
where
    F: Fn(u64) -> Fut,
    Fut: std::future::Future<Output = Result<bool, ApiError>>,
{
    let (mut low, mut high) = (0, total);
    while low < high {
        let middle = low + (high - low) / 2;
        if holds(middle).await? {
            high = middle;
        } else {
            low = middle + 1;
        }
    }
    Ok(low)
}

/// The previous and next links of a page at `offset` that showed `shown` items of `total`; no
/// next link past `offset_max`, the furthest the list pages.
pub fn pager(filters: &Filters, path: &str, shown: usize, total: u64, offset_max: u32) -> Markup {
    let offset = filters.offset;
    let previous = (offset > 0).then(|| filters.link(path, offset.saturating_sub(PAGE_ITEMS)));
    let after = u64::from(offset) + shown as u64;
    let next =
        (after < total && after <= u64::from(offset_max)).then(|| filters.link(path, after as u32));
    html! {
        p.pager {
            span #page-range {
                @if shown == 0 { "none of " (total) } @else { (offset + 1) "–" (after) " of " (total) }
            }
            @if let Some(previous) = previous { a #previous-page href=(previous) { "Newer" } }
            @if let Some(next) = next { a #next-page href=(next) { "Older" } }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn times_take_a_date_a_minute_or_the_apis_form_and_a_date_ends_its_day() {
        let day = time("2026-12-06", "from", false).unwrap();
        assert_eq!(day.to_rfc3339(), "2026-12-06T00:00:00.000Z");
        let end = time("2026-12-06", "to", true).unwrap();
        assert_eq!(end.to_rfc3339(), "2026-12-06T23:59:59.999Z");
        for (given, read) in [
            ("2026-12-06T09:30", "2026-12-06T09:30:00.000Z"),
            ("2026-12-06 09:30:15", "2026-12-06T09:30:15.000Z"),
            ("2026-12-06T09:30:15.250Z", "2026-12-06T09:30:15.250Z"),
        ] {
            assert_eq!(
                time(given, "to", true).unwrap().to_rfc3339(),
                read,
                "{given}"
            );
        }
        for bad in [
            "",
            "yesterday",
            "2026-13-01",
            "2026-12-06T25:00",
            "2026-12-0x",
            "2026/12/06",
            "２０２６-12-06",
        ] {
            let e = time(bad, "from", false).unwrap_err();
            assert!(e.message.contains("from"), "{bad}: {}", e.message);
        }
    }

    #[test]
    fn filters_are_checked_and_each_refusal_names_its_field() {
        let statuses = ["succeeded", "failed"];
        let ok = Filters::parse(
            &params(&[
                ("status", "failed"),
                ("action", "refund"),
                ("operationKey", "order-1"),
                ("offset", "50"),
                ("other", "x"),
            ]),
            &statuses,
            &[],
        )
        .unwrap();
        assert_eq!(ok.status.as_deref(), Some("failed"));
        assert_eq!(ok.offset, 50);
        for (field, value) in [
            ("status", "<b>"),
            ("stage", "x"),
            ("offset", "-1"),
            ("offset", "99999999999"),
            ("operationKey", "a\u{7}b"),
            ("from", "soon"),
        ] {
            let e = Filters::parse(&params(&[(field, value)]), &statuses, &[]).unwrap_err();
            assert!(e.message.contains(field), "{field}={value}: {}", e.message);
        }
        let long = "a".repeat(FILTER_TEXT_BYTES_MAX + 1);
        assert!(Filters::parse(&params(&[("action", &long)]), &statuses, &[]).is_err());
        let e = Filters::parse(
            &params(&[("from", "2026-12-06"), ("to", "2026-12-05")]),
            &statuses,
            &[],
        )
        .unwrap_err();
        assert!(e.message.contains("to"), "{}", e.message);
    }

    #[test]
    fn links_carry_the_filters_encoded_and_read_back_the_same() {
        let filters = Filters::parse(
            &params(&[
                ("status", "failed"),
                ("action", "a&b=c"),
                ("from", "2026-12-06"),
            ]),
            &["failed"],
            &[],
        )
        .unwrap();
        let link = filters.link("/console/invocations", 100);
        assert!(link.starts_with("/console/invocations?status=failed&action=a%26b%3Dc&from="));
        let query = link.split_once('?').unwrap().1;
        let back: HashMap<String, String> = form_urlencoded::parse(query.as_bytes())
            .into_owned()
            .collect();
        let read = Filters::parse(&back, &["failed"], &[]).unwrap();
        assert_eq!(
            read,
            Filters {
                offset: 100,
                ..filters.clone()
            }
        );
        assert_eq!(
            Filters::default().link("/console/effects", 0),
            "/console/effects"
        );
    }

    #[test]
    fn the_pager_offers_no_page_past_the_end_or_past_its_bound() {
        let at = |offset| Filters {
            offset,
            ..Filters::default()
        };
        let shown = pager(&at(0), "/console/audit", 50, 120, 10_000).into_string();
        assert!(
            shown.contains("1–50 of 120") && shown.contains("offset=50"),
            "{shown}"
        );
        assert!(!shown.contains("previous-page"));
        let last = pager(&at(100), "/console/audit", 20, 120, 10_000).into_string();
        assert!(
            !last.contains("next-page") && last.contains("offset=50"),
            "{last}"
        );
        let bounded = pager(&at(0), "/console/audit", 50, 120, 40).into_string();
        assert!(!bounded.contains("next-page"), "{bounded}");
    }

    #[tokio::test]
    async fn bisection_finds_the_first_index_that_holds() {
        let times = [90, 80, 70, 70, 60, 50];
        for (bound, want) in [(100, 0), (75, 2), (70, 2), (65, 4), (10, 6)] {
            let found = first(times.len() as u64, |i| async move {
                Ok(times[i as usize] <= bound)
            })
            .await
            .unwrap();
            assert_eq!(found, want, "{bound}");
        }
        assert_eq!(first(0, |_| async { Ok(true) }).await.unwrap(), 0);
    }
}
