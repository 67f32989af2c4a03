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
//! [collections.reports]                # a local directory under the host's home
//! [collections.uploads]
//! url = "s3://bucket/uploads"           # endpoint and credentials from AWS_* variables
//! scan = "antivirus"                    # files are visible once this job marks them clean
//! max_tenant_bytes = "1GiB"             # each tenant's quota here (10GiB, 100000 by default)
//! max_tenant_objects = 10_000
//!
//! [links.billing]
//! url = "https://billing.internal/api/"
//! methods = ["GET", "POST"]
//! credential = { header = "Authorization", prefix = "Bearer ", env = "BILLING_TOKEN" }
//! headers = ["content-type", "accept", "x-request-id"]  # what a guest may send (a default list)
//! rate = "25/s"                         # calls across every host and job (also /min, /h), spaced evenly
//! concurrency = 10                      # calls in flight at once, across every host and job
//! max_wait = "5s"                       # how long a call waits for them, then `rate-limited`; default 5s
//!
//! [lanes.bulk]                          # workers of its own on each host serving it
//! workers = 2
//!
//! [tenant_defaults]                     # each tenant's quota per rolling hour
//! time_per_hour = "1h"
//! max_queued = 50_000                   # runs queued at once (`backlog`); default 100 000
//! [tenants.trial]
//! fuel_per_hour = 1_000_000_000
//! over_quota = "fail"                   # default "wait"
//!
//! [jobs.ledger]
//! component = "ledger.wasm"
//! schedule = "*/5 * * * *"
//! retries = 2
//! payload = { rows = 3 }
//! actions = ["invoice.create"]
//! grants.db = { write = ["ledger"] }
//! grants.files = { write = ["reports"] }
//! grants.links = ["billing"]
//! grants.jobs = ["thumbnail", "event:order-paid"]   # may start these jobs, emit this event
//! lane = "bulk"
//! max_per_tenant = 3                    # queued or running per tenant
//! over_limit = "defer"                  # default "skip"
//! max_queued = 1000                     # runs of it queued per tenant; default 20 000
//! max_defers = 20                       # defers a run may make; default 100 (`job::DEFAULT_MAX_DEFERS`)
//! record = "always"                     # journal host calls of every attempt; default "failures", or "off"
//! record_limit = "4MiB"                 # a journal's cap; default 1MiB
//!
//! [jobs.sync]                           # claim limits, fleet-wide (docs/internals/flow-control.md)
//! component = "sync.wasm"
//! rate = "60/min"                       # starts per period ("/s", "/min", "/h"); a sliding window
//! concurrency = 4                       # running or claimed at once (`concurrency = 1` is `sequential`)
//! key = "/customer"                     # per-key limits count by this: a JSON pointer into the
//!                                       # payload, "instance" or "tenant"; computed as a run is queued
//! key_rate = "5/s"                      # starts per period per key
//! key_concurrency = 1                   # running or claimed at once per key
//! order = "fifo"                        # per key: one at a time, oldest queued first, never skipped
//!
//! [webhooks.ops]                        # where endings are delivered (`service::webhooks`)
//! url = "https://ops.example/jobhost"
//! secret_env = "OPS_WEBHOOK_SECRET"     # the HMAC-SHA256 signing secret's variable; required
//! timeout = "10s"                       # each POST's; default 10s, at most 60s
//! backoff = "5s"                        # the first retry's delay, doubled each time, jittered
//! backoff_max = "1h"                    # the longest delay between tries
//! retry_for = "24h"                     # then the delivery is given up (`failed`)
//!
//! [defaults]
//! deliver = { ops = ["failed", "crashed"] }   # every job's, unless it names its own
//! [jobs.billing]
//! deliver = { ops = ["succeeded", "failed", "cancelled", "crashed", "skipped"] }
//! ```
//!
//! A run over a claim limit stays queued, using no attempt, lease or worker, and the claim
//! passes over it to other keys and jobs. `host check` refuses a zero or negative limit, a
//! bad period or pointer, and `key_*` or `order` without `key`, naming the line.
//!
//! Relative paths are resolved against the manifest's own directory. Every problem of a
//! manifest is reported at once, not just the first.

use crate::queue::quota::{OverQuota, Quota, Quotas};
use crate::rules::claim_limits::{ClaimLimits, LimitKey, Order, Rate};
use crate::rules::event_filter::Filter;
use crate::rules::grants::Grants;
use crate::rules::job::{Flow, JobSpec, Limits, OverLimit, RetryPolicy};
use crate::sandbox::files::{
    CollectionSpec, DEFAULT_MAX_OBJECT, DEFAULT_MAX_TENANT_BYTES, DEFAULT_MAX_TENANT_OBJECTS,
    Location,
};
use crate::sandbox::journal::{RecordPolicy, Recorder};
use crate::sandbox::links::limits::{DEFAULT_MAX_WAIT, MountLimits};
use crate::sandbox::links::{
    Credential, DEFAULT_MAX_BODY, DEFAULT_TIMEOUT, MountSpec, SecretSource,
};
use crate::service::webhooks::WebhookSpec;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::collections::BTreeSet;
use std::num::NonZeroU32;
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
    /// Every problem found, one per line.
    #[error("manifest {}: {} problem{}:\n  {}", path.display(), problems.len(), if problems.len() == 1 { "" } else { "s" }, problems.join("\n  "))]
    Problems {
        path: PathBuf,
        problems: Vec<String>,
    },
}

