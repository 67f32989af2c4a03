//! Host implementations of the WIT capability interfaces. Each one only translates: WIT
//! values to the port's, the port's results back, and failures to fixed `host-error`
//! codes (noting them in the attempt's signals).

pub mod context;
pub mod db;
pub mod files;
pub mod handles;
pub mod jobs;
pub mod links;
pub mod log;
pub mod run;
pub mod steps;
pub mod tx;

use crate::sandbox::engine::bindings::jobhost::job::types;
use crate::sandbox::engine::state::GuestState;

impl types::Host for GuestState {}

#[cfg(test)]
pub(crate) mod tests {
    use crate::sandbox::engine::bindings::jobhost::job::types::HostError;

    /// The reason of an `invalid` refusal, for the capabilities' tests.
    pub(crate) fn reason<T: std::fmt::Debug>(result: Result<T, HostError>) -> String {
        match result {
            Err(HostError::Invalid(reason)) => reason,
            other => panic!("expected a refusal, got {other:?}"),
        }
    }
}
