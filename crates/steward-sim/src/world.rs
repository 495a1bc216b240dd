//! One run: the world (store, provider, network, server, client), its setup, the step loop that
//! picks the next event, and the final phase that heals everything and settles what it can.

use crate::client::Client;
use crate::provider::Call;
use crate::provider::Provider;
use crate::queue::{Event, Queue};
use crate::rng::Prng;
use crate::server::Server;
use crate::wire::{SimClock, SimIds, SimTransport};
use crate::{Bug, Config, Run};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use steward_core::impact::{LimitSpec, Period, ReservationState};
use steward_core::ReplicaId;
use steward_core::{
    ActionDefinition, ActionId, EffectState, EnvironmentId, KeyId, LimitId, Millis,
};
use steward_core::{IdempotencyKey, OperationKey};
use steward_server::{AppState, OutboundPolicy};
use steward_server::{Metrics, Vault};
use steward_store::{
    verify_chain, ActionRecord, Actor, AuditLog, Catalog, Identity, LimitRecord, Limits,
    SecretRecord, SqliteStore, GENESIS_HASH,
};

/// Where the simulated provider answers.
const PROVIDER_URL: &str = "https://provider.test";
/// The secret holding the refund action's Stripe key.
const CREDENTIAL: &str = "STRIPE_TEST_KEY";
/// Simulated time at the start of every run (2023-11-14, any fixed instant would do).
pub(crate) const EPOCH_MS: i64 = 1_700_000_000_000;
/// The server's dispatch deadline, as `--dispatch-timeout-ms` sets it.
pub(crate) const DISPATCH_TIMEOUT_MS: i64 = 1_000;
/// How long after an attempt's deadline "the provider has no such write" is conclusive
/// (`--absence-grace-ms`).
pub(crate) const ABSENCE_GRACE_MS: i64 = 500;
/// The longest one network hop takes. Below the dispatch deadline: a request that has not
/// reached the provider by its deadline never will (the sender's connection is gone), which is
/// what makes a lookup after the deadline and the grace conclusive.
pub(crate) const NETWORK_DELAY_MS_MAX: i64 = 400;
/// How long the agent waits for an invoke's answer before sending it again: longer than the
/// dispatch deadline, as the SDK's 30 s is longer than the server's 10 s.
pub(crate) const CLIENT_TIMEOUT_MS: i64 = 3_000;
/// Percent of messages a non-calm network drops, each way.
pub(crate) const DROP_PERCENT: u64 = 8;
/// The money limit every refund reserves against, in cents, forever (`Period::Total`).
pub(crate) const LIMIT_CENTS: i64 = 2_000;
/// Rounds of the final phase before what is still open counts as stuck.
const SETTLE_ROUNDS_MAX: u32 = 8;
/// Events the final phase may handle in all, so a livelock ends as a violation, not a hang.
const SETTLE_EVENTS_MAX: u32 = 5_000;

/// Which action an operation invokes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// `stripe.refund`: the provider deduplicates by the effect's provider idempotency key, and
    /// the adapter can look the write up, so an unknown settles and a replay is safe.
    Adapter,
    /// A template action without `verify`: no provider key, no lookup; unknown stays unknown
    /// until a person resolves it, and nothing may send it twice.
    Template,
}

/// What the client last durably knows of an operation (its journal).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Local {
    /// Intended (journaled before anything was sent), no answer yet.
    Intended,
    /// Answered `unknown`: needs reconciliation, polled by resending.
    Unknown,
    /// Answered with a terminal state.
    Final(EffectState),
}

/// One business operation: the client's journal entry and what the checks last saw of it.
pub(crate) struct Operation {
    pub name: String,
    pub kind: Kind,
    pub input: Value,
    pub amount_cents: i64,
    pub local: Local,
    /// The effect's state as the last check read it from the store.
    pub seen: Option<EffectState>,
    /// The money the effect reserved against the limit (0 when refused or a template), and
    /// what became of that reservation as the checks followed the effect's states.
    pub reserved_cents: i64,
    pub holding: Option<ReservationState>,
    /// The failed operation this one retries (`retryOf`), and whether this one was retried.
    pub retry_of: Option<usize>,
    pub retried: bool,
    /// The invocation the store recorded for it, once a check has seen it.
    pub invocation: Option<steward_core::InvocationId>,
}

