//! The run's figures: the summary line, and RPO and RTO for the deployment (acknowledged
//! operations lost; time from a primary's death to the first invoke acknowledged after it) as a
//! Markdown table row.

use super::check::{deaths, recovery_after, Violation};
use super::events::Stamped;
use super::nemesis::Injected;
use std::io::Write;
use std::path::Path;
use std::time::Duration;

/// What the last line and the report say.
#[derive(Debug, Clone, Default)]
pub(crate) struct Figures {
    pub(crate) operations: usize,
    pub(crate) writes: usize,
    pub(crate) duplicates: usize,
    pub(crate) lost: usize,
    pub(crate) unknown: usize,
    pub(crate) injected: Injected,
    /// One per primary death that was followed by an acknowledged invoke.
    pub(crate) recoveries: Vec<Duration>,
}

impl Figures {
    pub(crate) fn count(&mut self, violations: &[Violation], events: &[Stamped]) {
        self.duplicates = violations
            .iter()
            .filter(|v| matches!(v, Violation::Duplicate { .. }))
            .count();
        self.lost = violations
            .iter()
            .filter(|v| matches!(v, Violation::Lost { .. }))
            .count();
        self.recoveries = deaths(events)
            .into_iter()
            .filter_map(|d| recovery_after(events, d))
            .collect();
        self.recoveries.sort();
    }

    /// The median and the longest recovery.
    pub(crate) fn rto(&self) -> Option<(Duration, Duration)> {
        let median = *self.recoveries.get(self.recoveries.len() / 2)?;
        Some((median, *self.recoveries.last()?))
    }

    /// `faults: ok, ...` without the verdict.
    pub(crate) fn line(&self) -> String {
        let i = &self.injected;
        format!(
            "{} operations, {} provider writes, {} duplicates, {} lost, {} primary failovers, {} replica kills, {} pauses, {} partitions",
            self.operations,
            self.writes,
            self.duplicates,
            self.lost,
            i.primary_failovers,
            i.replica_kills,
            i.pauses,
            i.partitions
        )
    }

    /// The RPO and RTO line printed before the last one.
    pub(crate) fn recovery_line(&self) -> String {
        match self.rto() {
            Some((median, max)) => format!(
                "RPO: {} acknowledged operations lost ({} left unknown); RTO: median {:.1} s, max {:.1} s over {} primary deaths",
                self.lost,
                self.unknown,
                median.as_secs_f64(),
                max.as_secs_f64(),
                self.recoveries.len()
            ),
            None => format!(
                "RPO: {} acknowledged operations lost ({} left unknown); RTO: no primary death measured",
                self.lost, self.unknown
            ),
        }
    }
}

/// Appends this run's row to the Markdown table in `path` (the header first when the file is
/// new or empty).
pub(crate) fn write_row(
    path: &Path,
    deployment: &str,
    command: &str,
    figures: &Figures,
) -> std::io::Result<()> {
    let fresh = std::fs::metadata(path)
        .map(|m| m.len() == 0)
        .unwrap_or(true);
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?;
    if fresh {
        writeln!(
            file,
            "| deployment | primary deaths | acknowledged operations lost (RPO) | RTO median | RTO max | operations | command |"
        )?;
        writeln!(file, "| --- | --- | --- | --- | --- | --- | --- |")?;
    }
    let (median, max) = match figures.rto() {
        Some((m, x)) => (
            format!("{:.1} s", m.as_secs_f64()),
            format!("{:.1} s", x.as_secs_f64()),
        ),
        None => ("-".to_string(), "-".to_string()),
    };
    writeln!(
        file,
        "| {deployment} | {} | {} | {median} | {max} | {} | `{command}` |",
        figures.injected.primary_failovers, figures.lost, figures.operations
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_gets_a_header_once_and_a_row_per_run() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rpo.md");
        let mut figures = Figures {
            operations: 10,
            recoveries: vec![Duration::from_millis(1_500), Duration::from_millis(4_000)],
            ..Figures::default()
        };
        figures.injected.primary_failovers = 2;
        write_row(
            &path,
            "embedded (SQLite)",
            "steward faults --store embedded",
            &figures,
        )
        .unwrap();
        write_row(
            &path,
            "single PostgreSQL",
            "steward faults --store postgres",
            &figures,
        )
        .unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.matches("| deployment |").count(), 1, "{text}");
        assert!(
            text.contains("| embedded (SQLite) | 2 | 0 | 4.0 s | 4.0 s | 10 |"),
            "{text}"
        );
        assert_eq!(text.lines().count(), 4, "{text}");
    }
}
