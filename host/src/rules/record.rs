//! What a job's attempts keep of their host calls, as its manifest declares it (`record`,
//! `record_limit`). The flight recorder (`sandbox::journal`) follows it; the rule is the
//! job's, so it sits with the job's definition.

use serde::{Deserialize, Serialize};

/// A job's journal cap when its manifest sets none.
pub const DEFAULT_LIMIT: u64 = 1 << 20;
/// The largest journal cap a job may set.
pub const MAX_LIMIT: u64 = 64 << 20;

/// Which attempts keep their journal (`record` in the manifest).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RecordPolicy {
    /// Attempts that failed, timed out or trapped.
    #[default]
    Failures,
    /// Every attempt.
    Always,
    /// None: nothing is recorded, not even in memory.
    Off,
}

impl RecordPolicy {
    pub fn parse(text: &str) -> Option<RecordPolicy> {
        match text {
            "failures" => Some(RecordPolicy::Failures),
            "always" => Some(RecordPolicy::Always),
            "off" => Some(RecordPolicy::Off),
            _ => None,
        }
    }

    /// Whether an attempt that ended so keeps its journal.
    pub fn keeps(self, failed: bool) -> bool {
        match self {
            RecordPolicy::Failures => failed,
            RecordPolicy::Always => true,
            RecordPolicy::Off => false,
        }
    }
}

/// What a job's attempts keep of their host calls (`record`, `record_limit`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Recorder {
    pub policy: RecordPolicy,
    /// The journal's cap in bytes: past it, the attempt's journal is kept truncated and
    /// is not replayable.
    pub limit: u64,
}

impl Default for Recorder {
    fn default() -> Self {
        Recorder {
            policy: RecordPolicy::Failures,
            limit: DEFAULT_LIMIT,
        }
    }
}

impl Recorder {
    /// The cap an attempt records up to, or `None` when it records nothing.
    pub fn cap(&self) -> Option<u64> {
        (self.policy != RecordPolicy::Off).then_some(self.limit)
    }
}
