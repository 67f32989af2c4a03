//! Does nothing and succeeds: the baseline for benchmarks.

use jobhost_guest::{Context, Job, JobError, Outcome};

struct Noop;

impl Job for Noop {
    type Payload = serde::de::IgnoredAny;

    fn run(_ctx: Context<Self::Payload>) -> Result<Outcome, JobError> {
        Ok(Outcome::Done)
    }
}

jobhost_guest::export_job!(Noop);
