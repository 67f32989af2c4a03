//! Deletes the objects nothing can ever see: uploads that were never attached, and
//! objects that a name stopped pointing at. It runs once per period across the fleet,
//! under a lease of its own (like surveillance).
//!
//! It can never delete a file that is, or could become, visible:
//!
//! - A file is visible only through a row of `jobhost_files` naming its key, and keys
//!   are fresh UUIDs, never reused.
//! - An upload's key is recorded in `jobhost_uploads` before its first byte, with the
//!   deadline of the attempt that writes it (`attach_by`, database clock). Only that
//!   attempt holds the upload, and its attach commits only in a transaction that checks
//!   the attempt's lease is before that deadline — the same transaction deletes the
//!   upload's record. So a record the collector still finds `upload_grace` after its
//!   deadline belongs to a key that no transaction has attached and none ever can.
//! - A key enters `jobhost_file_garbage` only in the transaction that makes its name point
//!   elsewhere (or removes the name); it is deleted `garbage_grace` later, leaving readers
//!   that resolved the name just before time to finish their read.

use super::{Files, FilesError};
use crate::store::{DeadObject, Store};
use std::sync::Arc;
use std::time::Duration;

const CHORE: &str = "jobhost:collector";
/// Most objects of each kind deleted per period (the rest wait for the next).
const BATCH: i64 = 1000;

pub struct Collector {
    pub files: Arc<Files>,
    pub store: Store,
    pub host_id: String,
    pub interval: Duration,
    /// How long after its attempt's deadline an unattached upload is deleted.
    pub upload_grace: Duration,
    /// How long an object no name points at is kept for readers still reading it.
    pub garbage_grace: Duration,
}

#[derive(Debug, Default, PartialEq, Eq)]
pub struct Collected {
    /// Whether this host ran the collection (another may hold this period's lease).
    pub ran: bool,
    pub uploads: usize,
    pub garbage: usize,
}

impl Collector {
    pub async fn collect(&self) -> Result<Collected, FilesError> {
        if !crate::lease::fleet_turn(&self.store, CHORE, &self.host_id, self.interval).await? {
            return Ok(Collected::default());
        }
        let grace = |d: Duration| d.as_millis() as i64;
        let mut collected = Collected {
            ran: true,
            ..Collected::default()
        };
        for object in self
            .store
            .dead_uploads(grace(self.upload_grace), BATCH)
            .await?
        {
            if self.delete(&object).await? {
                self.store.forget_upload(&object.object_key).await?;
                collected.uploads += 1;
            }
        }
        for object in self
            .store
            .dead_garbage(grace(self.garbage_grace), BATCH)
            .await?
        {
            if self.delete(&object).await? {
                self.store.forget_garbage(&object.object_key).await?;
                collected.garbage += 1;
            }
        }
        if collected.uploads + collected.garbage > 0 {
            tracing::info!(
                uploads = collected.uploads,
                garbage = collected.garbage,
                "collected objects nothing can see"
            );
        }
        Ok(collected)
    }

    /// Deletes an object; false (and its record kept) if its collection is not declared
    /// on this host, for a host that declares it.
    async fn delete(&self, object: &DeadObject) -> Result<bool, FilesError> {
        match self
            .files
            .delete_object(&object.collection, &object.object_key)
            .await
        {
            Ok(()) => Ok(true),
            Err(FilesError::UnknownCollection) => Ok(false),
            Err(e) => Err(e),
        }
    }
}
