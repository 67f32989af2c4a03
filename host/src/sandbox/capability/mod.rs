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
use wasmtime::component::{HasSelf, Linker};

impl types::Host for GuestState {}

/// Links each capability's host impl, one line each, through the projection of the
/// attempt's state it works on: `log` its log alone; `links` and `run` their own state
/// plus the attempt's shared piece (`Attempt`: table, signals, journal, open
/// transaction); `db`, `files`, `steps` and `jobs` still the whole state, since they
/// reach `db`'s session and `files`' pending writes when a transaction ends.
pub fn add_to_linker(l: &mut Linker<GuestState>) -> wasmtime::Result<()> {
    use crate::sandbox::engine::bindings::jobhost::job;
    job::types::add_to_linker::<_, HasSelf<_>>(l, |s| s)?;
    job::log::add_to_linker::<_, log::HasLog>(l, |s| &mut s.log)?;
    job::db::add_to_linker::<_, HasSelf<_>>(l, |s| s)?;
    job::files::add_to_linker::<_, HasSelf<_>>(l, |s| s)?;
    job::links::add_to_linker::<_, links::HasLinks>(l, |s| s.links_view())?;
    job::steps::add_to_linker::<_, HasSelf<_>>(l, |s| s)?;
    job::run::add_to_linker::<_, run::HasRun>(l, |s| s.run_view())?;
    job::jobs::add_to_linker::<_, HasSelf<_>>(l, |s| s)?;
    Ok(())
}

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
