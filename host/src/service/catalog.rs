//! The jobs a serving host runs: each job's definition, its loaded component and its
//! parsed schedule, reloaded when the component file changes.
//!
//! A host serves before its components are compiled: a job whose component it has not
//! compiled yet is registered at once and compiled in the background
//! ([`Catalog::compile_pending`]); meanwhile this host claims none of its runs (they
//! wait, shown `compiling`, their deadlines not begun) rather than claim one and hold it
//! through a compile of many seconds.

use crate::rules::job::JobSpec;
use crate::sandbox::engine::{LoadError, Loaded, Prepared};
use crate::service::app::{App, AppError};
use crate::service::schedule::cron::{Cron, CronError};
use chrono_tz::Tz;
use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};
use std::time::{Instant, SystemTime};

#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    #[error("job {job}: {source}")]
    Schedule { job: String, source: CronError },
    #[error("job {job}: {source}")]
    Load { job: String, source: AppError },
    /// Every problem found, one per line.
    #[error("{} problem{}:\n  {}", .0.len(), if .0.len() == 1 { "" } else { "s" }, .0.join("\n  "))]
    Problems(Vec<String>),
}

/// Every problem of a set of jobs on this host, not just the first: schedules that do not
/// parse, components that do not read or import what their job was not granted, tables
/// the job was granted that the database does not have.
pub async fn problems(app: &App, specs: &[JobSpec], tz: Tz) -> Vec<String> {
    let mut problems = Vec::new();
    for spec in specs {
        if let Err(e) = load_job(app, spec.clone(), tz).await {
            problems.push(e.to_string());
        }
        for table in spec.grants.db.iter().flat_map(|g| g.tables()) {
            match app.store.table_exists(table).await {
                Ok(true) => {}
                Ok(false) => problems.push(format!(
                    "job {}: granted table {table:?} does not exist (are the operator's migrations applied?)",
                    spec.name
                )),
                Err(e) => problems.push(format!("job {}: cannot check table {table:?}: {e}", spec.name)),
            }
        }
    }
    problems
}

/// What identifies a component file's version cheaply, before hashing it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct FileStamp {
    modified: Option<SystemTime>,
    len: u64,
}

impl FileStamp {
    fn of(spec: &JobSpec) -> Option<FileStamp> {
        let meta = std::fs::metadata(&spec.component).ok()?;
        Some(FileStamp {
            modified: meta.modified().ok(),
            len: meta.len(),
        })
    }
}

pub struct CatalogJob {
    pub spec: JobSpec,
    /// The component's digest, as registered.
    pub digest: String,
    /// The compiled component; `None` while it compiles in the background.
    pub loaded: Option<Arc<Loaded>>,
    pub cron: Option<Cron>,
    stamp: Option<FileStamp>,
}

pub struct Catalog {
    jobs: RwLock<BTreeMap<String, Arc<CatalogJob>>>,
}

impl Catalog {
    /// Checks every schedule and every component (loading those compiled already, the
    /// rest left to [`Catalog::compile_pending`]); refuses the whole set if one is bad, so
    /// a host never starts with half its jobs.
    pub async fn load(app: &App, specs: Vec<JobSpec>, tz: Tz) -> Result<Catalog, CatalogError> {
        let found = problems(app, &specs, tz).await;
        if !found.is_empty() {
            return Err(CatalogError::Problems(found));
        }
        let mut jobs = BTreeMap::new();
        for spec in specs {
            let job = load_job(app, spec, tz).await?;
            jobs.insert(job.spec.name.clone(), Arc::new(job));
        }
        let catalog = Catalog {
            jobs: RwLock::new(jobs),
        };
        for job in catalog.all() {
            catalog
                .register(app, &job)
                .await
                .map_err(|source| CatalogError::Load {
                    job: job.spec.name.clone(),
                    source,
                })?;
        }
        Ok(catalog)
    }

    pub fn get(&self, name: &str) -> Option<Arc<CatalogJob>> {
        self.jobs.read().expect("catalog lock").get(name).cloned()
    }

    /// The lane whose workers run `job` here: the default lane for a job this host does
    /// not have (another host's, or one no longer in the manifest).
    pub fn lane_of(&self, job: &str) -> String {
        self.get(job)
            .map(|j| j.spec.lane.clone())
            .unwrap_or_else(|| crate::rules::job::DEFAULT_LANE.to_string())
    }

    pub fn all(&self) -> Vec<Arc<CatalogJob>> {
        self.jobs
            .read()
            .expect("catalog lock")
            .values()
            .cloned()
            .collect()
    }

    /// Records the job's registration; a new or changed schedule starts from now.
    async fn register(&self, app: &App, job: &CatalogJob) -> Result<(), AppError> {
        let next = match &job.cron {
            Some(cron) => cron.next_after(app.store.now().await?),
            None => None,
        };
        app.register(&job.spec, &job.digest, next).await?;
        let compiling = job.loaded.is_none().then_some(job.digest.as_str());
        app.store.set_compiling(&job.spec.name, compiling).await?;
        if job.spec.run_on_boot
            && crate::queue::kick::boot(&app.store, &job.spec, &job.digest).await?
        {
            tracing::info!(job = %job.spec.name, digest = %job.digest, "queued the boot run of a new version");
            app.wake.notify_one();
        }
        Ok(())
    }

