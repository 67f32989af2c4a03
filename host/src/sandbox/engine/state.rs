//! What one attempt's wasmtime store holds: WASI, the memory limiter, the log, each
//! capability's state and the piece they share (`capability/shared.rs`).

use super::limits::MemoryLimiter;
use super::output::AttemptLog;
use crate::sandbox::capability::Capabilities;
use crate::sandbox::capability::shared::Attempt;
use crate::sandbox::capability::view::View;
use crate::sandbox::journal::{Journal, wasi};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

/// Most random bytes one `get-random-bytes` call may ask for (more traps): the host fills
/// its buffer before the guest's allocation of it can fail, so WASI's default of 64 MiB
/// let a guest of any size have the host make 64 MiB per call.
pub const MAX_RANDOM_BYTES: u64 = 1 << 20;

pub struct GuestState {
    wasi: WasiCtx,
    pub(crate) limiter: MemoryLimiter,
    pub(crate) log: AttemptLog,
    pub(crate) capabilities: Capabilities,
    pub(crate) attempt: Attempt,
}

impl GuestState {
    /// A state whose host calls are not journaled.
    pub fn new(memory_cap: u64, log: AttemptLog, capabilities: Capabilities) -> Self {
        let seed = crate::sandbox::journal::wasi::fresh_seed();
        GuestState::journaled(memory_cap, log, capabilities, Journal::off(), seed)
    }

    /// `journal` records the attempt's host calls (or answers them, in a replay);
    /// `insecure_seed` is what `wasi:random/insecure-seed` answers.
    pub fn journaled(
        memory_cap: u64,
        log: AttemptLog,
        capabilities: Capabilities,
        journal: Journal,
        insecure_seed: u128,
    ) -> Self {
        // No preopens, no environment, no arguments, no network (no TCP, UDP or name
        // lookup: said here rather than left to the defaults): stdout and stderr go to the
        // attempt's log; stdin is empty. So the clocks and the generators are the only
        // inputs WASI gives, and they go through the journal.
        let wasi = WasiCtx::builder()
            .stdout(log.clone())
            .stderr(log.clone())
            .max_random_size(MAX_RANDOM_BYTES)
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false)
            .wall_clock(wasi::WallClock::new(journal.clone()))
            .monotonic_clock(wasi::MonotonicClock::new(journal.clone()))
            .secure_random(wasi::Random::secure(journal.clone()))
            .insecure_random(wasi::Random::insecure(journal.clone()))
            .insecure_random_seed(insecure_seed)
            .build();
        let attempt = Attempt::new(journal, capabilities.db.grant());
        GuestState {
            wasi,
            limiter: MemoryLimiter::new(memory_cap),
            log,
            capabilities,
            attempt,
        }
    }

    /// One capability's view: its state, picked from the capabilities, and the
    /// attempt's shared piece (how `capability::add_to_linker` projects each).
    pub fn view<T>(&mut self, pick: impl FnOnce(&mut Capabilities) -> &mut T) -> View<'_, T> {
        View::new(pick(&mut self.capabilities), &mut self.attempt)
    }
}

impl WasiView for GuestState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.attempt.table,
        }
    }
}
