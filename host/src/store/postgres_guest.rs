//! Guest SQL on Postgres: each job's statements run as a login role of its own that can
//! touch only the job's granted tables, so the grants are enforced by Postgres' own
//! privilege checks; commits are fenced by the lease in the same transaction.
//!
//! The job's role is the connection's session user, not a `SET ROLE` inside a privileged
//! session, so nothing the guest runs can give it more. Roles are created and re-granted by
//! the host (which needs `CREATEROLE`), their passwords kept in `jobhost_guest_roles`.
//!
//! What the role cannot be denied is decided on Postgres' own parse tree before a
//! statement is sent (see [`super::pg_statement`]). What the server sends back is bounded
//! before the host reads it (see [`super::pg_wire`]): these connections are the driver's
//! own (`tokio-postgres`) over a guarded socket, kept in a small pool per role. A
//! connection whose last use did not end cleanly is closed, never reused, and the
//! statement it may still be running is cancelled on the server; one that passes from one
//! attempt to another is reset (`DISCARD ALL`) first, so no setting, lock or temporary
//! object outlives an attempt.

use super::enqueue::EnqueueAnswer;
use super::family::Enqueue;
use super::guest::{
    Access, Applied, Fence, GuestDbError, MAX_RESULT_BYTES, MAX_VALUE_BYTES, Refusal, SqlRows,
    SqlValue, TxEffect, TxSession,
};
use super::pg_wire::{FrameGuard, Socket};
use super::pool::Exclusive;
use super::records::{FileWrite, FileWritten, ProgressWrite};
use crate::rules::grants::DbGrant;
use bytes::BytesMut;
use futures_util::TryStreamExt;
use postgres_protocol::types as wire;
use sha2::{Digest, Sha256};
use sqlx::AssertSqlSafe;
use sqlx::postgres::PgPool;
use std::collections::HashMap;
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::sync::{Mutex, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tokio_postgres::types::{FromSql, IsNull, Kind, ToSql, Type, to_sql_checked};
use tokio_postgres::{Client, NoTls};

/// Connections per job role.
const ROLE_CONNECTIONS: usize = 4;
/// An idle connection older than this is closed rather than reused.
const IDLE_FOR: Duration = Duration::from_secs(60);
/// The largest message a guest connection accepts from the server: one row may be as
/// large as a whole result, plus its framing.
const MAX_MESSAGE: usize = MAX_RESULT_BYTES + (64 << 10);

#[derive(Clone)]
pub struct PgGuest {
    admin: PgPool,
    config: Arc<tokio_postgres::Config>,
    /// Per job role: its pool, and the grant it was provisioned for.
    roles: Arc<Mutex<HashMap<String, Arc<RolePool>>>>,
}

impl PgGuest {
    pub fn new(admin: PgPool, url: &str) -> Result<PgGuest, super::error::StoreError> {
        let config = tokio_postgres::Config::from_str(url)
            .map_err(|_| super::error::StoreError::UnsupportedUrl)?;
        Ok(PgGuest {
            admin,
            config: Arc::new(config),
            roles: Arc::default(),
        })
    }

    pub async fn query(
        &self,
        access: &Access,
        sql: &str,
        params: &[SqlValue],
    ) -> Result<SqlRows, GuestDbError> {
        super::pg_statement::check(sql).await?;
        let mut session = self.session(access, access.deadline, true).await?;
        let result = session.fetch(sql, params).await;
        Box::new(session).release().await;
        result
    }

    pub(crate) async fn begin(
        &self,
        access: &Access,
        deadline: Instant,
    ) -> Result<Box<dyn TxSession>, GuestDbError> {
        Ok(Box::new(self.session(access, deadline, false).await?))
    }

    async fn session(
        &self,
        access: &Access,
        deadline: Instant,
        read_only: bool,
    ) -> Result<Session, GuestDbError> {
        let pool = self.pool_for(&access.fence.job, &access.grant).await?;
        let (conn, slot) = tokio::time::timeout_at(deadline, pool.acquire())
            .await
            .map_err(|_| GuestDbError::Refused(Refusal::Interrupted))??;
        let owner = owner(&access.fence);
        let mut session = Session {
            conn: Some(conn),
            pool,
            deadline,
            in_tx: false,
            host_rows: false,
            _slot: slot,
        };
        let begin = if read_only {
            "BEGIN READ ONLY"
        } else {
            "BEGIN"
        };
        let bounds = session.bounds()?;
        let conn = session
            .conn
            .as_mut()
            .expect("a new session has its connection");
        // In one round trip: reset the connection if another attempt used it last, open
        // the transaction, bound its statements and its idle time by the deadline, and say
        // whose run it is (a guest statement can neither `SET` nor call `set_config`).
        let reset = conn.owner.as_deref().is_some_and(|o| o != owner);
        let client = &conn.client;
        let tenant = access.tenant.replace('\'', "''");
        let open = format!("{begin}; {bounds}; SET LOCAL jobhost.tenant = '{tenant}'");
        let opened = if reset {
            tokio::try_join!(
                client.batch_execute("DISCARD ALL"),
                client.batch_execute(&open)
            )
            .map(drop)
        } else {
            client.batch_execute(&open).await
        };
        conn.owner = Some(owner);
        session.in_tx = true;
        opened.map_err(|e| session.classify(&e))?;
        Ok(session)
    }

    /// The job's role pool, provisioning the role for this grant first if needed.
    async fn pool_for(&self, job: &str, grant: &DbGrant) -> Result<Arc<RolePool>, GuestDbError> {
        let role = role_name(self.config.get_dbname().unwrap_or_default(), job);
        let fingerprint = grant_fingerprint(grant);
        let mut roles = self.roles.lock().await;
        if let Some(pool) = roles.get(&role)
            && pool.fingerprint == fingerprint
        {
            return Ok(pool.clone());
        }
        let password = provision(&self.admin, &role, grant, &fingerprint)
            .await
            .map_err(|e| {
                tracing::warn!(job, code = "driver_failed", error = %super::error_class::describe(&e), "cannot provision the job's database role");
                GuestDbError::Unavailable
            })?;
        let mut config = (*self.config).clone();
        config.user(&role).password(&password);
        let pool = Arc::new(RolePool {
            config,
            fingerprint,
            idle: std::sync::Mutex::default(),
            slots: Arc::new(Semaphore::new(ROLE_CONNECTIONS)),
        });
        roles.insert(role, pool.clone());
        Ok(pool)
    }
}

/// Who used a connection last: one attempt (a lease generation) of one run.
fn owner(fence: &Fence) -> String {
    format!(
        "{}\u{1f}{}\u{1f}{}\u{1f}{}",
        fence.job, fence.instance, fence.generation, fence.holder
    )
}

/// The connections of one job role.
struct RolePool {
    config: tokio_postgres::Config,
    fingerprint: String,
    idle: std::sync::Mutex<Vec<Conn>>,
    slots: Arc<Semaphore>,
}

/// One connection of a job role.
struct Conn {
    client: Client,
    /// The task driving the connection; aborting it closes the socket.
    driver: tokio::task::JoinHandle<()>,
    cancel: tokio_postgres::CancelToken,
    /// Set when the server announced a message over the bound, or a result went past
    /// its bounds: the connection is dead, and what it was sent is never read.
    oversized: Arc<AtomicBool>,
    owner: Option<String>,
    idle_since: Instant,
}

impl RolePool {
    /// A connection, and the slot that bounds how many are in use at once.
    async fn acquire(&self) -> Result<(Conn, OwnedSemaphorePermit), GuestDbError> {
        let slot = self
            .slots
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| GuestDbError::Unavailable)?;
        let reusable = {
            let mut idle = self.idle.lock().expect("idle connections");
            idle.retain(|c| !c.client.is_closed() && c.idle_since.elapsed() < IDLE_FOR);
            idle.pop()
        };
        match reusable {
            Some(conn) => Ok((conn, slot)),
            None => Ok((self.connect().await?, slot)),
        }
    }

    async fn connect(&self) -> Result<Conn, GuestDbError> {
        use tokio_postgres::config::Host;
        let unavailable = |_| GuestDbError::Unavailable;
        let host = self.config.get_hosts().first().cloned();
        let port = self.config.get_ports().first().copied().unwrap_or(5432);
        let socket = match host {
            Some(Host::Tcp(name)) => Socket::Tcp(
                tokio::net::TcpStream::connect((name.as_str(), port))
                    .await
                    .map_err(unavailable)?,
            ),
            Some(Host::Unix(dir)) => Socket::Unix(
                tokio::net::UnixStream::connect(dir.join(format!(".s.PGSQL.{port}")))
                    .await
                    .map_err(unavailable)?,
            ),
            None => Socket::Tcp(
                tokio::net::TcpStream::connect(("localhost", port))
                    .await
                    .map_err(unavailable)?,
            ),
        };
        if let Socket::Tcp(tcp) = &socket {
            let _ = tcp.set_nodelay(true);
        }
        let oversized = Arc::new(AtomicBool::new(false));
        let guarded = FrameGuard::new(socket, MAX_MESSAGE, oversized.clone());
        let (client, mut connection) = self
            .config
            .connect_raw(guarded, NoTls)
            .await
            .map_err(|e| {
                tracing::warn!(code = "driver_failed", error = %describe(&e), "cannot open a guest connection");
                GuestDbError::Unavailable
            })?;
        // Drive the connection, dropping what the server says on the side (notices can
        // quote guest data; they never reach the operator's log).
        let driver = tokio::spawn(async move {
            while let Some(message) = std::future::poll_fn(|cx| connection.poll_message(cx)).await {
                if message.is_err() {
                    break;
                }
            }
        });
        Ok(Conn {
            cancel: client.cancel_token(),
            client,
            driver,
            oversized,
            owner: None,
            idle_since: Instant::now(),
        })
    }

    fn put_back(&self, mut conn: Conn) {
        conn.idle_since = Instant::now();
        self.idle.lock().expect("idle connections").push(conn);
    }
}

