//! The guest's open transaction as every capability that writes sees it. The `db`
//! capability opens it; a call that writes with it (`files`' `attach-in`, `steps`'
//! `record-in` and `commit-pass`, `jobs`' `enqueue-in`) reaches it here; a call that
//! writes on its own (`run`'s `set-result`, an upload's record) first asks whether it
//! may; its commit tells the capabilities whose writes it carried. These are the helpers
//! they share.

use crate::rules::grants::DbGrant;
use crate::sandbox::capability::handles::TxHandle;
use crate::sandbox::engine::bindings::jobhost::job::types::HostError;
use crate::sandbox::engine::state::{Attempt, GuestState};
use crate::sandbox::refusal;
use crate::store::guest::{GuestDbError, GuestTx};
use wasmtime::component::Resource;

impl GuestState {
    /// A port failure as the guest sees it, noted in the attempt's signals.
    pub(crate) fn translate<T>(&mut self, result: Result<T, GuestDbError>) -> Result<T, HostError> {
        result.map_err(|error| match error {
            GuestDbError::LeaseLost => {
                self.attempt.signals.lease_lost = true;
                HostError::LeaseLost
            }
            GuestDbError::Refused(refused) => {
                if self.attempt.signals.refused.is_none() {
                    let grant = self.db.session.as_ref().map(|s| s.access.grant.clone());
                    self.attempt.signals.refuse(refusal::query(
                        refused,
                        grant.as_deref().unwrap_or(&DbGrant::default()),
                    ));
                }
                HostError::QueryRefused(refused.reason().into())
            }
            GuestDbError::Invalid(reason) => HostError::Invalid(reason.into()),
            GuestDbError::Unavailable => {
                self.attempt.signals.unavailable = true;
                HostError::Unavailable
            }
        })
    }

    /// Takes the guest's transaction out of its table, to end it (`None`: a replayed
    /// one).
    pub(crate) fn take_tx(&mut self, tx: Resource<TxHandle>) -> Result<Option<GuestTx>, HostError> {
        let handle = self
            .attempt
            .table
            .delete(tx)
            .map_err(|_| HostError::Invalid("unknown-transaction".into()))?;
        self.attempt.open_tx = None;
        Ok(handle.0)
    }

    /// Commits a transaction taken out of the table (fenced), and tells the other
    /// capabilities whose writes it carried.
    pub(crate) async fn commit_taken(&mut self, tx: GuestTx) -> Result<(), HostError> {
        let result = tx.commit().await;
        if result.is_ok() {
            self.files.committed().await;
        } else {
            self.files.rolled_back();
        }
        self.translate(result)
    }

    /// Rolls back a transaction taken out of the table.
    pub(crate) async fn roll_back_taken(&mut self, tx: GuestTx) {
        self.files.rolled_back();
        tx.rollback().await;
    }

    pub(crate) fn tx(&mut self, tx: &Resource<TxHandle>) -> Result<&mut GuestTx, HostError> {
        self.attempt
            .table
            .get_mut(tx)
            .ok()
            .and_then(|h| h.0.as_mut())
            .ok_or_else(|| HostError::Invalid("unknown-transaction".into()))
    }
}

impl Attempt {
    /// Refuses a host call that commits a write of its own (an upload's record, an attach
    /// or removal outside a transaction, a step recorded on its own, a scan's verdict)
    /// while the guest's transaction keeps every other writer out: SQLite's one write
    /// lock, taken at the transaction's first statement. The call would wait for the lock
    /// the guest itself holds until the transaction's time bound rolled it back; it is
    /// told at once instead (`invalid(transaction-open)`), and can use the call's `-in`
    /// variant or come before the transaction's first statement.
    pub(crate) async fn own_write_allowed(&mut self) -> Result<(), HostError> {
        let Some(rep) = self.open_tx else {
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