impl ManifestError {
    /// One problem, as a whole error.
    pub fn problems(path: &Path, problems: Vec<String>) -> Self {
        ManifestError::Problems {
            path: path.to_path_buf(),
            problems,
        }
    }
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
    /// How long finished runs and delivered reports are kept (none: for ever).
    #[serde(default, with = "opt_duration")]
    pub retention: Option<Duration>,
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
    /// One child run per active tenant for each fire or kick.
    per_tenant: Option<bool>,
    /// The events that queue a run of the job: names, or `{ event = NAME, where = {
    /// PATH = VALUE, ... } }` to take only events whose payload matches.
    on: Option<Vec<toml::Value>>,
    /// One run when the fleet first registers a new version of the job.
    run_on_boot: Option<bool>,
    grants: Option<Grants>,
    /// The actions the job may name in `links` calls (put in its tokens).
    actions: Option<BTreeSet<String>>,
    sequential: Option<bool>,
    /// Starts per period across the fleet (`"60/min"`, `"5/s"`, `"100/h"`).
    rate: Option<Rate>,
    /// Runs of the job running (or claimed) at once across the fleet.
    concurrency: Option<NonZeroU32>,
    /// What the per-key limits count by: `"instance"`, `"tenant"` or a JSON pointer.
    key: Option<LimitKey>,
    key_rate: Option<Rate>,
    key_concurrency: Option<NonZeroU32>,
    /// `"fifo"`: per key, one at a time, in queue order.
    order: Option<Order>,
    /// The defers a run may make; unset, `job::DEFAULT_MAX_DEFERS`.
    max_defers: Option<u32>,
    /// At most this many runs queued or running per tenant; `over_limit` says what a run
    /// over it does (`skip`, the default, or `defer`).
    max_per_tenant: Option<u32>,
    over_limit: Option<OverLimit>,
    /// At most this many runs of the job queued per tenant (`backlog`).
    max_queued: Option<u64>,
    /// The lane whose workers run the job (`[lanes.NAME]`; `default` otherwise).
    lane: Option<String>,
    /// Which attempts keep a journal of their host calls: `failures` (the default),
    /// `always` or `off`.
    record: Option<String>,
    /// A journal's cap (1MiB by default).
    #[serde(default, with = "opt_size")]
    record_limit: Option<u64>,
    /// Which endings go to which webhook: `{ WEBHOOK = ["failed", ...] }`.
    deliver: Option<BTreeMap<String, Vec<String>>>,
}

/// `[webhooks.NAME]`: a receiver of delivered endings.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct WebhookSection {
    url: Option<String>,
    /// The environment variable holding the signing secret (never the secret itself).
    secret_env: Option<String>,
    #[serde(default, with = "opt_duration")]
    timeout: Option<Duration>,
    #[serde(default, with = "opt_duration")]
    backoff: Option<Duration>,
    #[serde(default, with = "opt_duration")]
    backoff_max: Option<Duration>,
    #[serde(default, with = "opt_duration")]
    retry_for: Option<Duration>,
}

/// `[tenants.NAME]` (or `[tenant_defaults]`, for every tenant not named): the tenant's
/// quota per rolling hour, and its cap on queued runs.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct TenantSection {
    /// At most this many of the tenant's runs queued (`backlog`).
    max_queued: Option<u64>,
    fuel_per_hour: Option<u64>,
    #[serde(default, with = "opt_duration")]
    time_per_hour: Option<Duration>,
    over_quota: Option<OverQuota>,
}

impl TenantSection {
    fn quota(&self) -> Quota {
        Quota {
            fuel_per_hour: self.fuel_per_hour,
            time_per_hour: self.time_per_hour,
            over_quota: self.over_quota.unwrap_or_default(),
        }
    }
}

/// `[lanes.NAME] workers = N`: a lane's own workers on each host that serves it.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct LaneSection {
    workers: usize,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct CollectionSection {
    path: Option<PathBuf>,
    url: Option<String>,
    #[serde(default, with = "opt_size")]
    max_object: Option<u64>,
    #[serde(default, with = "opt_size")]
    max_tenant_bytes: Option<u64>,
    max_tenant_objects: Option<u64>,
    scan: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct MountSection {
    url: String,
    methods: Option<BTreeSet<String>>,
    #[serde(default, with = "opt_duration")]
    timeout: Option<Duration>,
    #[serde(default, with = "opt_size")]
    max_request: Option<u64>,
    #[serde(default, with = "opt_size")]
    max_response: Option<u64>,
    credential: Option<CredentialSection>,
    /// The request headers a guest may send (`links::headers::DEFAULT_HEADERS` if none).
    headers: Option<BTreeSet<String>>,
    /// Its limits (`links::limits`): a rate over zero, a concurrency over zero.
    rate: Option<crate::rules::units::Rate>,
    concurrency: Option<std::num::NonZeroU32>,
    #[serde(default, with = "opt_duration")]
    max_wait: Option<Duration>,
}

/// `{ header, prefix, env = "VAR" }`, `{ ..., file = "path" }` or
/// `{ ..., token = "attempt", audience = "..." }`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct CredentialSection {
    header: Option<String>,
    prefix: Option<String>,
    env: Option<String>,
    file: Option<PathBuf>,
    token: Option<String>,
    audience: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    host: HostSection,
    #[serde(default)]
    defaults: JobSection,
    #[serde(default)]
    collections: BTreeMap<String, CollectionSection>,
    #[serde(default)]
    links: BTreeMap<String, MountSection>,
    #[serde(default)]
    webhooks: BTreeMap<String, WebhookSection>,
    #[serde(default)]
    lanes: BTreeMap<String, LaneSection>,
    #[serde(default)]
    tenants: BTreeMap<String, TenantSection>,
    tenant_defaults: Option<TenantSection>,
    #[serde(default)]
    jobs: BTreeMap<String, JobSection>,
}

#[derive(Debug, Clone)]
pub struct Manifest {
    pub path: PathBuf,
    pub host: HostSection,
    /// The declared lanes and their workers per host (the `default` lane's come from
    /// `--workers` unless declared here).
    pub lanes: BTreeMap<String, usize>,
    /// The tenants' quotas per rolling hour.
    pub quotas: Quotas,
    pub collections: BTreeMap<String, CollectionSpec>,
    pub mounts: BTreeMap<String, MountSpec>,
    /// Where endings are delivered, by name; each job's `deliver` names them.
    pub webhooks: BTreeMap<String, WebhookSpec>,
    pub jobs: Vec<JobSpec>,
}

impl Manifest {
    pub fn load(path: &Path) -> Result<Manifest, ManifestError> {
        let (manifest, problems) = Self::load_with_problems(path)?;
        if problems.is_empty() {
            Ok(manifest)
        } else {
            Err(ManifestError::problems(path, problems))
        }
    }

