//! Counters for `/metrics` (Prometheus text format).

use std::collections::BTreeMap;
use std::sync::Mutex;

#[derive(Default)]
pub struct Metrics {
    counters: Mutex<BTreeMap<(&'static str, String), u64>>,
}

impl Metrics {
    fn add(&self, name: &'static str, label: String) {
        let mut counters = self.counters.lock().unwrap_or_else(|p| p.into_inner());
        *counters.entry((name, label)).or_default() += 1;
    }

    /// One reconcile result: found, absent, inconclusive, no_lookup.
    pub fn reconcile(&self, result: &str) {
        self.add("steward_reconcile_total", format!("result=\"{result}\""));
    }

    /// One finished dispatch attempt, by the state it led to.
    pub fn attempt(&self, outcome: &str) {
        self.add(
            "steward_dispatch_attempts_total",
            format!("outcome=\"{outcome}\""),
        );
    }

    pub fn render(&self) -> String {
        let counters = self.counters.lock().unwrap_or_else(|p| p.into_inner());
        let mut out = String::new();
        let mut last = "";
        for ((name, label), value) in counters.iter() {
            if *name != last {
                out.push_str(&format!("# TYPE {name} counter\n"));
                last = name;
            }
            out.push_str(&format!("{name}{{{label}}} {value}\n"));
        }
        out
    }
}
