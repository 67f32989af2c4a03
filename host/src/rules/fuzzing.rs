//! Shared by the property tests that fuzz the host's parsers: how many cases to run and
//! where their failures are kept. CI runs a bounded number; set `JOBHOST_FUZZ_CASES` for
//! a longer run. Failing inputs are written to `*.proptest-regressions` beside the source
//! and replayed first on every later run (the corpus lives in the repository).

use proptest::test_runner::{Config, FileFailurePersistence};

pub fn config(default_cases: u32) -> Config {
    let cases = std::env::var("JOBHOST_FUZZ_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(default_cases);
    Config {
        cases,
        failure_persistence: Some(Box::new(FileFailurePersistence::WithSource(
            "proptest-regressions",
        ))),
        ..Config::default()
    }
}

/// Text a person or a hostile input might type: printable, control, multi-byte and
/// unit-like fragments mixed.
pub fn text() -> impl proptest::strategy::Strategy<Value = String> {
    use proptest::prelude::*;
    prop_oneof![
        any::<String>(),
        "[0-9]{0,25}[a-zA-Z]{0,4}",
        "[ \\t0-9a-zA-Z.,=*/@#_-]{0,40}",
        "\\PC{0,20}",
    ]
}
