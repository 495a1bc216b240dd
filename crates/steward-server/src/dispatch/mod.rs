//! The dispatcher: takes a `Ready` effect to a settled or `unknown` state, exactly once.
//!
//! The write path, in order (docs/ARCHITECTURE.md numbers it the same way):
//! 1. (invoke) the request is accepted and governed, from one read of what it needs;
//! 2. the request is prepared and checked (secrets, hosts and ports, placements, outbound safety,
//!    and the whole request built as HTTP will carry it, `request.rs`); a
//!    refusal records the invocation, settles it `failed`, and nothing is sent;
//! 3. the invocation, its impact reservation and its attempt (`dispatching`, owned by this
//!    replica) are committed in one transaction (`Store::submit_and_begin`,
//!    [`submit_and_dispatch`]); a refused reservation settles `refused` and nothing is sent; a
//!    halted environment leaves it `ready` (`park.rs`). An effect an approval releases takes
//!    them in the decision's own transaction (`Store::decide_and_begin`, `release.rs`); one
//!    released later (a resume, a replay, a takeover) as separate transactions ([`dispatch`]);
//! 4. only then is the request sent, with a deadline, through `AppState::transport`
//!    (`transport.rs`: the HTTP client in a server process, a simulated network in `steward-sim`);
//! 5. the answer is classified honestly and committed (with the request's `Idempotency-Key`
//!    marked answered); a crash before this step leaves the effect `dispatching`, owned by this
//!    replica, which a recovery sweep turns into `unknown` (at start-up with the embedded store;
//!    within a lease on a shared one).

pub(crate) mod answer;
pub mod blocked;
pub mod defect;
pub(crate) mod hold;
pub mod outbound;
pub(crate) mod park;
pub mod pending;
pub(crate) mod prepare;
pub(crate) mod prepared;
pub(crate) mod release;
pub(crate) mod request;
pub(crate) mod reserve;
pub(crate) mod secret_value;
pub mod settle_kept;
pub mod transport;

use crate::crash;
use crate::effect_error::{EffectError, EffectResult};
use crate::progress::{Progress, Stage};
use crate::state::AppState;
use hold::Hold;
use prepared::{Blocked, Prepared};
use serde_json::{json, Value};
use steward_core::{
    classify, ActionDefinition, AttemptReport, CrashPoint, Destination, EffectEvent, EffectState,
    IdempotencyKey, Redactor,
};
use steward_core::{EvidenceKind, EvidenceSource};
use steward_store::{
    Actor, AttemptChange, Catalog, EffectChange, Fence, FirstAttempt, FirstAttemptOutcome,
    InvocationRecord, NewEvidence, SecretRecord, StoreError, Submission, SubmitOutcome,
};
use tracing::Instrument;

/// The most response body kept per attempt, in bytes; the rest is cut (and says so).
const RESPONSE_BODY_BYTES_MAX: usize = 256 * 1024;

/// The definition the invocation was made with: its action's version `inv.action_version`.
pub(crate) async fn definition_of(
    catalog: &dyn Catalog,
    inv: &InvocationRecord,
) -> EffectResult<ActionDefinition> {
    let versions = catalog.action_versions(&inv.env_id, &inv.action_id).await?;
    versions
        .into_iter()
        .find(|v| v.version == inv.action_version)
        .map(|v| v.definition)
        .ok_or_else(|| {
            EffectError::missing(
                "action version",
                format!("{} v{}", inv.action_id, inv.action_version),
            )
        })
}

