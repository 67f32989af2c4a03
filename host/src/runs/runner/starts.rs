//! Guest starts: one task per host writes when each attempt's guest starts, as many as
//! are waiting in one statement (group commit, like the finisher). A host claims runs
//! ahead of its free workers; until its guest's start is written such a run shows
//! `claimed`, not `running`, and its `started_at` is unset, so a run's duration never
//! counts the wait for a worker. A worker waits for the write before it starts the guest
//! (a round trip, shared by the starts written together): written after, a guest that
//! holds SQLite's write lock in a loop of transactions would keep its own start from
//! being written, and its run shown `claimed` while it runs. It waits at most
//! `WRITE_WAIT`: a start not written by then (the database slow or unreachable) is still
//! written when it can be, and a run whose ending comes first takes its start from the
//! attempt's row.

use crate::store::{GuestStart, Store};
use std::sync::Mutex;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

/// Most starts one statement writes.
const MAX_BATCH: usize = 512;
/// Most starts handed over and not yet written: beyond that, a worker waits.
const BACKLOG: usize = 4096;
/// Longest a worker waits for its guest's start to be written before it starts the guest.
const WRITE_WAIT: Duration = Duration::from_secs(1);

/// A start handed over, and who waits for its write.
struct Pending {
    start: GuestStart,
    written: oneshot::Sender<()>,
}

pub(super) struct Starts {
    sender: Mutex<Option<mpsc::Sender<Pending>>>,
    task: Mutex<Option<JoinHandle<()>>>,
}

impl Starts {
    pub(super) fn start(store: Store) -> Starts {
        let (sender, queue) = mpsc::channel(BACKLOG);
        Starts {
            sender: Mutex::new(Some(sender)),
            task: Mutex::new(Some(tokio::spawn(write(store, queue)))),
        }
    }

    /// Writes that a guest starts, with others handed over meanwhile; returns once it is
    /// written, or after `WRITE_WAIT`.
    pub(super) async fn started(&self, start: GuestStart) {
        let sender = self.sender.lock().expect("starts lock").clone();
        let Some(sender) = sender else { return };
        let (written, done) = oneshot::channel();
        let handed = async {
            if sender.send(Pending { start, written }).await.is_ok() {
                let _ = done.await;
            }
        };
        let _ = tokio::time::timeout(WRITE_WAIT, handed).await;
    }

    /// Stops taking starts and waits until the ones queued are written or given up on.
    pub(super) async fn close(&self) {
        self.sender.lock().expect("starts lock").take();
        let task = self.task.lock().expect("starts lock").take();
        if let Some(task) = task {
            let _ = task.await;
        }
    }
}

async fn write(store: Store, mut queue: mpsc::Receiver<Pending>) {
    while let Some(first) = queue.recv().await {
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match queue.try_recv() {
                Ok(pending) => batch.push(pending),
                Err(_) => break,
            }
        }
        let starts: Vec<GuestStart> = batch.iter().map(|p| p.start.clone()).collect();
        if let Err(e) = store.mark_guests_started(&starts).await {
            tracing::warn!(runs = starts.len(), code = "driver_failed", error = %e, "could not record that guests started; their runs show claimed until they end");
        }
        for pending in batch {
            let _ = pending.written.send(());
        }
    }
}
