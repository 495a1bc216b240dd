//! How far an invoke got, for callers that show it while they wait (MCP progress
//! notifications). Reporting never blocks and never fails the invoke: with no listener, or one
//! that went away, a stage is simply not heard.

use steward_core::EffectState;
use tokio::sync::mpsc;

/// A point an invoke passed, in the order it passes them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stage {
    /// Policy decided what happens to the call: it runs, waits for a person, or is refused.
    PolicyEvaluated { initial: EffectState },
    /// The attempt is durable and the request is about to leave for the provider.
    Dispatching,
}

impl Stage {
    /// What a person or a model reads about this stage.
    pub fn message(&self) -> &'static str {
        match self {
            Stage::PolicyEvaluated {
                initial: EffectState::Ready,
            } => "policy evaluated: the call may run",
            Stage::PolicyEvaluated {
                initial: EffectState::AwaitingApproval,
            } => "policy evaluated: a person must approve the call",
            Stage::PolicyEvaluated { .. } => "policy evaluated: the call is refused",
            Stage::Dispatching => "the attempt is recorded; dispatching to the provider",
        }
    }
}

/// Where an invoke reports its stages; [`Progress::none`] for callers that do not listen.
#[derive(Debug, Clone, Default)]
pub struct Progress(Option<mpsc::UnboundedSender<Stage>>);

impl Progress {
    pub fn none() -> Progress {
        Progress(None)
    }

    /// A reporter and the receiver that hears it.
    pub fn channel() -> (Progress, mpsc::UnboundedReceiver<Stage>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (Progress(Some(tx)), rx)
    }

    pub fn report(&self, stage: Stage) {
        if let Some(tx) = &self.0 {
            let _ = tx.send(stage);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stages_reach_the_listener_in_order_and_none_is_silent() {
        let (progress, mut heard) = Progress::channel();
        progress.report(Stage::PolicyEvaluated {
            initial: EffectState::Ready,
        });
        progress.report(Stage::Dispatching);
        drop(progress);
        assert_eq!(
            heard.try_recv().unwrap().message(),
            "policy evaluated: the call may run"
        );
        assert_eq!(heard.try_recv().unwrap(), Stage::Dispatching);
        assert!(heard.try_recv().is_err());
        Progress::none().report(Stage::Dispatching);
    }
}