impl Operation {
    pub(crate) fn key(&self) -> OperationKey {
        OperationKey::parse(&self.name).expect("simulated operation keys are valid")
    }

    pub(crate) fn request_key(&self) -> IdempotencyKey {
        IdempotencyKey::parse(&format!("req-{}", self.name)).expect("valid idempotency key")
    }
}

pub(crate) struct World {
    pub config: Config,
    pub rng: Prng,
    pub now: i64,
    pub step: u32,
    pub queue: Queue,
    pub log: Vec<String>,
    pub store: Arc<SqliteStore>,
    pub env: EnvironmentId,
    pub agent: KeyId,
    /// The operator's key: a person who resolves what has no lookup (never the invoker).
    pub operator: KeyId,
    pub adapter: ActionRecord,
    pub template: ActionRecord,
    pub limit: LimitId,
    pub provider: Provider,
    pub server: Server,
    pub client: Client,
    pub ops: Vec<Operation>,
    /// The simulated clock every process reads.
    pub clock: Arc<SimClock>,
    /// What every server process is built from; each has its own transport, crash hook and
    /// replica id (`Server::start`).
    pub base: AppState,
    /// The secrets the actions name, as the store holds them (the refund's Stripe test key).
    pub secrets: Vec<SecretRecord>,
    /// Calls on their way to the provider, by process and call id.
    pub calls: BTreeMap<(u32, u64), Call>,
    /// The final phase: no drops, no provider faults, no crashes.
    pub calm: bool,
    /// Set by every server handler that may write to the store (the server is its only
    /// writer); while it is clear, the store holds what the last check read.
    pub dirty: bool,
    /// The effects and the limit's usage as the last check read them.
    pub read: Option<crate::check::Snapshot>,
    /// What sets this run's ids, keys and replicas apart from other runs' in the shared store.
    pub tag: String,
    /// The audit chain verified up to this run's start (then to its end).
    pub head: (i64, String),
}

pub(crate) type Sim<T = ()> = Result<T, String>;

/// Runs one store serves before a fresh one replaces it: a store that grows costs every later
/// run more (20 measured fastest: 9 ms a seed, against 14 at 50 and 37 at 250).
const RUNS_PER_STORE: u64 = 20;

/// The store that successive runs share, each in an environment of its own (and with ids,
/// keys and replicas of its own), so that a run pays neither for the schema nor for preparing
/// statements on new connections. A run that ends clean leaves nothing in flight (no effect
/// `ready` or `dispatching`, no request in progress), so the next run's sweeps find nothing of
/// it; a run that breaks an invariant takes the store with it.
pub(crate) struct Shared {
    store: Arc<SqliteStore>,
    /// The HTTP client the dispatcher builds its requests with (never sends with: the
    /// transport is simulated), and the metrics; built once, as loading TLS roots is not free.
    http: reqwest::Client,
    metrics: Arc<Metrics>,
    runs: u64,
    /// The audit chain verified so far: the last event's sequence number and hash.
    head: (i64, String),
    _dir: tempfile::TempDir,
}

impl Shared {
    async fn open() -> Sim<Shared> {
        let dir = scratch().map_err(|e| e.to_string())?;
        let store = Arc::new(SqliteStore::open(&dir.path().join("steward.db")).map_err(err)?);
        let events = store.audit_events(0, u32::MAX).await.map_err(err)?;
        let head =
            verify_chain(0, GENESIS_HASH, &events).map_err(|e| format!("audit chain: {e}"))?;
        let http = steward_server::http_client(steward_server::OutboundPolicy {
            allow_insecure: true,
        })
        .map_err(|e| e.to_string())?;
        Ok(Shared {
            store,
            http,
            metrics: Arc::new(Metrics::default()),
            runs: 0,
            head,
            _dir: dir,
        })
    }
}

pub(crate) async fn run(config: &Config, shared: &mut Option<Shared>) -> Run {
    let failed = |violation: String| Run {
        seed: config.seed,
        log: vec![],
        violation: Some(violation),
    };
    if shared.as_ref().is_none_or(|s| s.runs >= RUNS_PER_STORE) {
        match Shared::open().await {
            Ok(fresh) => *shared = Some(fresh),
            Err(e) => return failed(format!("setup failed: {e}")),
        }
    }
    let store = shared.as_mut().expect("a shared store is open");
    store.runs += 1;
    let tag = format!("r{}", store.runs);
    match World::new(config, store, tag).await {
        Ok(mut world) => {
            let violation = world.drive().await.err();
            match violation {
                None => store.head = world.head.clone(),
                Some(_) => *shared = None,
            }
            Run {
                seed: config.seed,
                log: std::mem::take(&mut world.log),
                violation,
            }
        }
        Err(e) => {
            *shared = None;
            failed(format!("setup failed: {e}"))
        }
    }
}

