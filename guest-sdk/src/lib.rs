//! Write jobhost jobs in Rust.
//!
//! A job is a type implementing [`Job`], exported with [`export_job!`], compiled for
//! `wasm32-wasip2`. The host calls it once per pass with the run's [`Context`]; it returns
//! an [`Outcome`] or a [`JobError`]. Host calls return [`HostError`], which converts into
//! [`JobError`], so `?` works throughout.
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

#[doc(hidden)]
pub mod bindings {
    wit_bindgen::generate!({
        path: "../wit",
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

    use crate::bindings::exports::jobhost::job::handler as raw;

    /// The adapter `export_job!` installs: decodes the context, calls the job, encodes
    /// its outcome.
    pub fn run<J: crate::Job>(ctx: raw::Context) -> Result<raw::Outcome, raw::JobError> {
        let payload: J::Payload = serde_json::from_str(&ctx.payload).map_err(|e| {
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
        match J::run(context) {
            Ok(crate::Outcome::Done) => Ok(raw::Outcome::Done),
            Ok(crate::Outcome::Continue(cursor)) => Ok(raw::Outcome::Continue(cursor.to_string())),
            Ok(crate::Outcome::Defer(delay)) => Ok(raw::Outcome::Defer(
                delay.as_millis().try_into().unwrap_or(u64::MAX),
            )),
            Err(crate::JobError::Failed(m)) => Err(raw::JobError::Failed(m)),
            Err(crate::JobError::Unrecoverable(m)) => Err(raw::JobError::Unrecoverable(m)),
        }
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
    /// Run another pass after this delay.
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
