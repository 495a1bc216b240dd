//! Approval decisions as a pure function: who may decide, when a tally is enough, and what the
//! parked effect does next.

use crate::effect::EffectEvent;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalStatus {
    Pending,
    Approved,
    Denied,
    Expired,
}

impl ApprovalStatus {
    pub const ALL: [ApprovalStatus; 4] = [
        ApprovalStatus::Pending,
        ApprovalStatus::Approved,
        ApprovalStatus::Denied,
        ApprovalStatus::Expired,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalStatus::Pending => "pending",
            ApprovalStatus::Approved => "approved",
            ApprovalStatus::Denied => "denied",
            ApprovalStatus::Expired => "expired",
        }
    }

    pub fn parse(value: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.as_str() == value)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    Approve,
    Deny,
}

/// What the decider brings to the approval.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ballot {
    pub decision: Decision,
    /// The decider is the key that requested the approval.
    pub is_requester: bool,
    /// The decider already decided this approval.
    pub already_voted: bool,
}

/// Where the approval stands before the ballot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tally {
    pub status: ApprovalStatus,
    pub approvals: u32,
    pub required: u32,
    /// The approval's expiry has passed.
    pub expired: bool,
}

/// The result of casting a ballot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Recorded. `status` is the approval's new status; `effect` the parked effect's event, if
    /// the approval just settled.
    Recorded {
        status: ApprovalStatus,
        effect: Option<EffectEvent>,
    },
    /// The approval ran out before this ballot: it becomes expired, the ballot is not counted.
    Expires,
    /// Already settled: nothing changes, the caller gets the approval as it stands.
    AlreadySettled,
    /// The same key decided before: nothing changes.
    AlreadyVoted,
    /// A key never decides an approval it requested.
    SelfDecision,
}

pub fn cast(tally: Tally, ballot: Ballot) -> Verdict {
    if tally.status != ApprovalStatus::Pending {
        return Verdict::AlreadySettled;
    }
    if ballot.is_requester {
        return Verdict::SelfDecision;
    }
    if tally.expired {
        return Verdict::Expires;
    }
    if ballot.already_voted {
        return Verdict::AlreadyVoted;
    }
    match ballot.decision {
        Decision::Deny => Verdict::Recorded {
            status: ApprovalStatus::Denied,
            effect: Some(EffectEvent::Deny),
        },
        Decision::Approve if tally.approvals + 1 >= tally.required.max(1) => Verdict::Recorded {
            status: ApprovalStatus::Approved,
            effect: Some(EffectEvent::Approve),
        },
        Decision::Approve => Verdict::Recorded {
            status: ApprovalStatus::Pending,
            effect: None,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tally(status: ApprovalStatus, approvals: u32, required: u32, expired: bool) -> Tally {
        Tally {
            status,
            approvals,
            required,
            expired,
        }
    }

    #[test]
    fn every_combination() {
        for status in ApprovalStatus::ALL {
            for decision in [Decision::Approve, Decision::Deny] {
                for is_requester in [false, true] {
                    for already_voted in [false, true] {
                        for expired in [false, true] {
                            for (approvals, required) in [(0, 1), (0, 2), (1, 2)] {
                                let ballot = Ballot {
                                    decision,
                                    is_requester,
                                    already_voted,
                                };
                                let got = cast(tally(status, approvals, required, expired), ballot);
                                let expected = if status != ApprovalStatus::Pending {
                                    Verdict::AlreadySettled
                                } else if is_requester {
                                    Verdict::SelfDecision
                                } else if expired {
                                    Verdict::Expires
                                } else if already_voted {
                                    Verdict::AlreadyVoted
                                } else if decision == Decision::Deny {
                                    Verdict::Recorded {
                                        status: ApprovalStatus::Denied,
                                        effect: Some(EffectEvent::Deny),
                                    }
                                } else if approvals + 1 >= required {
                                    Verdict::Recorded {
                                        status: ApprovalStatus::Approved,
                                        effect: Some(EffectEvent::Approve),
                                    }
                                } else {
                                    Verdict::Recorded {
                                        status: ApprovalStatus::Pending,
                                        effect: None,
                                    }
                                };
                                assert_eq!(got, expected, "{status:?} {ballot:?} {approvals}/{required} expired={expired}");
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn two_distinct_approvers_are_needed_for_two() {
        let first = cast(
            tally(ApprovalStatus::Pending, 0, 2, false),
            Ballot {
                decision: Decision::Approve,
                is_requester: false,
                already_voted: false,
            },
        );
        assert_eq!(
            first,
            Verdict::Recorded {
                status: ApprovalStatus::Pending,
                effect: None
            }
        );
        let same_again = cast(
            tally(ApprovalStatus::Pending, 1, 2, false),
            Ballot {
                decision: Decision::Approve,
                is_requester: false,
                already_voted: true,
            },
        );
        assert_eq!(same_again, Verdict::AlreadyVoted);
    }
}