/// Where the runs' database lives: a RAM-backed directory when there is one, so a commit's
/// fsync costs nothing (durability across a power cut is not what the simulator tests; a
/// process crash is, and it loses no committed transaction anywhere).
fn scratch() -> std::io::Result<tempfile::TempDir> {
    let shm = std::path::Path::new("/dev/shm");
    if shm.is_dir() {
        if let Ok(dir) = tempfile::Builder::new()
            .prefix("steward-sim")
            .tempdir_in(shm)
        {
            return Ok(dir);
        }
    }
    tempfile::Builder::new().prefix("steward-sim").tempdir()
}

fn definition(value: Value) -> ActionDefinition {
    serde_json::from_value(value).expect("the simulated action definitions parse")
}

/// The simulated environment's actions (a `stripe.refund` adapter action and a governed
/// template action) and its one money limit, as an operator would create them.
async fn seed_catalog(
    store: &SqliteStore,
    tag: &str,
    env: &EnvironmentId,
    by_operator: &Actor,
) -> Sim<(ActionRecord, ActionRecord, LimitId)> {
    let now = EPOCH_MS;
    let record = |id: &str, def: ActionDefinition| ActionRecord {
        id: ActionId::from_unique(&format!("{tag}{id}")),
        env_id: env.clone(),
        name: def.name.clone(),
        version: 1,
        definition: def,
        created_at: Millis(now),
        updated_at: Millis(now),
    };
    let adapter = record(
        "refund",
        definition(json!({
            "name": "refund",
            "adapter": {"type": "stripe.refund", "config": {"mode": "test", "baseUrl": PROVIDER_URL}, "credentialSecret": CREDENTIAL}
        })),
    );
    let template = record(
        "notify",
        definition(json!({
            "name": "notify", "method": "POST",
            "urlTemplate": format!("{PROVIDER_URL}/v1/notify/{{{{input.op}}}}"),
            "governed": true
        })),
    );
    for action in [&adapter, &template] {
        store
            .create_action(action, by_operator)
            .await
            .map_err(err)?;
    }
    let limit = LimitId::from_unique(&format!("{tag}refunds"));
    let spec = LimitSpec {
        name: "refunds".into(),
        dimension: "money".into(),
        unit: "usd".into(),
        currency: Some("usd".into()),
        period: Period::Total,
        amount: LIMIT_CENTS,
        action_name: None,
        resource_prefix: None,
    };
    let limit_record = LimitRecord {
        id: limit.clone(),
        env_id: env.clone(),
        spec,
        archived_at: None,
        created_at: Millis(now),
        updated_at: Millis(now),
    };
    store
        .create_limit(&limit_record, by_operator)
        .await
        .map_err(err)?;
    Ok((adapter, template, limit))
}

/// The provider credential, sealed in a vault with a fixed key.
async fn seed_secret(
    store: &SqliteStore,
    env: &EnvironmentId,
    by_operator: &Actor,
) -> Sim<(Vault, SecretRecord)> {
    let now = EPOCH_MS;
    let vault = Vault::from_key([7; 32]);
    let (nonce, ciphertext) = vault
        .seal(env, CREDENTIAL, "sk_test_simulated")
        .map_err(|e| e.to_string())?;
    let secret = SecretRecord {
        env_id: env.clone(),
        name: CREDENTIAL.into(),
        nonce,
        ciphertext,
        description: None,
        allowed_hosts: None,
        allowed_placements: None,
        version: 1,
        created_at: Millis(now),
        updated_at: Millis(now),
    };
    let secret = store
        .put_secret(&secret, None, by_operator)
        .await
        .map_err(err)?;
    Ok((vault, secret))
}