impl Conn {
    /// Drops the connection for good (see `poison`).
    fn abandon(self) {
        self.poison();
    }

    /// Marks the connection dead (it is never pooled again), closes its socket without
    /// reading what may still be coming, and cancels what it may still be running.
    fn poison(&self) {
        self.oversized.store(true, Ordering::Release);
        self.driver.abort();
        let cancel = self.cancel.clone();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let _ = cancel.cancel_query(NoTls).await;
            });
        }
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

/// Which host functions a role is granted: a role provisioned by a host that granted
/// fewer is granted again (the fingerprint changes with it).
const HOST_FUNCTIONS: &str = "0041";

fn grant_fingerprint(grant: &DbGrant) -> String {
    let text = serde_json::to_string(grant).expect("a grant serialises");
    hex::encode(Sha256::digest(
        format!("{HOST_FUNCTIONS}:{text}").as_bytes(),
    ))
}

/// Creates (or updates) the job's role with exactly the grant's privileges, under an
/// advisory lock so hosts provisioning at once do not collide. Returns its password.
async fn provision(
    admin: &PgPool,
    role: &str,
    grant: &DbGrant,
    fingerprint: &str,
) -> Result<String, sqlx::Error> {
    // Provisioning runs inside a guest's first call and is cancelled with it (its
    // deadline): a connection dropped half-way is closed, never pooled inside the
    // transaction, which would keep the role's advisory lock from every host.
    let mut conn = Exclusive::acquire(admin).await?;
    let password = provision_on(&mut conn, role, grant, fingerprint).await?;
    conn.release();
    Ok(password)
}

