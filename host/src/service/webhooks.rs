//! Delivering endings to webhooks: the worker of `host serve` that claims due deliveries
//! (written by the database as each run ended, `store::deliveries`), POSTs each one's
//! JSON signed with its webhook's secret (`rules::delivery`), records every attempt, and
//! decides what follows: delivered on a 2xx, otherwise another try after an exponential,
//! jittered delay, until the webhook's `retry_for` has passed since the delivery was
//! written (or retried by an operator), when it is given up (`failed`).
//!
//! Delivery is at least once: a claim hides a delivery from other hosts for longer than
//! its request may take, and a host that dies mid-send leaves it to be claimed again, so
//! a receiver drops duplicates by the `delivery_id` (the `jobhost-delivery` header). A
//! secret is read from the environment once, at start, and only ever keys the HMAC: it is
//! in no log, record, answer or error. A receiver's error text is stored bounded and
//! escaped; a request that got no answer is recorded in fixed words, never the client's
//! error (which may quote the URL).

use crate::rules::delivery::{SIGNATURE_HEADER, signature};
use crate::rules::guest_text::{for_storage, for_terminal};
use crate::rules::job::RetryPolicy;
use crate::rules::trace::TraceParent;
use crate::runs::metrics::Metrics;
use crate::runs::runner::backoff;
use crate::service::views::time;
use crate::store::{DeliveryNext, DeliveryRecord, DeliveryTry, RunRecord, Store, StoreError};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// Deliveries claimed per round.
const BATCH: i64 = 16;
/// How long the worker waits for due deliveries when a round found fewer than a batch.
const POLL: Duration = Duration::from_millis(250);
/// Beyond a request's own timeout, how long a claim hides a delivery from other hosts.
const CLAIM_SLACK: Duration = Duration::from_secs(30);
/// The receiver's answer kept of a failed attempt, in bytes: read, then stored.
const ANSWER_READ: usize = 1024;
const ANSWER_KEPT: usize = 300;

/// `[webhooks.NAME]`: where endings go and how hard to try.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookSpec {
    pub url: String,
    /// The environment variable holding the signing secret (the secret is never kept
    /// here: a manifest is printed in debugging).
    pub secret_env: String,
    pub timeout: Duration,
    /// The first retry's delay; each after doubles it, up to `backoff_max`, half jittered.
    pub backoff: Duration,
    pub backoff_max: Duration,
    /// How long a delivery is tried before it is given up.
    pub retry_for: Duration,
}

impl WebhookSpec {
    pub fn defaults(url: &str, secret_env: &str) -> WebhookSpec {
        WebhookSpec {
            url: url.to_string(),
            secret_env: secret_env.to_string(),
            timeout: Duration::from_secs(10),
            backoff: Duration::from_secs(5),
            backoff_max: Duration::from_secs(3600),
            retry_for: Duration::from_secs(24 * 3600),
        }
    }

    /// The delay before try `tries + 1` (after `tries` failed), or `None` to give up:
    /// when that try would come later than `retry_for` after `since`.
    fn next_try(
        &self,
        tries: i64,
        elapsed: Duration,
        rng: &mut impl rand::Rng,
    ) -> Option<Duration> {
        let policy = RetryPolicy {
            retries: u32::MAX,
            backoff_base: self.backoff,
            backoff_max: self.backoff_max,
        };
        let delay = backoff::delay(&policy, u32::try_from(tries).unwrap_or(u32::MAX), rng);
        (elapsed + delay <= self.retry_for).then_some(delay)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum WebhookError {
    #[error("webhook {webhook}: the environment has no {var} (its signing secret)")]
    NoSecret { webhook: String, var: String },
}

/// A signing secret: never printed.
#[derive(Clone)]
struct Secret(Vec<u8>);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(..)")
    }
}

#[derive(Debug, Clone)]
struct Webhook {
    spec: WebhookSpec,
    secret: Secret,
}

/// The webhooks a host delivers to, their secrets read from the environment.
#[derive(Debug, Clone, Default)]
pub struct Webhooks {
    by_name: BTreeMap<String, Webhook>,
}

impl Webhooks {
    /// Reads each webhook's secret; refuses a webhook whose variable is unset or empty.
    pub fn resolve(specs: &BTreeMap<String, WebhookSpec>) -> Result<Webhooks, WebhookError> {
        let mut by_name = BTreeMap::new();
        for (name, spec) in specs {
            let secret = std::env::var_os(&spec.secret_env)
                .filter(|v| !v.is_empty())
                .ok_or_else(|| WebhookError::NoSecret {
                    webhook: name.clone(),
                    var: spec.secret_env.clone(),
                })?;
            by_name.insert(
                name.clone(),
                Webhook {
                    spec: spec.clone(),
                    secret: Secret(secret.into_encoded_bytes()),
                },
            );
        }
        Ok(Webhooks { by_name })
    }

    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }
}

/// Claims and sends due deliveries.
pub struct Deliverer {
    store: Store,
    host: String,
    webhooks: Webhooks,
    names: Vec<String>,
    client: reqwest::Client,
    hold: Duration,
    metrics: Arc<Metrics>,
}

