//! Write jobhost jobs in Rust.
//!
//! A job is a type implementing [`Job`], exported with [`export_job!`], compiled for
//! `wasm32-wasip2`. The host calls it once per pass with the run's [`Context`]; it returns
//! an [`Outcome`] or a [`JobError`]. Host calls return [`HostError`], which converts into
//! [`JobError`], so `?` works throughout. A run in several passes, or one whose retries
//! must not redo work, records its progress with [`steps`].
//!
//! ```no_run
//! use jobhost_guest::{Context, Job, JobError, Outcome, db, log};
//! use serde::Deserialize;
//!
//! #[derive(Deserialize)]
//! struct Payload {
//!     rows: i64,
//! }
//!
//! struct Ledger;
//!
//! impl Job for Ledger {
//!     type Payload = Payload;
//!
//!     fn run(ctx: Context<Payload>) -> Result<Outcome, JobError> {
//!         let tx = db::begin()?;
//!         for n in 0..ctx.payload.rows {
//!             tx.execute(
//!                 "INSERT INTO ledger (run_id, n) VALUES ($1, $2)",
//!                 &[ctx.run_id.as_str().into(), n.into()],
//!             )?;
//!         }
//!         tx.commit()?; // fenced by the attempt's lease: all rows or none
//!         log::info(&format!("wrote {} rows", ctx.payload.rows));
//!         Ok(Outcome::Done)
//!     }
//! }
//!
//! jobhost_guest::export_job!(Ledger);
//! ```
//!
//! Build it with `cargo build --release --target wasm32-wasip2` (a `cdylib` crate) and run
//! the resulting `.wasm` with `host run --job PATH --grant db.write=ledger`.

extern crate self as jobhost_guest;

/// The WIT package this SDK speaks, carried in the crate (`wit/`, kept identical to the
/// workspace's `wit/` by a test of the host's), so a job crate builds wherever the SDK is.
pub const WIT: &str = include_str!("../wit/jobhost.wit");

#[doc(hidden)]
pub mod bindings {
    wit_bindgen::generate!({
        path: "wit",
        world: "job",
        pub_export_macro: true,
        export_macro_name: "__export_job_world",
        default_bindings_module: "::jobhost_guest::bindings",
        runtime_path: "::jobhost_guest::__private::wit_bindgen::rt",
    });
}

#[doc(hidden)]
pub mod __private {
    pub use wit_bindgen;

    /// A payload decoded, or why not: where in it (`items[2].id`) and what was expected
    /// there, in serde's words.
    pub fn decode_payload<P: serde::de::DeserializeOwned>(text: &str) -> Result<P, String> {
        let mut decoder = serde_json::Deserializer::from_str(text);
        serde_path_to_error::deserialize(&mut decoder).map_err(|e| {
            let path = e.path().to_string();
            match path.as_str() {
                "." => e.inner().to_string(),
                _ => format!("at {path}: {}", e.inner()),
            }
        })
    }

    use crate::bindings::exports::jobhost::job::handler as raw;

