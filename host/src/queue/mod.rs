//! The queue's rules, below the sandbox because a guest's `jobs` calls use them too: leases
//! (who may run an instance, whose writes commit), kicks and starts, pauses, quotas,
//! bounded backlogs, per-tenant fan-out and named events.

pub mod backlog;
pub mod events;
pub mod fan_out;
pub mod kick;
pub mod lease;
pub mod pause;
pub mod quota;
pub mod waits;
