//! A case's `files`: objects placed in collections before the run, and objects that must
//! (or must not) be there afterwards. Each is named `"collection/name"`.
//!
//! ```toml
//! [case.files]                                   # placed before the run
//! "inbox/a.txt" = "hello"                        # text
//! "inbox/b.bin" = { base64 = "AAEC" }            # or bytes, or `path = "fixtures/c.png"`
//! [case.expect.files]                            # held afterwards
//! "outbox/a.txt" = "HELLO"                       # exactly this text
//! "outbox/b.bin" = { sha256 = "…", size = 3 }    # or its digest and size
//! "inbox/a.txt" = { absent = true }              # or gone
//! ```
//!
//! In a case every collection lives in the case's temporary home, whatever the manifest
//! says: a test never reads or writes the operator's storage.

use super::Mismatch;
use base64::Engine as _;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::Path;

/// Most bytes of an expected object read back to compare its text.
pub const MAX_COMPARED: u64 = 1 << 20;

/// An object placed before the run.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum Placed {
    Text(String),
    Given(PlacedFrom),
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlacedFrom {
    text: Option<String>,
    base64: Option<String>,
    /// A file, relative to the cases file.
    path: Option<std::path::PathBuf>,
}

/// What must hold of an object afterwards.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum ExpectedFile {
    Text(String),
    Described(Described),
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Described {
    text: Option<String>,
    /// Hex, lower-case.
    sha256: Option<String>,
    size: Option<u64>,
    #[serde(default)]
    absent: bool,
}

/// An object found afterwards: its size, digest, and up to [`MAX_COMPARED`] bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    pub size: u64,
    pub sha256: String,
    pub head: Vec<u8>,
}

/// `"collection/name"` split in two.
pub fn split(key: &str) -> Result<(&str, &str), String> {
    match key.split_once('/') {
        Some((collection, name)) if !collection.is_empty() && !name.is_empty() => {
            Ok((collection, name))
        }
        _ => Err(format!(
            "{key:?} is not an object: write it \"collection/name\""
        )),
    }
}

impl Placed {
    /// The object's bytes; `dir` is the cases file's directory.
    pub fn bytes(&self, dir: &Path) -> Result<Vec<u8>, String> {
        let from = match self {
            Placed::Text(text) => return Ok(text.clone().into_bytes()),
            Placed::Given(from) => from,
        };
        match (&from.text, &from.base64, &from.path) {
            (Some(text), None, None) => Ok(text.clone().into_bytes()),
            (None, Some(encoded), None) => base64::engine::general_purpose::STANDARD
                .decode(encoded)
                .map_err(|_| "`base64` is not valid base64".to_string()),
            (None, None, Some(path)) => std::fs::read(dir.join(path))
                .map_err(|e| format!("cannot read {}: {e}", path.display())),
            _ => Err("give one of `text`, `base64` or `path`".into()),
        }
    }
}

impl ExpectedFile {
    pub fn validate(&self) -> Result<(), String> {
        if let ExpectedFile::Described(d) = self {
            let described = d.text.is_some() || d.sha256.is_some() || d.size.is_some();
            if d.absent && described {
                return Err("an absent object has no text, digest or size".into());
            }
            if !d.absent && !described {
                return Err("give `text`, `sha256`, `size` or `absent = true`".into());
            }
        }
        Ok(())
    }
}