    /// The adapter `export_job!` installs: decodes the context, calls the job, encodes
    /// its outcome.
    pub fn run<J: crate::Job>(ctx: raw::Context) -> Result<raw::Outcome, raw::JobError> {
        report_panics();
        let payload: J::Payload = decode_payload(&ctx.payload).map_err(|e| {
            raw::JobError::Unrecoverable(format!("payload does not match the job: {e}"))
        })?;
        let cursor = match ctx.cursor.as_deref().map(serde_json::from_str).transpose() {
            Ok(cursor) => cursor,
            Err(e) => {
                return Err(raw::JobError::Unrecoverable(format!(
                    "cursor is not JSON: {e}"
                )));
            }
        };
        let context = crate::Context {
            job: ctx.job,
            run_id: ctx.run_id,
            instance: ctx.instance,
            tenant: ctx.tenant,
            attempt: ctx.attempt,
            pass: ctx.pass,
            payload,
            cursor,
            counters: ctx
                .counters
                .into_iter()
                .map(|c| (c.name, c.value))
                .collect(),
        };
        // Called through a pointer the optimiser cannot see through, so the job's `run` is
        // never inlined into this adapter: a trap's backtrace names it.
        let job_run: fn(crate::Context<J::Payload>) -> Result<crate::Outcome, crate::JobError> =
            std::hint::black_box(J::run);
        match job_run(context) {
            Ok(crate::Outcome::Done) => Ok(raw::Outcome::Done),
            Ok(crate::Outcome::Continue(cursor)) => Ok(raw::Outcome::Continue(cursor.to_string())),
            // A sub-millisecond delay is 1 ms, not the zero the host refuses.
            Ok(crate::Outcome::Defer(delay)) => Ok(raw::Outcome::Defer(
                delay
                    .as_millis()
                    .max(u128::from(!delay.is_zero()))
                    .try_into()
                    .unwrap_or(u64::MAX),
            )),
            Err(crate::JobError::Failed(m)) => Err(raw::JobError::Failed(m)),
            Err(crate::JobError::Unrecoverable(m)) => Err(raw::JobError::Unrecoverable(m)),
        }
    }

    /// Hands a panic to the host as one `error` line, `panicked at FILE:LINE:COLUMN:
    /// MESSAGE`, which becomes the run's error when the attempt then traps. It replaces
    /// the standard hook, whose advice to set `RUST_BACKTRACE` cannot be followed in the
    /// sandbox (the host names the frames itself).
    fn report_panics() {
        static INSTALLED: std::sync::Once = std::sync::Once::new();
        INSTALLED.call_once(|| {
            std::panic::set_hook(Box::new(|info| {
                let payload = info.payload();
                let message = payload
                    .downcast_ref::<&str>()
                    .copied()
                    .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
                    .unwrap_or("a panic without a message");
                let line = match info.location() {
                    Some(at) => format!(
                        "panicked at {}:{}:{}: {message}",
                        at.file(),
                        at.line(),
                        at.column()
                    ),
                    None => format!("panicked at an unknown place: {message}"),
                };
                crate::log::error(&line);
            }))
        });
    }
}

pub use bindings::jobhost::job::db::{Rows, Value};
pub use bindings::jobhost::job::types::HostError;

use serde::de::DeserializeOwned;
use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

/// A job: the host calls [`Job::run`] once per pass.
pub trait Job {
    /// The run's payload, decoded from JSON. A payload that does not decode fails the run
    /// as unrecoverable (retrying cannot fix it).
    type Payload: DeserializeOwned;

    fn run(ctx: Context<Self::Payload>) -> Result<Outcome, JobError>;
}

/// Everything a pass knows about its run.
#[derive(Debug, Clone)]
pub struct Context<P> {
    pub job: String,
    pub run_id: String,
    /// Runs of one job and instance never overlap.
    pub instance: String,
    pub tenant: String,
    /// 1-based attempt number within this pass.
    pub attempt: u32,
    /// 1-based pass number within this run.
    pub pass: u32,
    pub payload: P,
    /// What the previous pass returned with [`Outcome::Continue`].
    pub cursor: Option<serde_json::Value>,
    pub counters: BTreeMap<String, i64>,
}

/// How a pass ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// The run is complete.
    Done,
    /// Run another pass, which gets this cursor.
    Continue(serde_json::Value),
    /// Run another pass after this delay: longer than zero and at most 7 days, or the run
    /// ends `invalid_defer`.
    Defer(Duration),
}

/// Why a pass failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobError {
    /// This attempt failed; the host retries the pass if the job has retries left.
    Failed(String),
    /// The run cannot succeed; it is never retried.
    Unrecoverable(String),
}

impl JobError {
    pub fn failed(message: impl fmt::Display) -> Self {
        JobError::Failed(message.to_string())
    }

