//! `/metrics`: this host's counters and the fleet's gauges, read from the database when
//! scraped (off the runs' path): runs by status and code, the queue by tenant and by lane,
//! runs dropped and put off by reason, each tenant's use of the last hour, each tenant's
//! queued runs against its cap (`backlog`), and due runs a claim limit holds, by job; and
//! this host's calls held by each mount's limits and its attempts at webhook deliveries,
//! and the deliveries pending by webhook (the operator's view only: they name the mount or
//! webhook).
//!
//! Open to anyone who reaches the port, it names no job, run, file or tenant: without a
//! token the series are summed over their job and tenant labels, and gauges by tenant are
//! left out. The operator's token sees every series; a tenant's token its own tenant's
//! and those that name no one (`metrics::View`). A token that is presented must be valid.

use super::auth;
use super::error::ApiError;
use super::state::Shared;
use crate::rules::tenant::Principal;
use crate::runs::metrics::{Gauge, View};
use crate::store::{RunStatus, Store};
use axum::extract::State;
use axum::http::{HeaderMap, header};
use axum::response::{IntoResponse, Response};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// How long the fleet's gauges are reused. `/metrics` is open to anyone who reaches the
/// port, and the statements behind the gauges read whole tables: however often it is
/// scraped, they run at most once per this on each host.
const GAUGES_FRESH: Duration = Duration::from_secs(1);

#[utoipa::path(get, path = "/metrics", tag = "open", security((), ("bearer" = [])),
    responses(
        (status = 200, description = "Prometheus text: without a token no job, tenant, mount or webhook is named; a tenant's token sees its own", body = String, content_type = "text/plain"),
        (status = 401, description = "`unauthenticated` or `token_expired`: a token was given and is not valid", body = super::error::ErrorBody)))]