async fn provision_on(
    conn: &mut sqlx::PgConnection,
    role: &str,
    grant: &DbGrant,
    fingerprint: &str,
) -> Result<String, sqlx::Error> {
    use sqlx::Connection;
    let mut tx = conn.begin().await?;
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
    // The host's own row changes, called inside the guest's transaction (guest SQL can
    // never name them: see `pg_statement`).
    for function in [
        "jobhost_fence(text, text, bigint, text)",
        "jobhost_attach_file(text, text, text, text, bigint, text, text, text, bigint, bigint)",
        "jobhost_remove_file(text, text, text)",
        "jobhost_mark_file(text, text, text)",
        "jobhost_record_step(text, bigint, text, text, bigint)",
        "jobhost_end_pass(text, bigint, bigint, text, text, boolean)",
        "jobhost_start_runs(text, bigint, bigint, jsonb)",
    ] {
        ddl.push(format!(
            "GRANT EXECUTE ON FUNCTION {function} TO \"{role}\""
        ));
    }
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
    conn: Option<Conn>,
    pool: Arc<RolePool>,
    deadline: Instant,
    in_tx: bool,
    /// Whether the transaction wrote a host row (an `-in` call: a file's record, a step,
    /// queued runs and the parent's `family` mark): it holds that row's lock until it ends.
    host_rows: bool,
    _slot: OwnedSemaphorePermit,
}

