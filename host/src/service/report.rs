//! Delivering operations reports from the outbox table: to the log always, and to a
//! webhook when one is configured (a JSON POST with a fixed schema, retried with backoff).
//!
//! Reports are written in the same transaction as what they report (a failed run, a
//! crash, a missed schedule), so none is lost; delivery is at least once, and each carries
//! its `id` for the receiver to drop duplicates. A report carries a job, fixed codes and
//! times, never host-internal error text. A report about a run names its trace
//! (`trace_id`), and its webhook call carries a `traceparent` in that trace.

use crate::rules::trace::TraceParent;
use crate::runs::metrics::Metrics;
use crate::store::{ReportRecord, Store, StoreError};
use std::sync::Arc;
use std::time::Duration;

/// Reports taken per round.
const BATCH: i64 = 100;
/// How long a claimed report is hidden from other hosts while this one delivers it.
const CLAIM: Duration = Duration::from_secs(60);
/// Webhook attempts before a report is given up on (and the give-up logged).
pub const MAX_WEBHOOK_ATTEMPTS: i64 = 12;

pub struct Reporter {
    store: Store,
    webhook: Option<Webhook>,
    metrics: Arc<Metrics>,
}

struct Webhook {
    url: String,
    client: reqwest::Client,
}

impl Reporter {
    pub fn new(store: Store, webhook: Option<String>, metrics: Arc<Metrics>) -> Self {
        let webhook = webhook.map(|url| Webhook {
            url,
            client: reqwest::Client::builder()
                .timeout(Duration::from_secs(10))
                .build()
                .expect("a plain HTTP client builds"),
        });
        Reporter {
            store,
            webhook,
            metrics,
        }
    }

    /// Delivers what is due; returns how many reports it handled.
    pub async fn deliver_due(&self) -> Result<usize, StoreError> {
        let reports = self
            .store
            .claim_reports(BATCH, CLAIM.as_millis() as i64)
            .await?;
        for report in &reports {
            self.deliver(report).await?;
        }
        Ok(reports.len())
    }

    async fn deliver(&self, report: &ReportRecord) -> Result<(), StoreError> {
        if report.logged_at.is_none() {
            // A refusal's reason: host-written text (`sandbox::refusal`).
            let reason = serde_json::from_str::<serde_json::Value>(&report.body)
                .ok()
                .and_then(|body| body["reason"].as_str().map(str::to_string));
            tracing::warn!(
                report_id = report.id,
                kind = %report.kind,
                job = %report.job,
                run_id = report.run_id.as_deref(),
                code = report.code.as_deref(),
                reason = reason.as_deref(),
                "report"
            );
            self.metrics.report(&report.kind, "log", "delivered");
            self.store.report_logged(report.id).await?;
        }
        let Some(webhook) = &self.webhook else {
            return self.store.report_delivered(report.id, 0).await;
        };
        let body = payload(report);
        let mut post = webhook.client.post(&webhook.url).json(&body);
        if let Some(trace) = body["trace_id"]
            .as_str()
            .and_then(TraceParent::child_of_trace)
        {
            post = post.header("traceparent", trace.to_string());
        }
        let sent = post.send().await.map(|r| r.status().is_success());
        if sent.is_ok_and(|ok| ok) {
            self.metrics.report(&report.kind, "webhook", "delivered");
            return self.store.report_delivered(report.id, 1).await;
        }
        let attempts = report.webhook_attempts + 1;
        if attempts >= MAX_WEBHOOK_ATTEMPTS {
            self.metrics.report(&report.kind, "webhook", "gave_up");
            tracing::error!(report_id = report.id, kind = %report.kind, job = %report.job, attempts, "webhook delivery given up");
            return self.store.report_delivered(report.id, 1).await;
        }
        self.metrics.report(&report.kind, "webhook", "retry");
        self.store
            .report_retry(report.id, retry_delay(attempts).as_millis() as i64)
            .await
    }
}

/// The webhook's JSON: the stored body (kind, job, code, ...) plus the report's id and
/// creation time.
pub fn payload(report: &ReportRecord) -> serde_json::Value {
    let mut body: serde_json::Value =
        serde_json::from_str(&report.body).unwrap_or_else(|_| serde_json::json!({}));
    body["id"] = report.id.into();
    body["at"] = crate::service::views::time(report.created_at).into();
    body
}

/// 1s, 2s, 4s, ... capped at five minutes.
fn retry_delay(attempts: i64) -> Duration {
    Duration::from_secs(1u64 << attempts.clamp(0, 8) as u32).min(Duration::from_secs(300))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_back_off_to_a_cap() {
        assert_eq!(retry_delay(1), Duration::from_secs(2));
        assert_eq!(retry_delay(3), Duration::from_secs(8));
        assert_eq!(retry_delay(20), Duration::from_secs(256));
    }
}
