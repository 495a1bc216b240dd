//! How far a long command (`sim`, `chaos`, `bench`) has come, on standard error: a bar on a
//! terminal (indicatif), plain lines otherwise (a CI log, a pipe, a test), so that standard
//! output keeps only the summary that scripts and tests read.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// How many plain lines a run of known length prints at most (one every tenth), so a CI log
/// shows progress without a line per seed.
const PLAIN_LINES_MAX: u64 = 10;

/// Progress of one long command, shared by its threads and tasks (clones count together).
#[derive(Clone)]
pub struct Progress {
    /// `None` off a terminal: plain lines instead.
    bar: Option<ProgressBar>,
    /// What the plain lines start with (`sim`, `chaos`, `bench`).
    label: &'static str,
    /// What is counted (`seeds`, `runs`, `cells`).
    unit: &'static str,
    total: u64,
    done: Arc<AtomicU64>,
}

impl Progress {
    /// Progress over `total` `unit`s, drawn as a bar when standard error is a terminal.
    pub fn new(label: &'static str, unit: &'static str, total: u64) -> Progress {
        Progress::to(std::io::stderr().is_terminal(), label, unit, total)
    }

    fn to(terminal: bool, label: &'static str, unit: &'static str, total: u64) -> Progress {
        let bar = terminal.then(|| {
            let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
            let template = format!(
                "{label}: [{{elapsed_precise}}] {{bar:32}} {{pos}}/{{len}} {unit} {{msg}} (eta {{eta}})"
            );
            if let Ok(style) = ProgressStyle::with_template(&template) {
                bar.set_style(style);
            }
            bar
        });
        Progress {
            bar,
            label,
            unit,
            total,
            done: Arc::new(AtomicU64::new(0)),
        }
    }

    /// `n` more done. Off a terminal, a line each time another tenth of the total is done.
    pub fn advance(&self, n: u64) {
        let before = self.done.fetch_add(n, Ordering::Relaxed);
        if let Some(bar) = &self.bar {
            bar.inc(n);
            return;
        }
        if let Some(line) = plain_line(self.label, self.unit, before, before + n, self.total) {
            eprintln!("{line}");
        }
    }

    /// What is being done now: the bar's message, or a plain line.
    pub fn now_doing(&self, what: &str) {
        match &self.bar {
            Some(bar) => bar.set_message(what.to_string()),
            None => eprintln!("{}: {what}", self.label),
        }
    }

    /// What is being done now, on the bar only: off a terminal the command's own lines say it.
    pub fn set_message(&self, what: &str) {
        if let Some(bar) = &self.bar {
            bar.set_message(what.to_string());
        }
    }

    /// A line of the command's own log (already prefixed), printed above the bar on a terminal.
    pub fn line(&self, text: &str) {
        match &self.bar {
            Some(bar) => bar.println(text),
            None => eprintln!("{text}"),
        }
    }

    /// Clears the bar before the summary is printed.
    pub fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

/// The plain line for going from `before` to `after` of `total`, if that crossed a tenth (or
/// reached the end).
fn plain_line(label: &str, unit: &str, before: u64, after: u64, total: u64) -> Option<String> {
    let total = total.max(1);
    let tenth = |done: u64| done.min(total) * PLAIN_LINES_MAX / total;
    (tenth(after) > tenth(before)).then(|| {
        format!(
            "{label}: {} of {total} {unit} ({}%)",
            after.min(total),
            after.min(total) * 100 / total
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_progress_prints_a_line_per_tenth_and_one_at_the_end() {
        let lines: Vec<String> = (0..1_000)
            .filter_map(|done| plain_line("sim", "seeds", done, done + 1, 1_000))
            .collect();
        assert_eq!(lines.len(), 10, "{lines:?}");
        assert_eq!(lines[0], "sim: 100 of 1000 seeds (10%)");
        assert_eq!(lines[9], "sim: 1000 of 1000 seeds (100%)");
        // Fewer items than tenths: a line per item.
        let few: Vec<String> = (0..3)
            .filter_map(|done| plain_line("chaos", "runs", done, done + 1, 3))
            .collect();
        assert_eq!(few.len(), 3, "{few:?}");
        assert_eq!(few[2], "chaos: 3 of 3 runs (100%)");
    }

    #[test]
    fn off_a_terminal_there_is_no_bar_and_clones_count_together() {
        let progress = Progress::to(false, "sim", "seeds", 4);
        assert!(progress.bar.is_none());
        let clone = progress.clone();
        clone.advance(3);
        progress.advance(1);
        assert_eq!(progress.done.load(Ordering::Relaxed), 4);
    }
}
