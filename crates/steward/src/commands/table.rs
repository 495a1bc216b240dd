//! Human-readable output of the operator commands: aligned tables, `name: value` blocks and
//! ages. `--json` bypasses all of it.

use serde::Serialize;
use serde_json::Value;
use steward_core::Millis;

/// The widest a cell is shown, in characters; longer values are cut with `…` (the JSON output
/// has them whole).
pub const CELL_CHARS_MAX: usize = 48;

/// Rows under a header, each column as wide as its widest cell.
pub struct Table {
    header: Vec<&'static str>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(header: &[&'static str]) -> Table {
        Table {
            header: header.to_vec(),
            rows: Vec::new(),
        }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        debug_assert_eq!(
            cells.len(),
            self.header.len(),
            "a row has one cell per column"
        );
        self.rows.push(cells.into_iter().map(|c| cut(&c)).collect());
    }

    /// The table, one line per row; `(none)` under the header when there are no rows.
    pub fn render(&self) -> String {
        let mut widths: Vec<usize> = self.header.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(cell.chars().count());
            }
        }
        let line = |cells: Vec<&str>| {
            let mut out = String::new();
            for (i, (cell, width)) in cells.iter().zip(&widths).enumerate() {
                if i + 1 == cells.len() {
                    out.push_str(cell);
                } else {
                    out.push_str(&format!("{cell:<width$}  "));
                }
            }
            out.trim_end().to_string() + "\n"
        };
        let mut out = line(self.header.clone());
        if self.rows.is_empty() {
            out.push_str("(none)\n");
        }
        for row in &self.rows {
            out.push_str(&line(row.iter().map(String::as_str).collect()));
        }
        out
    }
}

/// One column of a listing: its header and how each item shows in it.
pub type Column<'a, T> = (&'static str, &'a dyn Fn(&T) -> String);

/// A listing: one row per item, one column per `(header, cell)`.
pub fn listing<T>(items: &[T], columns: &[Column<'_, T>]) -> String {
    let headers: Vec<&'static str> = columns.iter().map(|(h, _)| *h).collect();
    let mut table = Table::new(&headers);
    for item in items {
        table.row(columns.iter().map(|(_, cell)| cell(item)).collect());
    }
    table.render()
}

/// `name: value` lines, the values aligned.
pub fn fields(pairs: &[(&str, String)]) -> String {
    let width = pairs.iter().map(|(k, _)| k.len()).max().unwrap_or(0) + 1;
    pairs
        .iter()
        .map(|(k, v)| format!("{:<width$} {v}\n", format!("{k}:")))
        .collect()
}

/// A field of a view as a cell, as its JSON reads: strings (and names such as an outcome) bare,
/// nothing (`None`, `null`) as `-`, anything else as compact JSON.
pub fn cell<T: Serialize + ?Sized>(value: &T) -> String {
    text(&serde_json::to_value(value).unwrap_or_default())
}

/// A JSON value as a cell: strings bare, `null` as `-`, anything else as compact JSON.
pub fn text(value: &Value) -> String {
    match value {
        Value::Null => "-".into(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// How long before `now` the RFC 3339 time `at` was, in the largest whole unit (`45s`, `3m`,
/// `2h`, `5d`); `-` when there is none, `in 3m` for a time still ahead.
pub fn age(at: Option<&str>, now: Millis) -> String {
    let Some(at) = at.and_then(Millis::parse_rfc3339) else {
        return "-".into();
    };
    let delta = now.0 - at.0;
    let span = |ms: i64| {
        let s = ms / 1000;
        match s {
            s if s < 60 => format!("{s}s"),
            s if s < 3600 => format!("{}m", s / 60),
            s if s < 86_400 => format!("{}h", s / 3600),
            s => format!("{}d", s / 86_400),
        }
    };
    if delta >= 0 {
        span(delta)
    } else {
        format!("in {}", span(-delta))
    }
}

/// Now, from the system clock (the CLI is a binary; the core never reads a clock).
#[allow(clippy::disallowed_methods)] // a terminal's ages are relative to its own clock
pub fn now() -> Millis {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    Millis(since.as_millis() as i64)
}

fn cut(cell: &str) -> String {
    // One line per row: a value with line breaks shows them escaped.
    let cell = cell.replace('\n', "\\n").replace('\r', "\\r");
    if cell.chars().count() <= CELL_CHARS_MAX {
        return cell;
    }
    let kept: String = cell.chars().take(CELL_CHARS_MAX - 1).collect();
    format!("{kept}…")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn columns_align_and_an_empty_table_says_none() {
        let mut t = Table::new(&["ID", "STATUS", "NOTE"]);
        t.row(vec!["apr_1".into(), "pending".into(), "x".into()]);
        t.row(vec!["apr_22".into(), "ok".into(), "multi\nline".into()]);
        assert_eq!(
            t.render(),
            "ID      STATUS   NOTE\napr_1   pending  x\napr_22  ok       multi\\nline\n"
        );
        assert_eq!(Table::new(&["ID"]).render(), "ID\n(none)\n");
    }

    #[test]
    fn long_cells_are_cut_and_values_render_plainly() {
        let mut t = Table::new(&["V"]);
        t.row(vec!["a".repeat(100)]);
        let line = t.render().lines().nth(1).unwrap().to_string();
        assert_eq!(line.chars().count(), CELL_CHARS_MAX);
        assert!(line.ends_with('…'));
        assert_eq!(text(&json!(null)), "-");
        assert_eq!(text(&json!("s")), "s");
        assert_eq!(text(&json!({"a": 1})), "{\"a\":1}");
        assert_eq!(cell(&None::<String>), "-");
        assert_eq!(cell(&Some(3u32)), "3");
        assert_eq!(cell(&steward_core::Outcome::Succeeded), "succeeded");
    }

    #[test]
    fn ages_use_the_largest_whole_unit() {
        let now = Millis(1_796_210_264_123);
        let at = |ms: i64| now.plus_ms(-ms).to_rfc3339();
        assert_eq!(age(Some(&at(45_000)), now), "45s");
        assert_eq!(age(Some(&at(3 * 60_000 + 5)), now), "3m");
        assert_eq!(age(Some(&at(2 * 3_600_000)), now), "2h");
        assert_eq!(age(Some(&at(5 * 86_400_000)), now), "5d");
        assert_eq!(age(Some(&at(-120_000)), now), "in 2m");
        assert_eq!(age(None, now), "-");
    }

    #[test]
    fn fields_align_their_values() {
        assert_eq!(
            fields(&[("id", "a".into()), ("status", "b".into())]),
            "id:     a\nstatus: b\n"
        );
    }
}