    pub fn unrecoverable(message: impl fmt::Display) -> Self {
        JobError::Unrecoverable(message.to_string())
    }
}

/// A readable sentence for a host error (its code and fixed reason).
pub fn describe(error: &HostError) -> String {
    match error {
        HostError::LeaseLost => "lease lost: nothing was committed".into(),
        HostError::CapabilityRefused(r) => format!("capability refused: {r}"),
        HostError::QueryRefused(r) => format!("query refused: {r}"),
        HostError::Invalid(r) => format!("invalid call: {r}"),
        HostError::Unavailable => "host unavailable".into(),
    }
}

impl From<HostError> for JobError {
    fn from(e: HostError) -> Self {
        JobError::Failed(describe(&e))
    }
}

impl From<files::ReadError> for JobError {
    fn from(e: files::ReadError) -> Self {
        JobError::Failed(files::describe_read(&e))
    }
}

impl From<serde_json::Error> for JobError {
    fn from(e: serde_json::Error) -> Self {
        JobError::Failed(format!("JSON: {e}"))
    }
}

/// Exports a [`Job`] as the component's handler.
#[macro_export]
macro_rules! export_job {
    ($job:ty) => {
        #[doc(hidden)]
        struct __JobhostExport;

        impl $crate::bindings::exports::jobhost::job::handler::Guest for __JobhostExport {
            fn run(
                ctx: $crate::bindings::exports::jobhost::job::handler::Context,
            ) -> ::core::result::Result<
                $crate::bindings::exports::jobhost::job::handler::Outcome,
                $crate::bindings::exports::jobhost::job::handler::JobError,
            > {
                $crate::__private::run::<$job>(ctx)
            }
        }

        $crate::bindings::__export_job_world!(__JobhostExport with_types_in $crate::bindings);
    };
}

/// Log lines, kept on the attempt's record (bounded).
pub mod log {
    use crate::bindings::jobhost::job::log::{Level, write};

    pub fn trace(message: &str) {
        write(Level::Trace, message)
    }

    pub fn debug(message: &str) {
        write(Level::Debug, message)
    }

    pub fn info(message: &str) {
        write(Level::Info, message)
    }

    pub fn warn(message: &str) {
        write(Level::Warn, message)
    }

    pub fn error(message: &str) {
        write(Level::Error, message)
    }
}

/// SQL on the tables the job was granted. Reads run on their own; writes only inside a
/// [`Transaction`], whose commit is fenced by the attempt's lease.
pub mod db {
    use crate::HostError;
    use crate::bindings::jobhost::job::db as raw;
    pub use crate::bindings::jobhost::job::db::{Rows, Value};

    /// Runs one read-only statement.
    pub fn query(sql: &str, params: &[Value]) -> Result<Rows, HostError> {
        raw::query(sql, params)
    }

    /// Opens the attempt's write transaction.
    pub fn begin() -> Result<Transaction, HostError> {
        raw::begin().map(|inner| Transaction { inner })
    }

    /// A write transaction; dropping it without [`Transaction::commit`] rolls it back.
    pub struct Transaction {
        inner: raw::Transaction,
    }

    impl Transaction {
        /// The raw handle, for other capabilities' writes that commit with it.
        pub(crate) fn raw(&self) -> &raw::Transaction {
            &self.inner
        }

        pub fn query(&self, sql: &str, params: &[Value]) -> Result<Rows, HostError> {
            self.inner.query(sql, params)
        }

        /// Runs one statement; returns how many rows it changed.
        pub fn execute(&self, sql: &str, params: &[Value]) -> Result<u64, HostError> {
            self.inner.execute(sql, params)
        }

        /// Commits, if the attempt still holds its lease; `HostError::LeaseLost` means
        /// nothing was committed.
        pub fn commit(self) -> Result<(), HostError> {
            raw::Transaction::commit(self.inner)
        }

