//! A run's life once claimed: the runner (claim, attempt, decide, finish), families of
//! runs, the operator's cancel and retry, and the metrics they count.

pub mod controls;
pub mod family;
pub mod metrics;
pub mod runner;
