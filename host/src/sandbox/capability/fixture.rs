//! What the capabilities' unit tests build an attempt on, written once: a SQLite store
//! with the lease of job `j`, instance `i` held by `run-1`, its fence, and the attempt's
//! shared piece. Each test builds its own capability's session from these.

use crate::sandbox::capability::shared::Attempt;
use crate::sandbox::engine::bindings::jobhost::job::types::HostError;
use crate::sandbox::journal::Journal;
use crate::store::{Lease, LeaseRequest, Store};
use std::path::Path;

/// A store and the lease an attempt on it holds.
pub(crate) struct Leased {
    pub store: Store,
    pub lease: Lease,
}

impl Leased {
    /// The store in `dir` (made there the first time), with the lease acquired, or as it
    /// is when an earlier attempt in the same test holds it.
    pub async fn open(dir: &Path) -> Leased {
        let store = Store::open(&format!("sqlite://{}/t.db", dir.display()))
            .await
            .unwrap();
        let acquired = store
            .acquire_lease(&LeaseRequest {
                job: "j",
                instance: "i",
                holder: "run-1",
                deadline_ms: 60_000,
                expires_ms: 60_000,
            })
            .await
            .unwrap();
        let lease = match acquired {
            Some(lease) => lease,
            None => store
                .get_lease("j", "i")
                .await
                .unwrap()
                .unwrap()
                .into_lease(),
        };
        Leased { store, lease }
    }

    /// Moves the lease on a generation: every write the attempt commits now is refused.
    pub async fn lose_lease(&self) {
        if let crate::store::Pool::Sqlite(p) = self.store.pool() {
            sqlx::query("UPDATE jobhost_leases SET generation = generation + 1")
                .execute(p)
                .await
                .unwrap();
        }
    }
}

/// A fresh attempt's shared piece: nothing journaled, no `db` grant.
pub(crate) fn attempt() -> Attempt {
    Attempt::new(Journal::off(), None)
}

/// The reason of an `invalid` refusal.
pub(crate) fn reason<T: std::fmt::Debug>(result: Result<T, HostError>) -> String {
    match result {
        Err(HostError::Invalid(reason)) => reason,
        other => panic!("expected a refusal, got {other:?}"),
    }
}
