//! The operator's manifest (`jobhost.toml`): the database, the operator's migrations, host
//! settings and every job with its component, limits, retries, schedule and grants.
//!
//! ```toml
//! [host]
//! db = "sqlite://.jobhost/jobhost.db"
//! migrations = "migrations"          # the operator's own tables
//!
//! [defaults]
//! timeout = "30s"
//!
//! [jobs.ledger]
//! component = "ledger.wasm"
//! schedule = "*/5 * * * *"
//! retries = 2
//! payload = { rows = 3 }
//! grants.db = { write = ["ledger"] }
//! ```
//!
//! Relative paths are resolved against the manifest's own directory.

use crate::grants::{GrantError, Grants};
use crate::job::{JobError, JobSpec, Limits, RetryPolicy};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    #[error("cannot read manifest {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("manifest {path}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("manifest {path}, job {job}: {source}")]
    Job {
        path: PathBuf,
        job: String,
        source: JobError,
    },
    #[error("manifest {path}, job {job}: {source}")]
    Grant {
        path: PathBuf,
        job: String,
        source: GrantError,
    },
}

/// Host-wide settings; each can also come from a flag, which wins.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostSection {
    pub db: Option<String>,
    pub migrations: Option<PathBuf>,
    pub timezone: Option<String>,
    pub workers: Option<usize>,
    #[serde(default, with = "opt_duration")]
    pub surveillance_interval: Option<Duration>,
    #[serde(default, with = "opt_duration")]
    pub shutdown_grace: Option<Duration>,
    pub webhook: Option<String>,
    /// `one` (default): after downtime, run each schedule at most once to catch up;
    /// `none`: skip what was missed.
    pub catch_up: Option<CatchUp>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CatchUp {
    #[default]
    One,
    None,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct JobSection {
    component: Option<PathBuf>,
    tenant: Option<String>,
    #[serde(default, with = "opt_duration")]
    timeout: Option<Duration>,
    retries: Option<u32>,
    #[serde(default, with = "opt_duration")]
    backoff: Option<Duration>,
    #[serde(default, with = "opt_duration")]
    backoff_max: Option<Duration>,
    fuel: Option<u64>,
    #[serde(default, with = "opt_size")]
    memory: Option<u64>,
    schedule: Option<String>,
    payload: Option<toml::Value>,
    grants: Option<Grants>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    host: HostSection,
    #[serde(default)]
    defaults: JobSection,
    #[serde(default)]
    jobs: BTreeMap<String, JobSection>,
}

#[derive(Debug, Clone)]
pub struct Manifest {
    pub path: PathBuf,
    pub host: HostSection,
    pub jobs: Vec<JobSpec>,
}

impl Manifest {
    pub fn load(path: &Path) -> Result<Manifest, ManifestError> {
        let text = std::fs::read_to_string(path).map_err(|source| ManifestError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Self::parse(path, &text)
    }

    pub fn parse(path: &Path, text: &str) -> Result<Manifest, ManifestError> {
        let file: File = toml::from_str(text).map_err(|e| ManifestError::Parse {
            path: path.to_path_buf(),
            message: e.message().to_string(),
        })?;
        let base = path.parent().unwrap_or(Path::new("."));
        let resolve = |p: &Path| {
            if p.is_absolute() {
                p.to_path_buf()
            } else {
                base.join(p)
            }
        };
        let mut jobs = Vec::new();
        for (name, section) in file.jobs {
            let job_err = |source| ManifestError::Job {
                path: path.to_path_buf(),
                job: name.clone(),
                source,
            };
            let component = section
                .component
                .as_ref()
                .or(file.defaults.component.as_ref())
                .map(|p| resolve(p))
                .ok_or_else(|| ManifestError::Parse {
                    path: path.to_path_buf(),
                    message: format!("job {name} has no `component`"),
                })?;
            let pick = |f: fn(&JobSection) -> Option<Duration>, default| {
                f(&section).or(f(&file.defaults)).unwrap_or(default)
            };
            let defaults = (Limits::default(), RetryPolicy::default());
            let mut grants = section
                .grants
                .clone()
                .or(file.defaults.grants.clone())
                .unwrap_or_default();
            grants.normalize().map_err(|source| ManifestError::Grant {
                path: path.to_path_buf(),
                job: name.clone(),
                source,
            })?;
            let payload = section
                .payload
                .clone()
                .or(file.defaults.payload.clone())
                .map(|v| serde_json::to_value(v).expect("TOML values are JSON values"))
                .unwrap_or(serde_json::json!({}));
            let spec = JobSpec {
                name: name.clone(),
                tenant: section
                    .tenant
                    .clone()
                    .or(file.defaults.tenant.clone())
                    .unwrap_or_else(|| "default".into()),
                component,
                limits: Limits {
                    timeout: pick(|s| s.timeout, defaults.0.timeout),
                    fuel: section.fuel.or(file.defaults.fuel),
                    memory: section
                        .memory
                        .or(file.defaults.memory)
                        .unwrap_or(defaults.0.memory),
                },
                retry: RetryPolicy {
                    retries: section
                        .retries
                        .or(file.defaults.retries)
                        .unwrap_or(defaults.1.retries),
                    backoff_base: pick(|s| s.backoff, defaults.1.backoff_base),
                    backoff_max: pick(|s| s.backoff_max, defaults.1.backoff_max),
                },
                grants,
                schedule: section.schedule.clone(),
                payload,
            };
            spec.validate().map_err(job_err)?;
            jobs.push(spec);
        }
        let mut host = file.host;
        host.migrations = host.migrations.map(|p| resolve(&p));
        Ok(Manifest {
            path: path.to_path_buf(),
            host,
            jobs,
        })
    }

    pub fn job(&self, name: &str) -> Option<&JobSpec> {
        self.jobs.iter().find(|j| j.name == name)
    }
}

mod opt_duration {
    use serde::{Deserialize, Deserializer, de::Error};
    use std::time::Duration;

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        let text = Option::<String>::deserialize(d)?;
        text.map(|t| crate::units::parse_duration(&t).map_err(D::Error::custom))
            .transpose()
    }
}

mod opt_size {
    use serde::{Deserialize, Deserializer};

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
        #[derive(Deserialize)]
        struct Wrap(#[serde(with = "crate::units::serde_size")] u64);
        Ok(Option::<Wrap>::deserialize(d)?.map(|w| w.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parses_jobs_with_defaults() {
        let m = Manifest::parse(
            Path::new("/srv/jobs/jobhost.toml"),
            r#"
            [host]
            migrations = "migrations"
            [defaults]
            timeout = "5s"
            retries = 1
            [jobs.ledger]
            component = "ledger.wasm"
            memory = "32MiB"
            schedule = "*/5 * * * *"
            payload = { rows = 3 }
            grants.db = { write = ["Ledger"] }
            [jobs.hello]
            component = "/abs/hello.wasm"
            timeout = "1m"
            "#,
        )
        .unwrap();
        assert_eq!(
            m.host.migrations.as_deref(),
            Some(Path::new("/srv/jobs/migrations"))
        );
        let ledger = m.job("ledger").unwrap();
        assert_eq!(ledger.component, Path::new("/srv/jobs/ledger.wasm"));
        assert_eq!(ledger.limits.timeout, Duration::from_secs(5));
        assert_eq!(ledger.limits.memory, 32 << 20);
        assert_eq!(ledger.retry.retries, 1);
        assert_eq!(ledger.payload, serde_json::json!({"rows": 3}));
        assert!(ledger.grants.db.as_ref().unwrap().may_write("ledger"));
        let hello = m.job("hello").unwrap();
        assert_eq!(hello.component, Path::new("/abs/hello.wasm"));
        assert_eq!(hello.limits.timeout, Duration::from_secs(60));
        assert!(hello.grants.db.is_none());
    }

    #[test]
    fn refuses_bad_manifests() {
        let p = Path::new("m.toml");
        let err = |text: &str| Manifest::parse(p, text).unwrap_err().to_string();
        assert!(err("[jobs.x]\ncomponent='a'\ntimeout='soon'").contains("invalid duration"));
        assert!(err("[jobs.x]\ncomponent='a'\ncolour='red'").contains("unknown field"));
        assert!(err("[jobs.X]\ncomponent='a'").contains("invalid job name"));
        assert!(err("[jobs.x]\ntimeout='1s'").contains("no `component`"));
        assert!(
            err("[jobs.x]\ncomponent='a'\ngrants.db={read=['jobhost_runs']}")
                .contains("belongs to the host")
        );
        assert!(err("[jobs.x]\ncomponent='a'\ngrants.net={}").contains("unknown field"));
    }

    proptest! {
        #![proptest_config(crate::fuzzing::config(500))]

        /// Any manifest text loads or is refused with a message, never a panic.
        #[test]
        fn manifests_load_or_are_refused(
            text in prop_oneof![
                crate::fuzzing::text(),
                (
                    "[a-z0-9_-]{1,10}",
                    prop::sample::select(vec!["timeout", "memory", "retries", "schedule", "payload", "fuel", "tenant", "grants.db"]),
                    prop::sample::select(vec!["\"1s\"", "\"64MiB\"", "3", "-1", "\"* * * * *\"", "{ a = 1 }", "{ read = [\"x\"] }", "\"\"", "[]", "1e400"]),
                ).prop_map(|(job, key, value)| format!("[jobs.{job}]\ncomponent = \"x.wasm\"\n{key} = {value}\n")),
            ]
        ) {
            if let Err(e) = Manifest::parse(Path::new("m.toml"), &text) {
                prop_assert!(!e.to_string().is_empty());
            }
        }
    }
}
