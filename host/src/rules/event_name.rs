//! The rule for event names: an event is named as a job is, so a grant's `event:NAME`, a
//! manifest's `on` and a guest's emit all check the same rule here, below the queue that
//! emits them.

/// A name that breaks the rule, as given.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid event name {0:?}: use 1-64 lowercase letters, digits and . _ -, starting with a letter or digit"
)]
pub struct InvalidEventName(pub String);

/// Event names follow the job name rule.
pub fn validate_event(name: &str) -> Result<(), InvalidEventName> {
    crate::rules::job::validate_name(name).map_err(|_| InvalidEventName(name.to_string()))
}
