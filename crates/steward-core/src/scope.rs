//! Scopes and roles. A key holds a set of scope strings; a role is a named default set.

/// Every scope Steward checks. A key may also hold other scope strings; they are kept and
/// reported but grant nothing here.
pub mod scopes {
    pub const ACTIONS_READ: &str = "actions:read";
    pub const ACTIONS_WRITE: &str = "actions:write";
    pub const ACTIONS_INVOKE: &str = "actions:invoke";
    pub const ACTIONS_RESOLVE: &str = "actions:resolve";
    pub const ACTIONS_GOVERN: &str = "actions:govern";
    pub const APPROVALS_READ: &str = "approvals:read";
    pub const APPROVALS_REQUEST: &str = "approvals:request";
    pub const APPROVALS_DECIDE: &str = "approvals:decide";
    pub const POLICIES_READ: &str = "policies:read";
    pub const POLICIES_WRITE: &str = "policies:write";
    pub const ENVIRONMENTS_HALT: &str = "environments:halt";
    pub const IMPACT_LIMITS_READ: &str = "impact-limits:read";
    pub const IMPACT_LIMITS_WRITE: &str = "impact-limits:write";
    pub const SECRETS_READ: &str = "secrets:read";
    pub const SECRETS_WRITE: &str = "secrets:write";
    pub const AUDIT_READ: &str = "audit:read";
    /// Reading runs, their spans and feedback.
    pub const RUNS_READ: &str = "runs:read";
    /// Starting, ending and importing runs, ingesting spans, adding feedback.
    pub const RUNS_WRITE: &str = "runs:write";
}

/// A named default set of scopes for `steward keys create --role`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// What an agent needs: read actions, invoke them, ask for approval. Nothing privileged.
    Agent,
    /// Everything Steward checks.
    Operator,
}

impl Role {
    pub fn parse(value: &str) -> Option<Role> {
        match value {
            "agent" => Some(Role::Agent),
            "operator" => Some(Role::Operator),
            _ => None,
        }
    }

    pub fn scopes(self) -> Vec<String> {
        use scopes::*;
        let list: &[&str] = match self {
            Role::Agent => &[
                ACTIONS_READ,
                ACTIONS_INVOKE,
                APPROVALS_READ,
                APPROVALS_REQUEST,
                IMPACT_LIMITS_READ,
                RUNS_READ,
                RUNS_WRITE,
            ],
            Role::Operator => &[
                ACTIONS_READ,
                ACTIONS_WRITE,
                ACTIONS_INVOKE,
                ACTIONS_RESOLVE,
                ACTIONS_GOVERN,
                APPROVALS_READ,
                APPROVALS_REQUEST,
                APPROVALS_DECIDE,
                POLICIES_READ,
                POLICIES_WRITE,
                ENVIRONMENTS_HALT,
                IMPACT_LIMITS_READ,
                IMPACT_LIMITS_WRITE,
                SECRETS_READ,
                SECRETS_WRITE,
                AUDIT_READ,
                RUNS_READ,
                RUNS_WRITE,
            ],
        };
        list.iter().map(|s| s.to_string()).collect()
    }
}

/// Scopes no agent role may hold: deciding, resolving, governing, halting, policy and limit changes.
pub const PRIVILEGED: [&str; 7] = [
    scopes::ACTIONS_RESOLVE,
    scopes::ACTIONS_GOVERN,
    scopes::APPROVALS_DECIDE,
    scopes::POLICIES_READ,
    scopes::POLICIES_WRITE,
    scopes::ENVIRONMENTS_HALT,
    scopes::IMPACT_LIMITS_WRITE,
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_agent_role_holds_nothing_privileged() {
        let agent = Role::Agent.scopes();
        for scope in PRIVILEGED {
            assert!(!agent.iter().any(|s| s == scope), "{scope}");
        }
        assert!(agent.iter().any(|s| s == scopes::ACTIONS_INVOKE));
        let operator = Role::Operator.scopes();
        for scope in PRIVILEGED {
            assert!(operator.iter().any(|s| s == scope), "{scope}");
        }
    }
}
