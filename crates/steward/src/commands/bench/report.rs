//! The report: rows as a Markdown table, as JSON (for `bench/report.py`) and as an SVG plot of
//! throughput and p50 latency by concurrency.

use super::load::Cell;
use super::recovery::RecoveryRow;
use super::split::Split;
use super::{Args, Workload};
use serde::Serialize;
use std::fmt::Write as _;
use std::path::Path;

/// One measured (workload, store, concurrency) run.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Row {
    pub(crate) workload: String,
    pub(crate) store: String,
    pub(crate) concurrency: usize,
    pub(crate) requests: u64,
    pub(crate) errors: u64,
    pub(crate) writes: u64,
    pub(crate) writes_expected: u64,
    pub(crate) seconds: f64,
    pub(crate) throughput: f64,
    pub(crate) p50_ms: f64,
    pub(crate) mean_ms: f64,
    pub(crate) p90_ms: f64,
    pub(crate) p99_ms: f64,
    pub(crate) max_ms: f64,
    pub(crate) ratio: String,
    pub(crate) first_error: Option<String>,
    /// Where the time went (`split.rs`).
    pub(crate) split: Split,
}

fn ms(us: u64) -> f64 {
    us as f64 / 1000.0
}

impl Row {
    pub(super) fn from_cell(cell: &Cell, ratio: &str) -> Row {
        let h = &cell.latency_us;
        let empty = h.is_empty();
        let at = |q: f64| {
            if empty {
                0.0
            } else {
                ms(h.value_at_quantile(q))
            }
        };
        Row {
            workload: cell.workload.name().to_string(),
            store: cell.store.clone(),
            concurrency: cell.concurrency,
            requests: cell.ok,
            errors: cell.errors,
            writes: cell.writes,
            writes_expected: cell.writes_expected,
            seconds: cell.elapsed.as_secs_f64(),
            throughput: cell.throughput(),
            p50_ms: at(0.5),
            mean_ms: if empty { 0.0 } else { h.mean() / 1000.0 },
            p90_ms: at(0.9),
            p99_ms: at(0.99),
            max_ms: if empty { 0.0 } else { ms(h.max()) },
            ratio: ratio.to_string(),
            first_error: cell.first_error.clone(),
            split: cell.split.clone(),
        }
    }

    fn sound(&self) -> bool {
        self.errors == 0 && self.writes == self.writes_expected
    }
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Report {
    command: String,
    run_id: String,
    duration_s: u64,
    requests_max: Option<u64>,
    cores: usize,
    rows: Vec<Row>,
    recovery: Vec<RecoveryRow>,
    notes: Vec<String>,
}

impl Report {
    pub(super) fn new(args: &Args, run_id: &str) -> Report {
        let argv: Vec<String> = std::env::args().skip(1).collect();
        Report {
            command: format!("steward {}", argv.join(" ")),
            run_id: run_id.to_string(),
            duration_s: args.duration_s,
            requests_max: args.requests,
            cores: std::thread::available_parallelism().map_or(0, |n| n.get()),
            rows: vec![],
            recovery: vec![],
            notes: vec![],
        }
    }

    pub(super) fn push(&mut self, row: Row) {
        if let Some(e) = &row.first_error {
            self.notes.push(format!(
                "{} on {} at concurrency {}: {} errors; the first: {e}",
                row.workload, row.store, row.concurrency, row.errors
            ));
        }
        if row.writes != row.writes_expected {
            self.notes.push(format!(
                "{} on {} at concurrency {}: the fixture counted {} writes, expected {}",
                row.workload, row.store, row.concurrency, row.writes, row.writes_expected
            ));
        }
        self.rows.push(row);
    }

    pub(super) fn push_recovery(&mut self, row: RecoveryRow) {
        if !row.verified {
            self.notes.push(format!(
                "recovery on {}: the server's log did not report {} effects made unknown",
                row.store, row.effects
            ));
        }
        self.recovery.push(row);
    }

    pub(super) fn note(&mut self, text: &str) {
        self.notes.push(text.to_string());
    }

    /// Throughput as a multiple of the floor's at the same concurrency, when it was measured.
    pub(super) fn ratio_to_floor(&self, concurrency: usize, throughput: f64) -> String {
        self.rows
            .iter()
            .find(|r| r.workload == Workload::Floor.name() && r.concurrency == concurrency)
            .filter(|r| r.throughput > 0.0)
            .map_or("-".to_string(), |floor| {
                format!("{:.2}x floor", throughput / floor.throughput)
            })
    }

