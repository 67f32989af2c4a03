//! Guest SQL on Postgres: each job's statements run as a login role of its own that can
//! touch only the job's granted tables, so the grants are enforced by Postgres' own
//! privilege checks; commits are fenced by the lease in the same transaction.
//!
//! The job's role is the connection's session user, not a `SET ROLE` inside a privileged
//! session, so nothing the guest runs (`RESET ROLE`, `set_config`, a `DO` block) can give it
//! more. Roles are created and re-granted by the host (which needs `CREATEROLE`), their
//! passwords kept in `jobhost_guest_roles`. Only plain data statements are accepted
//! (SELECT, INSERT, UPDATE, DELETE, WITH, VALUES, TABLE, MERGE): transaction control and
//! the rest are refused before they reach the server, and each statement runs under a
//! statement timeout set to what is left of the deadline.

use super::guest::{
    Access, Fence, GuestDbError, Refusal, SqlRows, SqlValue, TxSession, collect_rows,
};
use crate::grants::DbGrant;
use sha2::{Digest, Sha256};
use sqlx::pool::PoolConnection;
use sqlx::postgres::{
    PgArgumentBuffer, PgArguments, PgConnectOptions, PgPool, PgPoolOptions, PgRow, PgTypeInfo,
};
use sqlx::{AssertSqlSafe, Postgres, Row, TypeInfo, ValueRef};
use std::collections::HashMap;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Mutex;
use tokio::time::Instant;

/// Statement kinds a guest may run; everything else is `forbidden`.
const ALLOWED_KINDS: [&str; 8] = [
    "select", "insert", "update", "delete", "with", "values", "table", "merge",
];

#[derive(Clone)]
pub struct PgGuest {
    admin: PgPool,
    options: Arc<PgConnectOptions>,
    /// Per job role: its pool, and the grant it was provisioned for.
    roles: Arc<Mutex<HashMap<String, (PgPool, String)>>>,
}

impl PgGuest {
    pub fn new(admin: PgPool, url: &str) -> Result<PgGuest, super::StoreError> {
        Ok(PgGuest {
            admin,
            options: Arc::new(PgConnectOptions::from_str(url)?),
            roles: Arc::default(),
        })
    }

    pub async fn query(
        &self,
        access: &Access,
        sql: &str,
        params: &[SqlValue],
    ) -> Result<SqlRows, GuestDbError> {
        let mut session = self
            .session(access, access.deadline, "BEGIN READ ONLY")
            .await?;
        let result = session.fetch(sql, params).await;
        Box::new(session).release().await;
        result
    }

    pub(crate) async fn begin(
        &self,
        access: &Access,
        deadline: Instant,
    ) -> Result<Box<dyn TxSession>, GuestDbError> {
        Ok(Box::new(self.session(access, deadline, "BEGIN").await?))
    }

    async fn session(
        &self,
        access: &Access,
        deadline: Instant,
        begin: &'static str,
    ) -> Result<Session, GuestDbError> {
        let pool = self.pool_for(&access.fence.job, &access.grant).await?;
        let conn = tokio::time::timeout_at(deadline, pool.acquire())
            .await
            .map_err(|_| GuestDbError::Refused(Refusal::Interrupted))?
            .map_err(|_| GuestDbError::Unavailable)?;
        let mut session = Session {
            conn: Some(conn),
            admin: self.admin.clone(),
            deadline,
            pid: 0,
            in_tx: false,
        };
        sqlx::raw_sql(begin)
            .execute(&mut **session.conn())
            .await
            .map_err(|e| classify(&e))?;
        session.in_tx = true;
        session.arm().await?;
        session.pid = sqlx::query_scalar("SELECT pg_backend_pid()")
            .fetch_one(&mut **session.conn())
            .await
            .map_err(|e| classify(&e))?;
        Ok(session)
    }

