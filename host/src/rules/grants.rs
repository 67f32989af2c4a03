//! What a job may touch: deny-by-default capability grants.
//!
//! A job starts with nothing. Each capability it is given gets its own section, written
//! in a manifest (`[jobs.NAME.grants] db = { read = [...], write = [...] }`,
//! `files = { read = [...], write = [...], scan = [...] }`, `links = ["billing"]`,
//! `steps = true`) or as `--grant CAP.MODE=NAME` flags for ad-hoc runs (`db.write=ledger`,
//! `files.read=reports`, `links=billing`, `steps=on`). Table grants are enforced by the database itself (see
//! `store::sqlite_guest`), never by matching SQL text; collection and mount grants by the
//! capabilities, at every call.

use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum GrantError {
    #[error(
        "invalid grant {0:?}: use CAP.MODE=NAME[,NAME...], e.g. db.write=ledger, files.read=reports, links=billing, steps=on"
    )]
    Syntax(String),
    #[error("unknown capability {0:?} in grant (known: db, files, links, steps)")]
    UnknownCapability(String),
    #[error("unknown mode {mode:?} for capability {capability:?} (known: {known})")]
    UnknownMode {
        capability: String,
        mode: String,
        known: &'static str,
    },
    #[error("invalid table name {0:?}: use letters, digits and underscores")]
    TableName(String),
    #[error("table {0:?} belongs to the host and cannot be granted")]
    ReservedTable(String),
    #[error("invalid {kind} name {name:?}: use 1-63 lower-case letters, digits, '-' and '_'")]
    Name { kind: &'static str, name: String },
    #[error("invalid grants.jobs entry {0:?}: name a job, or an event as event:NAME")]
    Startable(String),
}

/// Table-name prefixes that belong to the host or the database engine.
const RESERVED_PREFIXES: [&str; 3] = ["jobhost_", "sqlite_", "pg_"];

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Grants {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub db: Option<DbGrant>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub files: Option<FilesGrant>,
    /// Link mounts the job may call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub links: Option<BTreeSet<String>>,
    /// Memoised steps, counters and a pass's end committed with its writes.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub steps: bool,
    /// Jobs the job may start (enqueue, kick) and, as `event:NAME`, events it may emit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jobs: Option<BTreeSet<String>>,
}

/// The prefix of an event in `grants.jobs`.
pub const EVENT_GRANT: &str = "event:";

impl Grants {
    /// Every capability, granting nothing within it: what a replay loads a component
    /// with, since each of its calls is answered from the journal and none is live.
    pub fn everything() -> Grants {
        Grants {
            db: Some(DbGrant::default()),
            files: Some(FilesGrant::default()),
            links: Some(BTreeSet::new()),
            steps: true,
            jobs: Some(BTreeSet::new()),
        }
    }

    /// Whether the job may start runs of `job`.
    pub fn may_start(&self, job: &str) -> bool {
        self.jobs.as_ref().is_some_and(|jobs| jobs.contains(job))
    }

    /// Whether the job may emit `event`.
    pub fn may_emit(&self, event: &str) -> bool {
        self.jobs
            .as_ref()
            .is_some_and(|jobs| jobs.contains(&format!("{EVENT_GRANT}{event}")))
    }

    /// The jobs (not events) the job may start.
    pub fn startable_jobs(&self) -> impl Iterator<Item = &str> {
        self.jobs
            .iter()
            .flatten()
            .filter(|name| !name.starts_with(EVENT_GRANT))
            .map(String::as_str)
    }
}

/// Tables a job may read, and tables it may write (writing implies reading).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DbGrant {
    #[serde(default)]
    pub read: BTreeSet<String>,
    #[serde(default)]
    pub write: BTreeSet<String>,
}

impl DbGrant {
    pub fn may_read(&self, table: &str) -> bool {
        let table = table.to_ascii_lowercase();
        self.read.contains(&table) || self.write.contains(&table)
    }

    pub fn may_write(&self, table: &str) -> bool {
        self.write.contains(&table.to_ascii_lowercase())
    }

    /// Every table the grant names, lower-cased.
    pub fn tables(&self) -> BTreeSet<&str> {
        self.read
            .iter()
            .chain(self.write.iter())
            .map(String::as_str)
            .collect()
    }
}

