//! The built-in topics: one per family of Steward's events. Steward publishes only its own
//! events, so topics are not created, renamed or deleted, and nothing is published by hand.

use crate::events::EVENT_TYPES;

/// A built-in topic: its id, its name, and the event types it carries (by prefix).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Topic {
    pub id: &'static str,
    pub name: &'static str,
    pub description: &'static str,
    prefix: &'static str,
}

pub(crate) const TOPICS: &[Topic] = &[
    Topic {
        id: "top_runs",
        name: "runs",
        description: "Runs starting and ending (run.started, run.ended).",
        prefix: "run.",
    },
    Topic {
        id: "top_approvals",
        name: "approvals",
        description: "Approvals requested, decided and expired.",
        prefix: "approval.",
    },
    Topic {
        id: "top_effects",
        name: "effects",
        description: "Effects dispatched, settled, unknown and resolved.",
        prefix: "effect.",
    },
    Topic {
        id: "top_environment",
        name: "environment",
        description: "The kill switch: the environment halted and resumed.",
        prefix: "environment.",
    },
];

impl Topic {
    /// The topic named by its id or its name.
    pub fn find(reference: &str) -> Option<Topic> {
        TOPICS
            .iter()
            .copied()
            .find(|t| t.id == reference || t.name == reference)
    }

    pub fn by_name(name: &str) -> Option<Topic> {
        TOPICS.iter().copied().find(|t| t.name == name)
    }

    /// Every event type the topic carries.
    pub fn event_types(&self) -> Vec<&'static str> {
        EVENT_TYPES
            .iter()
            .copied()
            .filter(|t| t.starts_with(self.prefix))
            .collect()
    }

    pub fn carries(&self, event_type: &str) -> bool {
        event_type.starts_with(self.prefix) && EVENT_TYPES.contains(&event_type)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_event_type_is_in_exactly_one_topic() {
        for t in EVENT_TYPES {
            let holders: Vec<_> = TOPICS.iter().filter(|topic| topic.carries(t)).collect();
            assert_eq!(holders.len(), 1, "{t}");
        }
        assert_eq!(Topic::find("top_effects"), Topic::find("effects"));
        assert!(Topic::find("orders").is_none());
    }
}
