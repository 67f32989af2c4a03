//! The nondeterminism WASI gives a guest, through the journal: the wall and monotonic
//! clocks and the two random generators. Recording, each reading is the live one, kept;
//! replaying, each is the journal's. (The environment, the arguments and stdin are empty
//! by construction, `engine::state`, and the insecure seed is the journal header's.)

use super::Journal;
use rand_chacha::rand_core::{RngCore as _, SeedableRng as _};
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

/// `wasi:random/random` (`secure`) or `wasi:random/insecure`: a ChaCha20 generator whose
/// 32-byte seed, drawn from the operating system at the first draw, is the one journal
/// entry it makes (`random.seed`, `insecure.seed`); every draw after is the generator's,
/// not a host call of its own, and a replay seeded from the journal draws the same bytes.
/// A language runtime draws thousands of times as it starts (CPython: about 2 500 draws
/// of 4 bytes), each a journaled call when every draw was kept. A journal kept that way
/// (`random.bytes`, `insecure.bytes`, one per draw) still replays draw by draw.
pub struct Random {
    journal: Journal,
    /// The journal's entry for the seed, and for one draw in a journal kept per draw.
    seed_call: &'static str,
    draw_call: &'static str,
    draws: Draws,
}

enum Draws {
    /// Nothing drawn yet.
    Unseeded,
    Seeded(Box<rand_chacha::ChaCha20Rng>),
    /// Replaying a journal that kept every draw.
    EachJournaled,
}

impl Random {
    pub fn secure(journal: Journal) -> Random {
        Random::new(journal, "random.seed", "random.bytes")
    }

    pub fn insecure(journal: Journal) -> Random {
        Random::new(journal, "insecure.seed", "insecure.bytes")
    }

    fn new(journal: Journal, seed_call: &'static str, draw_call: &'static str) -> Random {
        Random {
            journal,
            seed_call,
            draw_call,
            draws: Draws::Unseeded,
        }
    }

    /// The generator, seeded at the first draw: live (and journaled) when recording or
    /// off, the journal's when replaying; `None` once a replay stopped.
    fn seeded(&mut self) -> Option<&mut Draws> {
        if let Draws::Unseeded = self.draws {
            if self.journal.replays_next(self.draw_call) {
                self.draws = Draws::EachJournaled;
            } else {
                let seed: [u8; 32] = self.journal.value(self.seed_call, &(), rand::random)?;
                self.draws = Draws::Seeded(Box::new(rand_chacha::ChaCha20Rng::from_seed(seed)));
            }
        }
        Some(&mut self.draws)
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
        let (journal, draw_call) = (self.journal.clone(), self.draw_call);
        match self.seeded() {
            Some(Draws::Seeded(generator)) => generator.fill_bytes(dst),
            Some(Draws::EachJournaled) => {
                let drawn: Option<Vec<u8>> =
                    journal.value(draw_call, &(dst.len() as u64), || vec![0; dst.len()]);
                match drawn {
                    Some(bytes) if bytes.len() == dst.len() => dst.copy_from_slice(&bytes),
                    // The replay stopped: zeros, and the attempt stops at its next tick.
                    _ => dst.fill(0),
                }
            }
            // The replay stopped: zeros, and the attempt stops at its next tick.
            Some(Draws::Unseeded) | None => dst.fill(0),
        }
        Ok(())
    }
}

/// The seed `wasi:random/insecure-seed` answers, for a new recording.
pub fn fresh_seed() -> u128 {
    rand::random()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand_core::TryRng as _;

    /// Draws of 4, 8 and 100 bytes, in that order, as a runtime's start makes them.
    fn draws(random: &mut Random) -> Vec<Vec<u8>> {
        [4, 8, 100]
            .into_iter()
            .map(|n| {
                let mut bytes = vec![0; n];
                random.try_fill_bytes(&mut bytes).unwrap();
                bytes
            })
            .collect()
    }

    #[test]
    fn a_generator_journals_its_seed_once_and_a_replay_draws_the_same_bytes() {
        let journal = Journal::recording(crate::rules::record::DEFAULT_LIMIT);
        let mut secure = Random::secure(journal.clone());
        let drawn = draws(&mut secure);
        assert_ne!(drawn[2], vec![0; 100], "live bytes, not zeros");
        let calls = journal.take().calls;
        let names: Vec<&str> = calls.iter().map(|c| c.call.as_str()).collect();
        assert_eq!(names, ["random.seed"], "one entry for every draw");

        let replay = Journal::replaying(calls, false);
        assert_eq!(draws(&mut Random::secure(replay.clone())), drawn);
        assert_eq!(replay.stopped(), None);
    }

    #[test]
    fn a_journal_that_kept_each_draw_replays_draw_by_draw() {
        // As hosts before the seeded generator kept them: one call per draw.
        let journal = Journal::recording(crate::rules::record::DEFAULT_LIMIT);
        let kept: Vec<Vec<u8>> = vec![vec![1; 4], vec![2; 8], vec![3; 100]];
        for bytes in &kept {
            journal.value("insecure.bytes", &(bytes.len() as u64), || bytes.clone());
        }
        let replay = Journal::replaying(journal.take().calls, false);
        assert_eq!(draws(&mut Random::insecure(replay.clone())), kept);
        assert_eq!(replay.stopped(), None);
    }

    #[test]
    fn a_replay_whose_journal_has_no_seed_stops_and_draws_zeros() {
        let replay = Journal::replaying(Vec::new(), false);
        let drawn = draws(&mut Random::secure(replay.clone()));
        assert!(drawn.iter().all(|d| d.iter().all(|b| *b == 0)));
        assert!(replay.stopped().is_some());
    }
}
