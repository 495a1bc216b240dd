//! The invariants, checked against the real store after every step (docs/INVARIANTS.md):
//!
//! - at most one provider write per operation, and per business operation (an operation and
//!   its `retryOf` retries) (2, 5);
//! - no illegal state: every change the store shows since the last step is one legal move of
//!   `steward_core::next`, and one operation key names at most one effect (2);
//! - durable intent: every request that reached the provider belongs to an attempt the store has
//!   on record (1);
//! - honest outcomes, nothing lost: a write at the provider belongs to an effect with a
//!   durable attempt that is not `ready`, `failed` or `rejected`, and only a write can make an
//!   effect `succeeded` (4);
//! - reservations add up: the limit's consumed, reserved and exposure are the sums of what each
//!   effect reserved, by where its states took it (`reservation_by_state`, the checker's own model), within the limit;
//! - the client's saved answers are what the store holds;
//!
//! and after the final phase: every operation the client journaled has its one effect, settled
//! (by reconcile, or by a person for a template action), writes match outcomes, the client
//! holds every answer, and the audit chain verifies (10).

use crate::world::{err, Kind, Local, Sim, World, LIMIT_CENTS};
use steward_core::impact::{ReservationState, Usage};
use steward_core::{next, EffectEvent, EffectState, Millis};
use steward_store::{
    verify_chain, verify_unsealed, AuditLog, AuditSeal, EffectFilter, EffectRecord, Effects,
    Limits, SealOutcome, SEAL_BATCH_EVENTS_MAX,
};

/// What the last check read from the store.
pub(crate) struct Snapshot {
    /// Every effect of the run, with the index of its operation, in operation order.
    effects: Vec<(usize, EffectRecord)>,
    usage: Usage,
}

/// True when one move of the state machine takes `from` to `to` (or nothing moved).
fn one_move(from: EffectState, to: EffectState) -> bool {
    from == to
        || EffectEvent::ALL
            .into_iter()
            .any(|e| next(from, e).is_ok_and(|(s, _)| s == to))
}

impl World {
    async fn effects(&self) -> Sim<Vec<(usize, EffectRecord)>> {
        let filter = EffectFilter {
            action_id: None,
            states: None,
            limit: 10_000,
            offset: 0,
        };
        let page = self
            .store
            .list_effects(&self.env, &filter)
            .await
            .map_err(err)?;
        let mut found = Vec::with_capacity(page.items.len());
        for effect in page.items {
            let key = effect
                .operation_key
                .as_ref()
                .ok_or_else(|| format!("effect {} has no operation key", effect.id))?;
            let op = key
                .as_str()
                .strip_prefix("op-")
                .and_then(|n| n.parse::<usize>().ok())
                .filter(|n| *n < self.ops.len())
                .ok_or_else(|| format!("effect {} names no operation of this run", effect.id))?;
            found.push((op, effect));
        }
        found.sort_by_key(|(op, _)| *op);
        Ok(found)
    }

    /// Reads the effects and the limit's usage again if the server wrote since the last read,
    /// and checks that every state change since then is one legal move.
    async fn refresh(&mut self) -> Sim {
        if !self.dirty && self.read.is_some() {
            return Ok(());
        }
        let effects = self.effects().await?;
        for pair in effects.windows(2) {
            if pair[0].0 == pair[1].0 {
                return Err(format!("{} names two effects", self.ops[pair[0].0].name));
            }
        }
        // Reservations change only with an effect's creation or a move of its state (in the
        // same transaction), so the limit is read again only then.
        let mut moved = false;
        for (op, effect) in &effects {
            let o = &mut self.ops[*op];
            if o.seen.is_none() {
                // First seen: the invoke's one commit reserved the money of a refund, unless
                // the limit refused it.
                if !matches!(effect.state, EffectState::Rejected { .. }) {
                    o.reserved_cents = match o.kind {
                        Kind::Adapter => o.amount_cents,
                        Kind::Template => 0,
                    };
                    o.holding = Some(ReservationState::Reserved);
                }
            }
            let from = o.seen.unwrap_or(EffectState::Ready);
            if !one_move(from, effect.state) {
                return Err(format!(
                    "illegal state: {} went {} -> {} in one step",
                    o.name,
                    from.name(),
                    effect.state.name()
                ));
            }
            if o.seen != Some(effect.state) {
                moved = true;
                if let (Some(_), Some(after)) = (o.holding, reservation_by_state(effect.state)) {
                    o.holding = Some(after);
                }
            }
            o.seen = Some(effect.state);
            if o.invocation.is_none() {
                o.invocation = Some(effect.invocation_id.clone());
            }
        }
        let usage = match (&self.read, moved) {
            (Some(read), false) => read.usage,
            _ => {
                self.store
                    .limit(&self.env, &self.limit, Millis(self.now))
                    .await
                    .map_err(err)?
                    .ok_or("the limit is missing")?
                    .usage
            }
        };
        self.read = Some(Snapshot { effects, usage });
        self.dirty = false;
        Ok(())
    }

