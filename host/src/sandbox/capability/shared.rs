//! What every capability's calls in one attempt share, beside each capability's own
//! state (`Attempt`): the guest's handles, what the calls noticed, the journal, the guest's
//! transaction. A capability's host impl is on a view of its own state and this piece
//! (`capability/view.rs`), so it lives with the capabilities, below the engine that holds
//! it in the attempt's store.

use crate::rules::failure::FailureCode;
use crate::rules::grants::DbGrant;
use crate::sandbox::capability::tx::TxState;
use crate::sandbox::journal::{Answer, CommittedEnd, Journal, Noticed, Placeholder};
use crate::sandbox::refusal::Refused;
use std::sync::Arc;
use wasmtime::component::ResourceTable;

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
    /// The timeout (ms) of the signal the pass recorded that it waits for (`run`).
    pub waits_for_signal: Option<u64>,
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

/// What the attempt's calls noted, as [`Attempt::noticed_mark`] compares it.
pub(crate) type NoticedMark = (bool, bool, bool, bool, bool, Option<u64>);

/// Most host resources (handles: streams, transactions, uploads...) an attempt may hold
/// at once; past it, the call that would create one traps (`resource_limit`).
pub const MAX_RESOURCES: usize = 1000;

/// What every capability's calls in one attempt share, beside each capability's own
/// state: a capability is linked through a view of its own state plus this piece
/// (`capability::view::View`).
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
    pub(crate) fn noticed_mark(&self) -> NoticedMark {
        (
            self.signals.lease_lost,
            self.signals.unavailable,
            self.signals.refused.is_some(),
            self.signals.committed.is_some(),
            self.signals.waits_for_children,
            self.signals.waits_for_signal,
        )
    }

    /// What the attempt has noted, if a call changed it since `before`.
    pub(crate) fn noticed_since(&self, before: NoticedMark) -> Option<Noticed> {
        (self.noticed_mark() != before).then(|| Noticed {
            lease_lost: self.signals.lease_lost,
            unavailable: self.signals.unavailable,
            refused: self.signals.refused.clone(),
            committed: self.signals.committed.clone(),
            waits_for_children: self.signals.waits_for_children,
            waits_for_signal: self.signals.waits_for_signal,
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
            self.signals.waits_for_signal = noticed.waits_for_signal;
        }
        value
    }
}