    /// The manifest's sound parts and the problems of the rest, so that a checker can add
    /// what it finds in those parts (schedules, components, tables) and report every
    /// problem at once. Fails outright only on a file that cannot be read or is not TOML
    /// of the manifest's shape.
    pub fn load_with_problems(path: &Path) -> Result<(Manifest, Vec<String>), ManifestError> {
        let text = std::fs::read_to_string(path).map_err(|source| ManifestError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Self::parse_with_problems(path, &text)
    }

    pub fn parse(path: &Path, text: &str) -> Result<Manifest, ManifestError> {
        let (manifest, problems) = Self::parse_with_problems(path, text)?;
        if problems.is_empty() {
            Ok(manifest)
        } else {
            Err(ManifestError::problems(path, problems))
        }
    }

    fn parse_with_problems(
        path: &Path,
        text: &str,
    ) -> Result<(Manifest, Vec<String>), ManifestError> {
        // The line a value the manifest refuses stands on, so a person finds it.
        let file: File = toml::from_str(text).map_err(|e| ManifestError::Parse {
            path: path.to_path_buf(),
            message: match e.span() {
                Some(span) => format!("line {}: {}", line_at(text, span.start), e.message()),
                None => e.message().to_string(),
            },
        })?;
        let base = path.parent().unwrap_or(Path::new("."));
        let resolve = |p: &Path| {
            if p.is_absolute() {
                p.to_path_buf()
            } else {
                base.join(p)
            }
        };
        let mut problems = Vec::new();
        let mut collections = BTreeMap::new();
        for (name, section) in &file.collections {
            match collection(name, section, &resolve) {
                Ok(spec) => {
                    collections.insert(name.clone(), spec);
                }
                Err(problem) => problems.push(format!("collection {name}: {problem}")),
            }
        }
        let mut mounts = BTreeMap::new();
        for (name, section) in &file.links {
            match mount(name, section, &resolve) {
                Ok(spec) => {
                    mounts.insert(name.clone(), spec);
                }
                Err(problem) => problems.push(format!("link {name}: {problem}")),
            }
        }
        let mut webhooks = BTreeMap::new();
        for (name, section) in &file.webhooks {
            match webhook(name, section) {
                Ok(spec) => {
                    webhooks.insert(name.clone(), spec);
                }
                Err((key, problem)) => {
                    problems.push(match key_line(text, &format!("webhooks.{name}"), key) {
                        Some(line) => format!("webhook {name}: line {line}: {problem}"),
                        None => format!("webhook {name}: {problem}"),
                    })
                }
            }
        }
        let mut jobs = Vec::new();
        for (name, section) in &file.jobs {
            match job(name, section, &file.defaults, &resolve) {
                Ok(mut spec) => {
                    let (deliver, table) = match &section.deliver {
                        Some(own) => (Some(own), format!("jobs.{name}")),
                        None => (file.defaults.deliver.as_ref(), "defaults".to_string()),
                    };
                    if let Some(deliver) = deliver {
                        let declared = |w: &str| file.webhooks.contains_key(w);
                        match crate::rules::delivery::routes(deliver, &declared) {
                            Ok(routes) => spec.deliver = routes,
                            Err(found) => {
                                let line = key_line(text, &table, Some("deliver"));
                                problems.extend(found.into_iter().map(|p| match line {
                                    Some(line) => format!("job {name}: line {line}: {p}"),
                                    None => format!("job {name}: {p}"),
                                }));
                            }
                        }
                    }
                    for problem in undeclared(&spec, &collections, &mounts) {
                        problems.push(format!("job {name}: {problem}"));
                    }
                    for started in spec.grants.startable_jobs() {
                        if !file.jobs.contains_key(started) {
                            problems.push(format!(
                                "job {name}: granted job {started:?} is not in this manifest ([jobs.{started}])"
                            ));
                        }
                    }
                    jobs.push(spec);
                }
                Err(problem) => problems.push(match limit_line(text, name, &problem) {
                    Some(line) => format!("job {name}: line {line}: {problem}"),
                    None => format!("job {name}: {problem}"),
                }),
            }
        }
        let mut lanes = BTreeMap::new();
        for (name, section) in &file.lanes {
            if crate::rules::job::validate_name(name).is_err() {
                problems.push(format!(
                    "lane {name:?}: use 1-64 lower-case letters, digits, '-', '_' or '.'"
                ));
            } else if !(1..=1024).contains(&section.workers) {
                problems.push(format!("lane {name}: workers must be 1 to 1024"));
            } else {
                lanes.insert(name.clone(), section.workers);
            }
        }
        for spec in &jobs {
            if spec.lane != crate::rules::job::DEFAULT_LANE && !file.lanes.contains_key(&spec.lane)
            {
                problems.push(format!(
                    "job {}: its lane {:?} is not declared ([lanes.{}])",
                    spec.name, spec.lane, spec.lane
                ));
            }
        }
        let mut quotas = Quotas {
            tenants: BTreeMap::new(),
            default: file.tenant_defaults.as_ref().map(TenantSection::quota),
        };
        let mut tenant_queued = crate::rules::queue_caps::TenantCaps {
            default: file.tenant_defaults.as_ref().and_then(|t| t.max_queued),
            tenants: BTreeMap::new(),
        };
        for (name, section) in &file.tenants {
            match crate::rules::tenant::validate_tenant(name) {
                Ok(()) => {
                    quotas.tenants.insert(name.clone(), section.quota());
                    if let Some(cap) = section.max_queued {
                        tenant_queued.tenants.insert(name.clone(), cap);
                    }
                }
                Err(e) => problems.push(format!("tenant {name:?}: {e}")),
            }
        }
        let sections = file
            .tenant_defaults
            .iter()
            .map(|t| ("[tenant_defaults]".to_string(), t));
        let named = file
            .tenants
            .iter()
            .map(|(n, t)| (format!("[tenants.{n}]"), t));
        for (place, section) in sections.chain(named) {
            if section.max_queued == Some(0) {
                problems.push(format!("{place}: max_queued must be at least 1"));
            }
        }
        for spec in &mut jobs {
            spec.flow.tenant_queued = tenant_queued.clone();
        }
        for (name, spec) in &collections {
            if let Some(scan) = &spec.scan
                && !jobs.iter().any(|j| &j.name == scan)
            {
                problems.push(format!(
                    "collection {name}: its scan job {scan:?} is not a job of this manifest"
                ));
            }
        }
        let mut host = file.host;
        host.migrations = host.migrations.map(|p| resolve(&p));
        let manifest = Manifest {
            path: path.to_path_buf(),
            host,
            lanes,
            quotas,
            collections,
            mounts,
            webhooks,
            jobs,
        };
        Ok((manifest, problems))
    }

    pub fn job(&self, name: &str) -> Option<&JobSpec> {
        self.jobs.iter().find(|j| j.name == name)
    }
}

fn collection(
    name: &str,
    section: &CollectionSection,
    resolve: &dyn Fn(&Path) -> PathBuf,
) -> Result<CollectionSpec, String> {
    crate::rules::grants::validate_name("collection", name).map_err(|e| e.to_string())?;
    let location = match (&section.path, &section.url) {
        (Some(_), Some(_)) => return Err("give `path` or `url`, not both".into()),
        (Some(path), None) => Location::Local(resolve(path)),
        (None, Some(url)) => Location::Url(url.clone()),
        (None, None) => Location::Home,
    };
    Ok(CollectionSpec {
        location,
        max_object_bytes: section.max_object.unwrap_or(DEFAULT_MAX_OBJECT),
        max_tenant_bytes: section.max_tenant_bytes.unwrap_or(DEFAULT_MAX_TENANT_BYTES),
        max_tenant_objects: section
            .max_tenant_objects
            .unwrap_or(DEFAULT_MAX_TENANT_OBJECTS),
        scan: section.scan.clone(),
    })
}

fn mount(
    name: &str,
    section: &MountSection,
    resolve: &dyn Fn(&Path) -> PathBuf,
) -> Result<MountSpec, String> {
    crate::rules::grants::validate_name("mount", name).map_err(|e| e.to_string())?;
    let methods = section
        .methods
        .clone()
        .unwrap_or_else(|| ["GET".to_string(), "POST".to_string()].into());
    let known = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"];
    let methods: BTreeSet<String> = methods.iter().map(|m| m.to_ascii_uppercase()).collect();
    if let Some(bad) = methods.iter().find(|m| !known.contains(&m.as_str())) {
        return Err(format!(
            "unknown method {bad:?} (known: {})",
            known.join(", ")
        ));
    }
    let credential = match &section.credential {
        None => None,
        Some(c) => {
            let header = c.header.clone().unwrap_or_else(|| "Authorization".into());
            let prefix = c.prefix.clone().unwrap_or_default();
            Some(match (&c.env, &c.file, &c.token) {
                (Some(var), None, None) => Credential::Secret {
                    header,
                    prefix,
                    source: SecretSource::Env(var.clone()),
                },
                (None, Some(file), None) => Credential::Secret {
                    header,
                    prefix,
                    source: SecretSource::File(resolve(file)),
                },
                (None, None, Some(kind)) if kind == "attempt" => Credential::Token {
                    header,
                    prefix,
                    audience: c.audience.clone().unwrap_or_else(|| name.to_string()),
                },
                _ => {
                    return Err(
                        "a credential takes one of `env = \"VAR\"`, `file = \"path\"` or `token = \"attempt\"`"
                            .into(),
                    );
                }
            })
        }
    };
    let headers = match &section.headers {
        None => crate::sandbox::links::headers::default_headers(),
        Some(listed) => crate::sandbox::links::headers::mount_headers(
            listed,
            credential.as_ref().map(Credential::header),
        )?,
    };
    Ok(MountSpec {
        url: section.url.clone(),
        methods,
        timeout: section.timeout.unwrap_or(DEFAULT_TIMEOUT),
        max_request: section.max_request.unwrap_or(DEFAULT_MAX_BODY),
        max_response: section.max_response.unwrap_or(DEFAULT_MAX_BODY),
        credential,
        headers,
        limits: MountLimits {
            rate: section.rate,
            concurrency: section.concurrency,
            max_wait: section.max_wait.unwrap_or(DEFAULT_MAX_WAIT),
        },
    })
}

/// A `[webhooks.NAME]` table checked whole; a problem names the key it is about.
fn webhook(
    name: &str,
    section: &WebhookSection,
) -> Result<WebhookSpec, (Option<&'static str>, String)> {
    crate::rules::grants::validate_name("webhook", name).map_err(|e| (None, e.to_string()))?;
    let url = section
        .url
        .as_deref()
        .ok_or((None, "`url` is required".to_string()))?;
    let parsed = reqwest::Url::parse(url)
        .ok()
        .filter(|u| matches!(u.scheme(), "http" | "https") && u.host().is_some());
    let Some(parsed) = parsed.filter(|_| url.len() <= 2048) else {
        return Err((
            Some("url"),
            "url: use an http:// or https:// URL with a host, at most 2048 characters".into(),
        ));
    };
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err((
            Some("url"),
            "url: carries no user or password (the receiver checks the signature)".into(),
        ));
    }
    let var = section.secret_env.as_deref().ok_or((
        None,
        "`secret_env` is required: the environment variable holding its signing secret".into(),
    ))?;
    if std::env::var_os(var).is_none_or(|v| v.is_empty()) {
        return Err((
            Some("secret_env"),
            format!("secret_env: the environment has no {var} (its signing secret)"),
        ));
    }
    let defaults = WebhookSpec::defaults(url, var);
    let spec = WebhookSpec {
        timeout: section.timeout.unwrap_or(defaults.timeout),
        backoff: section.backoff.unwrap_or(defaults.backoff),
        backoff_max: section.backoff_max.unwrap_or(defaults.backoff_max),
        retry_for: section.retry_for.unwrap_or(defaults.retry_for),
        ..defaults
    };
    if spec.timeout.is_zero() || spec.timeout > Duration::from_secs(60) {
        return Err((Some("timeout"), "timeout: more than 0, at most 60s".into()));
    }
    if spec.backoff < Duration::from_millis(10) {
        return Err((Some("backoff"), "backoff: at least 10ms".into()));
    }
    if spec.backoff_max < spec.backoff {
        return Err((
            Some("backoff_max"),
            "backoff_max: at least `backoff`".into(),
        ));
    }
    if spec.retry_for < spec.backoff || spec.retry_for > Duration::from_secs(30 * 86_400) {
        return Err((
            Some("retry_for"),
            "retry_for: at least `backoff`, at most 30d".into(),
        ));
    }
    Ok(spec)
}

