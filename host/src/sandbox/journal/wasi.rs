//! The nondeterminism WASI gives a guest, through the journal: the wall and monotonic
//! clocks and the two random generators. Recording, each reading is the live one, kept;
//! replaying, each is the journal's. (The environment, the arguments and stdin are empty
//! by construction, `engine::state`, and the insecure seed is the journal header's.)

use super::Journal;
use rand::{Rng as _, SeedableRng};
use std::convert::Infallible;
use std::time::Duration;
use wasmtime_wasi::{HostMonotonicClock, HostWallClock};

pub struct WallClock {
    live: wasmtime_wasi::clocks::WallClock,
    journal: Journal,
}

impl WallClock {
    pub fn new(journal: Journal) -> WallClock {
        WallClock {
            live: wasmtime_wasi::clocks::WallClock,
            journal,
        }
    }
}

impl HostWallClock for WallClock {
    fn resolution(&self) -> Duration {
        self.journal
            .value("wall-clock.resolution", &(), || self.live.resolution())
            .unwrap_or(Duration::from_nanos(1))
    }

    fn now(&self) -> Duration {
        self.journal
            .value("wall-clock.now", &(), || self.live.now())
            .unwrap_or_default()
    }
}

pub struct MonotonicClock {
    live: wasmtime_wasi::clocks::MonotonicClock,
    journal: Journal,
}

impl MonotonicClock {
    pub fn new(journal: Journal) -> MonotonicClock {
        MonotonicClock {
            live: wasmtime_wasi::clocks::MonotonicClock::default(),
            journal,
        }
    }
}

impl HostMonotonicClock for MonotonicClock {
    fn resolution(&self) -> u64 {
        self.journal
            .value("monotonic-clock.resolution", &(), || self.live.resolution())
            .unwrap_or(1)
    }

    fn now(&self) -> u64 {
        self.journal
            .value("monotonic-clock.now", &(), || self.live.now())
            .unwrap_or_default()
    }
}

/// `wasi:random/random` (`secure`) or `wasi:random/insecure`: a generator seeded from the
/// operating system, every draw journaled.
pub struct Random {
    live: rand::rngs::StdRng,
    journal: Journal,
    call: &'static str,
}

impl Random {
    pub fn secure(journal: Journal) -> Random {
        Random::new(journal, "random.bytes")
    }

    pub fn insecure(journal: Journal) -> Random {
        Random::new(journal, "insecure.bytes")
    }

    fn new(journal: Journal, call: &'static str) -> Random {
        Random {
            live: rand::rngs::StdRng::from_os_rng(),
            journal,
            call,
        }
    }
}

impl rand_core::TryRng for Random {
    type Error = Infallible;

    fn try_next_u32(&mut self) -> Result<u32, Infallible> {
        let mut bytes = [0; 4];
        self.try_fill_bytes(&mut bytes)?;
        Ok(u32::from_le_bytes(bytes))
    }

    fn try_next_u64(&mut self) -> Result<u64, Infallible> {
        let mut bytes = [0; 8];
        self.try_fill_bytes(&mut bytes)?;
        Ok(u64::from_le_bytes(bytes))
    }

    fn try_fill_bytes(&mut self, dst: &mut [u8]) -> Result<(), Infallible> {
        let live = &mut self.live;
        let drawn: Option<Vec<u8>> = self.journal.value(self.call, &(dst.len() as u64), || {
            let mut bytes = vec![0; dst.len()];
            live.fill(&mut bytes[..]);
            bytes
        });
        match drawn {
            Some(bytes) if bytes.len() == dst.len() => dst.copy_from_slice(&bytes),
            // The replay stopped: zeros, and the attempt stops at its next tick.
            _ => dst.fill(0),
        }
        Ok(())
    }
}

/// The seed `wasi:random/insecure-seed` answers, for a new recording.
pub fn fresh_seed() -> u128 {
    rand::random()
}