impl Session {
    fn conn(&self) -> &Conn {
        self.conn
            .as_ref()
            .expect("a session has its connection until released")
    }

    /// `SET LOCAL`s bounding the next statement, and the time the transaction may sit
    /// idle, by what is left of the deadline: a host frozen mid-transaction (a zombie) has
    /// its session ended by the server itself.
    fn bounds(&self) -> Result<String, GuestDbError> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(GuestDbError::Refused(Refusal::Interrupted));
        }
        // Rounded up: the server stops a statement no sooner than the deadline.
        let ms = left.as_millis() + 1;
        Ok(format!(
            "SET LOCAL statement_timeout = {ms}; SET LOCAL idle_in_transaction_session_timeout = {ms}"
        ))
    }

    fn classify(&self, error: &tokio_postgres::Error) -> GuestDbError {
        if self
            .conn
            .as_ref()
            .is_some_and(|c| c.oversized.load(Ordering::Acquire))
        {
            return GuestDbError::Invalid("result-too-large");
        }
        classify(error)
    }

    /// Runs one statement after bounding it (in the same round trip), and collects its
    /// rows up to the result's bounds.
    async fn run(
        &mut self,
        sql: &str,
        params: &[SqlValue],
    ) -> Result<(SqlRows, u64), GuestDbError> {
        let bounds = self.bounds()?;
        let typed: Vec<(&SqlValue, Type)> = params.iter().map(|p| (p, p.declared())).collect();
        let client = &self.conn().client;
        let streamed = tokio::try_join!(
            client.batch_execute(&bounds),
            client.query_typed_raw(sql, typed)
        );
        let stream = match streamed {
            Ok((_, stream)) => stream,
            Err(e) => return Err(self.classify(&e)),
        };
        let mut stream = std::pin::pin!(stream);
        let mut out = SqlRows::default();
        let mut bytes = 0usize;
        let too_large = loop {
            let row = match stream.try_next().await {
                Ok(Some(row)) => row,
                Ok(None) => break false,
                Err(e) => return Err(self.classify(&e)),
            };
            if out.columns.is_empty() {
                out.columns = row.columns().iter().map(|c| c.name().to_string()).collect();
            }
            let values = decode_row(&row)?;
            bytes += super::guest::row_bytes(&values);
            if out.rows.len() >= super::guest::MAX_ROWS || bytes > MAX_RESULT_BYTES {
                break true;
            }
            out.rows.push(values);
        };
        if too_large {
            // Stop here: the rest is never read. The connection is closed and the
            // statement cancelled now; the session's later calls fail with the same code.
            self.conn().poison();
            return Err(GuestDbError::Invalid("result-too-large"));
        }
        let changed = stream.rows_affected().unwrap_or(0);
        Ok((out, changed))
    }
}

#[async_trait::async_trait]
impl TxSession for Session {
    async fn fetch(&mut self, sql: &str, params: &[SqlValue]) -> Result<SqlRows, GuestDbError> {
        super::pg_statement::check(sql).await?;
        self.run(sql, params).await.map(|(rows, _)| rows)
    }

    async fn execute(&mut self, sql: &str, params: &[SqlValue]) -> Result<u64, GuestDbError> {
        super::pg_statement::check(sql).await?;
        self.run(sql, params).await.map(|(_, changed)| changed)
    }

    async fn commit(&mut self, fence: &Fence) -> Result<(), GuestDbError> {
        let bounds = self.bounds()?;
        // The fence takes a share lock on the lease row: a renewal or takeover waits for
        // this transaction to end, so it cannot slip between the check and the commit.
        let client = &self.conn().client;
        let arguments: [(&(dyn ToSql + Sync), Type); 4] = [
            (&fence.job, Type::TEXT),
            (&fence.instance, Type::TEXT),
            (&fence.generation, Type::INT8),
            (&fence.holder, Type::TEXT),
        ];
        let checked = tokio::try_join!(
            client.batch_execute(&bounds),
            client.query_typed("SELECT jobhost_fence($1, $2, $3, $4)", &arguments)
        );
        let held: bool = match checked {
            Ok((_, rows)) => rows
                .first()
                .and_then(|row| row.try_get(0).ok())
                .ok_or(GuestDbError::Refused(Refusal::Failed))?,
            Err(e) => return Err(self.classify(&e)),
        };
        if !held {
            return Err(GuestDbError::LeaseLost);
        }
        let committed = self.conn().client.batch_execute("COMMIT").await;
        committed.map_err(|e| self.classify(&e))?;
        self.in_tx = false;
        Ok(())
    }

