//! Guest starts: one task per host writes when each attempt's guest started, as many as
//! are waiting in one statement (group commit, like the finisher). A host claims runs
//! ahead of its free workers; until its guest's start is written such a run shows
//! `claimed`, not `running`, and its `started_at` is unset, so a run's duration never
//! counts the wait for a worker. Workers hand a start over and go on at once: a start not
//! written (the database unreachable, the host stopped) only leaves the run shown
//! `claimed` until its ending, which takes its start from the attempt's row.

use crate::store::{GuestStart, Store};
use std::sync::Mutex;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// Most starts one statement writes.
const MAX_BATCH: usize = 512;
/// Most starts handed over and not yet written: beyond that, a worker waits.
const BACKLOG: usize = 4096;

pub(super) struct Starts {
    sender: Mutex<Option<mpsc::Sender<GuestStart>>>,
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

    /// Queues a guest's start to be written (waiting while the backlog is full).
    pub(super) async fn started(&self, start: GuestStart) {
        let sender = self.sender.lock().expect("starts lock").clone();
        if let Some(sender) = sender {
            let _ = sender.send(start).await;
        }
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

async fn write(store: Store, mut queue: mpsc::Receiver<GuestStart>) {
    while let Some(first) = queue.recv().await {
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match queue.try_recv() {
                Ok(start) => batch.push(start),
                Err(_) => break,
            }
        }
        if let Err(e) = store.mark_guests_started(&batch).await {
            tracing::warn!(runs = batch.len(), code = "driver_failed", error = %e, "could not record that guests started; their runs show claimed until they end");
        }
    }
}