        /// Commits, with the pass's end and its counter changes ([`crate::steps`]), if the
        /// attempt still holds its lease: all of it or none (`HostError::LeaseLost`). Returns
        /// the outcome for the handler to return; once this succeeds the pass is over, and
        /// the host keeps this end whatever the handler returns.
        pub fn commit_pass(self, end: crate::steps::PassEnd) -> Result<crate::Outcome, HostError> {
            crate::steps::commit_pass(self.inner, &end)?;
            Ok(end.into())
        }

        pub fn rollback(self) {
            raw::Transaction::rollback(self.inner)
        }
    }

    impl From<i64> for Value {
        fn from(v: i64) -> Self {
            Value::Integer(v)
        }
    }

    impl From<i32> for Value {
        fn from(v: i32) -> Self {
            Value::Integer(v.into())
        }
    }

    impl From<u32> for Value {
        fn from(v: u32) -> Self {
            Value::Integer(v.into())
        }
    }

    impl From<bool> for Value {
        fn from(v: bool) -> Self {
            Value::Integer(v.into())
        }
    }

    impl From<f64> for Value {
        fn from(v: f64) -> Self {
            Value::Real(v)
        }
    }

    impl From<&str> for Value {
        fn from(v: &str) -> Self {
            Value::Text(v.to_string())
        }
    }

    impl From<String> for Value {
        fn from(v: String) -> Self {
            Value::Text(v)
        }
    }

    impl From<Vec<u8>> for Value {
        fn from(v: Vec<u8>) -> Self {
            Value::Blob(v)
        }
    }

    impl<T: Into<Value>> From<Option<T>> for Value {
        fn from(v: Option<T>) -> Self {
            v.map_or(Value::Null, Into::into)
        }
    }

    impl Rows {
        /// The index of a column by name.
        pub fn column(&self, name: &str) -> Option<usize> {
            self.columns.iter().position(|c| c == name)
        }
    }

    impl Value {
        pub fn as_i64(&self) -> Option<i64> {
            match self {
                Value::Integer(i) => Some(*i),
                _ => None,
            }
        }

        pub fn as_str(&self) -> Option<&str> {
            match self {
                Value::Text(s) => Some(s),
                _ => None,
            }
        }
    }
}

pub mod jobs;
pub mod run;
pub mod steps;

/// Named objects in the collections the job was granted.
///
/// Writing is an [`files::Upload`]: written in chunks (any size, up to the collection's
/// largest object), invisible until attached to its name — in a fenced transaction of its
/// own ([`files::Upload::attach`]) or inside the job's database transaction
/// ([`files::Upload::attach_in`]), so "the rows I wrote" and "the file I wrote" commit
/// together. Reading is [`files::read_all`], or [`files::stat_version`] then
/// [`files::read_version`] chunk by chunk: one object's bytes, never part of two, however
/// the name is replaced meanwhile. Names belong to the run's tenant.
pub mod files {
    use crate::HostError;
    use crate::bindings::jobhost::job::files as raw;
    pub use crate::bindings::jobhost::job::files::{
        ObjectMetadata, ObjectPage, ObjectVersion, PendingFile, ReadError, Verdict,
    };

    /// The most bytes one host call moves.
    pub const CHUNK: usize = 1 << 20;
    /// How many times [`read_all`] starts over on a name replaced under it before it
    /// gives up with [`ReadError::Changed`].
    pub const READ_ATTEMPTS: u32 = 8;

    pub fn stat(collection: &str, name: &str) -> Result<Option<ObjectMetadata>, HostError> {
        raw::stat(collection, name)
    }

    /// Up to `len` bytes (at most [`CHUNK`]) of whatever object `name` points at when
    /// called, from `offset`: chunks read this way may come from two objects if the name
    /// is replaced between them. [`read_version`] reads one object.
    pub fn read(collection: &str, name: &str, offset: u64, len: u64) -> Result<Vec<u8>, HostError> {
        raw::read(collection, name, offset, len)
    }