fn job(
    name: &str,
    section: &JobSection,
    defaults: &JobSection,
    resolve: &dyn Fn(&Path) -> PathBuf,
) -> Result<JobSpec, String> {
    let component = section
        .component
        .as_ref()
        .or(defaults.component.as_ref())
        .map(|p| resolve(p))
        .ok_or("no `component`")?;
    let pick = |f: fn(&JobSection) -> Option<Duration>, default| {
        f(section).or(f(defaults)).unwrap_or(default)
    };
    let limits = Limits::default();
    let retry = RetryPolicy::default();
    let mut grants = section
        .grants
        .clone()
        .or(defaults.grants.clone())
        .unwrap_or_default();
    grants.normalize().map_err(|e| e.to_string())?;
    let payload = section
        .payload
        .clone()
        .or(defaults.payload.clone())
        .map(|v| serde_json::to_value(v).expect("TOML values are JSON values"))
        .unwrap_or(serde_json::json!({}));
    let actions = section
        .actions
        .clone()
        .or(defaults.actions.clone())
        .unwrap_or_default();
    for action in &actions {
        let valid = (1..=64).contains(&action.len())
            && action
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "._:-".contains(c));
        if !valid {
            return Err(format!(
                "invalid action {action:?}: use letters, digits and . _ : -"
            ));
        }
    }
    let per_tenant = section.per_tenant.unwrap_or(false);
    let (on, on_where) = triggers(section.on.as_deref().unwrap_or_default())?;
    if per_tenant && section.tenant.is_some() {
        return Err(
            "a per_tenant job runs as each active tenant: it has no `tenant` of its own".into(),
        );
    }
    let tenant = match per_tenant {
        true => crate::rules::tenant::OPERATOR_TENANT.to_string(),
        false => section
            .tenant
            .clone()
            .or(defaults.tenant.clone())
            .unwrap_or_else(|| crate::rules::tenant::OPERATOR_TENANT.into()),
    };
    crate::rules::tenant::validate_tenant(&tenant).map_err(|e| e.to_string())?;
    let spec = JobSpec {
        name: name.to_string(),
        tenant,
        component,
        limits: Limits {
            timeout: pick(|s| s.timeout, limits.timeout),
            fuel: section.fuel.or(defaults.fuel),
            memory: section.memory.or(defaults.memory).unwrap_or(limits.memory),
        },
        retry: RetryPolicy {
            retries: section
                .retries
                .or(defaults.retries)
                .unwrap_or(retry.retries),
            backoff_base: pick(|s| s.backoff, retry.backoff_base),
            backoff_max: pick(|s| s.backoff_max, retry.backoff_max),
        },
        grants,
        actions,
        schedule: section.schedule.clone(),
        payload,
        per_tenant,
        on,
        on_where,
        run_on_boot: section.run_on_boot.unwrap_or(false),
        flow: Flow {
            sequential: section
                .sequential
                .or(defaults.sequential)
                .unwrap_or_default(),
            max_defers: section.max_defers.or(defaults.max_defers),
            max_per_tenant: section.max_per_tenant.or(defaults.max_per_tenant),
            over_limit: section
                .over_limit
                .or(defaults.over_limit)
                .unwrap_or_default(),
            max_queued: section.max_queued.or(defaults.max_queued),
            tenant_queued: crate::rules::queue_caps::TenantCaps::default(),
            limits: ClaimLimits {
                rate: section.rate.or(defaults.rate),
                concurrency: section.concurrency.or(defaults.concurrency),
                key: section.key.clone().or_else(|| defaults.key.clone()),
                key_rate: section.key_rate.or(defaults.key_rate),
                key_concurrency: section.key_concurrency.or(defaults.key_concurrency),
                order: section.order.or(defaults.order),
            },
        },
        lane: section
            .lane
            .clone()
            .or_else(|| defaults.lane.clone())
            .unwrap_or_else(|| crate::rules::job::DEFAULT_LANE.to_string()),
        recorder: recorder(section, defaults)?,
        deliver: Default::default(),
    };
    spec.validate().map_err(|e| e.to_string())?;
    Ok(spec)
}

