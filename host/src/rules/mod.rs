//! What a job is and the rules every value obeys: a job's definition and grants, the
//! names, JSON values, units and guest text the host accepts, the failure codes, tenants'
//! tokens and trace context. The bottom layer: it imports nothing else of the host.

pub mod audit;
pub mod claim_limits;
pub mod delivery;
pub mod enqueue;
pub mod event_filter;
pub mod event_name;
pub mod failure;
#[cfg(test)]
pub(crate) mod fuzzing;
pub mod grants;
pub mod guest_text;
pub mod job;
pub mod json_rule;
pub mod name_rule;
pub mod payload_match;
pub mod queue_caps;
pub mod record;
pub mod signal;
pub mod tenant;
pub mod trace;
pub mod units;