impl Deliverer {
    pub fn new(store: Store, host: &str, webhooks: Webhooks, metrics: Arc<Metrics>) -> Deliverer {
        let longest = webhooks
            .by_name
            .values()
            .map(|w| w.spec.timeout)
            .max()
            .unwrap_or_default();
        Deliverer {
            store,
            // Each claim is this host's own, so a late answer of a claim that expired
            // changes nothing another host claimed since.
            host: host.to_string(),
            names: webhooks.by_name.keys().cloned().collect(),
            webhooks,
            client: reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .user_agent("jobhost-webhooks")
                .build()
                .expect("a plain HTTP client builds"),
            hold: longest + CLAIM_SLACK,
            metrics,
        }
    }

    /// Sends what is due, each claimed delivery at once; how many it claimed.
    pub async fn deliver_due(&self) -> Result<usize, StoreError> {
        let claim = format!("{}:{}", self.host, uuid::Uuid::now_v7().simple());
        let due = self
            .store
            .claim_deliveries(&self.names, &claim, BATCH, self.hold.as_millis() as i64)
            .await?;
        let sends = due.iter().map(|d| self.deliver(d, &claim));
        for sent in futures_util::future::join_all(sends).await {
            sent?;
        }
        Ok(due.len())
    }

    async fn deliver(&self, delivery: &DeliveryRecord, claim: &str) -> Result<(), StoreError> {
        let Some(webhook) = self.webhooks.by_name.get(&delivery.webhook) else {
            return Ok(());
        };
        let run = self.store.get_run(&delivery.run_id).await?;
        let body = serde_json::to_vec(&body(delivery, run.as_ref())).expect("JSON serialises");
        let now = chrono::Utc::now().timestamp();
        let mut post = self
            .client
            .post(&webhook.spec.url)
            .timeout(webhook.spec.timeout)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header("jobhost-delivery", delivery.id.to_string())
            .header(SIGNATURE_HEADER, signature(&webhook.secret.0, now, &body));
        if let Some(trace) = run
            .as_ref()
            .and_then(|r| TraceParent::child_of_trace(&r.trace().trace_id()))
        {
            post = post.header("traceparent", trace.to_string());
        }
        let started = Instant::now();
        let (status_code, error) = match post.body(body).send().await {
            Ok(answer) if answer.status().is_success() => (Some(answer.status().as_u16()), None),
            Ok(answer) => (Some(answer.status().as_u16()), Some(refusal(answer).await)),
            Err(e) => (None, Some(unanswered(&e).to_string())),
        };
        let took = started.elapsed();
        let tries = delivery.attempts + 1;
        let next = match &error {
            None => DeliveryNext::Delivered,
            Some(_) => {
                let elapsed = Duration::from_millis(
                    u64::try_from(delivery.claimed_at - delivery.retry_from).unwrap_or(0),
                ) + took;
                match webhook.spec.next_try(tries, elapsed, &mut rand::rng()) {
                    Some(delay) => DeliveryNext::RetryIn(delay.as_millis() as i64),
                    None => DeliveryNext::GiveUp,
                }
            }
        };
        let result = match next {
            DeliveryNext::Delivered => "delivered",
            DeliveryNext::RetryIn(_) => "retry",
            DeliveryNext::GiveUp => "given_up",
        };
        self.metrics.delivery_attempt(&delivery.webhook, result);
        match next {
            DeliveryNext::Delivered => {
                tracing::info!(delivery_id = delivery.id, run_id = %delivery.run_id, webhook = %delivery.webhook, ending = %delivery.ending, tries, "delivered")
            }
            DeliveryNext::RetryIn(ms) => {
                tracing::warn!(delivery_id = delivery.id, run_id = %delivery.run_id, webhook = %delivery.webhook, status = status_code, error = error.as_deref(), tries, retry_in_ms = ms, "delivery failed; it will be tried again")
            }
            DeliveryNext::GiveUp => {
                tracing::error!(delivery_id = delivery.id, run_id = %delivery.run_id, webhook = %delivery.webhook, status = status_code, error = error.as_deref(), tries, "delivery given up after its retry window; `host deliveries retry` sends it again")
            }
        }
        let tried = DeliveryTry {
            host: &self.host,
            status_code: status_code.map(i64::from),
            error: error.as_deref(),
            duration_ms: took.as_millis() as i64,
            next,
        };
        if !self
            .store
            .settle_delivery(delivery.id, claim, &tried)
            .await?
        {
            tracing::warn!(
                delivery_id = delivery.id,
                "a delivery's claim expired before its attempt was recorded; another host may send it again"
            );
        }
        Ok(())
    }
}