/// Collections a job may read, write (writing implies reading), and scan (see the
/// pending files of every tenant and give them a verdict).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FilesGrant {
    #[serde(default)]
    pub read: BTreeSet<String>,
    #[serde(default)]
    pub write: BTreeSet<String>,
    #[serde(default)]
    pub scan: BTreeSet<String>,
}

impl FilesGrant {
    pub fn may_read(&self, collection: &str) -> bool {
        self.read.contains(collection) || self.write.contains(collection)
    }

    pub fn may_write(&self, collection: &str) -> bool {
        self.write.contains(collection)
    }

    pub fn may_scan(&self, collection: &str) -> bool {
        self.scan.contains(collection)
    }

    /// Every collection the grant names.
    pub fn collections(&self) -> BTreeSet<&str> {
        self.read
            .iter()
            .chain(&self.write)
            .chain(&self.scan)
            .map(String::as_str)
            .collect()
    }
}

impl Grants {
    /// Adds one `CAP.MODE=NAME[,NAME...]` flag; a refused flag changes nothing.
    pub fn add_flag(&mut self, flag: &str) -> Result<(), GrantError> {
        let mut added = self.clone();
        added.add_flag_to(flag)?;
        *self = added;
        Ok(())
    }

    fn add_flag_to(&mut self, flag: &str) -> Result<(), GrantError> {
        let syntax = || GrantError::Syntax(flag.to_string());
        let (key, names) = flag.split_once('=').ok_or_else(syntax)?;
        let (capability, mode) = match key.split_once('.') {
            Some((capability, mode)) => (capability, Some(mode)),
            None => (key, None),
        };
        let names: Vec<String> = names.split(',').map(|n| n.trim().to_string()).collect();
        if names.iter().any(|n| n.is_empty()) {
            return Err(syntax());
        }
        let unknown_mode = |known| GrantError::UnknownMode {
            capability: capability.into(),
            mode: mode.unwrap_or_default().into(),
            known,
        };
        match (capability, mode) {
            ("db", Some(mode)) => {
                let db = self.db.get_or_insert_with(DbGrant::default);
                match mode {
                    "read" => db.read.extend(names),
                    "write" => db.write.extend(names),
                    _ => return Err(unknown_mode("read, write")),
                }
            }
            ("files", Some(mode)) => {
                let files = self.files.get_or_insert_with(FilesGrant::default);
                match mode {
                    "read" => files.read.extend(names),
                    "write" => files.write.extend(names),
                    "scan" => files.scan.extend(names),
                    _ => return Err(unknown_mode("read, write, scan")),
                }
            }
            ("links", None | Some("call")) => {
                self.links.get_or_insert_with(BTreeSet::new).extend(names)
            }
            ("links", Some(_)) => return Err(unknown_mode("call")),
            ("steps", None) => match names.as_slice() {
                [on] if on == "on" => self.steps = true,
                _ => return Err(syntax()),
            },
            ("steps", Some(_)) => return Err(syntax()),
            ("jobs", None) => self.jobs.get_or_insert_with(BTreeSet::new).extend(names),
            ("jobs", Some(_)) => return Err(syntax()),
            ("db" | "files", None) => return Err(syntax()),
            (other, _) => return Err(GrantError::UnknownCapability(other.into())),
        }
        self.normalize()
    }

    /// Lower-cases and validates every name; refuses host and engine tables. A refused
    /// grant is left as it was.
    pub fn normalize(&mut self) -> Result<(), GrantError> {
        let mut checked = self.clone();
        if let Some(db) = &mut checked.db {
            for set in [&mut db.read, &mut db.write] {
                *set = set
                    .iter()
                    .map(|t| validate_table(t))
                    .collect::<Result<_, _>>()?;
            }
        }
        if let Some(files) = &mut checked.files {
            for set in [&mut files.read, &mut files.write, &mut files.scan] {
                *set = set
                    .iter()
                    .map(|c| validate_name("collection", c))
                    .collect::<Result<_, _>>()?;
            }
        }
        if let Some(links) = &mut checked.links {
            *links = links
                .iter()
                .map(|m| validate_name("mount", m))
                .collect::<Result<_, _>>()?;
        }
        if let Some(jobs) = &checked.jobs {
            for name in jobs {
                let valid = match name.strip_prefix(EVENT_GRANT) {
                    Some(event) => crate::rules::event_name::validate_event(event).is_ok(),
                    None => crate::rules::job::validate_name(name).is_ok(),
                };
                if !valid {
                    return Err(GrantError::Startable(name.clone()));
                }
            }
        }
        *self = checked;
        Ok(())
    }
}

