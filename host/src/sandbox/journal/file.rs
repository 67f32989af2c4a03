//! A journal as it is kept and exported: one JSON document holding what the attempt was
//! given (its context, limits and seed), its host calls in order, and how it ended. The
//! same text is the database's row, `host runs export`'s output and `host replay
//! --from`'s input, so a journal replays the same wherever it is.

use super::Call;
use crate::store::{self, JournalRow, Store};
use serde::{Deserialize, Serialize};

/// What the handler is told about its run (a journal's header keeps it: its replay is
/// told the same).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PassContext {
    pub job: String,
    pub run_id: String,
    pub instance: String,
    pub tenant: String,
    pub attempt: u32,
    pub pass: u32,
    pub payload: String,
    pub cursor: Option<String>,
    pub counters: Vec<(String, i64)>,
}

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
    /// The HMAC-SHA256 (hex) of the rest of the journal under its installation's key
    /// ([`SealKey`]): what says the journal is as its host kept it. `None` in a journal
    /// kept before journals were sealed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seal: Option<String>,
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
    #[error(
        "the journal gives the guest an environment, arguments or stdin, which a host never does: it was edited"
    )]
    Environment,
}

/// Whether a journal is as its host kept it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Sealed {
    /// Its seal is this installation's over every field.
    Verified,
    /// Its seal was not checked: a file read without this installation's key.
    Unchecked,
    /// It has no seal: kept before journals were sealed, or no key could be had.
    Unsealed,
    /// Its seal is not this installation's over these fields: edited after it was kept,
    /// or kept by another installation.
    Broken,
}

/// An installation's key for sealing journals: 32 random bytes, kept in its database
/// (`jobhost_secrets`), so a journal handed back — by a tenant, from a file — cannot be
/// changed and still pass for one the host kept.
#[derive(Clone)]
pub struct SealKey([u8; 32]);

impl SealKey {
    pub fn random() -> SealKey {
        SealKey(rand::random())
    }

    pub fn from_hex(text: &str) -> Option<SealKey> {
        hex::decode(text).ok()?.try_into().ok().map(SealKey)
    }

    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }

    /// The installation's key, if a host has made it.
    pub async fn kept(store: &Store) -> store::Result<Option<SealKey>> {
        let text = store.journal_seal_key().await?;
        Ok(text.as_deref().and_then(SealKey::from_hex))
    }

    /// The installation's key, made if no host has made it yet: of two hosts making it at
    /// once, the first one kept is the one both use.
    pub async fn kept_or_made(store: &Store) -> store::Result<SealKey> {
        if let Some(key) = SealKey::kept(store).await? {
            return Ok(key);
        }
        let made = SealKey::random();
        store.keep_journal_seal_key(&made.to_hex()).await?;
        Ok(SealKey::kept(store).await?.unwrap_or(made))
    }

    /// The seal of `journal`: over its text as kept, without a seal.
    fn seal_of(&self, journal: &JournalFile) -> [u8; 32] {
        let unsealed = JournalFile {
            seal: None,
            ..journal.clone()
        };
        hmac_sha256(&self.0, unsealed.to_json().as_bytes())
    }

    /// Seals `journal` (replacing any seal it had).
    pub fn seal(&self, journal: &mut JournalFile) {
        journal.seal = Some(hex::encode(self.seal_of(journal)));
    }

    /// Whether `journal`'s seal is this key's over what it holds.
    pub fn check(&self, journal: &JournalFile) -> Sealed {
        let Some(seal) = &journal.seal else {
            return Sealed::Unsealed;
        };
        let Ok(seal) = hex::decode(seal) else {
            return Sealed::Broken;
        };
        let expected = self.seal_of(journal);
        // Compared in constant time: the seal is a secret's image.
        let differs = seal.len() != expected.len()
            || seal
                .iter()
                .zip(expected)
                .fold(0, |acc, (a, b)| acc | (a ^ b))
                != 0;
        if differs {
            Sealed::Broken
        } else {
            Sealed::Verified
        }
    }
}

impl std::fmt::Debug for SealKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SealKey(..)")
    }
}

/// HMAC-SHA256 (RFC 2104) with a key of one SHA-256 block's half: zero-padded to the block.
fn hmac_sha256(key: &[u8; 32], message: &[u8]) -> [u8; 32] {
    use sha2::{Digest as _, Sha256};
    let mut block = [0u8; 64];
    block[..32].copy_from_slice(key);
    let pad = |byte: u8| block.map(|b| b ^ byte);
    let inner = Sha256::new()
        .chain_update(pad(0x36))
        .chain_update(message)
        .finalize();
    Sha256::new()
        .chain_update(pad(0x5c))
        .chain_update(inner)
        .finalize()
        .into()
}

