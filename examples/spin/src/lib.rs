//! Loops forever: the host must stop it at its deadline (or when its fuel runs out).
//!
//! Payload (optional): `{"iterations": n}` runs the same loop `n` times and succeeds, a
//! bounded amount of pure compute (the benchmarks measure what metering it costs). Any
//! other payload loops forever.

use jobhost_guest::{Context, Job, JobError, Outcome, log};

struct Spin;

impl Job for Spin {
    type Payload = serde_json::Value;

    fn run(ctx: Context<Self::Payload>) -> Result<Outcome, JobError> {
        let mut n: u64 = 0;
        if let Some(iterations) = ctx.payload.get("iterations").and_then(|v| v.as_u64()) {
            for _ in 0..iterations {
                n = std::hint::black_box(n.wrapping_add(1));
            }
            return Ok(Outcome::Done);
        }
        log::info("spinning");
        loop {
            n = std::hint::black_box(n.wrapping_add(1));
        }
    }
}

jobhost_guest::export_job!(Spin);