    /// The job's role pool, provisioning the role for this grant first if needed.
    async fn pool_for(&self, job: &str, grant: &DbGrant) -> Result<PgPool, GuestDbError> {
        let role = role_name(self.options.get_database().unwrap_or_default(), job);
        let fingerprint = grant_fingerprint(grant);
        let mut roles = self.roles.lock().await;
        if let Some((pool, provisioned)) = roles.get(&role)
            && *provisioned == fingerprint
        {
            return Ok(pool.clone());
        }
        let password = provision(&self.admin, &role, grant, &fingerprint)
            .await
            .map_err(|e| {
                tracing::warn!(job, code = "driver_failed", error = %super::describe(&e), "cannot provision the job's database role");
                GuestDbError::Unavailable
            })?;
        let pool = PgPoolOptions::new()
            .max_connections(4)
            .min_connections(0)
            .idle_timeout(Duration::from_secs(60))
            .acquire_timeout(Duration::from_secs(10))
            .connect_lazy_with((*self.options).clone().username(&role).password(&password));
        if let Some((old, _)) = roles.insert(role, (pool.clone(), fingerprint)) {
            old.close().await;
        }
        Ok(pool)
    }
}

/// The job's role: its name made safe, and a hash of the database and the name, so
/// distinct jobs never collide — nor the same job in two databases of one cluster (roles
/// are cluster-wide, grants per database).
fn role_name(database: &str, job: &str) -> String {
    let safe: String = job
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .take(40)
        .collect();
    let hash = hex::encode(&Sha256::digest(format!("{database}/{job}").as_bytes())[..4]);
    format!("jobhost_job_{safe}_{hash}")
}

fn grant_fingerprint(grant: &DbGrant) -> String {
    let text = serde_json::to_string(grant).expect("a grant serialises");
    hex::encode(Sha256::digest(text.as_bytes()))
}

/// Creates (or updates) the job's role with exactly the grant's privileges, under an
/// advisory lock so hosts provisioning at once do not collide. Returns its password.
async fn provision(
    admin: &PgPool,
    role: &str,
    grant: &DbGrant,
    fingerprint: &str,
) -> Result<String, sqlx::Error> {
    let mut tx = admin.begin().await?;
    sqlx::query("SELECT pg_advisory_xact_lock(hashtext($1))")
        .bind(role)
        .execute(&mut *tx)
        .await?;
    let known: Option<(String, String)> =
        sqlx::query_as("SELECT password, grants FROM jobhost_guest_roles WHERE role = $1")
            .bind(role)
            .fetch_optional(&mut *tx)
            .await?;
    let exists: bool =
        sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = $1)")
            .bind(role)
            .fetch_one(&mut *tx)
            .await?;
    let password = match &known {
        Some((password, grants)) if exists && grants == fingerprint => {
            tx.commit().await?;
            return Ok(password.clone());
        }
        Some((password, _)) => password.clone(),
        None => hex::encode(rand::random::<[u8; 24]>()),
    };
    // Identifiers come from `role_name` and validated table names, the password from
    // hex digits: safe to splice.
    let mut ddl = vec![if exists {
        format!("ALTER ROLE \"{role}\" WITH LOGIN NOINHERIT PASSWORD '{password}'")
    } else {
        format!("CREATE ROLE \"{role}\" WITH LOGIN NOINHERIT PASSWORD '{password}'")
    }];
    // Grants name tables as the host sees them: in its search path's first schema.
    let schema: String = sqlx::query_scalar("SELECT current_schema()::text")
        .fetch_one(&mut *tx)
        .await?;
    let schema = schema.replace('"', "\"\"");
    for objects in ["TABLES", "SEQUENCES"] {
        ddl.push(format!(
            "REVOKE ALL ON ALL {objects} IN SCHEMA \"{schema}\" FROM \"{role}\""
        ));
    }
    for (table, write) in grant.tables().into_iter().map(|t| (t, grant.may_write(t))) {
        let present: bool = sqlx::query_scalar("SELECT to_regclass($1) IS NOT NULL")
            .bind(table)
            .fetch_one(&mut *tx)
            .await?;
        if !present {
            continue;
        }
        let privileges = if write {
            "SELECT, INSERT, UPDATE, DELETE"
        } else {
            "SELECT"
        };
        ddl.push(format!(
            "GRANT {privileges} ON TABLE \"{table}\" TO \"{role}\""
        ));
        if write {
            let sequences: Vec<String> = sqlx::query_scalar(
                "SELECT pg_get_serial_sequence($1, attname) FROM pg_attribute \
                 WHERE attrelid = to_regclass($1) AND attnum > 0 AND NOT attisdropped \
                 AND pg_get_serial_sequence($1, attname) IS NOT NULL",
            )
            .bind(table)
            .fetch_all(&mut *tx)
            .await?;
            for sequence in sequences {
                ddl.push(format!("GRANT USAGE ON SEQUENCE {sequence} TO \"{role}\""));
            }
        }
    }
    ddl.push(format!(
        "GRANT EXECUTE ON FUNCTION jobhost_fence(text, text, bigint, text) TO \"{role}\""
    ));
    for statement in ddl {
        sqlx::raw_sql(AssertSqlSafe(statement))
            .execute(&mut *tx)
            .await?;
    }
    sqlx::query(
        "INSERT INTO jobhost_guest_roles (role, password, grants) VALUES ($1, $2, $3) \
         ON CONFLICT (role) DO UPDATE SET password = excluded.password, grants = excluded.grants",
    )
    .bind(role)
    .bind(&password)
    .bind(fingerprint)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(password)
}