    /// The object `name` points at and its version, for [`read_version`].
    pub fn stat_version(collection: &str, name: &str) -> Result<Option<ObjectVersion>, HostError> {
        raw::stat_version(collection, name)
    }

    /// Up to `len` bytes (at most [`CHUNK`]) of `version` of `name`, from `offset`;
    /// [`ReadError::Changed`] once the name points at another object (or none).
    pub fn read_version(
        collection: &str,
        name: &str,
        version: &str,
        offset: u64,
        len: u64,
    ) -> Result<Vec<u8>, ReadError> {
        raw::read_version(collection, name, version, offset, len)
    }

    /// A whole object, read chunk by chunk from one version; `None` if there is none.
    /// Should the name be pointed at another object meanwhile, the read starts again from
    /// the new one, at most [`READ_ATTEMPTS`] times in all, then fails with
    /// [`ReadError::Changed`]: the bytes are always exactly one object's.
    pub fn read_all(collection: &str, name: &str) -> Result<Option<Vec<u8>>, ReadError> {
        for _ in 0..READ_ATTEMPTS {
            let Some(object) = stat_version(collection, name).map_err(ReadError::Host)? else {
                return Ok(None);
            };
            match read_whole(collection, name, &object) {
                Err(ReadError::Changed) => continue,
                read => return read.map(Some),
            }
        }
        Err(ReadError::Changed)
    }

    /// Every byte of one version.
    fn read_whole(
        collection: &str,
        name: &str,
        object: &ObjectVersion,
    ) -> Result<Vec<u8>, ReadError> {
        let size = object.metadata.size;
        let mut bytes = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
        while (bytes.len() as u64) < size {
            let offset = bytes.len() as u64;
            let chunk = read_version(collection, name, &object.version, offset, CHUNK as u64)?;
            if chunk.is_empty() {
                break;
            }
            bytes.extend_from_slice(&chunk);
        }
        Ok(bytes)
    }

    /// A readable sentence for a failed versioned read.
    pub fn describe_read(error: &ReadError) -> String {
        match error {
            ReadError::Changed => "the object was replaced while it was read".into(),
            ReadError::Host(e) => crate::describe(e),
        }
    }

    /// One page of the objects whose name starts with `prefix`.
    pub fn list(
        collection: &str,
        prefix: &str,
        cursor: Option<&str>,
        limit: u32,
    ) -> Result<ObjectPage, HostError> {
        raw::list_objects(collection, prefix, cursor, limit)
    }

    /// An object being written.
    pub struct Upload {
        inner: raw::Upload,
    }

    /// Starts writing an object into `collection`. Start it before your transaction's
    /// first statement if it is to be attached in that transaction: on SQLite the
    /// transaction then holds the database's one write lock, and the upload (which
    /// records itself on its own) is refused `invalid(transaction-open)`.
    pub fn upload(collection: &str) -> Result<Upload, HostError> {
        raw::start_upload(collection).map(|inner| Upload { inner })
    }

    impl Upload {
        /// Appends bytes (sent in chunks of at most [`CHUNK`]).
        pub fn write(&self, bytes: &[u8]) -> Result<(), HostError> {
            for chunk in bytes.chunks(CHUNK) {
                self.inner.write(chunk)?;
            }
            Ok(())
        }

        /// Makes it visible as `name`, in a fenced transaction of its own;
        /// `HostError::LeaseLost` means it never became visible.
        pub fn attach(self, name: &str) -> Result<ObjectMetadata, HostError> {
            raw::attach(self.inner, name)
        }

        /// Makes it visible as `name` when `tx` commits, and never otherwise.
        pub fn attach_in(
            self,
            tx: &crate::db::Transaction,
            name: &str,
        ) -> Result<ObjectMetadata, HostError> {
            raw::attach_in(tx.raw(), self.inner, name)
        }
    }

