//! What one attempt's wasmtime store holds.

use super::limits::MemoryLimiter;
use super::output::AttemptLog;
use crate::rules::failure::FailureCode;
use crate::rules::grants::DbGrant;
use crate::sandbox::capability::tx::TxState;
use crate::sandbox::capability::{Capabilities, View};
use crate::sandbox::journal::{Answer, CommittedEnd, Journal, Noticed, Placeholder, wasi};
use crate::sandbox::refusal::Refused;
use std::sync::Arc;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

/// What host calls noticed during the attempt, so its failure gets the right code even
/// when the guest swallowed the error or turned it into its own message.
#[derive(Debug, Default)]
pub struct Signals {
    /// A commit's fence failed: the attempt no longer held its lease.
    pub lease_lost: bool,
    /// The first refusal a host call returned, with the host's reason.
    pub refused: Option<Refused>,
    /// A host call could not reach the database.
    pub unavailable: bool,
    /// The pass's end, if the guest committed it with its writes (`steps`' `commit-pass`).
    pub committed: Option<CommittedEnd>,
    /// Whether the pass recorded that it waits for its children (`jobs`).
    pub waits_for_children: bool,
}

impl Signals {
    /// Notes a refusal, unless one was noted before: the first is why.
    pub fn refuse(&mut self, refused: Refused) {
        self.refused.get_or_insert(refused);
    }

    /// The code of the refusal noted, if any.
    pub fn refused_code(&self) -> Option<FailureCode> {
        self.refused.as_ref().map(|r| r.code)
    }
}

/// Most host resources (handles: streams, transactions, uploads...) an attempt may hold
/// at once; past it, the call that would create one traps (`resource_limit`).
pub const MAX_RESOURCES: usize = 1000;
/// Most random bytes one `get-random-bytes` call may ask for (more traps): the host fills
/// its buffer before the guest's allocation of it can fail, so WASI's default of 64 MiB
/// let a guest of any size have the host make 64 MiB per call.
pub const MAX_RANDOM_BYTES: u64 = 1 << 20;

/// What every capability's calls in one attempt share, beside each capability's own
/// state: a capability is linked through a view of its own state plus this piece
/// (`capability::View`).
pub struct Attempt {
    /// The resources the guest holds handles to (transactions, uploads, WASI's streams).
    pub(crate) table: ResourceTable,
    pub(crate) signals: Signals,
    /// The flight recorder (or, in a replay, the player) of the attempt's host calls.
    pub(crate) journal: Journal,
    /// The guest's transaction, as the capabilities that write with it share it
    /// (`capability/tx.rs`).
    pub(crate) tx: TxState,
}

pub struct GuestState {
    wasi: WasiCtx,
    pub(crate) limiter: MemoryLimiter,
    pub(crate) log: AttemptLog,
    pub(crate) capabilities: Capabilities,
    pub(crate) attempt: Attempt,
}

impl GuestState {
    /// A state whose host calls are not journaled.
    pub fn new(memory_cap: u64, log: AttemptLog, capabilities: Capabilities) -> Self {
        let seed = crate::sandbox::journal::wasi::fresh_seed();
        GuestState::journaled(memory_cap, log, capabilities, Journal::off(), seed)
    }

    /// `journal` records the attempt's host calls (or answers them, in a replay);
    /// `insecure_seed` is what `wasi:random/insecure-seed` answers.
    pub fn journaled(
        memory_cap: u64,
        log: AttemptLog,
        capabilities: Capabilities,
        journal: Journal,
        insecure_seed: u128,
    ) -> Self {
        // No preopens, no environment, no arguments, no network (no TCP, UDP or name
        // lookup: said here rather than left to the defaults): stdout and stderr go to the
        // attempt's log; stdin is empty. So the clocks and the generators are the only
        // inputs WASI gives, and they go through the journal.
        let wasi = WasiCtx::builder()
            .stdout(log.clone())
            .stderr(log.clone())
            .max_random_size(MAX_RANDOM_BYTES)
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false)
            .wall_clock(wasi::WallClock::new(journal.clone()))
            .monotonic_clock(wasi::MonotonicClock::new(journal.clone()))
            .secure_random(wasi::Random::secure(journal.clone()))
            .insecure_random(wasi::Random::insecure(journal.clone()))
            .insecure_random_seed(insecure_seed)
            .build();
        let attempt = Attempt::new(journal, capabilities.db.grant());
        GuestState {
            wasi,
            limiter: MemoryLimiter::new(memory_cap),
            log,
            capabilities,
            attempt,
        }
    }

    /// One capability's view: its state, picked from the capabilities, and the
    /// attempt's shared piece (how `capability::add_to_linker` projects each).
    pub fn view<T>(&mut self, pick: impl FnOnce(&mut Capabilities) -> &mut T) -> View<'_, T> {
        View::new(pick(&mut self.capabilities), &mut self.attempt)
    }
}

impl Attempt {
    /// `journal` records the attempt's calls; `sql_grant` is the `db` grant the guest's
    /// statements run under (`None`: not granted).
    pub fn new(journal: Journal, sql_grant: Option<Arc<DbGrant>>) -> Attempt {
        let mut table = ResourceTable::new();
        table.set_max_capacity(MAX_RESOURCES);
        Attempt {
            table,
            signals: Signals::default(),
            journal,
            tx: TxState::new(sql_grant),
        }
    }

    /// What the calls so far noted, cheaply compared: whether a call changed it.
    pub(crate) fn noticed_mark(&self) -> (bool, bool, bool, bool, bool) {
        (
            self.signals.lease_lost,
            self.signals.unavailable,
            self.signals.refused.is_some(),
            self.signals.committed.is_some(),
            self.signals.waits_for_children,
        )
    }

    /// What the attempt has noted, if a call changed it since `before`.
    pub(crate) fn noticed_since(&self, before: (bool, bool, bool, bool, bool)) -> Option<Noticed> {
        (self.noticed_mark() != before).then(|| Noticed {
            lease_lost: self.signals.lease_lost,
            unavailable: self.signals.unavailable,
            refused: self.signals.refused.clone(),
            committed: self.signals.committed.clone(),
            waits_for_children: self.signals.waits_for_children,
        })
    }

    /// A replayed call's answer, with what the original call noted noted again; once the
    /// replay stopped, a placeholder (the attempt is stopped at its next tick).
    pub(crate) fn replayed<R>(&mut self, call: &str, answer: Answer) -> R
    where
        R: serde::de::DeserializeOwned + Placeholder,
    {
        let Some((bytes, noticed)) = answer.answer else {
            return R::placeholder();
        };
        let Some(value) = self.journal.decode(call, &bytes) else {
            return R::placeholder();
        };
        if let Some(noticed) = noticed {
            self.signals.lease_lost = noticed.lease_lost;
            self.signals.unavailable = noticed.unavailable;
            self.signals.refused = noticed.refused;
            self.signals.committed = noticed.committed;
            self.signals.waits_for_children = noticed.waits_for_children;
        }
        value
    }
}

impl WasiView for GuestState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.attempt.table,
        }
    }
}