    /// Compiles, one after another, the components `load` left to compile, and puts
    /// each job in service as its compile ends (its waiting runs may be claimed at once).
    /// Every problem, one per job: a component that does not compile stays out of
    /// service here until its file changes.
    pub async fn compile_pending(&self, app: &App) -> Vec<String> {
        let mut problems = Vec::new();
        for job in self.all().into_iter().filter(|j| j.loaded.is_none()) {
            let began = Instant::now();
            let (name, digest) = (&job.spec.name, &job.digest);
            tracing::info!(job = %name, digest = %digest, "compiling a component before its first run");
            let loaded = app.load(&job.spec).await;
            if let Err(e) = app.store.compiled(name, digest).await {
                tracing::warn!(job = %name, code = "driver_failed", error = %e, "could not record a compile's end");
            }
            match loaded {
                // The file changed since it was checked: `reload_changed` takes it on.
                Ok(loaded) if loaded.digest != *digest => {}
                Ok(loaded) => {
                    self.compiled(&job, loaded);
                    let ms = began.elapsed().as_millis() as u64;
                    tracing::info!(job = %name, digest = %digest, ms, "compiled; the job's runs may start");
                    app.wake.notify_one();
                }
                Err(e) => {
                    tracing::warn!(job = %name, error = %e, "component not compiled; the job's runs wait here until its file changes");
                    problems.push(format!("job {name}: {e}"));
                }
            }
        }
        problems
    }

    /// Puts `job`, compiled as `loaded`, in service, unless a reload replaced it since.
    fn compiled(&self, job: &CatalogJob, loaded: Arc<Loaded>) {
        let mut jobs = self.jobs.write().expect("catalog lock");
        let Some(now) = jobs.get(&job.spec.name) else {
            return;
        };
        if now.loaded.is_some() || now.digest != job.digest {
            return;
        }
        let ready = Arc::new(CatalogJob {
            spec: now.spec.clone(),
            digest: now.digest.clone(),
            loaded: Some(loaded),
            cron: now.cron.clone(),
            stamp: now.stamp.clone(),
        });
        jobs.insert(job.spec.name.clone(), ready);
    }

    /// Reloads components whose file changed, compiling each before it replaces the
    /// previous one (which serves meanwhile). A component that no longer loads is
    /// reported once per change and the previous one kept.
    pub async fn reload_changed(&self, app: &App) {
        for job in self.all() {
            if FileStamp::of(&job.spec) == job.stamp {
                continue;
            }
            let (stamp, loaded) = load_component(app, &job.spec).await;
            let loaded = match loaded {
                Ok(loaded) => Some(loaded),
                Err(e) => {
                    tracing::warn!(job = %job.spec.name, error = %e, "changed component refused; keeping the previous one");
                    job.loaded.clone()
                }
            };
            let digest = loaded
                .as_ref()
                .map_or_else(|| job.digest.clone(), |l| l.digest.clone());
            let changed = digest != job.digest || (loaded.is_some() && job.loaded.is_none());
            let fresh = Arc::new(CatalogJob {
                spec: job.spec.clone(),
                digest,
                loaded,
                cron: job.cron.clone(),
                stamp,
            });
            if changed {
                if self.register(app, &fresh).await.is_err() {
                    tracing::warn!(job = %job.spec.name, code = "driver_failed", "could not record the reloaded component; will retry");
                    continue;
                }
                tracing::info!(job = %fresh.spec.name, digest = %fresh.digest, "component reloaded");
                app.wake.notify_one();
            }
            self.jobs
                .write()
                .expect("catalog lock")
                .insert(fresh.spec.name.clone(), fresh);
        }
    }
}

/// The component's file stamp, taken before it is read, and the component: a file that
/// changes while it loads (still being written, say) is loaded again next time, whether
/// this load succeeded or not.
async fn load_component(
    app: &App,
    spec: &JobSpec,
) -> (Option<FileStamp>, Result<Arc<Loaded>, LoadError>) {
    let stamp = FileStamp::of(spec);
    (stamp, app.load(spec).await)
}

async fn load_job(app: &App, spec: JobSpec, tz: Tz) -> Result<CatalogJob, CatalogError> {
    let cron = spec
        .schedule
        .as_deref()
        .map(|expr| Cron::parse(expr, tz))
        .transpose()
        .map_err(|source| CatalogError::Schedule {
            job: spec.name.clone(),
            source,
        })?;
    let stamp = FileStamp::of(&spec);
    let prepared = app
        .prepare(&spec)
        .await
        .map_err(|source| CatalogError::Load {
            job: spec.name.clone(),
            source: source.into(),
        })?;
    let (digest, loaded) = match prepared {
        Prepared::Ready(loaded) => (loaded.digest.clone(), Some(loaded)),
        Prepared::Compiling { digest } => (digest, None),
    };
    Ok(CatalogJob {
        spec,
        digest,
        loaded,
        cron,
        stamp,
    })
}
