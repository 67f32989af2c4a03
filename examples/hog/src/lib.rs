//! Allocates without bound: the host's memory cap must stop it.

use jobhost_guest::{Context, Job, JobError, Outcome, log};

struct Hog;

impl Job for Hog {
    type Payload = serde::de::IgnoredAny;

    fn run(_ctx: Context<Self::Payload>) -> Result<Outcome, JobError> {
        log::info("allocating");
        let mut chunks: Vec<Vec<u8>> = Vec::new();
        loop {
            // Touch every chunk so the allocation is real.
            chunks.push(std::hint::black_box(vec![0xA5; 1 << 20]));
        }
    }
}

jobhost_guest::export_job!(Hog);