/// The 1-based line of byte `at` of the manifest.
fn line_at(text: &str, at: usize) -> usize {
    text.as_bytes()[..at.min(text.len())]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

/// The line of job `name`'s table that declares the claim limit a problem is about (the
/// first of the limits it names), so `host check` points at it.
fn limit_line(text: &str, name: &str, problem: &str) -> Option<usize> {
    const FIELDS: [&str; 7] = [
        "key_rate",
        "key_concurrency",
        "order",
        "sequential",
        "concurrency",
        "rate",
        "key",
    ];
    let field = FIELDS.iter().find(|f| problem.contains(*f))?;
    let header = format!("[jobs.{name}]");
    let mut inside = false;
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.starts_with('[') {
            inside = line == header;
        } else if inside
            && line
                .strip_prefix(field)
                .is_some_and(|rest| rest.trim_start().starts_with('='))
        {
            return Some(n + 1);
        }
    }
    None
}

/// The line of `[TABLE]` that sets `key` (the table's own line if `key` is `None` or not
/// found there), so `host check` points at it.
fn key_line(text: &str, table: &str, key: Option<&str>) -> Option<usize> {
    let header = format!("[{table}]");
    let mut inside = false;
    let mut header_at = None;
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.starts_with('[') {
            inside = line == header;
            if inside {
                header_at = Some(n + 1);
            }
        } else if inside
            && let Some(key) = key
            && line.strip_prefix(key).is_some_and(|rest| {
                let rest = rest.trim_start();
                rest.starts_with('=') || rest.starts_with('.')
            })
        {
            return Some(n + 1);
        }
    }
    header_at
}