    /// Writes `bytes` as `name` and attaches it: the whole object or nothing.
    pub fn put(collection: &str, name: &str, bytes: &[u8]) -> Result<ObjectMetadata, HostError> {
        let upload = upload(collection)?;
        upload.write(bytes)?;
        upload.attach(name)
    }

    /// Removes `name`, in a fenced transaction of its own; false if there was none.
    pub fn remove(collection: &str, name: &str) -> Result<bool, HostError> {
        raw::remove(collection, name)
    }

    /// Removes `name` when `tx` commits.
    pub fn remove_in(
        tx: &crate::db::Transaction,
        collection: &str,
        name: &str,
    ) -> Result<bool, HostError> {
        raw::remove_in(tx.raw(), collection, name)
    }

    /// For a collection's scan job (granted `files.scan`).
    pub mod scan {
        use super::raw;
        use crate::HostError;
        pub use raw::{PendingFile, Verdict};

        /// Files of every tenant waiting for a verdict.
        pub fn pending(collection: &str, limit: u32) -> Result<Vec<PendingFile>, HostError> {
            raw::scan_pending(collection, limit)
        }

        pub fn read(
            collection: &str,
            id: &str,
            offset: u64,
            len: u64,
        ) -> Result<Vec<u8>, HostError> {
            raw::scan_read(collection, id, offset, len)
        }

        /// Marks a waiting file clean (visible to its tenant) or rejected.
        pub fn mark(collection: &str, id: &str, verdict: Verdict) -> Result<(), HostError> {
            raw::scan_mark(collection, id, verdict)
        }
    }
}

/// Calls to the services the operator declared (mounts). The host adds the mount's
/// credential, an `Idempotency-Key` derived from the run, the pass and `step` (a retried
/// attempt sends the same one), and sends only while the attempt holds its lease.
pub mod links {
    use crate::HostError;
    use crate::bindings::jobhost::job::links as raw;
    pub use crate::bindings::jobhost::job::links::{CallError, Request, Response};
    use serde::Serialize;
    use serde::de::DeserializeOwned;

    /// One call; the mount's `rate` and `concurrency` limits answer `unavailable` here
    /// ([`send`] tells them apart).
    pub fn call(mount: &str, request: &Request) -> Result<Response, HostError> {
        raw::call(mount, request)
    }

    /// One call, with the mount's limits answered [`CallError::RateLimited`]: nothing was
    /// sent, and the job usually ends the pass with [`crate::Outcome::Defer`].
    pub fn send(mount: &str, request: &Request) -> Result<Response, CallError> {
        raw::send(mount, request)
    }

    impl From<CallError> for crate::JobError {
        fn from(e: CallError) -> Self {
            match e {
                CallError::RateLimited => crate::JobError::Failed(
                    "rate limited: the mount's limits held the call, nothing was sent".into(),
                ),
                CallError::Host(e) => e.into(),
            }
        }
    }

    /// A request with a JSON body.
    pub fn json<T: Serialize>(
        method: &str,
        path: &str,
        step: &str,
        body: &T,
    ) -> Result<Request, serde_json::Error> {
        Ok(Request {
            method: method.into(),
            path: path.into(),
            headers: vec![("content-type".into(), "application/json".into())],
            body: serde_json::to_vec(body)?,
            step: step.into(),
            action: None,
        })
    }

    impl Response {
        /// The body, decoded from JSON.
        pub fn json<T: DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
            serde_json::from_slice(&self.body)
        }

        pub fn is_success(&self) -> bool {
            (200..300).contains(&self.status)
        }
    }
}

/// Membership links issued by an IAM service through a mount, with the job's own
/// workload credential (the host's per-attempt token): an expiring, revocable link that
/// grants a role in one container of a dimension.
///
/// The service answers `POST memberships` with `{dimension, container, role,
/// expires_in_s}` by `201 {id, url, expires_at}` and `DELETE memberships/{id}` by `204`;
/// calls name the actions `membership.issue` and `membership.revoke`, which the job must
/// declare.
pub mod iam {
    use crate::HostError;
    use crate::links::{self, Response};
    use serde::{Deserialize, Serialize};

