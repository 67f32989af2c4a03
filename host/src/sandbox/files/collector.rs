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
//!
//! On local storage nothing is deleted through a symbolic link: an object with a link in
//! its place or on the way to it is reported (once) and its record kept, moved to the end
//! of the line so it holds up no other; it is deleted in the first period after the
//! operator removes the link.

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
    /// Objects left alone: a link stands in their place or on the way to them.
    pub refused: usize,
}

/// What became of one dead object.
enum Deleted {
    Yes,
    /// Its collection is not declared here (a host that declares it deletes it).
    NotHere,
    /// A link or a special file is in the way.
    Refused,
}

impl Collector {
    pub async fn collect(&self) -> Result<Collected, FilesError> {
        if !crate::queue::lease::fleet_turn(&self.store, CHORE, &self.host_id, self.interval)
            .await?
        {
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
            match self.delete(&object).await? {
                Deleted::Yes => {
                    self.store.forget_upload(&object.object_key).await?;
                    collected.uploads += 1;
                }
                Deleted::Refused => {
                    self.store.postpone_upload(&object.object_key).await?;
                    collected.refused += 1;
                }
                Deleted::NotHere => {}
            }
        }
        for object in self
            .store
            .dead_garbage(grace(self.garbage_grace), BATCH)
            .await?
        {
            match self.delete(&object).await? {
                Deleted::Yes => {
                    self.store.forget_garbage(&object.object_key).await?;
                    collected.garbage += 1;
                }
                Deleted::Refused => {
                    self.store.postpone_garbage(&object.object_key).await?;
                    collected.refused += 1;
                }
                Deleted::NotHere => {}
            }
        }
        if collected.uploads + collected.garbage + collected.refused > 0 {
            tracing::info!(
                uploads = collected.uploads,
                garbage = collected.garbage,
                refused = collected.refused,
                "collected objects nothing can see"
            );
        }
        Ok(collected)
    }

    /// Deletes an object (refused, and reported, if a link is in the way).
    async fn delete(&self, object: &DeadObject) -> Result<Deleted, FilesError> {
        match self
            .files
            .delete_object(&object.collection, &object.object_key)
            .await
        {
            Ok(()) => Ok(Deleted::Yes),
            Err(FilesError::UnknownCollection) => Ok(Deleted::NotHere),
            Err(FilesError::PathRefused) => Ok(Deleted::Refused),
            Err(e) => Err(e),
        }
    }
}