/// Every way the objects `found` differ from `expected` (both keyed `"collection/name"`).
pub fn check(
    expected: &BTreeMap<String, ExpectedFile>,
    found: &BTreeMap<String, Result<Option<Found>, String>>,
) -> Vec<Mismatch> {
    let mut mismatches = Vec::new();
    for (key, want) in expected {
        let mut differ = |part: &str, expected: String, actual: String| {
            if expected != actual {
                mismatches.push(Mismatch {
                    what: format!("file {key}{part}"),
                    expected,
                    actual,
                });
            }
        };
        let described = match want {
            ExpectedFile::Text(text) => &Described {
                text: Some(text.clone()),
                ..Described::default()
            },
            ExpectedFile::Described(d) => d,
        };
        let object = match found.get(key) {
            Some(Ok(object)) => object.as_ref(),
            Some(Err(error)) => {
                differ("", "readable".into(), format!("cannot read it: {error}"));
                continue;
            }
            None => None,
        };
        let Some(object) = object else {
            if !described.absent {
                differ("", "present".into(), "(absent)".into());
            }
            continue;
        };
        if described.absent {
            differ(
                "",
                "(absent)".into(),
                format!("present, {} bytes", object.size),
            );
            continue;
        }
        if let Some(size) = described.size {
            differ(" size", size.to_string(), object.size.to_string());
        }
        if let Some(sha256) = &described.sha256 {
            differ(
                " sha256",
                sha256.to_ascii_lowercase(),
                object.sha256.clone(),
            );
        }
        if let Some(text) = &described.text {
            let actual = if object.size > MAX_COMPARED {
                format!("({} bytes, too large to compare as text)", object.size)
            } else {
                String::from_utf8(object.head.clone())
                    .unwrap_or_else(|_| format!("({} bytes, not UTF-8)", object.size))
            };
            differ(" text", text.clone(), actual);
        }
    }
    mismatches
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placed_objects_are_text_bytes_or_a_file() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("f.bin"), [0u8, 1, 2]).unwrap();
        let placed: BTreeMap<String, Placed> = toml::from_str(
            "\"c/a\" = \"hi\"\n\"c/b\" = { base64 = \"AAEC\" }\n\"c/c\" = { path = \"f.bin\" }\n\"c/d\" = { base64 = \"!\" }\n\"c/e\" = {}",
        )
        .unwrap();
        let bytes = |key: &str| placed[key].bytes(dir.path());
        assert_eq!(bytes("c/a").unwrap(), b"hi");
        assert_eq!(bytes("c/b").unwrap(), [0, 1, 2]);
        assert_eq!(bytes("c/c").unwrap(), [0, 1, 2]);
        assert!(bytes("c/d").unwrap_err().contains("base64"));
        assert!(bytes("c/e").unwrap_err().contains("give one of"));
        assert_eq!(split("inbox/a/b.txt").unwrap(), ("inbox", "a/b.txt"));
        assert!(split("inbox").is_err());
        assert!(split("/a").is_err());
    }

    #[test]
    fn objects_found_are_held_against_the_case() {
        let expected: BTreeMap<String, ExpectedFile> = toml::from_str(
            "\"o/a\" = \"HI\"\n\"o/b\" = { size = 3, sha256 = \"AB\" }\n\"o/gone\" = { absent = true }\n\"o/missing\" = \"x\"",
        )
        .unwrap();
        assert!(expected.values().all(|e| e.validate().is_ok()));
        let object = |bytes: &[u8], sha: &str| {
            Ok(Some(Found {
                size: bytes.len() as u64,
                sha256: sha.into(),
                head: bytes.to_vec(),
            }))
        };
        let found = BTreeMap::from([
            ("o/a".to_string(), object(b"HI", "x")),
            ("o/b".to_string(), object(b"abc", "ab")),
            ("o/gone".to_string(), Ok(None)),
        ]);
        let what: Vec<String> = check(&expected, &found)
            .into_iter()
            .map(|m| format!("{}: {} / {}", m.what, m.expected, m.actual))
            .collect();
        assert_eq!(what, ["file o/missing: present / (absent)"]);
        let found = BTreeMap::from([
            ("o/a".to_string(), object(&[0xff], "x")),
            ("o/b".to_string(), object(b"ab", "cd")),
            ("o/gone".to_string(), object(b"", "e3")),
            ("o/missing".to_string(), Err("no".into())),
        ]);
        let what: Vec<String> = check(&expected, &found)
            .into_iter()
            .map(|m| format!("{}: {} / {}", m.what, m.expected, m.actual))
            .collect();
        assert_eq!(
            what,
            [
                "file o/a text: HI / (1 bytes, not UTF-8)",
                "file o/b size: 3 / 2",
                "file o/b sha256: ab / cd",
                "file o/gone: (absent) / present, 0 bytes",
                "file o/missing: readable / cannot read it: no",
            ]
        );
        let both: ExpectedFile =
            toml::from_str::<BTreeMap<String, ExpectedFile>>("k = { absent = true, size = 1 }")
                .unwrap()["k"]
                .clone();
        assert!(both.validate().is_err());
    }
}