    #[derive(Debug, Clone, Serialize)]
    pub struct MembershipRequest {
        pub dimension: String,
        pub container: String,
        pub role: String,
        pub expires_in_s: u64,
    }

    #[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
    pub struct MembershipLink {
        pub id: String,
        pub url: String,
        /// Seconds since the Unix epoch.
        pub expires_at: u64,
    }

    /// Why IAM did not do it, as fixed codes.
    #[derive(Debug, Clone)]
    pub enum IamError {
        /// IAM refused the job's credential or its action (401, 403).
        Unauthorized,
        /// IAM or the way to it is down (5xx, unreachable).
        Unavailable,
        /// Any other answer, by its status.
        Refused(u16),
        /// The host refused the call.
        Host(HostError),
    }

    impl IamError {
        pub fn code(&self) -> &'static str {
            match self {
                IamError::Unauthorized => "unauthorized",
                IamError::Unavailable => "unavailable",
                IamError::Refused(_) => "refused",
                IamError::Host(_) => "host",
            }
        }
    }

    impl From<IamError> for crate::JobError {
        fn from(e: IamError) -> Self {
            match e {
                IamError::Host(e) => crate::JobError::Failed(crate::describe(&e)),
                other => crate::JobError::Failed(format!("iam: {}", other.code())),
            }
        }
    }

    fn answer(result: Result<Response, HostError>, expected: u16) -> Result<Response, IamError> {
        let response = result.map_err(|e| match e {
            HostError::Unavailable => IamError::Unavailable,
            other => IamError::Host(other),
        })?;
        match response.status {
            s if s == expected => Ok(response),
            401 | 403 => Err(IamError::Unauthorized),
            s if s >= 500 => Err(IamError::Unavailable),
            s => Err(IamError::Refused(s)),
        }
    }

    /// Issues a membership link; `step` names the call within the pass.
    pub fn issue_membership(
        mount: &str,
        request: &MembershipRequest,
        step: &str,
    ) -> Result<MembershipLink, IamError> {
        let mut call =
            links::json("POST", "memberships", step, request).map_err(|_| IamError::Refused(0))?;
        call.action = Some("membership.issue".into());
        let response = answer(links::call(mount, &call), 201)?;
        response
            .json()
            .map_err(|_| IamError::Refused(response.status))
    }

    /// Revokes a membership link.
    pub fn revoke_membership(mount: &str, id: &str, step: &str) -> Result<(), IamError> {
        let call = links::Request {
            method: "DELETE".into(),
            path: format!("memberships/{id}"),
            headers: Vec::new(),
            body: Vec::new(),
            step: step.into(),
            action: Some("membership.revoke".into()),
        };
        answer(links::call(mount, &call), 204).map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::__private::decode_payload;

    #[derive(Debug, serde::Deserialize)]
    #[allow(dead_code)]
    struct Payload {
        items: Vec<Item>,
    }

    #[derive(Debug, serde::Deserialize)]
    #[allow(dead_code)]
    struct Item {
        id: i64,
    }

    #[test]
    fn a_payload_that_does_not_decode_says_where_and_what_was_expected() {
        let error =
            decode_payload::<Payload>(r#"{"items": [{"id": 1}, {"id": "two"}]}"#).unwrap_err();
        assert!(
            error.starts_with("at items[1].id: invalid type: string \"two\", expected i64"),
            "{error}"
        );
        let error = decode_payload::<Payload>("7").unwrap_err();
        assert!(
            error.starts_with("invalid type: integer `7`, expected struct Payload"),
            "{error}"
        );
        assert_eq!(
            decode_payload::<Payload>(r#"{"items": []}"#)
                .unwrap()
                .items
                .len(),
            0
        );
    }
}