impl JournalFile {
    /// Keeps the journal as its attempt's row (replacing one its seq had).
    pub async fn keep(&self, store: &Store) -> store::Result<()> {
        let body = self.to_json();
        let row = JournalRow {
            run_id: &self.run_id,
            seq: self.seq,
            job: &self.job,
            tenant: &self.tenant,
            calls: self.calls.len(),
            replayable: self.replayable(),
            body: &body,
        };
        store.put_journal(&row).await
    }

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
        // Empty by construction: a replay gives the guest none, whatever the file says.
        if !(journal.environment.is_empty()
            && journal.arguments.is_empty()
            && journal.stdin.is_empty())
        {
            return Err(FileError::Environment);
        }
        // A journal file is input from anywhere: the sandbox it replays in is sized by it.
        let memory = journal.limits.memory;
        if !(1 << 20..=crate::sandbox::engine::limits::MAX_JOB_MEMORY).contains(&memory) {
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
    fn hmac_sha256_is_rfc_4231s() {
        // Test case 2: the key "Jefe", zero-padded as HMAC pads it.
        let mut key = [0u8; 32];
        key[..4].copy_from_slice(b"Jefe");
        assert_eq!(
            hex::encode(hmac_sha256(&key, b"what do ya want for nothing?")),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    const JOURNAL: &str = r#"{"format":"jobhost-journal","version":1,"job":"j","tenant":"t",
        "run_id":"r","seq":1,"component":"c","context":{"job":"j","run_id":"r",
        "instance":"default","tenant":"t","attempt":1,"pass":1,"payload":"{}","cursor":null,
        "counters":[]},"limits":{"memory":1048576,"fuel":null,"timeout_ms":1000},
        "insecure_seed":"7","environment":[],"arguments":[],"stdin":"","truncated":false,
        "calls":[],"ending":{"status":"failed","outcome":null,"code":"trap","fuel_used":5,
        "log_digest":""}}"#;

    #[test]
    fn a_seal_holds_for_its_key_and_the_journal_as_sealed_only() {
        let key = SealKey::random();
        let mut journal = JournalFile::parse(JOURNAL.as_bytes()).unwrap();
        assert_eq!(key.check(&journal), Sealed::Unsealed);
        key.seal(&mut journal);
        assert_eq!(key.check(&journal), Sealed::Verified);
        // Through its text, as exported and read back.
        let again = JournalFile::parse(journal.to_json().as_bytes()).unwrap();
        assert_eq!(key.check(&again), Sealed::Verified);
        assert_eq!(SealKey::random().check(&journal), Sealed::Broken);
        let mut edited = journal.clone();
        edited.limits.timeout_ms += 1;
        assert_eq!(key.check(&edited), Sealed::Broken);
        let mut edited = journal.clone();
        edited.ending.code = Some("timeout".into());
        assert_eq!(key.check(&edited), Sealed::Broken);
        let mut edited = journal;
        edited.seal = Some("not hex".into());
        assert_eq!(key.check(&edited), Sealed::Broken);
        let hex = key.to_hex();
        assert_eq!(SealKey::from_hex(&hex).map(|k| k.to_hex()), Some(hex));
        assert!(SealKey::from_hex("abcd").is_none());
    }

    #[test]
    fn a_journal_that_gives_the_guest_an_environment_is_refused() {
        for edit in [
            (r#""environment":[]"#, r#""environment":[["HOME","/"]]"#),
            (r#""arguments":[]"#, r#""arguments":["x"]"#),
            (r#""stdin":"""#, r#""stdin":"x""#),
        ] {
            let with = JOURNAL.replace(edit.0, edit.1);
            assert!(
                matches!(
                    JournalFile::parse(with.as_bytes()),
                    Err(FileError::Environment)
                ),
                "{}",
                edit.1
            );
        }
    }

    #[test]
    fn the_size_cap_in_the_security_doc_is_the_constants() {
        let doc = include_str!("../../../../docs/security.md");
        let said = format!("read to at most {} bytes", MAX_FILE_BYTES);
        assert!(doc.contains(&said), "docs/security.md should say {said:?}");
    }

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