impl World {
    async fn new(config: &Config, shared: &Shared, tag: String) -> Sim<World> {
        let store = shared.store.clone();
        let now = EPOCH_MS;
        let env = EnvironmentId::from_unique(&tag);
        let operator = KeyId::from_unique(&format!("{tag}operator"));
        let system = Actor::system(Millis(now));
        store
            .ensure_environment(
                steward_store::NewEnvironment {
                    name: &tag,
                    id: &env,
                },
                &system,
            )
            .await
            .map_err(err)?;
        let by_operator = Actor::key(&operator, Millis(now));
        let (adapter, template, limit) = seed_catalog(&store, &tag, &env, &by_operator).await?;
        let (vault, secret) = seed_secret(&store, &env, &by_operator).await?;
        let clock = Arc::new(SimClock::default());
        clock.set(now);
        let base = AppState {
            store: store.clone(),
            vault,
            clock: clock.clone(),
            http: shared.http.clone(),
            transport: Arc::new(SimTransport(Arc::default())),
            ids: Arc::new(SimIds::new(&tag)),
            outbound: OutboundPolicy {
                allow_insecure: true,
            },
            dispatch_timeout: Duration::from_millis(DISPATCH_TIMEOUT_MS as u64),
            approval_events: Arc::new(tokio::sync::Notify::new()),
            absence_grace: Duration::from_millis(ABSENCE_GRACE_MS as u64),
            metrics: shared.metrics.clone(),
            crash_hook: None,
            defect: config.bug.map(Bug::defect),
            replica: ReplicaId::from_unique(&format!("{tag}gen0")),
            lease: std::sync::Arc::new(steward_server::Lease::unlimited()),
            key_usage: Arc::default(),
            integrations: Arc::default(),
            stream_slots: Arc::default(),
            heavy_reads: Arc::default(),
            pending: Arc::default(),
        };
        let mut rng = Prng::new(config.seed);
        let server = Server::start(&base, &tag, 1, rng.next_u64(), false);
        let world = World {
            config: config.clone(),
            rng,
            now,
            step: 0,
            queue: Queue::default(),
            log: Vec::new(),
            store,
            env,
            agent: KeyId::from_unique(&format!("{tag}agent")),
            operator,
            adapter,
            template,
            limit,
            provider: Provider::default(),
            server,
            client: Client::new(),
            ops: Vec::new(),
            clock,
            base,
            secrets: vec![secret],
            calls: BTreeMap::new(),
            calm: false,
            dirty: true,
            read: None,
            tag,
            head: shared.head.clone(),
        };
        Ok(world)
    }

    /// Appends one line to the event log: step, simulated time since the start, what happened.
    pub(crate) fn say(&mut self, what: impl AsRef<str>) {
        let line = format!(
            "{:>5} {:>8}ms {}",
            self.step,
            self.now - EPOCH_MS,
            what.as_ref()
        );
        self.log.push(line);
    }

    /// One network hop: `Some(delay)`, or `None` when the message is dropped.
    pub(crate) fn hop(&mut self) -> Option<i64> {
        if !self.calm && self.rng.percent(DROP_PERCENT) {
            return None;
        }
        Some(self.rng.between(1, NETWORK_DELAY_MS_MAX))
    }

    async fn drive(&mut self) -> Sim {
        self.say(format!(
            "seed {} steps {} bug {}",
            self.config.seed,
            self.config.steps,
            self.config.bug.map_or("none", Bug::name)
        ));
        for _ in 0..self.config.steps {
            self.step += 1;
            self.one_step().await?;
            self.check().await?;
        }
        self.settle().await?;
        self.check().await?;
        self.check_final().await
    }

    /// One step: either something from outside happens now (the agent starts an operation, an
    /// operator reconciles or replays, a process crashes), or the earliest pending event does.
    async fn one_step(&mut self) -> Sim {
        if self.queue.is_empty() || self.rng.percent(35) {
            self.now += self.rng.between(0, 40);
            return self.external().await;
        }
        let (at, event) = self.queue.pop().expect("the queue is not empty");
        self.now = self.now.max(at);
        self.handle(event).await
    }