    /// `throughput` as a ratio of `store`'s in the same workload and concurrency, e.g. what a
    /// synchronous standby costs next to a single PostgreSQL server.
    pub(super) fn ratio_to_store(
        &self,
        store: &str,
        workload: Workload,
        concurrency: usize,
        throughput: f64,
    ) -> String {
        self.rows
            .iter()
            .find(|r| {
                r.store == store && r.workload == workload.name() && r.concurrency == concurrency
            })
            .filter(|r| r.throughput > 0.0)
            .map_or("-".to_string(), |other| {
                format!("{:.2}x {store}", throughput / other.throughput)
            })
    }

    /// A run with errors, wrong write counts or an unverified recovery.
    pub(super) fn failed(&self) -> bool {
        self.rows.iter().any(|r| !r.sound()) || self.recovery.iter().any(|r| !r.verified)
    }

    pub(super) fn markdown(&self) -> String {
        let mut out = String::new();
        let bound = match self.requests_max {
            Some(n) => format!(
                "{} s or {n} requests per run, whichever comes first",
                self.duration_s
            ),
            None => format!("{} s per run", self.duration_s),
        };
        let _ = writeln!(out, "`{}` ({bound}; {} cores)\n", self.command, self.cores);
        if !self.rows.is_empty() {
            out.push_str("| workload | store | concurrency | requests | errors | provider writes | throughput/s | p50 ms | p90 ms | p99 ms | max ms | ratio |\n");
            out.push_str("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |\n");
            for r in &self.rows {
                let writes = if r.writes == r.writes_expected {
                    r.writes.to_string()
                } else {
                    format!("{} (expected {})", r.writes, r.writes_expected)
                };
                let _ = writeln!(
                    out,
                    "| {} | {} | {} | {} | {} | {writes} | {:.1} | {:.3} | {:.3} | {:.3} | {:.3} | {} |",
                    r.workload, r.store, r.concurrency, r.requests, r.errors, r.throughput,
                    r.p50_ms, r.p90_ms, r.p99_ms, r.max_ms, r.ratio
                );
            }
            out.push('\n');
        }
        if !self.rows.is_empty() {
            out.push_str(&where_the_time_goes(&self.rows, self.cores));
        }
        if !self.recovery.is_empty() {
            out.push_str("| workload | store | unfinished effects | start-up, empty store s | start-up with them s | recovery s | effects/s | all made unknown |\n");
            out.push_str("| --- | --- | ---: | ---: | ---: | ---: | ---: | --- |\n");
            for r in &self.recovery {
                let rate = r.effects as f64 / r.recovery_s().max(1e-3);
                let _ = writeln!(
                    out,
                    "| d | {} | {} | {:.3} | {:.3} | {:.3} | {rate:.0} | {} |",
                    r.store,
                    r.effects,
                    r.baseline_s,
                    r.ready_s,
                    r.recovery_s(),
                    if r.verified { "yes" } else { "NO" }
                );
            }
            out.push('\n');
        }
        out.push_str("Workloads: ");
        let described: Vec<String> = [
            Workload::Floor,
            Workload::Proxy,
            Workload::Invoke,
            Workload::Resubmit,
            Workload::Approve,
            Workload::Recovery,
        ]
        .iter()
        .map(|w| format!("`{}` {}", w.name(), w.describe()))
        .collect();
        out.push_str(&described.join("; "));
        out.push_str(". Latencies are per request (for `c`: the invoke and the approve together), in milliseconds; `provider writes` is the fixture's own count during the run.\n");
        for n in &self.notes {
            let _ = writeln!(out, "\n- {n}");
        }
        out
    }

    /// Writes the Markdown to `out`, the JSON and the SVG beside it.
    pub(super) fn write(&self, out: &Path) -> anyhow::Result<()> {
        if let Some(parent) = out.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(out, self.markdown())?;
        std::fs::write(out.with_extension("json"), serde_json::to_vec_pretty(self)?)?;
        std::fs::write(out.with_extension("svg"), self.svg())?;
        Ok(())
    }