    async fn apply(&mut self, effect: TxEffect<'_>) -> Result<Applied, GuestDbError> {
        match effect {
            TxEffect::File(write) => self.file_write(write).await.map(Applied::File),
            TxEffect::Progress(write) => self.progress_write(write).await.map(Applied::Progress),
            TxEffect::Enqueue(write) => self.enqueue(write).await.map(Applied::Enqueued),
        }
    }

    /// Postgres locks rows, not the database: the host's own writes go on beside a
    /// transaction of the guest's own rows. Once it wrote a host row, one of the host's
    /// own writes may need that row (the parent's `family` mark, a run's result, a file's
    /// name, a dedup key's id) and would wait for the guest's own transaction.
    fn blocks_other_writers(&self) -> bool {
        self.in_tx && self.host_rows
    }

    /// Cancel-safe: the session keeps its connection until the rollback has answered, so
    /// a release dropped half-way abandons the connection (see `Drop`) rather than
    /// pooling one that may still be inside the transaction.
    async fn release(mut self: Box<Self>) {
        let Some(conn) = self.conn.as_ref() else {
            return;
        };
        let clean = !conn.oversized.load(Ordering::Acquire)
            && (!self.in_tx || conn.client.batch_execute("ROLLBACK").await.is_ok());
        let Some(conn) = self.conn.take() else {
            return;
        };
        if clean && !conn.client.is_closed() {
            self.pool.put_back(conn);
        } else {
            conn.abandon();
        }
    }
}

