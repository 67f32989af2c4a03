//! `jobhost:job/db`: the guest's SQL, through the [`GuestDb`] port.

use crate::rules::grants::DbGrant;
use crate::sandbox::capability::context::AttemptContext;
use crate::sandbox::capability::handles::TxHandle;
use crate::sandbox::capability::shared::Attempt;
use crate::sandbox::capability::view::View;
use crate::sandbox::engine::bindings::jobhost::job::db::{Host, HostTransaction, Rows, Value};
use crate::sandbox::engine::bindings::jobhost::job::types::HostError;
use crate::sandbox::refusal;
use crate::store::guest::{Access, GuestDb, GuestTx, SqlRows, SqlValue};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use wasmtime::component::Resource;

/// The database a job was granted for one attempt.
pub struct DbSession {
    pub db: GuestDb,
    pub access: Access,
    /// How long a write transaction may stay open.
    pub txn_bound: Duration,
}

impl DbSession {
    /// The database of `cx`'s attempt, if its job was granted `db`.
    pub fn for_attempt(cx: &AttemptContext) -> Option<DbSession> {
        let grant = cx.spec.grants.db.clone()?;
        Some(DbSession {
            db: cx.host.guest_db.clone(),
            access: Access {
                grant: Arc::new(grant),
                fence: cx.fence(),
                tenant: cx.run.tenant.clone(),
                deadline: cx.deadline,
            },
            txn_bound: cx.host.txn_bound,
        })
    }
}

/// The `db` capability's per-attempt state: `None` when the job was not granted `db`.
pub struct DbCapability {
    pub(super) session: Option<DbSession>,
}

impl DbCapability {
    pub fn new(session: Option<DbSession>) -> Self {
        DbCapability { session }
    }

    /// The grant the guest's statements run under, if the job was granted `db`: a query
    /// refusal is worded by it, whichever capability's call met it (`capability/tx.rs`).
    pub(crate) fn grant(&self) -> Option<Arc<DbGrant>> {
        self.session.as_ref().map(|s| s.access.grant.clone())
    }
}

/// The session, or a refusal noted in `attempt`: the job was not granted `db`. Borrowed
/// beside the attempt, not cloned: a call reads it while it notes in the attempt.
fn granted<'s>(db: &'s DbCapability, attempt: &mut Attempt) -> Result<&'s DbSession, HostError> {
    db.session.as_ref().ok_or_else(|| {
        attempt
            .signals
            .refuse(refusal::capability_not_granted("db"));
        HostError::CapabilityRefused("not-granted".into())
    })
}

impl Host for View<'_, DbCapability> {
    async fn query(&mut self, sql: String, params: Vec<Value>) -> Result<Rows, HostError> {
        crate::journaled!(self.attempt, "db.query", (&sql, &params), async {
            let s = granted(self.own, self.attempt)?;
            let result = s.db.query(&s.access, &sql, &to_sql(params)).await;
            self.attempt.translate(result).map(to_rows)
        })
    }

    async fn begin(&mut self) -> Result<Resource<TxHandle>, HostError> {
        if self.attempt.tx_open() {
            return Err(HostError::Invalid("transaction-open".into()));
        }
        let began: Result<Option<GuestTx>, HostError> = crate::journaled!(self.attempt, "db.begin", (), resource async {
            let s = granted(self.own, self.attempt)?;
            let result = s.db.begin(&s.access, Instant::now() + s.txn_bound).await;
            self.attempt.translate(result)
        });
        // A replayed transaction has nothing behind it: its calls are answered too.
        self.attempt.hold_tx(began?)
    }
}

impl HostTransaction for View<'_, DbCapability> {
    async fn query(
        &mut self,
        tx: Resource<TxHandle>,
        sql: String,
        params: Vec<Value>,
    ) -> Result<Rows, HostError> {
        crate::journaled!(
            self.attempt,
            "db.transaction.query",
            (&sql, &params),
            async {
                let result = self
                    .attempt
                    .guest_tx(&tx)?
                    .query(&sql, &to_sql(params))
                    .await;
                self.attempt.translate(result).map(to_rows)
            }
        )
    }

    async fn execute(
        &mut self,
        tx: Resource<TxHandle>,
        sql: String,
        params: Vec<Value>,
    ) -> Result<u64, HostError> {
        crate::journaled!(
            self.attempt,
            "db.transaction.execute",
            (&sql, &params),
            async {
                let result = self
                    .attempt
                    .guest_tx(&tx)?
                    .execute(&sql, &to_sql(params))
                    .await;
                self.attempt.translate(result)
            }
        )
    }

    async fn commit(&mut self, tx: Resource<TxHandle>) -> Result<(), HostError> {
        let tx = self.attempt.take_tx(tx)?;
        crate::journaled!(self.attempt, "db.transaction.commit", (), async {
            match tx {
                Some(tx) => self.attempt.commit_taken(tx).await,
                None => Err(HostError::Invalid("unknown-transaction".into())),
            }
        })
    }

    async fn rollback(&mut self, tx: Resource<TxHandle>) {
        if let Ok(handle) = self.attempt.take_tx(tx) {
            crate::journaled!(self.attempt, "db.transaction.rollback", (), async {
                if let Some(handle) = handle {
                    self.attempt.roll_back_taken(handle).await;
                }
            })
        }
    }

    /// A transaction the guest drops unended is rolled back.
    async fn drop(&mut self, tx: Resource<TxHandle>) -> wasmtime::Result<()> {
        HostTransaction::rollback(self, tx).await;
        Ok(())
    }
}

fn to_sql(params: Vec<Value>) -> Vec<SqlValue> {
    params
        .into_iter()
        .map(|v| match v {
            Value::Null => SqlValue::Null,
            Value::Integer(i) => SqlValue::Integer(i),
            Value::Real(f) => SqlValue::Real(f),
            Value::Text(s) => SqlValue::Text(s),
            Value::Blob(b) => SqlValue::Blob(b),
        })
        .collect()
}

fn to_rows(rows: SqlRows) -> Rows {
    Rows {
        columns: rows.columns,
        rows: rows
            .rows
            .into_iter()
            .map(|row| {
                row.into_iter()
                    .map(|v| match v {
                        SqlValue::Null => Value::Null,
                        SqlValue::Integer(i) => Value::Integer(i),
                        SqlValue::Real(f) => Value::Real(f),
                        SqlValue::Text(s) => Value::Text(s),
                        SqlValue::Blob(b) => Value::Blob(b),
                    })
                    .collect()
            })
            .collect(),
    }
}