/// Settles a `Ready` effect as failed without sending: the request must not leave.
async fn block(state: &AppState, inv: &InvocationRecord, blocked: Blocked) -> EffectResult<()> {
    let evidence = NewEvidence::new(
        EvidenceKind::Blocked,
        EvidenceSource::Steward,
        format!("not sent: {}", blocked.message),
    )
    .with_data(json!({"code": blocked.code}));
    let mut change = EffectChange::of(
        &inv.env_id,
        &inv.effect_id,
        EffectState::Ready,
        EffectEvent::Block,
        evidence,
        Actor::key(&inv.created_by, state.clock.now()),
    )?;
    change.error = Some(json!({"code": blocked.code, "message": blocked.message}));
    match state.store.change_effect(&change).await {
        Ok(()) | Err(StoreError::StateConflict { .. }) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Drives one `Ready` effect through one attempt. Returns once the outcome is recorded (or, on
/// a storage failure, with the error and nothing sent).
pub async fn dispatch(state: &AppState, inv: &InvocationRecord) -> EffectResult<()> {
    attempt(state, inv, Start::First).await
}

/// Repeats a lost write under the same provider identity (the same provider idempotency key):
/// a new attempt of the same effect, never a new effect. Only from `unknown`.
pub async fn replay(state: &AppState, inv: &InvocationRecord) -> EffectResult<()> {
    attempt(state, inv, Start::Replay).await
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Start {
    First,
    Replay,
}

/// Refuses to send: a first attempt settles `failed`; a replay leaves the effect `unknown`.
async fn refuse(
    state: &AppState,
    inv: &InvocationRecord,
    start: Start,
    blocked: Blocked,
) -> EffectResult<()> {
    match start {
        Start::First => block(state, inv, blocked).await,
        Start::Replay => {
            let note = NewEvidence::new(
                EvidenceKind::Replay,
                EvidenceSource::Steward,
                format!("replay not sent: {}", blocked.message),
            );
            state
                .store
                .append_evidence(
                    &inv.env_id,
                    &inv.effect_id,
                    &note,
                    &Actor::system(state.clock.now()),
                )
                .await?;
            Err(EffectError::ReplayBlocked {
                effect: inv.effect_id.clone(),
                code: blocked.code,
                message: blocked.message,
            })
        }
    }
}

async fn attempt(state: &AppState, inv: &InvocationRecord, start: Start) -> EffectResult<()> {
    let def = definition_of(&*state.store, inv).await?;
    let effect = state
        .store
        .effect(&inv.env_id, &inv.effect_id)
        .await?
        .ok_or_else(|| EffectError::missing("effect", &inv.effect_id))?;
    let (from, event, number) = match start {
        Start::First => (EffectState::Ready, EffectEvent::BeginAttempt, 1),
        Start::Replay => (
            EffectState::Unknown,
            EffectEvent::Replay,
            effect.effect.attempt_count + 1,
        ),
    };
    if effect.effect.state != from {
        // Someone else moved it first (another replica, another request): nothing to do here.
        return Ok(());
    }
    let effect_key = match start {
        Start::First => effect.effect.provider_idempotency_key.clone(),
        Start::Replay => defect::replay_key(
            state.defect,
            effect.effect.provider_idempotency_key.clone(),
            number,
        ),
    };
    let effect_key = effect_key.as_deref();
    let (prepared, host) = match checked(state, inv, &def, effect_key, None).await {
        Ok(checked) => checked,
        Err(blocked) => return refuse(state, inv, start, blocked).await,
    };

    // Step 3, as separate transactions: every applicable impact limit is reserved, or the
    // effect is refused unsent; then the attempt is durable before any byte leaves.
    if start == Start::First
        && reserve::reserve(state, inv, &def).await? == reserve::Reservation::Refused
    {
        return Ok(());
    }

    let hold = Hold::take(state);
    let begin = begin_change(
        state, inv, from, event, number, &host, &prepared, effect_key,
    )?;
    // Held until the answer is recorded or kept (`pending.rs`).
    let _sending = state.pending.sending(&begin.effect_id);
    let started = std::time::Instant::now();
    let begun = state.store.change_effect(&begin).await;
    state
        .metrics
        .store_commit("begin_attempt", started.elapsed());
    match begun {
        Ok(()) => {}
        Err(StoreError::StateConflict { .. }) => return Ok(()),
        // The kill switch: no attempt was recorded; the effect stays ready until resume.
        Err(StoreError::Halted) if start == Start::First => {
            return park::park(state, inv, park::Parked::Halted).await
        }
        // A hold: likewise, until the hold is released.
        Err(StoreError::Held) if start == Start::First => {
            return park::park(state, inv, park::Parked::Held).await
        }
        // The commit's answer was lost: the attempt may be recorded or not. Nothing is sent
        // on it; a recorded one is settled failed as not sent once the database answers, as
        // for `submit_and_begin`.
        Err(source) if source.commit_unknown() => {
            state
                .pending
                .keep(pending::not_sent(&begin, None), pending::Kind::NotSent);
            return Err(EffectError::IntentNotKnown { source });
        }
        Err(e) => return Err(e.into()),
    }
    send_and_record(state, inv, &def, number, &prepared, None, hold)
        .await
        .map(|_| ())
}

/// Write path step 2: the request is prepared and checked (secrets, the request as HTTP will
/// carry it, destination, the secrets' hosts). `Err` means it must not be sent; nothing was recorded.
async fn checked(
    state: &AppState,
    inv: &InvocationRecord,
    def: &ActionDefinition,
    effect_key: Option<&str>,
    secrets: Option<&[SecretRecord]>,
) -> Result<(Prepared, Destination), Blocked> {
    let prepared = prepare::prepare(state, inv, def, effect_key, secrets).await?;
    // The whole request (URL, method, header names and values, body) must be one HTTP can
    // carry, or it is refused here, unrecorded and unsent, rather than failing once it is sent.
    request::build(&state.http, &prepared, state.dispatch_timeout)?;
    let host = state
        .outbound
        .check(&prepared.url)
        .await
        .map_err(|e| Blocked::new("destination_refused", e.to_string()))?;
    if let Some(refusal) = prepared
        .secrets
        .iter()
        .find_map(|s| s.allow_host(&host).err())
    {
        return Err(refusal);
    }
    Ok((prepared, host))
}

/// The attempt's `Begin`: `from -> dispatching` with its deadline, owner and evidence.
#[allow(clippy::too_many_arguments)]
fn begin_change(
    state: &AppState,
    inv: &InvocationRecord,
    from: EffectState,
    event: EffectEvent,
    number: u32,
    host: &Destination,
    prepared: &Prepared,
    effect_key: Option<&str>,
) -> EffectResult<EffectChange> {
    let now = state.clock.now();
    let deadline = now.plus_ms(state.dispatch_timeout.as_millis() as i64);
    let what = if event == EffectEvent::Replay {
        "replay"
    } else {
        "attempt"
    };
    let evidence = NewEvidence::new(
        EvidenceKind::Attempt,
        EvidenceSource::Steward,
        format!(
            "{what} {number}: {} to {host}, deadline {} ms{}",
            prepared.method,
            state.dispatch_timeout.as_millis(),
            effect_key
                .map(|k| format!(", provider idempotency key {k}"))
                .unwrap_or_default()
        ),
    );
    // What the receipt of this attempt's settlement names the request by (`receipts/`).
    let evidence = evidence.with_data(json!({
        "attempt": number,
        "requestDigest": prepared.scrubbed_digest(),
    }));
    let mut begin = EffectChange::of(
        &inv.env_id,
        &inv.effect_id,
        from,
        event,
        evidence,
        Actor::key(&inv.created_by, now),
    )?;
    begin.attempt = Some(AttemptChange::Begin {
        number,
        deadline_at: deadline,
        owner: state.replica.clone(),
    });
    Ok(begin)
}

/// Write path steps 4 and 5 once the attempt is committed: send, classify, record. With
/// `answers_request`, the recorded answer also marks that invoke request answered. Returns the
/// invocation as the recorded answer left it, or `None` when another replica had settled the
/// attempt first (the answer is then kept as evidence, and the request not marked). Nothing is
/// sent unless `hold` (taken before the attempt's `Begin`) still holds right before the send
/// (`hold.rs`); otherwise the attempt is dropped unsent.
#[allow(clippy::too_many_arguments)]
async fn send_and_record(
    state: &AppState,
    inv: &InvocationRecord,
    def: &ActionDefinition,
    number: u32,
    prepared: &Prepared,
    answers_request: Option<IdempotencyKey>,
    hold: Hold,
) -> EffectResult<Option<InvocationRecord>> {
    // What a graceful shutdown waits for (`serve.rs`): the answer recorded, or the grace out.
    let _in_flight = state.metrics.dispatch_in_flight();
    crash::reach(state, CrashPoint::ServerAfterRecord)?;
    if let Err(lost) = hold::may_send(state, hold).await {
        return hold::drop_unsent(state, inv, number, lost, answers_request).await;
    }

    // Step 4: send, with a deadline shorter than the SDK's own timeout.
    let started = std::time::Instant::now();
    let mut sent = send(state, prepared).await?;
    if state.defect == Some(defect::Defect::ResendAfterUnknown) && outcome_unknown(&sent.report) {
        sent = send(state, prepared).await?;
    }
    // A connected OAuth account's access token the provider refused (401): the request was not
    // acted on, so it is sent once more with a refreshed token, within this attempt.
    let refreshed = match (&sent.report, prepared.secrets.iter().find(|s| s.oauth)) {
        (AttemptReport::Answered { status: 401, .. }, Some(account)) => {
            match crate::oauth::account::refreshed(
                state,
                &inv.env_id,
                &account.name,
                &account.value,
            )
            .await
            {
                Ok(token) => Some(prepared.with_secret(&account.name, &token)),
                Err(blocked) => {
                    tracing::info!(
                        code = blocked.code,
                        "the refused access token could not be refreshed"
                    );
                    None
                }
            }
        }
        _ => None,
    };
    if let Some(again) = &refreshed {
        tracing::info!(
            "the provider refused the access token (401); sending once more with a refreshed one"
        );
        sent = send(state, again).await?;
    }
    let prepared = refreshed.as_ref().unwrap_or(prepared);
    let adapter = prepared
        .adapter
        .as_ref()
        .and_then(|spec| crate::adapters::find(&spec.kind))
        .map_or("template", |a| a.kind());
    state.metrics.dispatch_latency(adapter, started.elapsed());
    if let (
        Some(verify),
        AttemptReport::Answered {
            status: 200..=299, ..
        },
    ) = (&def.verify, &sent.report)
    {
        sent.verified = Some(read_back(state, inv, def, verify, sent.body.as_ref()).await);
    }

    // Step 5: classify and record.
    record_answer(state, inv, number, sent, prepared, answers_request).await
}

/// True when `report` leaves the attempt `unknown` (for [`defect::Defect::ResendAfterUnknown`]).
fn outcome_unknown(report: &AttemptReport) -> bool {
    let event = classify(report).event;
    steward_core::next(EffectState::Dispatching, event)
        .is_ok_and(|(to, _)| to == EffectState::Unknown)
}

/// What the invoke path did with a submission.
pub struct Submitted {
    pub outcome: SubmitOutcome,
    /// The invocation as its recorded answer left it, when the answer was recorded here; the
    /// request's `Idempotency-Key` was marked answered in the same transaction.
    pub answered: Option<InvocationRecord>,
}

/// The invoke path of a submission that starts `ready`: the request is prepared and checked
/// first (step 2, with `secrets` as read with the action), then the invocation, its reservation
/// and its first attempt are committed in one transaction (`Store::submit_and_begin`, step 3),
/// then it is sent and its answer recorded (steps 4 and 5).
/// The same records, in the same order, as `submit` followed by [`dispatch`], with one commit
/// where there were three. A request that must not be sent is recorded first and then settled
/// `failed`, as [`dispatch`] would.
pub async fn submit_and_dispatch(
    state: &AppState,
    submission: &Submission,
    def: &ActionDefinition,
    secrets: &[SecretRecord],
    progress: &Progress,
) -> EffectResult<Submitted> {
    let inv = submission.created();
    let effect_key = submission.provider_idempotency_key.as_deref();
    let (prepared, host) = match checked(state, &inv, def, effect_key, Some(secrets)).await {
        Ok(checked) => checked,
        Err(blocked) => {
            let outcome = state.store.submit(submission).await?;
            if let SubmitOutcome::Created(created) = &outcome {
                block(state, created, blocked).await?;
            }
            return Ok(Submitted {
                outcome,
                answered: None,
            });
        }
    };
    let hold = Hold::take(state);
    let begin = begin_change(
        state,
        &inv,
        EffectState::Ready,
        EffectEvent::BeginAttempt,
        1,
        &host,
        &prepared,
        effect_key,
    )?;
    let first = FirstAttempt {
        impact: reserve::request(state, &inv, def),
        begin,
    };
    // A broken build only: the request leaves before anything is committed.
    let early = match state.defect {
        Some(defect::Defect::SendBeforeAttemptIsDurable) => Some(send(state, &prepared).await?),
        _ => None,
    };
    // Held until the answer is recorded or kept (`pending.rs`).
    let _sending = state.pending.sending(&first.begin.effect_id);
    let started = std::time::Instant::now();
    let submitted = state
        .store
        .submit_and_begin(submission, &first)
        .instrument(tracing::info_span!(
            "steward.store",
            operation = "submit_and_begin"
        ))
        .await;
    let submitted = match submitted {
        Ok(submitted) => submitted,
        // The commit's answer was lost: the intent and its attempt may be recorded or not.
        // Nothing is sent on an intent not known to be committed; if it is, its attempt is
        // settled failed as not sent once the database answers (`pending.rs`).
        Err(source) if source.commit_unknown() => {
            let settle = pending::not_sent(&first.begin, submission.idempotency_key.clone());
            state.pending.keep(settle, pending::Kind::NotSent);
            return Err(EffectError::IntentNotKnown { source });
        }
        Err(source) => return Err(source.into()),
    };
    state
        .metrics
        .store_commit("submit_and_begin", started.elapsed());
    let answered = match submitted.first {
        None => None,
        Some(FirstAttemptOutcome::Begun) => {
            progress.report(Stage::Dispatching);
            let key = submission.idempotency_key.clone();
            match early {
                Some(sent) => record_answer(state, &inv, 1, sent, &prepared, key).await?,
                None => {
                    send_and_record(state, &inv, def, 1, &prepared, key, hold)
                        .instrument(tracing::info_span!("steward.dispatch", attempt = 1))
                        .await?
                }
            }
        }
        // The kill switch: no attempt was recorded; the effect stays ready until resume.
        Some(FirstAttemptOutcome::Halted) => {
            park::park(state, &inv, park::Parked::Halted).await?;
            None
        }
        // A hold: likewise, until the hold is released.
        Some(FirstAttemptOutcome::Held) => {
            park::park(state, &inv, park::Parked::Held).await?;
            None
        }
        Some(FirstAttemptOutcome::Refused(refused)) => {
            reserve::refuse(state, &inv, refused).await?;
            None
        }
    };
    Ok(Submitted {
        outcome: submitted.outcome,
        answered,
    })
}

/// Runs the action's `verify` read-back after a 2xx.
async fn read_back(
    state: &AppState,
    inv: &InvocationRecord,
    def: &ActionDefinition,
    verify: &Value,
    body: Option<&Value>,
) -> Result<(), String> {
    let spec = crate::reconcile::verify::parse(verify, state.outbound.allow_insecure)
        .map_err(|(field, message)| format!("{field} {message}"))?;
    let response = body.cloned().unwrap_or(Value::Null);
    crate::reconcile::verify::read_back(
        state,
        inv,
        &spec,
        def.url_template.as_deref().unwrap_or_default(),
        &response,
    )
    .await
}

/// What came back from one send.
struct Answer {
    report: AttemptReport,
    status: Option<u16>,
    body: Option<Value>,
    external_reference: Option<String>,
    /// The `verify` read-back after a 2xx, when the action declares one.
    verified: Option<Result<(), String>>,
}

async fn send(state: &AppState, prepared: &Prepared) -> EffectResult<Answer> {
    let no_answer = |report: AttemptReport| Answer {
        report,
        status: None,
        body: None,
        external_reference: None,
        verified: None,
    };
    // Checked in step 2 already; should it fail now all the same, nothing left.
    let request = match request::build(&state.http, prepared, state.dispatch_timeout) {
        Ok(r) => r,
        Err(blocked) => {
            return Ok(no_answer(AttemptReport::NotBuilt {
                reason: blocked.message,
            }))
        }
    };
    let exchange = match state.transport.execute(request).await {
        Ok(exchange) => exchange,
        Err(failure) => return Ok(no_answer(failure.report())),
    };
    crash::reach(state, CrashPoint::ServerAfterSend)?;
    let status = exchange.status;
    let bytes = match exchange.body {
        Ok(bytes) => bytes,
        Err(failure) => {
            return Ok(Answer {
                report: failure.report(),
                status: Some(status),
                body: None,
                external_reference: None,
                verified: None,
            })
        }
    };
    crash::reach(state, CrashPoint::ServerAfterResponse)?;
    let body = parse_body(&bytes);
    // Found when the request was prepared, so found again: the registry is static.
    let adapter = prepared
        .adapter
        .as_ref()
        .and_then(|spec| crate::adapters::find(&spec.kind).map(|a| (a, spec)));
    let reading = crate::adapters::read_answer(adapter, status, &exchange.headers, &body);
    Ok(Answer {
        report: AttemptReport::Answered {
            status,
            provider_says_nothing_happened: reading.nothing_happened,
            provider_record_confirms: reading.confirms,
        },
        status: Some(status),
        body: Some(body),
        external_reference: reading.reference,
        verified: None,
    })
}

/// The answer's JSON, or its text when it is not JSON (cut only once it is redacted, so that no
/// cut can leave the start of a secret behind).
fn parse_body(bytes: &[u8]) -> Value {
    serde_json::from_slice::<Value>(bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(bytes).into_owned()))
}

/// The body as it is stored: every secret redacted (on parsed values: the provider's own JSON
/// escaping is undone before the secrets are looked for, in every encoding
/// `steward_core::redact` covers), then a text answer cut to [`RESPONSE_BODY_BYTES_MAX`].
fn stored_body(body: &Value, redactor: &Redactor) -> Value {
    match redactor.json(body) {
        Value::String(mut text) if text.len() > RESPONSE_BODY_BYTES_MAX => {
            let mut cut = RESPONSE_BODY_BYTES_MAX;
            while !text.is_char_boundary(cut) {
                cut -= 1;
            }
            text.truncate(cut);
            text.push_str(" [truncated]");
            Value::String(text)
        }
        other => other,
    }
}

async fn record_answer(
    state: &AppState,
    inv: &InvocationRecord,
    number: u32,
    answer: Answer,
    prepared: &Prepared,
    answers_request: Option<IdempotencyKey>,
) -> EffectResult<Option<InvocationRecord>> {
    let mut report = answer.report.clone();
    if let (
        AttemptReport::Answered {
            provider_record_confirms,
            ..
        },
        Some(Ok(())),
    ) = (&mut report, &answer.verified)
    {
        *provider_record_confirms = true;
    }
    let classified = classify(&report);
    let redactor = Redactor::new(&prepared.secret_values());
    let mut reason = classified.reason.clone();
    match &answer.verified {
        Some(Ok(())) => reason.push_str("; the read-back matched"),
        Some(Err(why)) => reason.push_str(&format!("; the read-back did not confirm it: {why}")),
        None => {}
    }
    let reason = redactor.text(&reason);
    let kind = if answer.status.is_some() {
        EvidenceKind::Response
    } else {
        EvidenceKind::Transport
    };
    let evidence = NewEvidence::new(kind, EvidenceSource::Provider, reason.clone())
        .with_data(json!({"attempt": number, "status": answer.status}));
    let mut change = EffectChange::of(
        &inv.env_id,
        &inv.effect_id,
        EffectState::Dispatching,
        classified.event,
        evidence,
        Actor::key(&inv.created_by, state.clock.now()),
    )
    .expect("every classification is legal from dispatching");
    let to = change.to;
    state.metrics.attempt(to.name());
    let failed = !matches!(to, EffectState::Succeeded { .. });
    change.attempt = Some(AttemptChange::Finish {
        number,
        response_status: answer.status,
        error: failed.then(|| reason.clone()),
    });
    change.response_status = answer.status;
    change.response_body = answer.body.as_ref().map(|b| stored_body(b, &redactor));
    change.external_reference = answer.external_reference.map(|r| redactor.text(&r));
    if failed {
        let code = match to {
            EffectState::Unknown => "outcome_unknown",
            _ if matches!(classified.event, EffectEvent::NotSent) => "not_sent",
            _ => "provider_rejected",
        };
        change.error = Some(json!({"code": code, "message": reason}));
    }
    change.answers_request = answers_request;
    // Written as the attempt's holder: refused if another replica took the attempt over.
    change.fence = Some(Fence::Holder(state.replica.clone()));
    record_answer_fenced(state, inv, number, &change, answer.status, &reason).await
}

/// Commits `change`, the holder's closing of attempt `number`, and reads the invocation it
/// leaves. `None` when another replica took the attempt over first: the answer (`status`,
/// `reason`) is then kept as evidence, and the new owner's state stands.
pub(crate) async fn record_answer_fenced(
    state: &AppState,
    inv: &InvocationRecord,
    number: u32,
    change: &EffectChange,
    status: Option<u16>,
    reason: &str,
) -> EffectResult<Option<InvocationRecord>> {
    let started = std::time::Instant::now();
    let recorded = state
        .store
        .change_effect_and_read(change)
        .instrument(tracing::info_span!(
            "steward.store",
            operation = "record_answer"
        ))
        .await;
    state
        .metrics
        .store_commit("record_answer", started.elapsed());
    match recorded {
        // This replica went longer than its lease without a heartbeat (a pause, a lost
        // database), and another replica's sweep took the attempt over (marked it `unknown`,
        // under the next epoch) meanwhile. The answer is kept as evidence for whoever
        // reconciles it; the state stays as the new owner left it.
        Err(StoreError::Fenced { held, current, .. }) => {
            tracing::warn!(
                effect = %inv.effect_id,
                attempt = number,
                held,
                current,
                "fenced: another replica took this attempt over; its answer is kept as evidence \
                 and not committed over the new owner's"
            );
            let not_recorded = |source| EffectError::AnswerNotRecorded {
                effect: inv.effect_id.clone(),
                source,
            };
            let found = state
                .store
                .effect(&inv.env_id, &inv.effect_id)
                .await
                .map_err(not_recorded)?
                .map_or(EffectState::Unknown, |e| e.effect.state);
            late_answer(state, inv, number, status, reason, found)
                .await
                .map_err(not_recorded)?;
            Ok(None)
        }
        Err(StoreError::StateConflict { found, .. }) => {
            late_answer(state, inv, number, status, reason, found)
                .await
                .map_err(|source| EffectError::AnswerNotRecorded {
                    effect: inv.effect_id.clone(),
                    source,
                })?;
            Ok(None)
        }
        Ok(recorded) => Ok(Some(recorded)),
        // The request has left: whatever failed, the answer never says "nothing was sent".
        // The answer is kept and committed once the database takes it (`pending.rs`); an
        // error that no retry resolves (a bug, a corrupt record) keeps the effect only to be
        // marked unknown.
        Err(source) => {
            let kept = if source.storage_failed() {
                state.pending.keep(change.clone(), pending::Kind::Answer)
            } else {
                let unknown = pending::unknown_instead(change, "answer");
                state.pending.keep(unknown, pending::Kind::Unknown)
            };
            tracing::warn!(effect = %inv.effect_id, invocation = %inv.id, error = %source, kept, "the answer of a provider call could not be recorded");
            Err(EffectError::AnswerNotRecorded {
                effect: inv.effect_id.clone(),
                source,
            })
        }
    }
}

/// Appends an answer that arrived after another replica had settled its attempt.
async fn late_answer(
    state: &AppState,
    inv: &InvocationRecord,
    number: u32,
    status: Option<u16>,
    reason: &str,
    found: EffectState,
) -> Result<(), StoreError> {
    let late = NewEvidence::new(
        EvidenceKind::LateAnswer,
        EvidenceSource::Provider,
        format!(
            "attempt {number} answered after another Steward process had marked it {}: {reason}",
            found.name()
        ),
    )
    .with_data(json!({"attempt": number, "status": status}));
    let actor = Actor::system(state.clock.now());
    state
        .store
        .append_evidence(&inv.env_id, &inv.effect_id, &late, &actor)
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_text_answer_is_cut_only_after_it_is_redacted() {
        let secret = "sk_test_straddles_the_cut".to_string();
        let mut text = "x".repeat(RESPONSE_BODY_BYTES_MAX - 5);
        text.push_str(&secret);
        let stored = stored_body(
            &parse_body(text.as_bytes()),
            &Redactor::new(std::slice::from_ref(&secret)),
        );
        let stored = stored.as_str().unwrap();
        // Before, the cut came first and left the secret's first five bytes behind.
        assert!(
            !stored.contains("sk_te"),
            "{}",
            &stored[stored.len() - 40..]
        );
        assert!(stored.ends_with("x[REDA [truncated]"));
        let long = "y".repeat(RESPONSE_BODY_BYTES_MAX + 10);
        let stored = stored_body(&parse_body(long.as_bytes()), &Redactor::new(&[]));
        assert!(stored.as_str().unwrap().ends_with(" [truncated]"));
        assert_eq!(
            stored.as_str().unwrap().len(),
            RESPONSE_BODY_BYTES_MAX + " [truncated]".len()
        );
    }
}
