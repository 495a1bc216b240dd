//! The seeded fault schedule: which faults, on which replica, in which order, and where in the
//! run each one falls. A pure function of the seed and the mix, so a seed replays the schedule.

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

/// What the fixture does to one provider write (its `FaultMode`, as `POST /_fixture/faults`
/// names it).
pub(crate) const PROVIDER_MODES: [&str; 5] = [
    "hold_after_commit",
    "drop_after_commit",
    "error_after_commit",
    "error_before_commit",
    "reject",
];

/// One fault.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Fault {
    /// SIGKILL of the PostgreSQL primary (embedded: of the Steward process, then a restart).
    PrimaryKill,
    /// SIGKILL of a replica, then a restart on the same store.
    ReplicaKill { replica: usize },
    /// SIGSTOP of a replica past its lease, then SIGCONT.
    Pause { replica: usize },
    /// The replica's route to the database held past its lease, then reset and healed.
    Partition { replica: usize },
    /// The provider fixture misbehaves on its next writes.
    Provider { mode: &'static str },
}

impl Fault {
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Fault::PrimaryKill => "primary-kill",
            Fault::ReplicaKill { .. } => "replica-kill",
            Fault::Pause { .. } => "pause",
            Fault::Partition { .. } => "partition",
            Fault::Provider { .. } => "provider",
        }
    }
}

/// How many of each fault a run injects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Mix {
    pub(crate) primary_kills: u32,
    pub(crate) replica_kills: u32,
    pub(crate) pauses: u32,
    pub(crate) partitions: u32,
    pub(crate) provider_faults: u32,
}

/// One fault and where it falls: `position` is the share of the run (of its time, or of its
/// operations) done before it starts, strictly between 0 and 1.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Planned {
    pub(crate) position: f64,
    pub(crate) fault: Fault,
}

/// The schedule for `seed`: the mix's faults in a seeded order, each on a seeded replica,
/// spread evenly over the run with a seeded jitter of up to a third of a slot.
pub(crate) fn plan(seed: u64, mix: Mix, replicas: usize) -> Vec<Planned> {
    let mut rng = StdRng::seed_from_u64(seed);
    let replicas = replicas.max(1);
    let mut faults = vec![];
    for _ in 0..mix.primary_kills {
        faults.push(Fault::PrimaryKill);
    }
    for _ in 0..mix.replica_kills {
        faults.push(Fault::ReplicaKill {
            replica: rng.gen_range(0..replicas),
        });
    }
    for _ in 0..mix.pauses {
        faults.push(Fault::Pause {
            replica: rng.gen_range(0..replicas),
        });
    }
    for _ in 0..mix.partitions {
        faults.push(Fault::Partition {
            replica: rng.gen_range(0..replicas),
        });
    }
    for _ in 0..mix.provider_faults {
        let mode = PROVIDER_MODES[rng.gen_range(0..PROVIDER_MODES.len())];
        faults.push(Fault::Provider { mode });
    }
    faults.shuffle(&mut rng);
    let slot = 1.0 / (faults.len() as f64 + 1.0);
    faults
        .into_iter()
        .enumerate()
        .map(|(i, fault)| Planned {
            position: slot * (i as f64 + 1.0) + rng.gen_range(-slot / 3.0..slot / 3.0),
            fault,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIX: Mix = Mix {
        primary_kills: 3,
        replica_kills: 2,
        pauses: 3,
        partitions: 2,
        provider_faults: 4,
    };

    #[test]
    fn a_seed_replays_its_schedule_and_another_seed_differs() {
        assert_eq!(plan(7, MIX, 3), plan(7, MIX, 3));
        assert_ne!(plan(7, MIX, 3), plan(8, MIX, 3));
    }

    #[test]
    fn the_schedule_holds_the_mix_in_order_inside_the_run() {
        let schedule = plan(42, MIX, 3);
        let count = |name: &str| schedule.iter().filter(|p| p.fault.name() == name).count();
        assert_eq!(count("primary-kill"), 3);
        assert_eq!(count("replica-kill"), 2);
        assert_eq!(count("pause"), 3);
        assert_eq!(count("partition"), 2);
        assert_eq!(count("provider"), 4);
        for pair in schedule.windows(2) {
            assert!(pair[0].position < pair[1].position, "{schedule:?}");
        }
        assert!(schedule
            .iter()
            .all(|p| p.position > 0.0 && p.position < 1.0));
        for planned in &schedule {
            if let Fault::ReplicaKill { replica }
            | Fault::Pause { replica }
            | Fault::Partition { replica } = planned.fault
            {
                assert!(replica < 3, "{planned:?}");
            }
        }
    }

    #[test]
    fn an_empty_mix_plans_nothing() {
        assert_eq!(plan(1, Mix::default(), 2), vec![]);
    }
}