/// A connection of the job's role with a transaction open.
struct Session {
    conn: Option<PoolConnection<Postgres>>,
    admin: PgPool,
    deadline: Instant,
    pid: i32,
    in_tx: bool,
}

impl Session {
    fn conn(&mut self) -> &mut PoolConnection<Postgres> {
        self.conn
            .as_mut()
            .expect("a session has its connection until released")
    }

    /// Bounds the next statement by what is left of the deadline.
    async fn arm(&mut self) -> Result<(), GuestDbError> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(GuestDbError::Refused(Refusal::Interrupted));
        }
        // Also bound the time the transaction may sit idle: a host frozen mid-transaction
        // (a zombie) has its session ended by the server itself.
        let ms = left.as_millis().max(1);
        let bounds = format!(
            "SET LOCAL statement_timeout = {ms}; SET LOCAL idle_in_transaction_session_timeout = {ms}"
        );
        sqlx::raw_sql(AssertSqlSafe(bounds))
            .execute(&mut **self.conn())
            .await
            .map(drop)
            .map_err(|e| classify(&e))
    }
}

#[async_trait::async_trait]
impl TxSession for Session {
    async fn fetch(&mut self, sql: &str, params: &[SqlValue]) -> Result<SqlRows, GuestDbError> {
        check_kind(sql)?;
        self.arm().await?;
        let query = bind_all(sqlx::query(AssertSqlSafe(sql)).persistent(false), params);
        collect_rows(query.fetch(&mut **self.conn()), classify, decode_row).await
    }

    async fn execute(&mut self, sql: &str, params: &[SqlValue]) -> Result<u64, GuestDbError> {
        check_kind(sql)?;
        self.arm().await?;
        bind_all(sqlx::query(AssertSqlSafe(sql)).persistent(false), params)
            .execute(&mut **self.conn())
            .await
            .map(|r| r.rows_affected())
            .map_err(|e| classify(&e))
    }

    async fn commit(&mut self, fence: &Fence) -> Result<(), GuestDbError> {
        self.arm().await?;
        // The fence takes a share lock on the lease row: a renewal or takeover waits for
        // this transaction to end, so it cannot slip between the check and the commit.
        let held: bool = sqlx::query_scalar("SELECT jobhost_fence($1, $2, $3, $4)")
            .persistent(false)
            .bind(&fence.job)
            .bind(&fence.instance)
            .bind(fence.generation)
            .bind(&fence.holder)
            .fetch_one(&mut **self.conn())
            .await
            .map_err(|e| classify(&e))?;
        if !held {
            return Err(GuestDbError::LeaseLost);
        }
        sqlx::raw_sql("COMMIT")
            .execute(&mut **self.conn())
            .await
            .map_err(|e| classify(&e))?;
        self.in_tx = false;
        Ok(())
    }

