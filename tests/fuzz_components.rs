//! Component loading under mutation: every mutant of a real guest either loads or is
//! refused with a one-line error — never a panic, never a multi-line message. Seeds are
//! the example guests and `tests/fuzz/components/`; a mutant that panics is saved there
//! for the next run to replay. `JOBHOST_FUZZ_SECS` bounds the run (20 s by default) and
//! `JOBHOST_FUZZ_SEED` replays one.

use crate::common;

use jobhost::rules::grants::Grants;
use jobhost::sandbox::engine::{Engine, EngineSettings};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

fn corpus() -> PathBuf {
    common::workspace().join("tests/fuzz/components")
}

fn seeds() -> Vec<Vec<u8>> {
    let mut seeds: Vec<Vec<u8>> = ["hello", "ledger", "noop", "future", "adversary"]
        .iter()
        .map(|g| std::fs::read(common::guest(g)).unwrap())
        .collect();
    seeds
        .push(std::fs::read(common::workspace().join("tests/prebuilt/ledger-0.1.0.wasm")).unwrap());
    for entry in std::fs::read_dir(corpus()).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "wasm") {
            seeds.push(std::fs::read(path).unwrap());
        }
    }
    seeds
}

fn mutate(rng: &mut StdRng, bytes: &mut Vec<u8>, other: &[u8]) {
    for _ in 0..rng.random_range(1..=4) {
        if bytes.is_empty() {
            bytes.extend_from_slice(b"\0asm\r\0\x01\0");
        }
        let at = rng.random_range(0..bytes.len());
        match rng.random_range(0..7) {
            0 => bytes[at] ^= 1 << rng.random_range(0..8),
            1 => bytes[at] = [0, 0x7f, 0x80, 0xff, 0x40][rng.random_range(0..5)],
            2 => {
                let n = rng.random_range(1..16);
                let junk: Vec<u8> = (0..n).map(|_| rng.random()).collect();
                bytes.splice(at..at, junk);
            }
            3 => {
                let end = (at + rng.random_range(1..64)).min(bytes.len());
                bytes.drain(at..end);
            }
            4 => bytes.truncate(at.max(8)),
            5 if !other.is_empty() => {
                let from = rng.random_range(0..other.len());
                let end = (from + rng.random_range(1..256)).min(other.len());
                let end_at = (at + (end - from)).min(bytes.len());
                bytes.splice(at..end_at, other[from..end].iter().copied());
            }
            _ => {
                // A LEB128 length or index one larger or smaller.
                if bytes[at] < 0x7f {
                    bytes[at] = bytes[at].wrapping_add(if rng.random() { 1 } else { 0x7e });
                }
            }
        }
    }
}

#[test]
fn mutated_components_load_or_are_refused_in_one_line() {
    let budget = Duration::from_secs(
        std::env::var("JOBHOST_FUZZ_SECS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(20),
    );
    let seed: u64 = std::env::var("JOBHOST_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random);
    eprintln!("component fuzzing: JOBHOST_FUZZ_SEED={seed}");
    let mut rng = StdRng::seed_from_u64(seed);
    let engine = Engine::new(&EngineSettings::default()).unwrap();
    let mut grants = Grants::default();
    grants.add_flag("db.write=ledger").unwrap();
    let seeds = seeds();
    let started = Instant::now();
    let (mut tried, mut loaded) = (0u64, 0u64);
    while started.elapsed() < budget {
        let mut bytes = seeds[rng.random_range(0..seeds.len())].clone();
        let other = &seeds[rng.random_range(0..seeds.len())];
        mutate(&mut rng, &mut bytes, other);
        let name = Path::new("mutant.wasm");
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            engine.load_bytes(name, &bytes, &grants)
        }));
        tried += 1;
        match result {
            Ok(Ok(_)) => loaded += 1,
            Ok(Err(e)) => {
                let message = e.to_string();
                assert!(
                    !message.contains('\n') && message.starts_with("mutant.wasm"),
                    "not one line: {message:?}"
                );
            }
            Err(_) => {
                let digest = format!("{:x}", rand::random::<u64>());
                let kept = corpus().join(format!("crash-{digest}.wasm"));
                std::fs::write(&kept, &bytes).unwrap();
                panic!("loading a mutant panicked; kept as {}", kept.display());
            }
        }
    }
    eprintln!(
        "component fuzzing: {tried} mutants, {loaded} loaded, in {:?}",
        started.elapsed()
    );
    assert!(tried > 0);
}