/// A job's `record` and `record_limit`.
fn recorder(section: &JobSection, defaults: &JobSection) -> Result<Recorder, String> {
    let policy = match section.record.as_ref().or(defaults.record.as_ref()) {
        None => RecordPolicy::default(),
        Some(text) => RecordPolicy::parse(text)
            .ok_or_else(|| format!("record = {text:?}: use \"failures\", \"always\" or \"off\""))?,
    };
    let limit = section
        .record_limit
        .or(defaults.record_limit)
        .unwrap_or(crate::sandbox::journal::DEFAULT_LIMIT);
    if limit == 0 || limit > crate::sandbox::journal::MAX_LIMIT {
        return Err(format!(
            "record_limit: a journal's cap is more than 0 and at most {} MiB",
            crate::sandbox::journal::MAX_LIMIT >> 20
        ));
    }
    Ok(Recorder { policy, limit })
}

/// A job's `on`: the events it subscribes to, and the payload filters of those given one.
fn triggers(on: &[toml::Value]) -> Result<(BTreeSet<String>, BTreeMap<String, Filter>), String> {
    const SHAPE: &str =
        "each `on` entry is an event name or `{ event = \"NAME\", where = { PATH = VALUE } }`";
    let mut events = BTreeSet::new();
    let mut filters = BTreeMap::new();
    for entry in on {
        let (event, filter) = match entry {
            toml::Value::String(event) => (event.clone(), None),
            toml::Value::Table(t) if t.keys().all(|k| k == "event" || k == "where") => {
                let event = t.get("event").and_then(toml::Value::as_str).ok_or(SHAPE)?;
                let filter = match t.get("where") {
                    None => None,
                    Some(toml::Value::Table(w)) => Some(
                        Filter::from_table(w)
                            .map_err(|e| format!("the trigger of event {event:?}: {e}"))?,
                    ),
                    Some(_) => {
                        return Err(format!(
                            "the trigger of event {event:?}: `where` is a table of PATH = VALUE"
                        ));
                    }
                };
                (event.to_string(), filter)
            }
            _ => return Err(SHAPE.into()),
        };
        crate::rules::event_name::validate_event(&event).map_err(|e| e.to_string())?;
        if !events.insert(event.clone()) {
            return Err(format!("the event {event:?} is given twice in `on`"));
        }
        if let Some(filter) = filter {
            filters.insert(event, filter);
        }
    }
    Ok((events, filters))
}

/// Collections and mounts a job is granted that the manifest does not declare.
fn undeclared(
    spec: &JobSpec,
    collections: &BTreeMap<String, CollectionSpec>,
    mounts: &BTreeMap<String, MountSpec>,
) -> Vec<String> {
    let mut problems = Vec::new();
    if let Some(files) = &spec.grants.files {
        for c in files.collections() {
            if !collections.contains_key(c) {
                problems.push(format!(
                    "granted collection {c:?} is not declared ([collections.{c}])"
                ));
            }
        }
    }
    for m in spec.grants.links.iter().flatten() {
        if !mounts.contains_key(m) {
            problems.push(format!("granted link {m:?} is not declared ([links.{m}])"));
        }
    }
    problems
}

mod opt_duration {
    use serde::{Deserialize, Deserializer, de::Error};
    use std::time::Duration;

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        let text = Option::<String>::deserialize(d)?;
        text.map(|t| crate::rules::units::parse_duration(&t).map_err(D::Error::custom))
            .transpose()
    }
}