    async fn release(mut self: Box<Self>) {
        let Some(mut conn) = self.conn.take() else {
            return;
        };
        if self.in_tx && sqlx::raw_sql("ROLLBACK").execute(&mut *conn).await.is_err() {
            conn.close_on_drop();
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        // Dropped mid-statement (the attempt's deadline, or a cancelled host call): close
        // the connection, which rolls back, and stop the statement on the server now
        // rather than when it next writes to the closed socket.
        let Some(mut conn) = self.conn.take() else {
            return;
        };
        conn.close_on_drop();
        drop(conn);
        let (admin, pid) = (self.admin.clone(), self.pid);
        if pid != 0
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            runtime.spawn(async move {
                let _ = sqlx::query("SELECT pg_cancel_backend($1)")
                    .bind(pid)
                    .execute(&admin)
                    .await;
            });
        }
    }
}

/// The first keyword of a statement, past whitespace, comments and parentheses.
fn first_keyword(sql: &str) -> String {
    let bytes = sql.as_bytes();
    let mut i = 0;
    loop {
        while i < bytes.len() && (bytes[i].is_ascii_whitespace() || bytes[i] == b'(') {
            i += 1;
        }
        if sql[i..].starts_with("--") {
            i = sql[i..].find('\n').map_or(bytes.len(), |n| i + n + 1);
        } else if sql[i..].starts_with("/*") {
            // Postgres block comments nest.
            let mut depth = 0;
            while i < bytes.len() {
                if sql[i..].starts_with("/*") {
                    depth += 1;
                    i += 2;
                } else if sql[i..].starts_with("*/") {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else {
            break;
        }
    }
    sql[i..]
        .chars()
        .take_while(|c| c.is_ascii_alphabetic())
        .collect::<String>()
        .to_ascii_lowercase()
}

fn check_kind(sql: &str) -> Result<(), GuestDbError> {
    if ALLOWED_KINDS.contains(&first_keyword(sql).as_str()) {
        Ok(())
    } else {
        Err(GuestDbError::Refused(Refusal::Forbidden))
    }
}

/// A NULL whose type the server infers from the statement, as for a literal NULL.
struct UntypedNull;

impl sqlx::Type<Postgres> for UntypedNull {
    fn type_info() -> PgTypeInfo {
        PgTypeInfo::with_oid(sqlx::postgres::types::Oid(0))
    }
}

impl sqlx::Encode<'_, Postgres> for UntypedNull {
    fn encode_by_ref(
        &self,
        _: &mut PgArgumentBuffer,
    ) -> Result<sqlx::encode::IsNull, sqlx::error::BoxDynError> {
        Ok(sqlx::encode::IsNull::Yes)
    }
}

fn bind_all<'q>(
    mut query: sqlx::query::Query<'q, Postgres, PgArguments>,
    params: &'q [SqlValue],
) -> sqlx::query::Query<'q, Postgres, PgArguments> {
    for p in params {
        query = match p {
            SqlValue::Null => query.bind(UntypedNull),
            SqlValue::Integer(i) => query.bind(*i),
            SqlValue::Real(f) => query.bind(*f),
            SqlValue::Text(s) => query.bind(s.as_str()),
            SqlValue::Blob(b) => query.bind(b.as_slice()),
        };
    }
    query
}