    pub(crate) async fn check(&mut self) -> Sim {
        self.refresh().await?;
        let read = self.read.take().expect("refresh read the store");
        let checked = self.check_snapshot(&read);
        self.read = Some(read);
        checked
    }

    fn check_snapshot(&self, read: &Snapshot) -> Sim {
        let effects = &read.effects;
        self.check_durable_intent(effects)?;
        self.check_writes(effects)?;
        self.check_reservations(read.usage)?;
        for (op, effect) in effects {
            if let Local::Final(saved) = self.ops[*op].local {
                if saved != effect.state {
                    return Err(format!(
                        "{}: the client saved {} but the store holds {}",
                        self.ops[*op].name,
                        saved.name(),
                        effect.state.name()
                    ));
                }
            }
        }
        Ok(())
    }

    /// Durable intent, as the provider sees it: every request that reached it belongs to an
    /// attempt the store has on record (attempts are never removed, so this holds for ever).
    fn check_durable_intent(&self, effects: &[(usize, EffectRecord)]) -> Sim {
        for (op, number) in &self.provider.received {
            let recorded = effects
                .iter()
                .find(|(i, _)| i == op)
                .map_or(0, |(_, e)| e.attempt_count);
            if recorded < *number {
                return Err(format!(
                    "durable intent: the provider received {} request {number}, the store records {recorded} attempts",
                    self.ops[*op].name
                ));
            }
        }
        Ok(())
    }

    fn check_writes(&self, effects: &[(usize, EffectRecord)]) -> Sim {
        for (op, o) in self.ops.iter().enumerate() {
            let writes = self.provider.writes_of(op);
            if writes > 1 {
                let attempts: Vec<String> = self
                    .provider
                    .writes
                    .iter()
                    .filter(|w| w.op == op)
                    .map(|w| w.request.to_string())
                    .collect();
                return Err(format!(
                    "{} has {writes} provider writes (its requests {})",
                    o.name,
                    attempts.join(", ")
                ));
            }
            let effect = effects.iter().find(|(i, _)| *i == op).map(|(_, e)| e);
            match effect {
                None if writes > 0 => {
                    return Err(format!(
                        "lost: {} was written with no effect recorded",
                        o.name
                    ))
                }
                Some(e) if writes > 0 => {
                    let denies = matches!(
                        e.state,
                        EffectState::Ready | EffectState::Failed | EffectState::Rejected { .. }
                    );
                    if e.attempt_count == 0 || denies {
                        return Err(format!(
                            "lost: {} was written but its effect is {} with {} attempts",
                            o.name,
                            e.state.name(),
                            e.attempt_count
                        ));
                    }
                }
                Some(e) if matches!(e.state, EffectState::Succeeded { .. }) => {
                    return Err(format!("{} is succeeded without a provider write", o.name))
                }
                _ => {}
            }
        }
        // One business operation is an operation and its retries: one write among them all.
        let mut per_business = vec![0; self.ops.len()];
        for op in 0..self.ops.len() {
            let mut root = op;
            while let Some(earlier) = self.ops[root].retry_of {
                root = earlier;
            }
            per_business[root] += self.provider.writes_of(op);
            if per_business[root] > 1 {
                return Err(format!(
                    "{} and its retries have {} provider writes",
                    self.ops[root].name, per_business[root]
                ));
            }
        }
        Ok(())
    }

    fn check_reservations(&self, usage: Usage) -> Sim {
        let (mut consumed, mut reserved, mut exposure) = (0, 0, 0);
        for o in &self.ops {
            match o.holding {
                Some(ReservationState::Reserved) => reserved += o.reserved_cents,
                Some(ReservationState::Consumed) => consumed += o.reserved_cents,
                Some(ReservationState::Exposure) => exposure += o.reserved_cents,
                Some(ReservationState::Released) | None => {}
            }
        }
        if (usage.consumed, usage.reserved, usage.exposure) != (consumed, reserved, exposure) {
            return Err(format!(
                "reservations do not add up: the store has consumed {} reserved {} exposure {}, \
                 the effects' states give {consumed} {reserved} {exposure}",
                usage.consumed, usage.reserved, usage.exposure
            ));
        }
        if usage.used() > LIMIT_CENTS {
            return Err(format!(
                "the limit is passed: {} of {LIMIT_CENTS}",
                usage.used()
            ));
        }
        Ok(())
    }

