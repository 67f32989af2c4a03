//! Host implementations of the WIT capability interfaces. Each one only translates: WIT
//! values to the port's, the port's results back, and failures to fixed `host-error`
//! codes (noting them in the attempt's signals). Each is on a [`view::View`] of its own state and
//! the attempt's shared piece; this file registers them: a capability's field in
//! [`Capabilities`], its `for_attempt` line, its line in [`add_to_linker`].

pub mod context;
pub mod db;
pub mod files;
#[cfg(test)]
pub(crate) mod fixture;
pub mod handles;
pub mod jobs;
pub mod links;
pub mod log;
pub mod run;
pub mod shared;
pub mod steps;
pub mod tx;
pub mod view;

use crate::sandbox::engine::bindings::jobhost::job;
use crate::sandbox::engine::output::AttemptLog;
use crate::sandbox::engine::state::GuestState;
use context::AttemptContext;
use db::{DbCapability, DbSession};
use files::{FilesCapability, FilesSession};
use jobs::{JobsCapability, JobsSession};
use links::{LinksCapability, LinksSession};
use run::{RunCapability, RunSession};
use shared::Attempt;
use steps::{StepsCapability, StepsSession};
use view::Has;
use wasmtime::component::{HasSelf, Linker};

/// Each capability's per-attempt state: what one attempt was given.
pub struct Capabilities {
    pub db: DbCapability,
    pub files: FilesCapability,
    pub links: LinksCapability,
    pub steps: StepsCapability,
    pub jobs: JobsCapability,
    pub run: RunCapability,
}

impl Capabilities {
    /// No capability granted (each session `None`): start from this and set the ones a
    /// job was given.
    pub fn none() -> Capabilities {
        Capabilities {
            db: DbCapability::new(None),
            files: FilesCapability::new(None),
            links: LinksCapability::new(None),
            steps: StepsCapability::new(None),
            jobs: JobsCapability::new(None),
            run: RunCapability::new(None),
        }
    }

    /// The capabilities of `cx`'s attempt: each builds its session from the context in
    /// its own file (`None` where the job was not granted it).
    pub fn for_attempt(cx: &AttemptContext) -> Capabilities {
        Capabilities {
            db: DbCapability::new(DbSession::for_attempt(cx)),
            files: FilesCapability::new(FilesSession::for_attempt(cx)),
            links: LinksCapability::new(LinksSession::for_attempt(cx)),
            steps: StepsCapability::new(StepsSession::for_attempt(cx)),
            jobs: JobsCapability::new(JobsSession::for_attempt(cx)),
            run: RunCapability::new(RunSession::for_attempt(cx)),
        }
    }
}

impl job::types::Host for Attempt {}

/// Links each capability's host impl, one line each, through the projection of the
/// attempt's state it works on: `log` its log alone, every other capability a [`view::View`] of
/// its own state and the attempt's shared piece (`Attempt`: table, signals, journal, the
/// guest's transaction), so none reaches another's state.
pub fn add_to_linker(l: &mut Linker<GuestState>) -> wasmtime::Result<()> {
    job::types::add_to_linker::<_, HasSelf<Attempt>>(l, |s| &mut s.attempt)?;
    job::log::add_to_linker::<_, HasSelf<AttemptLog>>(l, |s| &mut s.log)?;
    job::db::add_to_linker::<_, Has<DbCapability>>(l, |s| s.view(|c| &mut c.db))?;
    job::files::add_to_linker::<_, Has<FilesCapability>>(l, |s| s.view(|c| &mut c.files))?;
    job::links::add_to_linker::<_, Has<LinksCapability>>(l, |s| s.view(|c| &mut c.links))?;
    job::steps::add_to_linker::<_, Has<StepsCapability>>(l, |s| s.view(|c| &mut c.steps))?;
    job::run::add_to_linker::<_, Has<RunCapability>>(l, |s| s.view(|c| &mut c.run))?;
    job::jobs::add_to_linker::<_, Has<JobsCapability>>(l, |s| s.view(|c| &mut c.jobs))?;
    Ok(())
}
