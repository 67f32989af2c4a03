//! The persistence port: every row the host reads and writes, on SQLite or Postgres.
//!
//! One implementation serves both backends: the statements are written once (see
//! [`queries`]) and run on whichever pool the URL selected. This module only reads and
//! writes rows; what the rows mean — when to retry, who may take a lease — is decided by
//! `lease` and `runner`. Compound writes that must be atomic (finishing a run and
//! releasing its lease, say) are single methods here, each one transaction.
//!
//! This file only declares the store's files and names what the rest of the host uses;
//! the files import each other from where a thing is defined (`handle::Store`,
//! `error::Result`), never through here, so the store is no one circle.

#[macro_use]
mod pool;
mod apps;
mod audit;
#[macro_use]
mod controls;
mod cancel_book;
pub mod claims;
mod connect;
mod deliveries;
pub mod enqueue;
mod error;
mod error_class;
pub mod family;
mod files;
pub mod guest;
mod handle;
mod hosts;
mod jobs;
mod journals;
mod leases;
mod live_logs;
pub mod migrate;
mod mount_limits;
mod orphans;
pub mod payload_search;
mod pg_statement;
mod pg_wire;
pub mod postgres_guest;
mod probe;
mod queries;
pub mod records;
mod reports;
mod resumable;
mod retention;
pub mod row;
mod runs;
pub mod scratch;
pub mod signals;
pub mod sqlite_guest;
mod tenants;

pub use apps::AppGrant;
pub use cancel_book::CancelMark;
pub use claims::{
    AttemptEnding, AttemptTerms, ClaimRequest, Claimed, Recorded, Recording, RunChange,
};
pub use connect::claim_for_serving;
#[cfg(test)]
pub(crate) use connect::open_sqlite;
pub use controls::{CancelRequest, RetryRequest};
pub use deliveries::{
    DeliveryAttemptRecord, DeliveryFilter, DeliveryNext, DeliveryRecord, DeliveryState, DeliveryTry,
};
pub use error::{Result, StoreError};
pub use error_class::{ErrorClass, describe};
#[cfg(test)]
pub(crate) use handle::SQLITE_QUERIES;
pub use handle::Store;
pub use journals::{JournalRecord, JournalRow};
pub use live_logs::LiveLogRecord;
pub use orphans::OrphanEnding;
pub use pool::{Backend, Pool, SQLITE_BUSY_TIMEOUT};
pub use records::*;
pub use retention::Pruned;
