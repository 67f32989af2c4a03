//! What the runner hands the capabilities for one attempt. Each capability file builds its
//! own session from it (`XSession::for_attempt`: `None` when the job was not granted the
//! capability), so the runner names no capability's session.

use crate::rules::job::JobSpec;
use crate::sandbox::files::Files;
use crate::sandbox::links::Links;
use crate::store::guest::{Fence, GuestDb};
use crate::store::{Lease, RunRecord, Store};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// What the host shares with every attempt's capabilities, made once with the runner.
pub struct HostServices {
    pub store: Store,
    /// The guest-DB port (`db`).
    pub guest_db: GuestDb,
    /// Object storage (`files`).
    pub files: Arc<Files>,
    /// Outbound HTTP mounts (`links`).
    pub links: Arc<Links>,
    /// How long a guest write transaction may stay open.
    pub txn_bound: Duration,
}

/// One attempt, as its capabilities' sessions are built from it.
pub struct AttemptContext<'a> {
    pub run: &'a RunRecord,
    pub spec: &'a JobSpec,
    /// The lease the attempt holds: every write it commits is fenced by it.
    pub lease: &'a Lease,
    /// When the attempt's time is up (its host calls' too).
    pub deadline: Instant,
    /// The attempt's number in its pass (the run's failures so far, plus one).
    pub attempt: i64,
    pub host: &'a HostServices,
}

impl AttemptContext<'_> {
    /// The fence of the attempt's writes: its lease's generation.
    pub fn fence(&self) -> Fence {
        self.lease.fence()
    }
}
