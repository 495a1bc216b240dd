//! CPU time from Linux's `/proc`, read before and after each cell: the whole machine's busy and
//! total ticks (`/proc/stat`), a process's user + system ticks (`/proc/PID/stat`) and the time
//! its threads spent runnable but waiting for a core (`/proc/PID/task/TID/schedstat`).
//!
//! Elsewhere (no `/proc`) every reading is `None` and the report shows `-`.

use std::collections::BTreeMap;

/// The command name PostgreSQL's processes run under (the postmaster, every backend, the WAL
/// writer, the checkpointer...): their CPU is summed as "postgres".
const POSTGRES_COMM: &str = "postgres";

/// The whole machine's ticks since boot, over all cores.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct MachineTicks {
    /// Neither idle nor waiting for IO.
    pub(super) busy: u64,
    pub(super) total: u64,
}

/// Parses the aggregate `cpu` line of `/proc/stat`: user nice system idle iowait irq softirq
/// steal (guest and guest_nice, when present, are already counted in user and nice).
pub(super) fn parse_machine(stat: &str) -> Option<MachineTicks> {
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let fields: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .take(8)
        .map(str::parse)
        .collect::<Result<_, _>>()
        .ok()?;
    if fields.len() < 5 {
        return None;
    }
    let total: u64 = fields.iter().sum();
    let idle = fields[3] + fields[4];
    Some(MachineTicks {
        busy: total - idle,
        total,
    })
}

/// One process's line of `/proc/PID/stat`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct ProcessTicks {
    /// The command name (`/proc/PID/comm`, at most 15 bytes; it may hold spaces and parentheses).
    pub(super) comm: String,
    /// utime + stime: the process's own CPU, all its threads.
    pub(super) own: u64,
    /// cutime + cstime: the CPU of its children that exited and that it waited for.
    pub(super) children: u64,
}

/// Parses `/proc/PID/stat`. The command name sits in parentheses and may itself hold spaces and
/// `)`, so the fields are counted from the last `)`.
pub(super) fn parse_process(stat: &str) -> Option<ProcessTicks> {
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    if close < open {
        return None;
    }
    let comm = stat[open + 1..close].to_string();
    // After the name: field 3 (state) onwards; utime is field 14, stime 15, cutime 16, cstime 17.
    let rest: Vec<&str> = stat[close + 1..].split_whitespace().collect();
    let field = |n: usize| rest.get(n - 3)?.parse::<u64>().ok();
    Some(ProcessTicks {
        comm,
        own: field(14)? + field(15)?,
        children: field(16)? + field(17)?,
    })
}

/// The nanoseconds a task spent runnable, waiting for a core: the second field of
/// `/proc/PID/task/TID/schedstat` (on-CPU ns, run-queue wait ns, time slices).
pub(super) fn parse_run_queue_wait_ns(schedstat: &str) -> Option<u64> {
    schedstat.split_whitespace().nth(1)?.parse().ok()
}

fn read(path: &str) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

pub(super) fn machine() -> Option<MachineTicks> {
    parse_machine(&read("/proc/stat")?)
}

pub(super) fn process(pid: u32) -> Option<ProcessTicks> {
    parse_process(&read(&format!("/proc/{pid}/stat"))?)
}

/// Run-queue wait of each of `pid`'s threads, by thread id.
fn thread_waits(pid: u32, into: &mut BTreeMap<u32, u64>) {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return;
    };
    for task in tasks.flatten() {
        let Some(tid) = task.file_name().to_str().and_then(|t| t.parse().ok()) else {
            continue;
        };
        if let Some(ns) = read(&format!("/proc/{pid}/task/{tid}/schedstat"))
            .as_deref()
            .and_then(parse_run_queue_wait_ns)
        {
            into.insert(tid, ns);
        }
    }
}

/// A group of processes' CPU at one instant.
#[derive(Debug, Clone, Default)]
pub(super) struct GroupSample {
    /// Summed ticks; `None` when a process of the group could not be read (or none was found).
    pub(super) ticks: Option<u64>,
    /// Run-queue wait by thread id, so threads born or ended between two samples count right.
    pub(super) waits_ns: BTreeMap<u32, u64>,
}

impl GroupSample {
    /// The group of `pids`: their own ticks (their children are not theirs to count).
    pub(super) fn of(pids: &[u32]) -> GroupSample {
        let mut sample = GroupSample {
            ticks: Some(0),
            ..GroupSample::default()
        };
        for &pid in pids {
            match process(pid) {
                Some(p) => sample.ticks = sample.ticks.map(|t| t + p.own),
                None => sample.ticks = None,
            }
            thread_waits(pid, &mut sample.waits_ns);
        }
        if pids.is_empty() {
            sample.ticks = None;
        }
        sample
    }