/// The effects' statements (`TxSession::apply`), each one of the store's functions.
impl Session {
    async fn file_write(&mut self, write: &FileWrite) -> Result<FileWritten, GuestDbError> {
        self.host_rows = true;
        type Argument<'a> = (&'a (dyn ToSql + Sync), Type);
        let client = &self.conn().client;
        let (sql, arguments): (&str, Vec<Argument>) = match write {
            FileWrite::Attach {
                tenant,
                collection,
                name,
                object_key,
                size,
                digest,
                status,
                run_id,
                max_objects,
                max_bytes,
            } => (
                "SELECT jobhost_attach_file($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
                vec![
                    (tenant, Type::TEXT),
                    (collection, Type::TEXT),
                    (name, Type::TEXT),
                    (object_key, Type::TEXT),
                    (size, Type::INT8),
                    (digest, Type::TEXT),
                    (status, Type::TEXT),
                    (run_id, Type::TEXT),
                    (max_objects, Type::INT8),
                    (max_bytes, Type::INT8),
                ],
            ),
            FileWrite::Remove {
                tenant,
                collection,
                name,
            } => (
                "SELECT jobhost_remove_file($1, $2, $3)",
                vec![
                    (tenant, Type::TEXT),
                    (collection, Type::TEXT),
                    (name, Type::TEXT),
                ],
            ),
            FileWrite::Mark {
                collection,
                object_key,
                status,
            } => (
                "SELECT jobhost_mark_file($1, $2, $3)",
                vec![
                    (collection, Type::TEXT),
                    (object_key, Type::TEXT),
                    (status, Type::TEXT),
                ],
            ),
        };
        let rows = match client.query_typed(sql, &arguments).await {
            Ok(rows) => rows,
            Err(e) => return Err(self.classify(&e)),
        };
        let row = rows.first().ok_or(GuestDbError::Refused(Refusal::Failed))?;
        let failed = |_| GuestDbError::Refused(Refusal::Failed);
        Ok(match write {
            FileWrite::Attach { .. } => match row.try_get(0).map_err(failed)? {
                Some(created_at) => FileWritten::Attached { created_at },
                None => FileWritten::OverQuota,
            },
            _ => FileWritten::Changed(row.try_get(0).map_err(failed)?),
        })
    }

    async fn progress_write(&mut self, write: &ProgressWrite) -> Result<bool, GuestDbError> {
        self.host_rows = true;
        type Argument<'a> = (&'a (dyn ToSql + Sync), Type);
        let client = &self.conn().client;
        let (sql, arguments): (&str, Vec<Argument>) = match write {
            ProgressWrite::Step {
                run_id,
                pass,
                name,
                result,
                generation,
            } => (
                "SELECT jobhost_record_step($1, $2, $3, $4, $5)",
                vec![
                    (run_id, Type::TEXT),
                    (pass, Type::INT8),
                    (name, Type::TEXT),
                    (result, Type::TEXT),
                    (generation, Type::INT8),
                ],
            ),
            ProgressWrite::EndPass {
                run_id,
                generation,
                pass,
                cursor,
                counters,
                done,
            } => (
                "SELECT jobhost_end_pass($1, $2, $3, $4, $5, $6)",
                vec![
                    (run_id, Type::TEXT),
                    (generation, Type::INT8),
                    (pass, Type::INT8),
                    (cursor, Type::TEXT),
                    (counters, Type::TEXT),
                    (done, Type::BOOL),
                ],
            ),
        };
        let rows = match client.query_typed(sql, &arguments).await {
            Ok(rows) => rows,
            Err(e) => return Err(self.classify(&e)),
        };
        rows.first()
            .and_then(|row| row.try_get::<_, bool>(0).ok())
            .ok_or(GuestDbError::Refused(Refusal::Failed))
    }

    async fn enqueue(&mut self, write: &Enqueue) -> Result<Vec<EnqueueAnswer>, GuestDbError> {
        self.host_rows = true;
        let (parent, generation, pass, runs) = super::family::postgres_arguments(write);
        let client = &self.conn().client;
        let arguments: [(&(dyn ToSql + Sync), Type); 4] = [
            (&parent, Type::TEXT),
            (&generation, Type::INT8),
            (&pass, Type::INT8),
            (&runs, Type::TEXT),
        ];
        let rows = match client
            .query_typed(super::family::POSTGRES_ENQUEUE, &arguments)
            .await
        {
            Ok(rows) => rows,
            Err(e) => return Err(self.classify(&e)),
        };
        let answered: Option<String> = rows
            .first()
            .ok_or(GuestDbError::Refused(Refusal::Failed))?
            .try_get(0)
            .map_err(|_| GuestDbError::Refused(Refusal::Failed))?;
        super::family::answers_of(write, answered)
            .map_err(|()| GuestDbError::Refused(Refusal::Failed))?
            .ok_or(GuestDbError::LeaseLost)
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        // Dropped mid-call (the attempt's deadline, or a cancelled host call): close the
        // connection, which rolls back, and stop the statement on the server now rather
        // than when it next writes to the closed socket.
        if let Some(conn) = self.conn.take() {
            conn.abandon();
        }
    }
}

impl SqlValue {
    /// The type a parameter is declared with; a NULL's is left to the server to infer.
    fn declared(&self) -> Type {
        match self {
            SqlValue::Null => Type::new("unknown".into(), 0, Kind::Pseudo, "pg_catalog".into()),
            SqlValue::Integer(_) => Type::INT8,
            SqlValue::Real(_) => Type::FLOAT8,
            SqlValue::Text(_) => Type::TEXT,
            SqlValue::Blob(_) => Type::BYTEA,
        }
    }
}

impl ToSql for SqlValue {
    fn to_sql(
        &self,
        _: &Type,
        out: &mut BytesMut,
    ) -> Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        match self {
            SqlValue::Null => return Ok(IsNull::Yes),
            SqlValue::Integer(i) => wire::int8_to_sql(*i, out),
            SqlValue::Real(f) => wire::float8_to_sql(*f, out),
            SqlValue::Text(s) => wire::text_to_sql(s, out),
            SqlValue::Blob(b) => wire::bytea_to_sql(b, out),
        }
        Ok(IsNull::No)
    }

    fn accepts(_: &Type) -> bool {
        true
    }

    to_sql_checked!();
}

/// One value of a result row, decoded from the server's binary format.
struct Cell(SqlValue);

/// 2000-01-01T00:00:00Z, Postgres' epoch, in Unix seconds.
const PG_EPOCH: i64 = 946_684_800;

