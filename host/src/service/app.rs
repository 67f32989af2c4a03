//! Wiring: the store, the engine, the guest database and the runner of one host process.

use crate::rules::job::JobSpec;
use crate::runs::metrics::Metrics;
use crate::runs::runner::{Runner, RunnerSettings};
use crate::sandbox::engine::{Engine, EngineError, EngineSettings, LoadError, Loaded, Prepared};
use crate::sandbox::files::{CollectionSpec, Files, FilesError};
use crate::sandbox::links::token::Signer;
use crate::sandbox::links::{LinkError, Links, MountSpec};
use crate::store::guest::GuestDb;
use crate::store::{JobRecord, JobUpsert, Store, StoreError};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;

#[derive(Debug, thiserror::Error)]
pub enum AppError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Engine(#[from] EngineError),
    #[error(transparent)]
    Load(#[from] LoadError),
    #[error(transparent)]
    Files(#[from] FilesError),
    #[error(transparent)]
    Links(#[from] LinkError),
}

pub struct AppConfig {
    pub db_url: String,
    pub operator_migrations: Option<PathBuf>,
    pub engine: EngineSettings,
    pub runner: RunnerSettings,
    /// The host's home: default collections live under it.
    pub home: PathBuf,
    pub collections: BTreeMap<String, CollectionSpec>,
    pub mounts: BTreeMap<String, MountSpec>,
    /// How long a key signs per-attempt tokens before a new one is made.
    pub key_rotation: Duration,
}

pub struct App {
    pub store: Store,
    pub engine: Arc<Engine>,
    pub runner: Arc<Runner>,
    pub metrics: Arc<Metrics>,
    pub files: Arc<Files>,
    pub links: Arc<Links>,
    /// Wakes whoever claims runs (`host serve`'s dispatcher): a run was queued here or is
    /// due soon.
    pub wake: Arc<Notify>,
}

impl App {
    pub async fn open(config: AppConfig) -> Result<App, AppError> {
        let store = Store::open(&config.db_url).await?;
        if let Some(dir) = &config.operator_migrations {
            let applied = store.migrate_operator(dir).await?;
            for name in applied {
                tracing::info!(migration = %name, "applied operator migration");
            }
        }
        let engine = Arc::new(Engine::new(&config.engine)?);
        let guest_db = GuestDb::open(&store).await?;
        let metrics = Arc::new(Metrics::default());
        let files = Arc::new(Files::open(
            &config.collections,
            &config.home,
            store.clone(),
        )?);
        let signer = Arc::new(Signer::open(store.clone(), config.key_rotation).await?);
        let links = Arc::new(Links::open(&config.mounts, signer, store.clone())?);
        let wake = Arc::new(Notify::new());
        let runner = Arc::new(Runner::new(
            store.clone(),
            engine.clone(),
            guest_db,
            host_id(),
            config.runner,
            metrics.clone(),
            files.clone(),
            links.clone(),
            wake.clone(),
        ));
        Ok(App {
            store,
            engine,
            runner,
            metrics,
            files,
            links,
            wake,
        })
    }

    /// Loads a job's component (compiling it off the async threads) and checks it against
    /// the job's grants.
    pub async fn load(&self, spec: &JobSpec) -> Result<Arc<Loaded>, LoadError> {
        let engine = self.engine.clone();
        let path = spec.component.clone();
        let grants = spec.grants.clone();
        tokio::task::spawn_blocking(move || engine.load(&path, &grants))
            .await
            .expect("component loading does not panic")
    }

    /// Takes a job's component on without waiting for its compile (`Engine::prepare`):
    /// loaded if this host has it compiled, otherwise checked by name and left to
    /// [`App::load`].
    pub async fn prepare(&self, spec: &JobSpec) -> Result<Prepared, LoadError> {
        let engine = self.engine.clone();
        let path = spec.component.clone();
        let grants = spec.grants.clone();
        tokio::task::spawn_blocking(move || engine.prepare(&path, &grants))
            .await
            .expect("component checking does not panic")
    }

    /// Records the job's registration (first-seen time, component `digest`, definition)
    /// and its routes of delivered endings.
    pub async fn register(
        &self,
        spec: &JobSpec,
        digest: &str,
        next_fire_at: Option<i64>,
    ) -> Result<JobRecord, StoreError> {
        let definition = serde_json::to_string(spec).expect("a job spec serialises");
        if spec.tenant != crate::rules::tenant::OPERATOR_TENANT {
            self.store.add_tenant(&spec.tenant).await?;
        }
        let record = self
            .store
            .upsert_job(&JobUpsert {
                name: &spec.name,
                tenant: &spec.tenant,
                component_path: &display_path(&spec.component),
                component_digest: digest,
                spec: &definition,
                schedule: spec.schedule.as_deref(),
                next_fire_at,
                per_tenant: spec.per_tenant,
                sequential: spec.flow.sequential,
                max_per_tenant: spec.flow.max_per_tenant,
                over_limit: spec.flow.over_limit,
                limits: &spec.flow.limits,
            })
            .await?;
        self.store
            .set_delivery_routes(&spec.name, &spec.deliver)
            .await?;
        Ok(record)
    }
}

fn display_path(path: &Path) -> String {
    path.canonicalize()
        .unwrap_or_else(|_| path.to_path_buf())
        .display()
        .to_string()
}

/// This process's identity on run and attempt records.
fn host_id() -> String {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "host".into());
    format!("{name}-{}", std::process::id())
}
