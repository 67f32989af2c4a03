//! A journal as it is kept and exported: one JSON document holding what the attempt was
//! given (its context, limits and seed), its host calls in order, and how it ended. The
//! same text is the database's row, `host runs export`'s output and `host replay
//! --from`'s input, so a journal replays the same wherever it is.

use super::Call;
use crate::engine::attempt::PassContext;
use serde::{Deserialize, Serialize};

/// What a journal file says it is.
pub const FORMAT: &str = "jobhost-journal";
/// The layout's version: a host reads only its own.
pub const VERSION: u32 = 1;
/// The largest journal file a host reads: the largest cap (which counts calls as they are
/// kept), with room for the header (the handler's context: a payload, a cursor).
pub const MAX_FILE_BYTES: u64 = super::MAX_LIMIT + (8 << 20);

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JournalFile {
    pub format: String,
    pub version: u32,
    pub job: String,
    pub tenant: String,
    pub run_id: String,
    /// The attempt's number in the run (`host runs show`'s, `--attempt`).
    pub seq: i64,
    /// The component that ran: a replay refuses another unless told to use it.
    pub component: String,
    /// What the handler was called with.
    pub context: PassContext,
    pub limits: Limits,
    /// `wasi:random/insecure-seed`'s answer (decimal: JSON numbers stop at 2^53).
    pub insecure_seed: String,
    /// The environment, arguments and stdin the guest had: empty, said so.
    pub environment: Vec<(String, String)>,
    pub arguments: Vec<String>,
    pub stdin: String,
    /// The journal passed its cap: calls after the last kept were not recorded, and a
    /// replay stops there.
    pub truncated: bool,
    pub calls: Vec<Call>,
    pub ending: Ending,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct Limits {
    pub memory: u64,
    pub fuel: Option<u64>,
    pub timeout_ms: u64,
    /// Whether the recording host metered fuel (`--fuel-metering`): unmetered, the
    /// attempt's `fuel_used` is 0 and says nothing.
    #[serde(default = "metered")]
    pub fuel_metered: bool,
}

fn metered() -> bool {
    true
}

/// How the attempt ended, as recorded: what a replay is compared with.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Ending {
    /// `succeeded`, `failed` or `cancelled`.
    pub status: String,
    pub outcome: Option<String>,
    pub code: Option<String>,
    pub fuel_used: u64,
    /// The SHA-256 of the attempt's log: a replay says whether its log is the same.
    pub log_digest: String,
}

/// Why a journal file was refused.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    #[error("the journal is larger than {MAX_FILE_BYTES} bytes")]
    TooLarge,
    #[error("this is not a jobhost journal (it is not the JSON `host runs export` writes)")]
    NotJournal,
    #[error("the journal is of version {0}; this host reads version {VERSION}")]
    Version(u32),
    #[error("the journal's memory cap is out of bounds: a job's is 1 MiB to 4 GiB")]
    Limits,
    #[error(
        "the journal is damaged: it says it is a journal of this version, but it does not read (line {line}, column {column})"
    )]
    Damaged { line: usize, column: usize },
    #[error("the journal's insecure_seed is not a number")]
    Seed,
}

impl JournalFile {
    /// Reads a journal, refusing anything that is not one of this host's.
    pub fn parse(text: &[u8]) -> Result<JournalFile, FileError> {
        if text.len() as u64 > MAX_FILE_BYTES {
            return Err(FileError::TooLarge);
        }
        #[derive(Deserialize)]
        struct Head {
            format: String,
            version: u32,
        }
        let head: Head = serde_json::from_slice(text).map_err(|_| FileError::NotJournal)?;
        if head.format != FORMAT {
            return Err(FileError::NotJournal);
        }
        if head.version != VERSION {
            return Err(FileError::Version(head.version));
        }
        let journal: JournalFile =
            serde_json::from_slice(text).map_err(|e| FileError::Damaged {
                line: e.line(),
                column: e.column(),
            })?;
        if journal.insecure_seed.parse::<u128>().is_err() {
            return Err(FileError::Seed);
        }
        // A journal file is input from anywhere: the sandbox it replays in is sized by it.
        let memory = journal.limits.memory;
        if !(1 << 20..=crate::engine::limits::MAX_JOB_MEMORY).contains(&memory) {
            return Err(FileError::Limits);
        }
        Ok(journal)
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a journal serialises")
    }

    /// The insecure seed (`parse` refused a journal whose seed is not a number).
    pub fn seed(&self) -> u128 {
        self.insecure_seed.parse().unwrap_or_default()
    }

    /// Whether every call the attempt made is in the journal.
    pub fn replayable(&self) -> bool {
        !self.truncated
    }
}

/// The SHA-256 of a log, hex.
pub fn log_digest(log: &str) -> String {
    use sha2::Digest as _;
    hex::encode(sha2::Sha256::digest(log.as_bytes()))
}

/// An answer's bytes as base64 text in JSON.
pub(crate) mod base64_opt {
    use base64::Engine as _;
    use base64::engine::general_purpose::STANDARD;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(bytes: &Option<Vec<u8>>, s: S) -> Result<S::Ok, S::Error> {
        match bytes {
            Some(bytes) => s.serialize_some(&STANDARD.encode(bytes)),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<u8>>, D::Error> {
        Option::<String>::deserialize(d)?
            .map(|text| STANDARD.decode(text).map_err(serde::de::Error::custom))
            .transpose()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_not_a_journal_of_this_version_is_refused_in_words() {
        assert!(matches!(
            JournalFile::parse(b"\x00\xff"),
            Err(FileError::NotJournal)
        ));
        assert!(matches!(
            JournalFile::parse(br#"{"format":"other","version":1}"#),
            Err(FileError::NotJournal)
        ));
        assert!(matches!(
            JournalFile::parse(br#"{"format":"jobhost-journal","version":9}"#),
            Err(FileError::Version(9))
        ));
        assert!(matches!(
            JournalFile::parse(br#"{"format":"jobhost-journal","version":1}"#),
            Err(FileError::Damaged { line: 1, .. })
        ));
    }
}