    /// Every process named `postgres` on this machine: own ticks plus those of the children it
    /// reaped, so a backend that exits between two samples still counts (in the postmaster's).
    pub(super) fn postgres() -> GroupSample {
        let mut sample = GroupSample::default();
        let Ok(entries) = std::fs::read_dir("/proc") else {
            return sample;
        };
        for entry in entries.flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|p| p.parse::<u32>().ok())
            else {
                continue;
            };
            let Some(p) = process(pid).filter(|p| p.comm == POSTGRES_COMM) else {
                continue;
            };
            sample.ticks = Some(sample.ticks.unwrap_or(0) + p.own + p.children);
            thread_waits(pid, &mut sample.waits_ns);
        }
        sample
    }

    /// Ticks from `before` to `self`, and the run-queue wait of the threads alive at `self`
    /// (a thread that ended in between loses its share).
    pub(super) fn since(&self, before: &GroupSample) -> (Option<u64>, u64) {
        let ticks = match (before.ticks, self.ticks) {
            (Some(b), Some(a)) => Some(a.saturating_sub(b)),
            _ => None,
        };
        let waits = self
            .waits_ns
            .iter()
            .map(|(tid, ns)| ns.saturating_sub(before.waits_ns.get(tid).copied().unwrap_or(0)))
            .sum();
        (ticks, waits)
    }
}

/// Clock ticks per second, the unit of `/proc/*/stat` (`getconf CLK_TCK`; 100 on Linux).
pub(super) fn ticks_per_second() -> u64 {
    #[cfg(target_os = "linux")]
    {
        rustix::param::clock_ticks_per_second().max(1)
    }
    #[cfg(not(target_os = "linux"))]
    {
        100
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_machine_line_counts_idle_and_iowait_as_not_busy() {
        let stat = "cpu  34338 10 8418 13367 393 0 107 75 5 0\ncpu0 1 2 3 4 5 6 7 8 9 10\nintr 1\n";
        let m = parse_machine(stat).expect("parsed");
        assert_eq!(m.total, 34338 + 10 + 8418 + 13367 + 393 + 107 + 75);
        assert_eq!(m.busy, m.total - 13367 - 393);
        assert_eq!(parse_machine("intr 1\n"), None);
        assert_eq!(parse_machine("cpu  1 2 x 4 5\n"), None);
    }

    #[test]
    fn a_process_line_is_read_after_the_last_parenthesis() {
        // A command name with spaces and parentheses, as a process may set it.
        let stat = "4242 (my (odd) name) S 1 4242 4242 0 -1 4194560 500 0 0 0 \
                    731 69 12 3 20 0 9 0 1000 123456 789 18446744073709551615";
        let p = parse_process(stat).expect("parsed");
        assert_eq!(p.comm, "my (odd) name");
        assert_eq!(p.own, 731 + 69);
        assert_eq!(p.children, 12 + 3);
        let postgres = "2271 (postgres) S 1 2271 2271 0 -1 4194560 9 0 0 0 5 7 100 200 20 0 1 0";
        let p = parse_process(postgres).expect("parsed");
        assert_eq!((p.comm.as_str(), p.own, p.children), ("postgres", 12, 300));
        assert_eq!(parse_process("4242 (cut short) S 1 2"), None);
        assert_eq!(parse_process("no name here"), None);
    }

    #[test]
    fn the_run_queue_wait_is_the_second_schedstat_field() {
        assert_eq!(
            parse_run_queue_wait_ns("729652 19137715 3\n"),
            Some(19_137_715)
        );
        assert_eq!(parse_run_queue_wait_ns("729652"), None);
    }

    #[test]
    fn a_group_counts_threads_that_appeared_and_not_those_that_ended() {
        let before = GroupSample {
            ticks: Some(100),
            waits_ns: BTreeMap::from([(1, 1_000), (2, 5_000)]),
        };
        let after = GroupSample {
            ticks: Some(130),
            waits_ns: BTreeMap::from([(1, 1_500), (3, 700)]),
        };
        assert_eq!(after.since(&before), (Some(30), 500 + 700));
        let unreadable = GroupSample::default();
        assert_eq!(unreadable.since(&before).0, None);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn this_process_and_the_machine_can_be_read() {
        let me = process(std::process::id()).expect("/proc/self/stat");
        assert!(!me.comm.is_empty());
        let m = machine().expect("/proc/stat");
        assert!(m.total >= m.busy && m.total > 0);
    }
}
