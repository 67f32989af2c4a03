//! The attempts this host is running, by run, so that an operator's cancel can stop one at
//! once. The cancel itself is fenced in the database (the lease moves on in the cancelling
//! transaction); stopping the attempt only spares the work it would do until it found out.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use tokio::sync::watch;

/// By run: its lane, and the sender that stops its attempt.
type Running = Arc<Mutex<HashMap<String, (String, watch::Sender<bool>)>>>;

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
    /// Registers an attempt of `run_id` in `lane`; the receiver turns `true` when it is
    /// interrupted.
    pub fn register(&self, run_id: &str, lane: &str) -> (Registered, watch::Receiver<bool>) {
        let (tx, rx) = watch::channel(false);
        lock(&self.running).insert(run_id.to_string(), (lane.to_string(), tx));
        let registered = Registered {
            running: self.running.clone(),
            run_id: run_id.to_string(),
        };
        (registered, rx)
    }

    /// Stops the attempt of `run_id` running here, if there is one.
    pub fn interrupt(&self, run_id: &str) -> bool {
        lock(&self.running)
            .get(run_id)
            .is_some_and(|(_, tx)| tx.send(true).is_ok())
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
        assert!(!*rx.borrow());
        assert!(interrupts.interrupt("r1"));
        assert!(*rx.borrow());
        assert!(!interrupts.interrupt("r2"), "no such attempt");
        drop(registered);
        assert!(interrupts.running().is_empty());
        assert!(!interrupts.interrupt("r1"), "ended");
    }
}