mod opt_size {
    use serde::{Deserialize, Deserializer};

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
        #[derive(Deserialize)]
        struct Wrap(#[serde(with = "crate::rules::units::serde_size")] u64);
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
            max_defers = 4
            [jobs.ledger]
            component = "ledger.wasm"
            memory = "32MiB"
            schedule = "*/5 * * * *"
            payload = { rows = 3 }
            grants.db = { write = ["Ledger"] }
            [jobs.hello]
            component = "/abs/hello.wasm"
            timeout = "1m"
            sequential = true
            max_defers = 0
            max_per_tenant = 2
            over_limit = "defer"
            max_queued = 500
            lane = "bulk"
            [lanes.bulk]
            workers = 2
            [tenant_defaults]
            max_queued = 1000
            [tenants.acme]
            max_queued = 10
            "#,
        )
        .unwrap();
        assert_eq!(m.lanes, BTreeMap::from([("bulk".to_string(), 2)]));
        assert_eq!(m.job("ledger").unwrap().lane, "default");
        assert_eq!(m.job("hello").unwrap().lane, "bulk");
        assert_eq!(
            m.quotas.of("acme"),
            Some(&Quota::default()),
            "a cap sets no quota"
        );
        let with_quotas = Manifest::parse(
            Path::new("m.toml"),
            "[tenant_defaults]\ntime_per_hour = '10m'\n[tenants.acme]\nfuel_per_hour = 1000\nover_quota = 'fail'",
        )
        .unwrap();
        assert_eq!(
            with_quotas.quotas.of("acme"),
            Some(&Quota {
                fuel_per_hour: Some(1000),
                time_per_hour: None,
                over_quota: OverQuota::Fail,
            })
        );
        assert_eq!(
            with_quotas
                .quotas
                .of("globex")
                .and_then(|q| q.time_per_hour),
            Some(Duration::from_secs(600))
        );
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
        assert_eq!(
            ledger.flow,
            Flow {
                sequential: false,
                max_defers: Some(4),
                max_per_tenant: None,
                over_limit: OverLimit::Skip,
                max_queued: None,
                tenant_queued: ledger.flow.tenant_queued.clone(),
                limits: ClaimLimits::default(),
            }
        );
        let caps = ledger.flow.queue_caps("acme");
        assert_eq!(
            (caps.tenant, caps.job),
            (10, crate::rules::queue_caps::DEFAULT_MAX_QUEUED_PER_JOB)
        );
        assert_eq!(ledger.flow.queue_caps("globex").tenant, 1000);
        let hello = m.job("hello").unwrap();
        assert_eq!(hello.component, Path::new("/abs/hello.wasm"));
        assert_eq!(hello.limits.timeout, Duration::from_secs(60));
        assert!(hello.grants.db.is_none());
        assert_eq!(
            hello.flow,
            Flow {
                sequential: true,
                max_defers: Some(0),
                max_per_tenant: Some(2),
                over_limit: OverLimit::Defer,
                max_queued: Some(500),
                tenant_queued: hello.flow.tenant_queued.clone(),
                limits: ClaimLimits::default(),
            }
        );
    }

    #[test]
    fn webhooks_and_deliver_routes_with_a_default() {
        // PATH is set in every environment the tests run in.
        let m = Manifest::parse(
            Path::new("/srv/jobhost.toml"),
            r#"
            [webhooks.ops]
            url = "https://ops.example/hooks"
            secret_env = "PATH"
            backoff = "50ms"
            retry_for = "1h"
            [webhooks.billing]
            url = "http://127.0.0.1:9/in"
            secret_env = "PATH"
            [defaults]
            deliver = { ops = ["failed", "crashed"] }
            [jobs.plain]
            component = "a.wasm"
            [jobs.own]
            component = "a.wasm"
            deliver = { billing = ["succeeded"], ops = ["failed"] }
            [jobs.quiet]
            component = "a.wasm"
            deliver = {}
            "#,
        )
        .unwrap();
        use crate::rules::delivery::Ending;
        let ops = &m.webhooks["ops"];
        assert_eq!(ops.backoff, Duration::from_millis(50));
        assert_eq!(ops.timeout, Duration::from_secs(10), "the default");
        assert_eq!(ops.retry_for, Duration::from_secs(3600));
        assert_eq!(
            m.job("plain").unwrap().deliver,
            BTreeMap::from([(
                "ops".to_string(),
                BTreeSet::from([Ending::Failed, Ending::Crashed])
            )])
        );
        let own = &m.job("own").unwrap().deliver;
        assert_eq!(own["billing"], BTreeSet::from([Ending::Succeeded]));
        assert_eq!(own["ops"], BTreeSet::from([Ending::Failed]));
        assert!(m.job("quiet").unwrap().deliver.is_empty());
        assert!(!format!("{m:?}").contains(&std::env::var("PATH").unwrap()));
    }

    #[test]
    fn bad_webhooks_and_routes_are_refused_naming_the_line_and_key() {
        let p = Path::new("m.toml");
        let err = |text: &str| Manifest::parse(p, text).unwrap_err().to_string();
        let hook = "[webhooks.ops]
url = 'https://ops.example/'
secret_env = 'PATH'
";
        for (text, says) in [
            (
                format!("{hook}[jobs.x]\ncomponent = 'a'\ndeliver = {{ ops = ['finished'] }}\n"),
                "job x: line 6: deliver.ops: unknown ending \"finished\" (known: succeeded, failed, cancelled, crashed, skipped)",
            ),
            (
                "[jobs.x]\ncomponent = 'a'\ndeliver = { ops = ['failed'] }\n".to_string(),
                "job x: line 3: deliver.ops: webhook \"ops\" is not declared ([webhooks.ops])",
            ),
            (
                format!("{hook}[defaults]\ndeliver.ops = []\n[jobs.x]\ncomponent = 'a'\n"),
                "job x: line 5: deliver.ops: name at least one ending",
            ),
            (
                "[webhooks.ops]\nurl = 'ftp://ops.example/'\nsecret_env = 'PATH'\n".to_string(),
                "webhook ops: line 2: url: use an http:// or https:// URL with a host",
            ),
            (
                "[webhooks.ops]\nsecret_env = 'PATH'\nurl = 'not a url'\n".to_string(),
                "webhook ops: line 3: url: use an http:// or https:// URL",
            ),
            (
                "[webhooks.ops]\nurl = 'https://u:p@ops.example/'\nsecret_env = 'PATH'\n".to_string(),
                "webhook ops: line 2: url: carries no user or password",
            ),
            (
                "[webhooks.ops]\nurl = 'https://ops.example/'\nsecret_env = 'JOBHOST_NO_SUCH_SECRET_VAR'\n".to_string(),
                "webhook ops: line 3: secret_env: the environment has no JOBHOST_NO_SUCH_SECRET_VAR (its signing secret)",
            ),
            (
                "[webhooks.ops]\nurl = 'https://ops.example/'\n".to_string(),
                "webhook ops: line 1: `secret_env` is required",
            ),
            (
                format!("{hook}timeout = '2m'\n"),
                "webhook ops: line 4: timeout: more than 0, at most 60s",
            ),
            (
                format!("{hook}backoff = '1h'\nbackoff_max = '1m'\n"),
                "webhook ops: line 5: backoff_max: at least `backoff`",
            ),
            (
                "[webhooks.Ops]\nurl = 'https://ops.example/'\nsecret_env = 'PATH'\n".to_string(),
                "webhook Ops: line 1: ",
            ),
        ] {
            let got = err(&text);
            assert!(got.contains(says), "{text}\n=> {got}");
        }
    }

    #[test]
    fn reads_claim_limits() {
        let m = Manifest::parse(
            Path::new("/srv/jobhost.toml"),
            r#"
            [jobs.sync]
            component = "sync.wasm"
            rate = "60/min"
            concurrency = 4
            key = "/customer"
            key_rate = "5/s"
            key_concurrency = 1
            order = "fifo"
            "#,
        )
        .unwrap();
        let limits = &m.job("sync").unwrap().flow.limits;
        assert_eq!(limits.rate, Some(Rate::parse("60/min").unwrap()));
        assert_eq!(limits.concurrency, NonZeroU32::new(4));
        assert_eq!(limits.key, Some(LimitKey::Pointer("/customer".into())));
        assert_eq!(limits.key_rate, Some(Rate::parse("5/s").unwrap()));
        assert_eq!(limits.key_concurrency, NonZeroU32::new(1));
        assert!(limits.fifo());
    }

    #[test]
    fn refuses_nonsense_claim_limits_naming_the_line() {
        let p = Path::new("m.toml");
        let err = |limit: &str| {
            Manifest::parse(p, &format!("[jobs.x]\ncomponent = 'a'\n{limit}\n"))
                .unwrap_err()
                .to_string()
        };
        for (limit, says) in [
            ("concurrency = 0", "nonzero"),
            ("concurrency = -2", "nonzero"),
            ("key_concurrency = 0", "nonzero"),
            ("rate = '0/s'", "invalid rate"),
            ("rate = '-5/s'", "invalid rate"),
            ("rate = '60/day'", "invalid rate"),
            ("rate = 60", "invalid type"),
            ("key_rate = '5/fortnight'", "invalid rate"),
            ("key = 'customer'", "invalid key"),
            ("key = '/a//b'", "invalid key"),
            ("key = '/a~2'", "invalid key"),
            ("order = 'lifo'", "unknown variant"),
            (
                "key_concurrency = 1",
                "key_concurrency limits runs per key: it needs `key`",
            ),
            (
                "key_rate = '1/s'",
                "key_rate limits runs per key: it needs `key`",
            ),
            (
                "order = 'fifo'",
                "order = \"fifo\" limits runs per key: it needs `key`",
            ),
            (
                "sequential = true\nconcurrency = 2",
                "`concurrency = 1` is sequential",
            ),
        ] {
            let refused = err(limit);
            assert!(refused.contains(says), "{limit}: {refused}");
            assert!(
                refused.contains("line 3"),
                "{limit} names no line: {refused}"
            );
        }
    }

    #[test]
    fn refuses_bad_manifests() {
        let p = Path::new("m.toml");
        let err = |text: &str| Manifest::parse(p, text).unwrap_err().to_string();
        assert!(err("[jobs.x]\ncomponent='a'\ntimeout='soon'").contains("invalid duration"));
        assert!(err("[jobs.x]\ncomponent='a'\ncolour='red'").contains("unknown field"));
        assert!(err("[jobs.X]\ncomponent='a'").contains("invalid job name"));
        assert!(err("[jobs.x]\ntimeout='1s'").contains("no `component`"));
        // Every problem at once.
        let all = err(
            "[collections.files]\nscan = 'nobody'\n[links.api]\nurl = 'http://x/'\nmethods = ['BREW']\n\
             [jobs.a]\ncomponent = 'a'\ngrants.files = { read = ['nowhere'] }\n\
             [jobs.b]\ncomponent = 'b'\ngrants.links = ['elsewhere']\n[jobs.C]\ncomponent = 'c'",
        );
        for expected in [
            "5 problems",
            "collection files: its scan job \"nobody\"",
            "link api: unknown method \"BREW\"",
            "job a: granted collection \"nowhere\" is not declared",
            "job b: granted link \"elsewhere\" is not declared",
            "job C: invalid job name",
        ] {
            assert!(all.contains(expected), "{expected:?} in {all}");
        }
        assert!(
            err("[jobs.x]\ncomponent='a'\ngrants.db={read=['jobhost_runs']}")
                .contains("belongs to the host")
        );
        assert!(err("[jobs.x]\ncomponent='a'\ngrants.net={}").contains("unknown field"));
        assert!(
            err("[jobs.x]\ncomponent='a'\nlane='bulk'")
                .contains("its lane \"bulk\" is not declared")
        );
        assert!(err("[lanes.bulk]\nworkers=0").contains("workers must be 1 to 1024"));
        assert!(err("[jobs.x]\ncomponent='a'\nmax_per_tenant=0").contains("at least 1"));
        assert!(
            err("[jobs.x]\ncomponent='a'\nmax_queued=0").contains("max_queued must be at least 1")
        );
        assert!(err("[tenants.acme]\nmax_queued=0").contains("[tenants.acme]: max_queued"));
        assert!(err("[jobs.x]\ncomponent='a'\nover_limit='maybe'").contains("unknown variant"));
        assert!(err("[tenants.acme]\nover_quota='later'").contains("unknown variant"));
        assert!(err("[tenants.\"a b\"]\nfuel_per_hour=1").contains("tenant \"a b\""));
        assert!(
            err("[links.api]\nurl='http://x/'\nheaders=['accept', 'X-Forwarded-Host']")
                .contains("link api: a mount may not accept the header \"X-Forwarded-Host\"")
        );
        assert!(
            err("[links.api]\nurl='http://x/'\nheaders=['x-key']\ncredential={header='X-Key', env='K'}")
                .contains("may not accept the header \"x-key\"")
        );
    }

    #[test]
    fn a_mount_declares_its_limits_and_nonsense_is_refused_with_its_line() {
        let p = Path::new("m.toml");
        let m = Manifest::parse(
            p,
            "[links.a]\nurl='http://x/'\nrate='25/s'\nconcurrency=10\nmax_wait='2s'\n\
             [links.b]\nurl='http://x/'",
        )
        .unwrap();
        let limits = m.mounts["a"].limits;
        assert_eq!(limits.rate.map(|r| r.to_string()).as_deref(), Some("25/s"));
        assert_eq!(limits.concurrency.map(|c| c.get()), Some(10));
        assert_eq!(limits.max_wait, Duration::from_secs(2));
        assert_eq!(m.mounts["b"].limits, MountLimits::default());
        let err = |text: &str| Manifest::parse(p, text).unwrap_err().to_string();
        for (bad, expected) in [
            ("rate='0/s'", "invalid rate \"0/s\""),
            ("rate='-5/min'", "invalid rate"),
            ("rate='5/day'", "invalid rate"),
            ("concurrency=0", "nonzero"),
            ("concurrency=-2", "nonzero"),
            ("max_wait='soon'", "invalid duration"),
        ] {
            let got = err(&format!("[links.a]\nurl='http://x/'\n{bad}"));
            assert!(
                got.contains(expected) && got.contains("line 3"),
                "{bad}: {got}"
            );
        }
    }

    #[test]
    fn a_mount_accepts_the_default_headers_or_its_own_list() {
        let p = Path::new("m.toml");
        let m = Manifest::parse(
            p,
            "[links.a]\nurl='http://x/'\n[links.b]\nurl='http://x/'\nheaders=['X-Request-Id']",
        )
        .unwrap();
        assert_eq!(
            m.mounts["a"].headers,
            crate::sandbox::links::headers::default_headers()
        );
        assert_eq!(m.mounts["b"].headers, ["x-request-id".to_string()].into());
    }

    proptest! {
        #![proptest_config(crate::rules::fuzzing::config(500))]

        /// Any manifest text loads or is refused with a message, never a panic.
        #[test]
        fn manifests_load_or_are_refused(
            text in prop_oneof![
                crate::rules::fuzzing::text(),
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