    async fn external(&mut self) -> Sim {
        // new operation, client poll, reconcile, replay, server crash, client crash, retry
        match self.rng.weighted(&[30, 8, 10, 8, 5, 5, 4]) {
            0 => self.new_operation(),
            1 => {
                self.client_poll();
                Ok(())
            }
            2 => match self.pick(|op| op.seen == Some(EffectState::Unknown)) {
                Some(op) => self.reconcile(op).await,
                None => Ok(()),
            },
            3 => match self
                .pick(|op| op.kind == Kind::Adapter && op.seen == Some(EffectState::Unknown))
            {
                Some(op) => self.replay(op).await,
                None => Ok(()),
            },
            4 => {
                if self.server.up {
                    self.crash_server("at a random moment");
                }
                Ok(())
            }
            5 => {
                if self.client.up {
                    self.crash_client();
                }
                Ok(())
            }
            _ => self.retry_failure(),
        }
    }

    /// A random operation for which `fits` holds.
    pub(crate) fn pick(&mut self, fits: impl Fn(&Operation) -> bool) -> Option<usize> {
        let candidates: Vec<usize> = (0..self.ops.len())
            .filter(|i| fits(&self.ops[*i]))
            .collect();
        if candidates.is_empty() {
            return None;
        }
        Some(candidates[self.rng.below(candidates.len() as u64) as usize])
    }

    pub(crate) async fn handle(&mut self, event: Event) -> Sim {
        match event {
            Event::InvokeArrives { op, client } => self.invoke(op, client).await,
            Event::AnswerArrives { op, client, answer } => {
                self.answer_arrives(op, client, answer);
                Ok(())
            }
            Event::RequestArrives { call, server } => {
                self.request_arrives(call, server);
                Ok(())
            }
            Event::ResponseArrives {
                call,
                server,
                response,
            } => self.response_arrives(call, server, response).await,
            Event::Deadline { call, server } => self.deadline(call, server).await,
            Event::ClientTimeout { op, client, send } => {
                self.client_timeout(op, client, send);
                Ok(())
            }
            Event::ClientRetry { op, client } => {
                self.client_retry(op, client);
                Ok(())
            }
            Event::ServerRestart => self.restart_server().await,
            Event::ClientRestart => {
                self.restart_client();
                Ok(())
            }
        }
    }

    /// An operation is open until the client has saved a terminal answer for it.
    fn open(&self, op: usize) -> bool {
        !matches!(self.ops[op].local, Local::Final(_))
    }

    /// The final phase: the network and the provider heal, both processes come back, every
    /// pending event is handled, the client resends what it has no final answer for, every
    /// adapter effect left unknown is reconciled once its deadline and the grace have passed, and
    /// the operator resolves every template effect left unknown from what the provider holds.
    async fn settle(&mut self) -> Sim {
        self.calm = true;
        self.server.wire.set_calm();
        self.say("calm: no more drops, faults or crashes");
        if !self.server.up {
            self.restart_server().await?;
        }
        if !self.client.up {
            self.restart_client();
        }
        let mut handled = 0;
        for _ in 0..SETTLE_ROUNDS_MAX {
            self.drain(&mut handled).await?;
            self.now += DISPATCH_TIMEOUT_MS + ABSENCE_GRACE_MS + 1;
            let unknown: Vec<usize> = (0..self.ops.len())
                .filter(|i| self.ops[*i].seen == Some(EffectState::Unknown))
                .collect();
            for op in unknown {
                self.step += 1;
                match self.ops[op].kind {
                    Kind::Adapter => self.reconcile(op).await?,
                    Kind::Template => self.resolve(op).await?,
                }
                self.check().await?;
            }
            // The lookups the reconciles sent come back.
            self.drain(&mut handled).await?;
            let open: Vec<usize> = (0..self.ops.len()).filter(|i| self.open(*i)).collect();
            if open.is_empty() {
                return Ok(());
            }
            for op in open {
                if !self.client.waiting.contains_key(&op) {
                    self.send(op);
                }
            }
        }
        Ok(())
    }

    /// Handles every pending event, checking after each.
    async fn drain(&mut self, handled: &mut u32) -> Sim {
        while let Some((at, event)) = self.queue.pop() {
            *handled += 1;
            if *handled > SETTLE_EVENTS_MAX {
                return Err(format!(
                    "the final phase did not quiesce in {SETTLE_EVENTS_MAX} events"
                ));
            }
            self.step += 1;
            self.now = self.now.max(at);
            self.handle(event).await?;
            self.check().await?;
        }
        Ok(())
    }
}

pub(crate) fn err(e: impl std::fmt::Display) -> String {
    format!("store error: {e}")
}
