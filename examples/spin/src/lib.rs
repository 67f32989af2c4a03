//! Loops forever: the host must stop it at its deadline (or when its fuel runs out).

use jobhost_guest::{Context, Job, JobError, Outcome, log};

struct Spin;

impl Job for Spin {
    type Payload = serde::de::IgnoredAny;

    fn run(_ctx: Context<Self::Payload>) -> Result<Outcome, JobError> {
        log::info("spinning");
        let mut n: u64 = 0;
        loop {
            n = std::hint::black_box(n.wrapping_add(1));
        }
    }
}

jobhost_guest::export_job!(Spin);
