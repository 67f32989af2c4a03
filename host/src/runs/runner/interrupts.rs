//! The attempts this host is running, by run, so that an operator's cancel (or a family's
//! end) can stop one at once. The cancel itself is fenced in the database (the lease moves
//! on in the cancelling transaction); stopping the attempt only spares the work it would
//! do until it found out. The attempt is stopped with the code the run ends with, so
//! that, should its own ending be recorded first, it records the same one.

use crate::rules::failure::FailureCode;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use tokio::sync::watch;

/// By run: its lane, and the sender that stops its attempt.
type Running = Arc<Mutex<HashMap<String, (String, watch::Sender<Option<FailureCode>>)>>>;

#[derive(Default)]
pub struct Interrupts {
    running: Running,
}

/// An attempt's place in [`Interrupts`]: removed when dropped, however the attempt ends.
pub struct Registered {
    running: Running,
    run_id: String,
}

impl Drop for Registered {
    fn drop(&mut self) {
        lock(&self.running).remove(&self.run_id);
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Interrupts {
    /// Registers an attempt of `run_id` in `lane`; the receiver takes the run's ending
    /// code when it is interrupted.
    pub fn register(
        &self,
        run_id: &str,
        lane: &str,
    ) -> (Registered, watch::Receiver<Option<FailureCode>>) {
        let (tx, rx) = watch::channel(None);
        lock(&self.running).insert(run_id.to_string(), (lane.to_string(), tx));
        let registered = Registered {
            running: self.running.clone(),
            run_id: run_id.to_string(),
        };
        (registered, rx)
    }

    /// Stops the attempt of `run_id` running here, if there is one, as its run ends with
    /// `code`; the first code sent is the one that holds.
    pub fn interrupt(&self, run_id: &str, code: FailureCode) -> bool {
        lock(&self.running).get(run_id).is_some_and(|(_, tx)| {
            tx.send_if_modified(|stop| {
                let first = stop.is_none();
                if first {
                    *stop = Some(code);
                }
                first
            });
            !tx.is_closed()
        })
    }

    /// The runs with an attempt running here.
    pub fn running(&self) -> Vec<String> {
        lock(&self.running).keys().cloned().collect()
    }

    /// How many attempts run here, by lane.
    pub fn busy_by_lane(&self) -> std::collections::BTreeMap<String, usize> {
        let mut busy = std::collections::BTreeMap::new();
        for (lane, _) in lock(&self.running).values() {
            *busy.entry(lane.clone()).or_default() += 1;
        }
        busy
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_attempt_is_interrupted_while_registered_only() {
        let interrupts = Interrupts::default();
        let (registered, rx) = interrupts.register("r1", "bulk");
        assert_eq!(interrupts.running(), ["r1"]);
        assert_eq!(interrupts.busy_by_lane().get("bulk"), Some(&1));
        assert_eq!(*rx.borrow(), None);
        assert!(interrupts.interrupt("r1", FailureCode::ParentFailed));
        assert_eq!(*rx.borrow(), Some(FailureCode::ParentFailed));
        // A second ending does not change why the attempt was stopped.
        assert!(interrupts.interrupt("r1", FailureCode::CancelledByOperator));
        assert_eq!(*rx.borrow(), Some(FailureCode::ParentFailed));
        let cancel = FailureCode::CancelledByOperator;
        assert!(!interrupts.interrupt("r2", cancel), "no such attempt");
        drop(registered);
        assert!(interrupts.running().is_empty());
        assert!(!interrupts.interrupt("r1", cancel), "ended");
    }
}