/// The JSON a receiver gets: the ending, with what the run row says of it (only what the
/// delivery row holds if retention deleted the run meanwhile).
pub fn body(delivery: &DeliveryRecord, run: Option<&RunRecord>) -> Value {
    let mut body = json!({
        "type": "run.ended",
        "delivery_id": delivery.id,
        "run_id": delivery.run_id,
        "job": delivery.job,
        "tenant": delivery.tenant,
        "status": delivery.ending,
        "ended_at": time(delivery.created_at),
    });
    if let Some(run) = run {
        body["instance"] = run.instance.clone().into();
        body["code"] = run.last_code.clone().into();
        body["result"] = run
            .result
            .as_deref()
            .and_then(|r| serde_json::from_str(r).ok())
            .unwrap_or(Value::Null);
        body["attempts"] = run.attempts.into();
        body["origin"] = run.origin.clone().into();
        body["created_at"] = time(run.created_at).into();
        body["started_at"] = run.started_at.map(time).into();
        body["finished_at"] = run.finished_at.map(time).into();
        body["retry_of"] = run.retry_of.clone().into();
        body["rerun_of"] = run.rerun_of.clone().into();
        body["trace_id"] = run.trace().trace_id().into();
    }
    body
}

/// A non-2xx answer: its status and the start of its body, bounded and escaped.
async fn refusal(mut answer: reqwest::Response) -> String {
    let status = answer.status().as_u16();
    let mut bytes = Vec::new();
    while bytes.len() < ANSWER_READ {
        match answer.chunk().await {
            Ok(Some(chunk)) => {
                let room = ANSWER_READ - bytes.len();
                bytes.extend_from_slice(&chunk[..chunk.len().min(room)]);
            }
            _ => break,
        }
    }
    let text = String::from_utf8_lossy(&bytes);
    let shown = for_terminal(&text).replace('\n', "\\n").replace('\t', " ");
    let kept = for_storage(shown.trim(), ANSWER_KEPT);
    if kept.is_empty() {
        format!("HTTP {status}")
    } else {
        format!("HTTP {status}: {kept}")
    }
}

/// A request that got no answer, in fixed words.
fn unanswered(e: &reqwest::Error) -> &'static str {
    if e.is_timeout() {
        "no answer within the webhook's timeout"
    } else if e.is_connect() {
        "could not connect to the webhook"
    } else {
        "the request failed before an answer"
    }
}

/// Delivers until `stop`, polling while nothing is due.
pub async fn delivery_loop(deliverer: Deliverer, mut stop: watch::Receiver<bool>) {
    loop {
        let claimed = match deliverer.deliver_due().await {
            Ok(n) => n,
            Err(e) => {
                tracing::warn!(code = "driver_failed", error = %e, "webhook delivery failed");
                0
            }
        };
        if *stop.borrow() {
            return;
        }
        if claimed < BATCH as usize {
            tokio::select! {
                _ = tokio::time::sleep(POLL) => {}
                _ = stop.wait_for(|s| *s) => return,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn tries_back_off_until_the_window_is_spent() {
        let spec = WebhookSpec {
            backoff: Duration::from_secs(1),
            backoff_max: Duration::from_secs(60),
            retry_for: Duration::from_secs(600),
            ..WebhookSpec::defaults("http://x", "X")
        };
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        let first = spec.next_try(1, Duration::ZERO, &mut rng).unwrap();
        assert!(first >= Duration::from_millis(500) && first <= Duration::from_secs(1));
        let later = spec.next_try(10, Duration::ZERO, &mut rng).unwrap();
        assert!(later >= Duration::from_secs(30) && later <= Duration::from_secs(60));
        assert_eq!(spec.next_try(3, Duration::from_secs(599), &mut rng), None);
    }

    #[test]
    fn a_secret_is_never_printed() {
        let var = "JOBHOST_TEST_WEBHOOK_SECRET_PRINTED";
        let spec = WebhookSpec::defaults("http://x", "PATH");
        let hooks = Webhooks::resolve(&BTreeMap::from([("ops".to_string(), spec)])).unwrap();
        let shown = format!("{hooks:?}");
        let path = std::env::var("PATH").unwrap();
        assert!(!shown.contains(&path), "{shown}");
        assert!(shown.contains("Secret(..)"));
        let missing = WebhookSpec::defaults("http://x", var);
        let refused = Webhooks::resolve(&BTreeMap::from([("ops".to_string(), missing)]));
        assert_eq!(
            refused.unwrap_err().to_string(),
            format!("webhook ops: the environment has no {var} (its signing secret)")
        );
    }

    #[test]
    fn the_body_names_the_ending_and_the_run() {
        let delivery = DeliveryRecord {
            id: 7,
            run_id: "r1".into(),
            job: "hello".into(),
            tenant: "default".into(),
            ending: "failed".into(),
            created_at: 0,
            ..Default::default()
        };
        let gone = body(&delivery, None);
        assert_eq!(gone["delivery_id"], 7);
        assert_eq!(gone["status"], "failed");
        let run = RunRecord {
            id: "r1".into(),
            instance: "default".into(),
            last_code: Some("trap".into()),
            attempts: 3,
            result: Some("{\"n\":1}".into()),
            ..Default::default()
        };
        let full = body(&delivery, Some(&run));
        assert_eq!(full["code"], "trap");
        assert_eq!(full["attempts"], 3);
        assert_eq!(full["result"], json!({"n": 1}));
    }
}