fn validate_table(name: &str) -> Result<String, GrantError> {
    let valid = !name.is_empty()
        && name.len() <= 63
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !valid {
        return Err(GrantError::TableName(name.to_string()));
    }
    let lower = name.to_ascii_lowercase();
    if RESERVED_PREFIXES.iter().any(|p| lower.starts_with(p)) {
        return Err(GrantError::ReservedTable(name.to_string()));
    }
    Ok(lower)
}

/// A collection, mount or action name: what the operator writes in the manifest.
pub fn validate_name(kind: &'static str, name: &str) -> Result<String, GrantError> {
    let valid = (1..=63).contains(&name.len())
        && name.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_');
    if valid {
        Ok(name.to_string())
    } else {
        Err(GrantError::Name {
            kind,
            name: name.to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn flags_build_grants() {
        let mut g = Grants::default();
        g.add_flag("db.write=Ledger").unwrap();
        g.add_flag("db.read=accounts,rates").unwrap();
        g.add_flag("files.write=reports").unwrap();
        g.add_flag("links=billing,iam").unwrap();
        let files = g.files.clone().unwrap();
        assert!(
            files.may_write("reports") && files.may_read("reports") && !files.may_scan("reports")
        );
        assert_eq!(g.links.clone().unwrap().len(), 2);
        assert!(!g.steps);
        g.add_flag("steps=on").unwrap();
        assert!(g.steps);
        assert_eq!(
            Grants::default().add_flag("steps=yes"),
            Err(GrantError::Syntax("steps=yes".into()))
        );
        let db = g.db.unwrap();
        assert!(db.may_write("ledger") && db.may_read("LEDGER"));
        assert!(db.may_read("accounts") && !db.may_write("accounts"));
        assert!(!db.may_read("secrets"));
    }

    #[test]
    fn bad_flags_are_refused() {
        let mut g = Grants::default();
        assert_eq!(
            g.add_flag("db.write"),
            Err(GrantError::Syntax("db.write".into()))
        );
        assert!(matches!(
            g.add_flag("net.read=x"),
            Err(GrantError::UnknownCapability(_))
        ));
        assert!(matches!(
            g.add_flag("files.delete=x"),
            Err(GrantError::UnknownMode { .. })
        ));
        assert!(matches!(
            g.add_flag("files.read=../etc"),
            Err(GrantError::Name { .. })
        ));
        assert!(matches!(
            g.add_flag("db.admin=x"),
            Err(GrantError::UnknownMode { .. })
        ));
        assert!(matches!(
            g.add_flag("db.read=jobhost_runs"),
            Err(GrantError::ReservedTable(_))
        ));
        assert!(matches!(
            g.add_flag("db.read=sqlite_master"),
            Err(GrantError::ReservedTable(_))
        ));
        assert!(matches!(
            g.add_flag("db.read=a;drop"),
            Err(GrantError::TableName(_))
        ));
        assert!(matches!(
            g.add_flag("db.read=a,"),
            Err(GrantError::Syntax(_))
        ));
    }

    proptest! {
        #![proptest_config(crate::rules::fuzzing::config(2000))]

        /// A flag either adds valid, normalised, non-reserved names or changes nothing.
        #[test]
        fn grant_flags_are_valid_or_refused_whole(
            flag in prop_oneof![
                crate::rules::fuzzing::text(),
                ("(db|files|links|net)", "(read|write|scan|admin)", "[a-zA-Z0-9_,;. -]{0,30}")
                    .prop_map(|(c, m, n)| format!("{c}.{m}={n}")),
            ]
        ) {
            let mut grants = Grants::default();
            grants.add_flag("db.read=base").unwrap();
            let before = grants.clone();
            match grants.add_flag(&flag) {
                Ok(()) => {
                    let db = grants.db.clone().unwrap_or_default();
                    for name in db.tables() {
                        prop_assert!(validate_table(name).is_ok(), "{name}");
                    }
                    let mut again = grants.clone();
                    again.normalize().unwrap();
                    prop_assert_eq!(again, grants);
                }
                Err(e) => {
                    prop_assert_eq!(grants, before);
                    prop_assert!(!e.to_string().contains('\n'));
                }
            }
        }
    }
}