fn decode_row(row: &PgRow) -> Result<Vec<SqlValue>, GuestDbError> {
    let unsupported = GuestDbError::Invalid("unsupported-column-type");
    let bad = |_| GuestDbError::Refused(Refusal::Failed);
    (0..row.len())
        .map(|i| {
            let raw = row.try_get_raw(i).map_err(bad)?;
            if raw.is_null() {
                return Ok(SqlValue::Null);
            }
            let kind = raw.type_info().name().to_ascii_uppercase();
            Ok(match kind.as_str() {
                "BOOL" => SqlValue::Integer(row.try_get::<bool, _>(i).map_err(bad)?.into()),
                "INT2" => SqlValue::Integer(row.try_get::<i16, _>(i).map_err(bad)?.into()),
                "INT4" => SqlValue::Integer(row.try_get::<i32, _>(i).map_err(bad)?.into()),
                "INT8" => SqlValue::Integer(row.try_get::<i64, _>(i).map_err(bad)?),
                "FLOAT4" => SqlValue::Real(row.try_get::<f32, _>(i).map_err(bad)?.into()),
                "FLOAT8" => SqlValue::Real(row.try_get::<f64, _>(i).map_err(bad)?),
                "TEXT" | "VARCHAR" | "BPCHAR" | "NAME" | "CHAR" => {
                    SqlValue::Text(row.try_get::<String, _>(i).map_err(bad)?)
                }
                "BYTEA" => SqlValue::Blob(row.try_get::<Vec<u8>, _>(i).map_err(bad)?),
                "JSON" | "JSONB" => SqlValue::Text(
                    row.try_get::<serde_json::Value, _>(i)
                        .map_err(bad)?
                        .to_string(),
                ),
                "UUID" => SqlValue::Text(row.try_get::<uuid::Uuid, _>(i).map_err(bad)?.to_string()),
                "TIMESTAMPTZ" => SqlValue::Text(
                    row.try_get::<chrono::DateTime<chrono::Utc>, _>(i)
                        .map_err(bad)?
                        .to_rfc3339(),
                ),
                "TIMESTAMP" => SqlValue::Text(
                    row.try_get::<chrono::NaiveDateTime, _>(i)
                        .map_err(bad)?
                        .to_string(),
                ),
                "DATE" => SqlValue::Text(
                    row.try_get::<chrono::NaiveDate, _>(i)
                        .map_err(bad)?
                        .to_string(),
                ),
                _ => return Err(unsupported),
            })
        })
        .collect()
}

/// Maps a driver error to a fixed code by its SQLSTATE.
fn classify(error: &sqlx::Error) -> GuestDbError {
    match error {
        sqlx::Error::Database(e) => {
            let state = e.code().map(|c| c.to_string()).unwrap_or_default();
            match state.as_str() {
                "42501" => GuestDbError::Refused(Refusal::NotGranted),
                "25006" => GuestDbError::Refused(Refusal::ReadOnly),
                "57014" => GuestDbError::Refused(Refusal::Interrupted),
                s if s.starts_with("23") => GuestDbError::Refused(Refusal::Constraint),
                s if s.starts_with("42") || s.starts_with("22") => {
                    GuestDbError::Refused(Refusal::InvalidStatement)
                }
                s if s.starts_with("08") || s.starts_with("57P") || s.starts_with("53") => {
                    GuestDbError::Unavailable
                }
                _ => GuestDbError::Refused(Refusal::Failed),
            }
        }
        sqlx::Error::Io(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::Protocol(_)
        | sqlx::Error::Tls(_) => GuestDbError::Unavailable,
        _ => GuestDbError::Refused(Refusal::Failed),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statement_kinds() {
        for ok in [
            "SELECT 1",
            "  select * from t",
            "-- note\nINSERT INTO t VALUES (1)",
            "/* a /* nested */ b */ update t set x = 1",
            "(SELECT 1)",
            "WITH x AS (DELETE FROM t RETURNING *) SELECT * FROM x",
        ] {
            assert!(check_kind(ok).is_ok(), "{ok}");
        }
        for refused in [
            "COMMIT",
            "/* SELECT */ ROLLBACK",
            "begin",
            "SET ROLE postgres",
            "RESET ROLE",
            "DROP TABLE t",
            "CREATE TABLE x (a int)",
            "COPY t TO PROGRAM 'x'",
            "DO $$ BEGIN END $$",
            "CALL p()",
            "LOCK TABLE t",
            "",
            "-- only a comment",
        ] {
            assert_eq!(
                check_kind(refused),
                Err(GuestDbError::Refused(Refusal::Forbidden)),
                "{refused}"
            );
        }
    }

    #[test]
    fn role_names_are_safe_and_distinct() {
        let a = role_name("prod", "nightly-report.v2");
        assert!(a.starts_with("jobhost_job_nightly_report_v2_"), "{a}");
        assert!(a.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'));
        assert!(a.len() <= 63);
        assert_ne!(role_name("prod", "a-b"), role_name("prod", "a_b"));
        assert_ne!(role_name("prod", "a"), role_name("staging", "a"));
    }
}