    /// After the final phase: nothing lost, everything answerable, the audit chain intact.
    pub(crate) async fn check_final(&mut self) -> Sim {
        let effects = self.effects().await?;
        if effects.len() != self.ops.len() {
            return Err(format!(
                "lost: {} operations journaled, {} effects recorded",
                self.ops.len(),
                effects.len()
            ));
        }
        for (op, effect) in &effects {
            let o = &self.ops[*op];
            let writes = self.provider.writes_of(*op);
            let state = effect.state;
            let settled = state.is_terminal();
            if !settled {
                return Err(format!("{} ended {}, not settled", o.name, state.name()));
            }
            let honest = match state {
                EffectState::Succeeded { .. } => writes == 1,
                _ => writes == 0,
            };
            if !honest {
                return Err(format!(
                    "{} ended {} with {writes} writes",
                    o.name,
                    state.name()
                ));
            }
            let answered = o.local == Local::Final(state);
            if !answered {
                return Err(format!(
                    "{}: the client holds {:?}, the store {}",
                    o.name,
                    o.local,
                    state.name()
                ));
            }
        }
        // The run's audit events were written unsealed, each with its own hash; the server's
        // sealer would seal them in the background: here they are verified, then sealed, then
        // verified as the chain's continuation.
        let unsealed = self
            .store
            .unsealed_audit_events(0, u32::MAX)
            .await
            .map_err(err)?;
        verify_unsealed(&unsealed).map_err(|e| format!("audit log: {e}"))?;
        // The simulated server is the store's only process: it needs no lease to keep others off.
        let seal = AuditSeal {
            sealer: self.server.state.replica.clone(),
            now: Millis(self.now),
            lease_ms: 0,
            events_max: SEAL_BATCH_EVENTS_MAX,
            epoch: None,
        };
        loop {
            match self.store.seal_audit(&seal).await.map_err(err)? {
                SealOutcome::Sealed { .. } => {}
                SealOutcome::Idle => break,
                held @ SealOutcome::Held { .. } => return Err(format!("audit seal: {held:?}")),
            }
        }
        let (after, hash) = self.head.clone();
        let events = self
            .store
            .audit_events(after, u32::MAX)
            .await
            .map_err(err)?;
        if events.len() != unsealed.len() {
            return Err(format!(
                "audit chain: {} events were unsealed, {} sealed",
                unsealed.len(),
                events.len()
            ));
        }
        self.head = verify_chain(after, &hash, &events).map_err(|e| format!("audit chain: {e}"))?;
        let succeeded = effects
            .iter()
            .filter(|(_, e)| matches!(e.state, EffectState::Succeeded { .. }))
            .count();
        self.say(format!(
            "end: {} operations, {succeeded} succeeded, {} provider writes, {} audit events",
            self.ops.len(),
            self.provider.writes.len(),
            events.len()
        ));
        Ok(())
    }
}

/// What an effect's reservations must hold once it is in `state`, read off the state alone. The
/// checker's own model, kept apart on purpose from what the write path applies (the
/// transition's work, `steward_core::settlement`), so that a wrong settlement shows as a
/// difference between the two.
fn reservation_by_state(state: EffectState) -> Option<ReservationState> {
    match state {
        EffectState::Succeeded { .. } => Some(ReservationState::Consumed),
        EffectState::Failed | EffectState::Rejected { .. } => Some(ReservationState::Released),
        EffectState::Unknown => Some(ReservationState::Exposure),
        EffectState::AwaitingApproval | EffectState::Ready | EffectState::Dispatching => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use steward_core::Rejection;

    #[test]
    fn one_move_is_a_transition_of_the_state_machine() {
        use EffectState as S;
        assert!(one_move(S::Ready, S::Dispatching));
        assert!(one_move(S::Dispatching, S::Unknown));
        assert!(one_move(S::Unknown, S::Dispatching));
        assert!(one_move(S::Unknown, S::Unknown));
        assert!(one_move(
            S::Ready,
            S::Rejected {
                reason: Rejection::Refused
            }
        ));
        // Two moves at once, backwards, or out of a settled state are not one move.
        assert!(!one_move(S::Ready, S::Unknown));
        assert!(!one_move(S::Unknown, S::Ready));
        assert!(!one_move(S::Succeeded { confirmed: true }, S::Unknown));
        assert!(!one_move(S::Failed, S::Dispatching));
    }
}