pub(super) async fn metrics(
    State(s): State<Arc<Shared>>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let principal = if auth::has_token(&headers) {
        match auth::principal(&s, &headers).await {
            Ok((principal, _)) => Some(principal),
            Err(refused) => return Ok(refused),
        }
    } else {
        None
    };
    let view = match &principal {
        None => View::Open,
        Some(Principal::Operator) => View::Operator,
        Some(Principal::Tenant(own)) => View::Tenant(own),
    };
    let gauges = fleet_gauges(&s).await?;
    for (mount, counts) in s.app.links.limit_counts() {
        s.app
            .metrics
            .mount_limits(mount, counts.waited, counts.wait, counts.refused);
    }
    let text = s.app.metrics.render(&gauges, view);
    Ok(([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response())
}

/// The gauges read from the database, at most `GAUGES_FRESH` old; concurrent scrapes wait
/// for one read.
async fn fleet_gauges(s: &Shared) -> Result<Arc<Vec<Gauge>>, ApiError> {
    let mut cached = s.gauges.lock().await;
    if let Some((read_at, gauges)) = cached.as_ref()
        && read_at.elapsed() < GAUGES_FRESH
    {
        return Ok(gauges.clone());
    }
    let store = &s.app.store;
    let counts = store.count_runs().await?;
    let mut gauges = run_gauges(&counts);
    queue_gauges(s, store, &mut gauges).await?;
    deferral_gauges(store, &mut gauges).await?;
    usage_gauges(s, &mut gauges).await?;
    backlog_gauges(store, &mut gauges).await?;
    pause_gauges(s, &mut gauges).await?;
    held_gauges(store, &mut gauges).await?;
    delivery_gauges(store, &mut gauges).await?;
    let gauges = Arc::new(gauges);
    *cached = Some((Instant::now(), gauges.clone()));
    Ok(gauges)
}

/// Due runs a claim limit holds back, by job and limit (`concurrency`, `rate`, `key`).
async fn held_gauges(store: &Store, gauges: &mut Vec<Gauge>) -> Result<(), ApiError> {
    for (job, limit, n) in store.held_runs().await? {
        gauges.push(Gauge {
            name: "jobhost_runs_held",
            help: "Due runs a claim limit holds queued, by job and limit (`concurrency`, `rate`, `key`), among the 10 000 oldest due runs of jobs with limits.",
            labels: vec![("job", job), ("limit", limit)],
            value: n as f64,
        });
    }
    Ok(())
}

/// Endings waiting to be delivered, fleet-wide and by webhook (the operator's view only:
/// webhooks are its own), and how long the oldest has waited since it was written or
/// retried by an operator.
async fn delivery_gauges(store: &Store, gauges: &mut Vec<Gauge>) -> Result<(), ApiError> {
    let backlog = store.delivery_backlog().await?;
    let pending: i64 = backlog.iter().map(|(_, n, _)| n).sum();
    let oldest_ms = backlog.iter().map(|(_, _, ms)| *ms).max().unwrap_or(0);
    gauges.push(Gauge {
        name: "jobhost_deliveries_pending",
        help: "Endings waiting to be delivered to a webhook (being tried or retried).",
        labels: Vec::new(),
        value: pending as f64,
    });
    gauges.push(Gauge {
        name: "jobhost_deliveries_oldest_pending_seconds",
        help: "How long the oldest pending delivery has waited since it was written (or retried by an operator).",
        labels: Vec::new(),
        value: oldest_ms as f64 / 1000.0,
    });
    for (webhook, n, ms) in backlog {
        let labels = vec![("webhook", webhook)];
        gauges.push(Gauge {
            name: "jobhost_webhook_deliveries_pending",
            help: "Endings waiting to be delivered, by webhook.",
            labels: labels.clone(),
            value: n as f64,
        });
        gauges.push(Gauge {
            name: "jobhost_webhook_oldest_pending_seconds",
            help: "How long each webhook's oldest pending delivery has waited since it was written (or retried by an operator).",
            labels,
            value: ms as f64 / 1000.0,
        });
    }
    Ok(())
}

/// What is paused, fleet-wide: one series per pause, labelled `job`, `tenant` or `lane`.
async fn pause_gauges(s: &Shared, gauges: &mut Vec<Gauge>) -> Result<(), ApiError> {
    let pauses = s.app.runner.pauses().current().await?;
    for pause in &pauses.pauses {
        let Some(scope) = crate::queue::pause::Scope::parse(&pause.scope) else {
            continue;
        };
        gauges.push(Gauge {
            name: "jobhost_paused",
            help: "Paused jobs, tenants and lanes (1 each): nothing of them is claimed.",
            labels: vec![(scope.as_str(), pause.name.clone())],
            value: 1.0,
        });
    }
    Ok(())
}

/// Runs in the database by status and failure code (every status, 0 if none), and the
/// skipped ones again by why they were not run.
fn run_gauges(counts: &[(String, String, i64)]) -> Vec<Gauge> {
    let mut gauges = Vec::new();
    let statuses = RunStatus::ALL.iter().map(|s| s.as_str());
    for status in statuses.chain([crate::store::WAITING, crate::store::CLAIMED]) {
        let mut seen = false;
        for (_, code, n) in counts.iter().filter(|(s, _, _)| s == status) {
            seen = true;
            gauges.push(runs_gauge(status, code, *n));
        }
        if !seen {
            gauges.push(runs_gauge(status, "", 0));
        }
    }
    for (_, code, n) in counts
        .iter()
        .filter(|(s, _, _)| s == RunStatus::Skipped.as_str())
    {
        gauges.push(Gauge {
            name: "jobhost_runs_dropped",
            help: "Runs kept that were not run (status skipped), by reason: `tenant_limit` (max_per_tenant), or none (their instance was running).",
            labels: vec![("reason", code.clone())],
            value: *n as f64,
        });
    }
    gauges
}

fn runs_gauge(status: &str, code: &str, n: i64) -> Gauge {
    Gauge {
        name: "jobhost_runs",
        help: "Runs in the database, by status (`waiting`: queued, sleeping until its children ended; `claimed`: running, its guest not started) and failure code.",
        labels: vec![("status", status.to_string()), ("code", code.to_string())],
        value: n as f64,
    }
}

/// Due runs and the oldest one's wait: in all, by tenant, and by lane (every lane of this
/// host's jobs, idle ones at 0).
async fn queue_gauges(s: &Shared, store: &Store, gauges: &mut Vec<Gauge>) -> Result<(), ApiError> {
    let (due, lag_ms) = store.queue_lag().await?;
    gauges.push(Gauge {
        name: "jobhost_queue_due",
        help: "Queued runs that are due now.",
        labels: Vec::new(),
        value: due as f64,
    });
    gauges.push(Gauge {
        name: "jobhost_queue_lag_seconds",
        help: "How long the oldest due run has waited.",
        labels: Vec::new(),
        value: lag_ms as f64 / 1000.0,
    });
    let mut by_tenant: BTreeMap<String, (i64, i64)> = BTreeMap::new();
    let mut by_lane: BTreeMap<String, (i64, i64)> = s
        .catalog
        .all()
        .iter()
        .map(|j| (j.spec.lane.clone(), (0, 0)))
        .collect();
    for (tenant, job, due, lag_ms) in store.queue_lag_by_tenant_and_job().await? {
        let lane = s.catalog.lane_of(&job);
        for (key, map) in [(tenant, &mut by_tenant), (lane, &mut by_lane)] {
            let entry = map.entry(key).or_default();
            entry.0 += due;
            entry.1 = entry.1.max(lag_ms);
        }
    }
    let families = [
        (
            "tenant",
            &by_tenant,
            (
                "jobhost_tenant_queue_due",
                "Queued runs that are due now, by tenant.",
            ),
            (
                "jobhost_tenant_queue_lag_seconds",
                "How long the oldest due run of each tenant has waited.",
            ),
        ),
        (
            "lane",
            &by_lane,
            (
                "jobhost_lane_queue_due",
                "Queued runs that are due now, by lane.",
            ),
            (
                "jobhost_lane_queue_lag_seconds",
                "How long the oldest due run of each lane has waited.",
            ),
        ),
    ];
    for (label, map, (due_name, due_help), (lag_name, lag_help)) in families {
        for (key, (due, lag_ms)) in map {
            gauges.push(Gauge {
                name: due_name,
                help: due_help,
                labels: vec![(label, key.clone())],
                value: *due as f64,
            });
            gauges.push(Gauge {
                name: lag_name,
                help: lag_help,
                labels: vec![(label, key.clone())],
                value: *lag_ms as f64 / 1000.0,
            });
        }
    }
    Ok(())
}

/// Runs waiting for a slot of `max_per_tenant` now, and how often runs were put off
/// without using an attempt, by reason.
async fn deferral_gauges(store: &Store, gauges: &mut Vec<Gauge>) -> Result<(), ApiError> {
    let (waiting, slot_waits, guest_defers) = store.deferrals().await?;
    gauges.push(Gauge {
        name: "jobhost_runs_waiting_for_slot",
        help: "Queued runs waiting for a slot of their job's max_per_tenant.",
        labels: Vec::new(),
        value: waiting as f64,
    });
    for (reason, n) in [("max_per_tenant", slot_waits), ("guest", guest_defers)] {
        gauges.push(Gauge {
            name: "jobhost_run_deferrals",
            help: "Times runs kept were put off without using an attempt, by reason: no slot of max_per_tenant, or the guest's defer.",
            labels: vec![("reason", reason.to_string())],
            value: n as f64,
        });
    }
    Ok(())
}

/// Each tenant with queued runs: how many (up to its cap), its cap, and whether it is at
/// it (its jobs' `jobs` calls, kicks and starts are refused `queue_full`).
async fn backlog_gauges(store: &Store, gauges: &mut Vec<Gauge>) -> Result<(), ApiError> {
    for (tenant, queued, cap) in crate::queue::backlog::tenants(store).await? {
        let labels = vec![("tenant", tenant)];
        gauges.push(Gauge {
            name: "jobhost_tenant_queued",
            help: "Each tenant's queued runs (due, delayed, retrying, deferred or waiting): what its max_queued caps.",
            labels: labels.clone(),
            value: queued as f64,
        });
        gauges.push(Gauge {
            name: "jobhost_tenant_max_queued",
            help: "Each tenant's cap on its queued runs (max_queued).",
            labels: labels.clone(),
            value: cap as f64,
        });
        gauges.push(Gauge {
            name: "jobhost_tenant_queue_full",
            help: "1 while a tenant has max_queued runs queued: new runs of its jobs are refused (queue_full).",
            labels,
            value: f64::from(u8::from(queued >= cap)),
        });
    }
    Ok(())
}

/// Each tenant's use of the last hour (what its quota measures) and whether it is over.
async fn usage_gauges(s: &Shared, gauges: &mut Vec<Gauge>) -> Result<(), ApiError> {
    let book = s.app.runner.quotas();
    for u in book.usage().await?.values() {
        let tenant = vec![("tenant", u.tenant.clone())];
        gauges.push(Gauge {
            name: "jobhost_tenant_fuel_used_last_hour",
            help: "Fuel used by each tenant's attempts that ended in the last hour (its quota's measure).",
            labels: tenant.clone(),
            value: u.fuel_used as f64,
        });
        gauges.push(Gauge {
            name: "jobhost_tenant_attempt_seconds_last_hour",
            help: "Wall time of each tenant's attempts that ended in the last hour (its quota's measure).",
            labels: tenant.clone(),
            value: u.wall_ms as f64 / 1000.0,
        });
        let over = book.quotas().exceeded_by(u).is_some();
        gauges.push(Gauge {
            name: "jobhost_tenant_over_quota",
            help: "1 while a tenant is over its quota: its runs wait or fail by its policy.",
            labels: tenant,
            value: f64::from(u8::from(over)),
        });
    }
    Ok(())
}
