//! The guest's open transaction as every capability that writes sees it, kept in the
//! attempt's shared piece ([`TxState`], `Attempt::tx`) so that no capability reaches
//! another's state. The `db` capability opens it; a call that writes with it (`files`'
//! `attach-in`, `steps`' `record-in` and `commit-pass`, `jobs`' `enqueue-in`) reaches it
//! here, and leaves what must follow its commit in its [`AfterCommit`] list; a call that
//! writes on its own (`run`'s `set-result`, an upload's record) first asks whether it may.
//! These are the helpers they share, on `Attempt`.

use crate::rules::grants::DbGrant;
use crate::sandbox::capability::handles::TxHandle;
use crate::sandbox::capability::shared::Attempt;
use crate::sandbox::engine::bindings::jobhost::job::types::HostError;
use crate::sandbox::files::Files;
use crate::sandbox::refusal;
use crate::store::guest::{GuestDbError, GuestTx};
use std::sync::Arc;
use wasmtime::component::Resource;

/// The guest's transaction, shared by the capabilities that write with it.
pub struct TxState {
    /// The open transaction (its handle's number in the table): one at a time.
    open: Option<u32>,
    /// What the writes the open transaction carries ask of the host once it commits;
    /// dropped when it rolls back.
    after_commit: Vec<AfterCommit>,
    /// The `db` grant the guest's statements run under: a query refusal is worded by it,
    /// whichever capability's call met it (`None`: the job was not granted `db`).
    grant: Option<Arc<DbGrant>>,
}

impl TxState {
    pub fn new(grant: Option<Arc<DbGrant>>) -> TxState {
        TxState {
            open: None,
            after_commit: Vec::new(),
            grant,
        }
    }
}

/// Work a capability's write in the guest's transaction leaves for its commit.
pub enum AfterCommit {
    /// `files`: kick a collection's scan job, for the files the transaction attached
    /// (once per job, however many files).
    KickScan { files: Arc<Files>, job: String },
}

impl AfterCommit {
    async fn run(self) {
        match self {
            AfterCommit::KickScan { files, job } => files.kick_scan(&job).await,
        }
    }
}

impl Attempt {
    /// A port failure as the guest sees it, noted in the attempt's signals.
    pub(crate) fn translate<T>(&mut self, result: Result<T, GuestDbError>) -> Result<T, HostError> {
        result.map_err(|error| match error {
            GuestDbError::LeaseLost => {
                self.signals.lease_lost = true;
                HostError::LeaseLost
            }
            GuestDbError::Refused(refused) => {
                if self.signals.refused.is_none() {
                    let grant = self.tx.grant.as_deref();
                    self.signals.refuse(refusal::query(
                        refused,
                        grant.unwrap_or(&DbGrant::default()),
                    ));
                }
                HostError::QueryRefused(refused.reason().into())
            }
            GuestDbError::Invalid(reason) => HostError::Invalid(reason.into()),
            GuestDbError::Unavailable => {
                self.signals.unavailable = true;
                HostError::Unavailable
            }
        })
    }

    /// Whether the guest holds an open transaction.
    pub(crate) fn tx_open(&self) -> bool {
        self.tx.open.is_some()
    }

    /// Puts a transaction the guest began into its table, as its open one (`None`: a
    /// replayed one, with nothing behind it).
    pub(crate) fn hold_tx(
        &mut self,
        began: Option<GuestTx>,
    ) -> Result<Resource<TxHandle>, HostError> {
        let handle = self
            .table
            .push(TxHandle(began))
            .map_err(|_| HostError::Invalid("too-many-resources".into()))?;
        self.tx.open = Some(handle.rep());
        Ok(handle)
    }

    /// The live transaction behind the guest's handle, to write in.
    pub(crate) fn guest_tx(&mut self, tx: &Resource<TxHandle>) -> Result<&mut GuestTx, HostError> {
        self.table
            .get_mut(tx)
            .ok()
            .and_then(|h| h.0.as_mut())
            .ok_or_else(|| HostError::Invalid("unknown-transaction".into()))
    }

    /// Takes the guest's transaction out of its table, to end it (`None`: a replayed
    /// one).
    pub(crate) fn take_tx(&mut self, tx: Resource<TxHandle>) -> Result<Option<GuestTx>, HostError> {
        let handle = self
            .table
            .delete(tx)
            .map_err(|_| HostError::Invalid("unknown-transaction".into()))?;
        self.tx.open = None;
        Ok(handle.0)
    }

    /// Leaves `work` for the open transaction's commit (once: the same kick is not left
    /// twice).
    pub(crate) fn after_commit(&mut self, work: AfterCommit) {
        let AfterCommit::KickScan { job, .. } = &work;
        let left = self.tx.after_commit.iter().any(|w| match w {
            AfterCommit::KickScan { job: left, .. } => left == job,
        });
        if !left {
            self.tx.after_commit.push(work);
        }
    }

    /// Commits a transaction taken out of the table (fenced), then does what its writes
    /// left for the commit.
    pub(crate) async fn commit_taken(&mut self, tx: GuestTx) -> Result<(), HostError> {
        let result = tx.commit().await;
        let after = std::mem::take(&mut self.tx.after_commit);
        if result.is_ok() {
            for work in after {
                work.run().await;
            }
        }
        self.translate(result)
    }

    /// Rolls back a transaction taken out of the table, and what it left for its commit.
    pub(crate) async fn roll_back_taken(&mut self, tx: GuestTx) {
        self.tx.after_commit.clear();
        tx.rollback().await;
    }

    /// Refuses a host call that commits a write of its own (an upload's record, an attach
    /// or removal outside a transaction, a step recorded on its own, a scan's verdict)
    /// while the guest's transaction keeps every other writer out: SQLite's one write
    /// lock, taken at the transaction's first statement. The call would wait for the lock
    /// the guest itself holds until the transaction's time bound rolled it back; it is
    /// told at once instead (`invalid(transaction-open)`), and can use the call's `-in`
    /// variant or come before the transaction's first statement.
    pub(crate) async fn own_write_allowed(&mut self) -> Result<(), HostError> {
        let Some(rep) = self.tx.open else {
            return Ok(());
        };
        let open: Resource<TxHandle> = Resource::new_borrow(rep);
        let blocked = match self.table.get(&open) {
            Ok(TxHandle(Some(tx))) => tx.blocks_other_writers().await,
            _ => false,
        };
        if blocked {
            Err(HostError::Invalid("transaction-open".into()))
        } else {
            Ok(())
        }
    }
}