impl<'a> FromSql<'a> for Cell {
    fn from_sql(
        ty: &Type,
        raw: &'a [u8],
    ) -> Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        let text = |s: &str| SqlValue::Text(s.to_string());
        Ok(Cell(match *ty {
            Type::BOOL => SqlValue::Integer(wire::bool_from_sql(raw)?.into()),
            Type::INT2 => SqlValue::Integer(wire::int2_from_sql(raw)?.into()),
            Type::INT4 => SqlValue::Integer(wire::int4_from_sql(raw)?.into()),
            Type::INT8 => SqlValue::Integer(wire::int8_from_sql(raw)?),
            Type::OID => SqlValue::Integer(wire::oid_from_sql(raw)?.into()),
            Type::FLOAT4 => SqlValue::Real(wire::float4_from_sql(raw)?.into()),
            Type::FLOAT8 => SqlValue::Real(wire::float8_from_sql(raw)?),
            Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME | Type::CHAR | Type::JSON => {
                text(wire::text_from_sql(raw)?)
            }
            // Binary JSONB: a version byte, then the text.
            Type::JSONB => match raw.split_first() {
                Some((1, rest)) => text(std::str::from_utf8(rest)?),
                _ => return Err("unknown jsonb format".into()),
            },
            Type::BYTEA => SqlValue::Blob(wire::bytea_from_sql(raw).to_vec()),
            Type::UUID => text(&uuid::Uuid::from_bytes(wire::uuid_from_sql(raw)?).to_string()),
            Type::TIMESTAMPTZ | Type::TIMESTAMP => {
                let micros = wire::timestamp_from_sql(raw)?;
                match micros {
                    i64::MAX => return Ok(Cell(text("infinity"))),
                    i64::MIN => return Ok(Cell(text("-infinity"))),
                    _ => {}
                }
                let at = (PG_EPOCH * 1_000_000)
                    .checked_add(micros)
                    .and_then(chrono::DateTime::from_timestamp_micros)
                    .ok_or("timestamp out of range")?;
                if *ty == Type::TIMESTAMPTZ {
                    text(&at.to_rfc3339())
                } else {
                    text(&at.naive_utc().to_string())
                }
            }
            Type::DATE => {
                let days = wire::date_from_sql(raw)?;
                match days {
                    i32::MAX => return Ok(Cell(text("infinity"))),
                    i32::MIN => return Ok(Cell(text("-infinity"))),
                    _ => {}
                }
                let date = chrono::DateTime::from_timestamp(PG_EPOCH + i64::from(days) * 86_400, 0)
                    .ok_or("date out of range")?;
                text(&date.date_naive().to_string())
            }
            _ => return Err("unsupported column type".into()),
        }))
    }

    fn from_sql_null(_: &Type) -> Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        Ok(Cell(SqlValue::Null))
    }

    fn accepts(_: &Type) -> bool {
        true
    }
}

fn decode_row(row: &tokio_postgres::Row) -> Result<Vec<SqlValue>, GuestDbError> {
    (0..row.len())
        .map(|i| {
            let Cell(value) = row
                .try_get::<_, Cell>(i)
                .map_err(|_| GuestDbError::Invalid("unsupported-column-type"))?;
            if value.content_bytes() > MAX_VALUE_BYTES {
                return Err(GuestDbError::Invalid("value-too-large"));
            }
            Ok(value)
        })
        .collect()
}

/// A fixed, secret-free description of a driver error.
fn describe(error: &tokio_postgres::Error) -> String {
    match error.code() {
        Some(code) => format!("statement failed (code {})", code.code()),
        None => "connection failed".into(),
    }
}

/// Maps a driver error to a fixed code by its SQLSTATE. A table that does not exist is
/// `not-granted` like one that is not granted, so a guest cannot probe for names.
fn classify(error: &tokio_postgres::Error) -> GuestDbError {
    let Some(state) = error.code().map(|c| c.code()) else {
        return GuestDbError::Unavailable;
    };
    match state {
        "42501" | "42P01" => GuestDbError::Refused(Refusal::NotGranted),
        "25006" => GuestDbError::Refused(Refusal::ReadOnly),
        "57014" => GuestDbError::Refused(Refusal::Interrupted),
        "54000" => GuestDbError::Invalid("value-too-large"),
        // A protocol violation here is a bad statement (parameters that do not match).
        "08P01" => GuestDbError::Refused(Refusal::InvalidStatement),
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

#[cfg(test)]
mod tests {
    use super::*;

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
