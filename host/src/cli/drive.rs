//! `host drive`: one bounded sweep, then exit (see `crate::service::drive`).

use super::failure::Failure;
use super::global::Global;
use crate::rules::units::parse_duration;
use crate::runs::runner::RunnerSettings;
use crate::sandbox::engine::EngineSettings;
use crate::service::app::{App, AppConfig};
use crate::service::catalog::Catalog;
use crate::service::drive::{DriveLimits, drive as sweep};
use crate::service::schedule::cron::parse_tz;
use crate::service::schedule::surveillance::Surveillance;
use clap::Args;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

#[derive(Args, Debug)]
pub struct DriveArgs {
    /// The jobs this sweep may run (runs of other jobs stay queued).
    #[arg(long)]
    pub manifest: PathBuf,
    /// Most runs attempted.
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub limit: u32,
    /// Most passes of each run.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub max_passes: u32,
    /// Most due runs looked at, including runs of jobs not in the manifest (default: 20
    /// times the limit).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub scan: Option<u32>,
    /// How often the fleet checks for crashed runs: the sweep checks first unless a host
    /// (or another sweep) checked within this interval.
    #[arg(long, value_parser = parse_duration, default_value = "60s")]
    pub surveillance_interval: Duration,
    #[command(flatten)]
    pub attempts: super::global::AttemptArgs,
    /// Reruns a crashed run gets.
    #[arg(long, default_value_t = 3)]
    pub max_reruns: i64,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Exit 0 when the sweep ran (whatever its runs did: the report says), 2 or 4 when it
/// could not.
pub async fn drive(global: &Global, args: DriveArgs) -> Result<u8, Failure> {
    let manifest = super::serve::serving_manifest(global, &args.manifest)?;
    let host = manifest.host.clone();
    let tz = parse_tz(host.timezone.as_deref().unwrap_or("UTC"))?;
    let app = App::open(AppConfig {
        db_url: global.db_url(host.db.as_deref()),
        operator_migrations: host.migrations.clone(),
        engine: EngineSettings {
            pooling: false,
            max_instances: 16,
            cache_dir: Some(global.cache_dir()),
            fuel: true,
            compiler: Some(global.compiler()?),
        },
        runner: RunnerSettings {
            quotas: manifest.quotas.clone(),
            ..args.attempts.runner()
        },
        home: global.home.clone(),
        collections: manifest.collections.clone(),
        mounts: manifest.mounts.clone(),
        key_rotation: Duration::from_secs(24 * 3600),
    })
    .await?;
    let catalog = Arc::new(Catalog::load(&app, manifest.jobs, tz).await?);
    // A sweep runs what it claims at once: every component compiled first.
    let problems = catalog.compile_pending(&app).await;
    if !problems.is_empty() {
        return Err(crate::service::catalog::CatalogError::Problems(problems).into());
    }
    let surveillance = Surveillance {
        store: app.store.clone(),
        catalog: Some(catalog.clone()),
        host_id: app.runner.host_id().to_string(),
        interval: args.surveillance_interval,
        stale: args.attempts.lease_grace,
        max_reruns: args.max_reruns,
    };
    surveillance.check().await?;
    // Parents whose children ended since are due in this sweep.
    crate::runs::family::sweep(&app.store, &app.metrics, Some(&app.runner)).await?;
    let (stop, cancel) = tokio::sync::watch::channel(false);
    let signalled = super::serve::shutdown_signal();
    let stopping = tokio::spawn(async move {
        signalled.await;
        let _ = stop.send(true);
    });
    let limits = DriveLimits {
        runs: args.limit as usize,
        max_passes: args.max_passes,
        scan: args.scan.map_or(args.limit as usize * 20, |s| s as usize),
    };
    let progress = super::progress::Progress::new(args.json);
    let on_pass = |run: &crate::store::RunRecord| progress.pass(run);
    let report = sweep(
        &app.store,
        &app.runner,
        &catalog,
        limits,
        cancel,
        Some(&on_pass),
    )
    .await;
    progress.finish();
    stopping.abort();
    app.runner.flush().await;
    app.store.close().await;
    let report = report?;
    if args.json {
        println!(
            "{}",
            serde_json::to_value(&report).expect("a report serialises")
        );
    } else {
        for run in &report.runs {
            println!(
                "{} {:<20} {:<9} after {} pass{}{}",
                run.run_id,
                run.job,
                run.result,
                run.passes,
                if run.passes == 1 { "" } else { "es" },
                run.code
                    .as_deref()
                    .map(|c| format!(" ({c})"))
                    .unwrap_or_default()
            );
        }
        println!(
            "scanned {}, attempted {}: advanced {}, completed {}, retrying {}, failed {}, skipped {}",
            report.scanned,
            report.attempted,
            report.advanced,
            report.completed,
            report.retrying,
            report.failed,
            report.skipped
        );
    }
    Ok(0)
}