    fn svg(&self) -> String {
        let series = series(&self.rows);
        let levels = {
            let mut l: Vec<usize> = self.rows.iter().map(|r| r.concurrency).collect();
            l.sort_unstable();
            l.dedup();
            l
        };
        plot(&series, &levels)
    }
}

/// `value` with `digits` decimals, or `-` when not measured.
fn or_dash(value: Option<f64>, digits: usize) -> String {
    value.map_or("-".to_string(), |v| format!("{v:.digits$}"))
}

/// The second table: per cell, the machine's load, CPU per request by process, the servers'
/// own split of a request and PostgreSQL's backends, with what each column measures below it.
fn where_the_time_goes(rows: &[Row], cores: usize) -> String {
    let mut out = String::from(
        "Where the time goes

",
    );
    out.push_str("| workload | store | concurrency | requests/s | machine busy % | CPU us/req client | fixture | steward | postgres | run-queue wait ms/req client / fixture / steward | server ms/req | commits/req | commit ms/req | provider call ms/req | PG backends: cpu / WAL flush / lock / LWLock / idle in tx / idle |\n");
    out.push_str("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    for r in rows {
        let s = &r.split;
        let waits = format!(
            "{} / {} / {}",
            or_dash(s.run_queue_ms.client, 2),
            or_dash(s.run_queue_ms.fixture, 2),
            or_dash(s.run_queue_ms.steward, 2)
        );
        let pg = s.pg_waits.as_ref().map_or("-".to_string(), |w| {
            let m = |k: &str| format!("{:.1}", w.states.get(k).copied().unwrap_or(0.0));
            format!(
                "{} / {} / {} / {} / {} / {}",
                m("cpu"),
                m("walFlush"),
                m("lock"),
                m("lwlock"),
                m("idleInTransaction"),
                m("idle")
            )
        });
        let _ = writeln!(
            out,
            "| {} | {} | {} | {:.1} | {} | {} | {} | {} | {} | {waits} | {} | {} | {} | {} | {pg} |",
            r.workload,
            r.store,
            r.concurrency,
            r.throughput,
            or_dash(s.machine_busy_pct, 0),
            or_dash(s.cpu_us.client, 0),
            or_dash(s.cpu_us.fixture, 0),
            or_dash(s.cpu_us.steward, 0),
            or_dash(s.cpu_us.postgres, 0),
            or_dash(s.server_ms, 3),
            or_dash(s.commits_per_request, 2),
            or_dash(s.commit_ms, 3),
            or_dash(s.dispatch_ms, 3),
        );
    }
    let _ = writeln!(
        out,
        "\nMeasured around each timed run, per request sent. `machine busy %`: all {cores} cores, \
         not idle and not waiting for IO (`/proc/stat`). `CPU us/req`: user + system time (`/proc/PID/stat`, \
         clock ticks) of this load generator (`client`), the fixture, the `steward serve` processes (replicas \
         summed) and every `postgres` process on the machine (with the backends that exited, through the \
         postmaster). `run-queue wait`: time the threads were runnable but had no core (`schedstat`). From the \
         servers' `/metrics`: `server` the time to answer, `commit` the durable store writes on the request \
         path (queueing for the writer or a connection, statements and the commit with its fsync), `provider \
         call` the call to the fixture; summed over concurrent requests, so at concurrency above 1 they are \
         shares of each request's latency, not of a core. `PG backends`: mean client backends of the run's \
         database in each state, sampled from `pg_stat_activity` every 20 ms (WAL flush: `IO:WAL*` and \
         `LWLock:WALWrite`; lock: heavyweight locks).\n"
    );
    out
}

/// One line of the plot: a (workload, store) pair with its points by concurrency.
struct Series {
    label: String,
    points: Vec<(usize, f64, f64)>,
}

fn series(rows: &[Row]) -> Vec<Series> {
    let mut out: Vec<Series> = vec![];
    for r in rows {
        let label = if r.store == "-" {
            r.workload.clone()
        } else {
            format!("{} {}", r.workload, r.store)
        };
        let point = (r.concurrency, r.throughput, r.p50_ms);
        match out.iter_mut().find(|s| s.label == label) {
            Some(s) => s.points.push(point),
            None => out.push(Series {
                label,
                points: vec![point],
            }),
        }
    }
    out
}

const COLORS: [&str; 8] = [
    "#1b9e77", "#d95f02", "#7570b3", "#e7298a", "#66a61e", "#e6ab02", "#a6761d", "#666666",
];
const PANEL_W: f64 = 420.0;
const PANEL_H: f64 = 300.0;
const MARGIN: f64 = 60.0;

/// Two log-scale panels side by side: throughput/s and p50 ms against concurrency.
fn plot(series: &[Series], levels: &[usize]) -> String {
    let width = 2.0 * (PANEL_W + MARGIN) + MARGIN;
    let legend_rows = series.len().div_ceil(3) as f64;
    let height = PANEL_H + 2.0 * MARGIN + 20.0 * legend_rows + 20.0;
    let mut svg = String::new();
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(svg, r#"<rect width="100%" height="100%" fill="white"/>"#);
    for (panel, title) in ["throughput (requests/s, log)", "p50 latency (ms, log)"]
        .iter()
        .enumerate()
    {
        let x0 = MARGIN + panel as f64 * (PANEL_W + MARGIN);
        let y0 = MARGIN;
        let value = |p: &(usize, f64, f64)| if panel == 0 { p.1 } else { p.2 };
        let values: Vec<f64> = series
            .iter()
            .flat_map(|s| s.points.iter().map(value))
            .filter(|v| *v > 0.0)
            .collect();
        let lo = values
            .iter()
            .copied()
            .fold(f64::MAX, f64::min)
            .max(1e-3)
            .log10()
            .floor();
        let hi = values
            .iter()
            .copied()
            .fold(1e-3, f64::max)
            .log10()
            .ceil()
            .max(lo + 1.0);
        let y = |v: f64| y0 + PANEL_H - (v.max(1e-3).log10() - lo) / (hi - lo) * PANEL_H;
        let x = |c: usize| {
            let i = levels.iter().position(|l| *l == c).unwrap_or(0) as f64;
            x0 + (i + 0.5) / levels.len().max(1) as f64 * PANEL_W
        };
        let _ = writeln!(
            svg,
            r##"<rect x="{x0}" y="{y0}" width="{PANEL_W}" height="{PANEL_H}" fill="none" stroke="#999"/><text x="{}" y="{}" text-anchor="middle" font-weight="bold">{title}</text>"##,
            x0 + PANEL_W / 2.0,
            y0 - 10.0
        );
        for d in (lo as i32)..=(hi as i32) {
            let v = 10f64.powi(d);
            let _ = writeln!(
                svg,
                r##"<line x1="{x0}" x2="{}" y1="{yy}" y2="{yy}" stroke="#eee"/><text x="{}" y="{}" text-anchor="end">{}</text>"##,
                x0 + PANEL_W,
                x0 - 5.0,
                y(v) + 4.0,
                tick(v),
                yy = y(v)
            );
        }
        for &c in levels {
            let _ = writeln!(
                svg,
                r#"<text x="{}" y="{}" text-anchor="middle">{c}</text>"#,
                x(c),
                y0 + PANEL_H + 18.0
            );
        }
        let _ = writeln!(
            svg,
            r#"<text x="{}" y="{}" text-anchor="middle">concurrency</text>"#,
            x0 + PANEL_W / 2.0,
            y0 + PANEL_H + 36.0
        );
        for (i, s) in series.iter().enumerate() {
            let color = COLORS[i % COLORS.len()];
            let points: Vec<String> = s
                .points
                .iter()
                .filter(|p| value(p) > 0.0)
                .map(|p| format!("{:.1},{:.1}", x(p.0), y(value(p))))
                .collect();
            let _ = writeln!(
                svg,
                r#"<polyline points="{}" fill="none" stroke="{color}" stroke-width="2"/>"#,
                points.join(" ")
            );
            for p in &points {
                let (px, py) = p.split_once(',').unwrap_or(("0", "0"));
                let _ = writeln!(svg, r#"<circle cx="{px}" cy="{py}" r="3" fill="{color}"/>"#);
            }
        }
    }
    for (i, s) in series.iter().enumerate() {
        let lx = MARGIN + (i % 3) as f64 * 280.0;
        let ly = PANEL_H + 2.0 * MARGIN + 10.0 + (i / 3) as f64 * 20.0;
        let _ = writeln!(
            svg,
            r#"<rect x="{lx}" y="{}" width="14" height="4" fill="{}"/><text x="{}" y="{ly}">{}</text>"#,
            ly - 6.0,
            COLORS[i % COLORS.len()],
            lx + 20.0,
            xml_escape(&s.label)
        );
    }
    svg.push_str("</svg>\n");
    svg
}

fn tick(v: f64) -> String {
    if v >= 1.0 {
        format!("{v:.0}")
    } else {
        format!("{v}")
    }
}

fn xml_escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}
