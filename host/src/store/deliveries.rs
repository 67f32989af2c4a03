//! The rows of delivered endings (migration 0034): each job's routes, the outbox of
//! deliveries the database writes as a run ends (its triggers, on every path that ends a
//! run), and each attempt at one. When to send, retry or give up is decided in
//! `service::webhooks`; these methods only read and write the rows.

use super::error::Result;
use super::handle::Store;
use super::pool::Exclusive;
use super::queries::{self, statements};
use crate::rules::delivery::Routes;
use serde::Serialize;
use sqlx::Connection;
use std::sync::LazyLock;

static SQLITE: LazyLock<DeliveryStatements> =
    LazyLock::new(|| DeliveryStatements::render(&queries::SQLITE));
static POSTGRES: LazyLock<DeliveryStatements> =
    LazyLock::new(|| DeliveryStatements::render(&queries::POSTGRES));

macro_rules! delivery_columns {
    () => {
        "id, run_id, job, tenant, webhook, ending, after_run, state, attempts, next_try_at, \
         retry_from, last_status, last_error, created_at, delivered_at, updated_at"
    };
}

statements! {
    DeliveryStatements;

    clear_routes = "DELETE FROM jobhost_delivery_routes WHERE job = $1";
    add_route = "INSERT INTO jobhost_delivery_routes (job, ending, webhook) VALUES ($1, $2, $3)";
    // Up to `$1` due deliveries to the webhooks of the JSON array `$2`, for claim `$3`,
    // hidden from other claims for `$4` ms. A delivery whose run retries or reruns another
    // waits while that run's delivery to the same webhook is pending: in order.
    claim = concat!(
        "UPDATE jobhost_deliveries SET claim = $3, next_try_at = {now} + $4, updated_at = {now} \
         WHERE id IN (SELECT d.id FROM jobhost_deliveries d \
             WHERE d.state = 'pending' AND d.next_try_at <= {now} \
             AND d.webhook IN {json_strings_2} \
             AND NOT EXISTS (SELECT 1 FROM jobhost_deliveries e WHERE e.run_id = d.after_run \
                 AND e.webhook = d.webhook AND e.state = 'pending') \
             ORDER BY d.next_try_at, d.id LIMIT $1 {skip_locked}) \
         AND state = 'pending' AND next_try_at <= {now} \
         RETURNING {now} AS claimed_at, ",
        delivery_columns!()
    );
    add_attempt = "INSERT INTO jobhost_delivery_attempts \
        (delivery_id, host, status_code, error, duration_ms, at) \
        VALUES ($1, $2, $3, $4, $5, {now})";
    // Delivery `$1`, while claim `$2` holds it: delivered (`$3`: 'delivered'), tried
    // again in `$5` ms, or given up (`$3`: 'failed'), with the last answer `$4`, `$6`.
    settle = "UPDATE jobhost_deliveries SET state = $3, attempts = attempts + 1, claim = NULL, \
        last_status = $4, last_error = $6, next_try_at = {now} + $5, updated_at = {now}, \
        delivered_at = CASE WHEN $3 = 'delivered' THEN {now} END \
        WHERE id = $1 AND claim = $2 AND state = 'pending'";
    list = concat!(
        "SELECT ",
        delivery_columns!(),
        " FROM jobhost_deliveries \
         WHERE ($1 IS NULL OR run_id = $1) AND ($2 IS NULL OR state = $2) \
         AND ($3 IS NULL OR tenant = $3) AND ($5 IS NULL OR id < $5) \
         ORDER BY id DESC LIMIT $4"
    );
    attempts = "SELECT id, delivery_id, host, status_code, error, duration_ms, at \
        FROM jobhost_delivery_attempts WHERE delivery_id = $1 ORDER BY id DESC LIMIT $2";
    // An operator's retry of a given-up delivery: pending now, its window anew.
    retry = concat!(
        "UPDATE jobhost_deliveries SET state = 'pending', claim = NULL, next_try_at = {now}, \
         retry_from = {now}, updated_at = {now} WHERE id = $1 AND state = 'failed' \
         RETURNING ",
        delivery_columns!()
    );
    get = concat!(
        "SELECT ",
        delivery_columns!(),
        " FROM jobhost_deliveries WHERE id = $1"
    );
    // Pending deliveries by webhook, and how long ago the oldest was written or retried
    // by an operator (its `retry_from`).
    backlog = "SELECT webhook, COUNT(*), {now} - MIN(retry_from) FROM jobhost_deliveries \
        WHERE state = 'pending' GROUP BY webhook ORDER BY webhook";
}

crate::record! {
    /// A delivery of a run's ending to one webhook.
    #[derive(Debug, Clone, Default, Serialize)]
    pub struct DeliveryRecord {
        pub id: i64,
        pub run_id: String,
        pub job: String,
        pub tenant: String,
        pub webhook: String,
        pub ending: String,
        pub after_run: Option<String>,
        pub state: String,
        pub attempts: i64,
        pub next_try_at: i64,
        pub retry_from: i64,
        pub last_status: Option<i64>,
        pub last_error: Option<String>,
        pub created_at: i64,
        pub delivered_at: Option<i64>,
        pub updated_at: i64,
        /// The database's clock when it was claimed (claims only).
        #[serde(skip)]
        pub claimed_at: i64,
    }
    missing_as_default: claimed_at
}

crate::record! {
    /// One attempt at a delivery: the receiver's HTTP status, if it answered.
    #[derive(Debug, Clone, Default, Serialize)]
    pub struct DeliveryAttemptRecord {
        pub id: i64,
        pub delivery_id: i64,
        pub host: String,
        pub status_code: Option<i64>,
        pub error: Option<String>,
        pub duration_ms: i64,
        pub at: i64,
    }
}

/// A delivery's state as stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeliveryState {
    Pending,
    Delivered,
    /// Given up after its retry window; an operator may retry it.
    Failed,
}

impl DeliveryState {
    pub const ALL: [DeliveryState; 3] = [
        DeliveryState::Pending,
        DeliveryState::Delivered,
        DeliveryState::Failed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            DeliveryState::Pending => "pending",
            DeliveryState::Delivered => "delivered",
            DeliveryState::Failed => "failed",
        }
    }

    pub fn parse(text: &str) -> Option<DeliveryState> {
        Self::ALL.into_iter().find(|s| s.as_str() == text)
    }
}

/// The outcome of one attempt, as recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeliveryTry<'a> {
    pub host: &'a str,
    pub status_code: Option<i64>,
    /// Fixed words, or the receiver's text bounded and escaped.
    pub error: Option<&'a str>,
    pub duration_ms: i64,
    /// What follows: delivered, another try in so many ms, or given up.
    pub next: DeliveryNext,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeliveryNext {
    Delivered,
    RetryIn(i64),
    GiveUp,
}

/// Which deliveries a listing shows.
#[derive(Debug, Clone, Default)]
pub struct DeliveryFilter<'a> {
    pub run_id: Option<&'a str>,
    pub state: Option<DeliveryState>,
    pub tenant: Option<&'a str>,
    /// Only those with an id below this one (the next page).
    pub before: Option<i64>,
    pub limit: i64,
}

impl Store {
    fn delivery_statements(&self) -> &'static DeliveryStatements {
        match self.backend {
            super::pool::Backend::Sqlite => &SQLITE,
            super::pool::Backend::Postgres => &POSTGRES,
        }
    }

    /// Replaces job `job`'s routes with `routes`, in one transaction.
    pub async fn set_delivery_routes(&self, job: &str, routes: &Routes) -> Result<()> {
        let s = self.delivery_statements();
        with_pool!(self.pool, p => {
            let mut conn = Exclusive::acquire(p).await?;
            let mut tx = conn.begin_with(self.dialect.begin_write).await?;
            sqlx::query(s.clear_routes.as_str()).bind(job).execute(&mut *tx).await?;
            for (webhook, endings) in routes {
                for ending in endings {
                    sqlx::query(s.add_route.as_str())
                        .bind(job)
                        .bind(ending.as_str())
                        .bind(webhook.as_str())
                        .execute(&mut *tx)
                        .await?;
                }
            }
            tx.commit().await?;
            conn.release();
        });
        Ok(())
    }

    /// Claims up to `limit` due deliveries to `webhooks` for `claim`, hidden from other
    /// claims for `hold_ms`.
    pub async fn claim_deliveries(
        &self,
        webhooks: &[String],
        claim: &str,
        limit: i64,
        hold_ms: i64,
    ) -> Result<Vec<DeliveryRecord>> {
        let q = &self.delivery_statements().claim;
        let names = serde_json::to_string(webhooks).expect("names serialise");
        Ok(with_pool!(self.pool, p => sqlx::query_as(q.as_str())
            .bind(limit)
            .bind(&names)
            .bind(claim)
            .bind(hold_ms)
            .fetch_all(p)
            .await?))
    }

    /// Records an attempt at delivery `id` and what follows it, if `claim` still holds it
    /// (whether it did); the attempt is recorded either way: it was made.
    pub async fn settle_delivery(
        &self,
        id: i64,
        claim: &str,
        tried: &DeliveryTry<'_>,
    ) -> Result<bool> {
        let s = self.delivery_statements();
        let (state, retry_ms) = match tried.next {
            DeliveryNext::Delivered => (DeliveryState::Delivered, 0),
            DeliveryNext::RetryIn(ms) => (DeliveryState::Pending, ms),
            DeliveryNext::GiveUp => (DeliveryState::Failed, 0),
        };
        let held = with_pool!(self.pool, p => {
            let mut conn = Exclusive::acquire(p).await?;
            let mut tx = conn.begin_with(self.dialect.begin_write).await?;
            sqlx::query(s.add_attempt.as_str())
                .bind(id)
                .bind(tried.host)
                .bind(tried.status_code)
                .bind(tried.error)
                .bind(tried.duration_ms)
                .execute(&mut *tx)
                .await?;
            let held = sqlx::query(s.settle.as_str())
                .bind(id)
                .bind(claim)
                .bind(state.as_str())
                .bind(tried.status_code)
                .bind(retry_ms)
                .bind(tried.error)
                .execute(&mut *tx)
                .await?
                .rows_affected();
            tx.commit().await?;
            conn.release();
            held > 0
        });
        Ok(held)
    }

    /// The newest deliveries the filter takes.
    pub async fn list_deliveries(&self, f: &DeliveryFilter<'_>) -> Result<Vec<DeliveryRecord>> {
        let q = &self.delivery_statements().list;
        Ok(with_pool!(self.reader, p => sqlx::query_as(q.as_str())
            .bind(f.run_id)
            .bind(f.state.map(DeliveryState::as_str))
            .bind(f.tenant)
            .bind(f.limit)
            .bind(f.before)
            .fetch_all(p)
            .await?))
    }

    pub async fn get_delivery(&self, id: i64) -> Result<Option<DeliveryRecord>> {
        let q = &self.delivery_statements().get;
        Ok(
            with_pool!(self.reader, p => sqlx::query_as(q.as_str()).bind(id).fetch_optional(p).await?),
        )
    }

    /// The newest `limit` attempts at delivery `id`.
    pub async fn delivery_attempts(
        &self,
        id: i64,
        limit: i64,
    ) -> Result<Vec<DeliveryAttemptRecord>> {
        let q = &self.delivery_statements().attempts;
        Ok(with_pool!(self.reader, p => sqlx::query_as(q.as_str())
            .bind(id)
            .bind(limit)
            .fetch_all(p)
            .await?))
    }

    /// Pending deliveries by webhook: how many, and the oldest one's wait in ms since it
    /// was written (or retried by an operator).
    pub async fn delivery_backlog(&self) -> Result<Vec<(String, i64, i64)>> {
        let q = &self.delivery_statements().backlog;
        Ok(with_pool!(self.reader, p => sqlx::query_as(q.as_str()).fetch_all(p).await?))
    }

    /// Makes given-up delivery `id` pending again, its retry window anew; `None` if it is
    /// not a given-up delivery.
    pub async fn retry_delivery(&self, id: i64) -> Result<Option<DeliveryRecord>> {
        let q = &self.delivery_statements().retry;
        Ok(with_pool!(self.pool, p => sqlx::query_as(q.as_str()).bind(id).fetch_optional(p).await?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::delivery::Ending;

    #[test]
    fn every_token_is_rendered() {
        for statements in [&*SQLITE, &*POSTGRES] {
            for sql in statements.all() {
                assert!(!sql.contains('{'), "unrendered token in {sql}");
            }
        }
    }

    async fn exec(store: &Store, sql: &str) {
        match store.pool() {
            crate::store::Pool::Sqlite(p) => {
                sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_string()))
                    .execute(p)
                    .await
                    .unwrap();
            }
            crate::store::Pool::Postgres(_) => unreachable!("a SQLite test"),
        }
    }

    fn run_row(id: &str, job: &str, status: &str, retry_of: &str) -> String {
        format!(
            "INSERT INTO jobhost_runs (id, job, instance, tenant, origin, payload, status, \
             next_attempt_at, created_at, updated_at, retry_of) \
             VALUES ('{id}', '{job}', 'default', 'default', 'kick', '{{}}', '{status}', 0, 0, 0, \
             {retry_of})"
        )
    }

    /// The triggers write a delivery per route as a run ends (and only then), claims take
    /// it once and in order, and a settled attempt is recorded; a given-up one is retried.
    #[tokio::test]
    async fn an_ending_writes_its_deliveries_which_are_claimed_once_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&format!("sqlite://{}/t.db", dir.path().display()))
            .await
            .unwrap();
        let routes = Routes::from([
            (
                "ops".to_string(),
                [Ending::Failed, Ending::Succeeded].into(),
            ),
            (
                "audit".to_string(),
                [Ending::Failed, Ending::Skipped].into(),
            ),
        ]);
        store.set_delivery_routes("j", &routes).await.unwrap();
        // Registering again replaces the routes.
        store.set_delivery_routes("j", &routes).await.unwrap();
        exec(&store, &run_row("r1", "j", "running", "NULL")).await;
        exec(&store, &run_row("r2", "j", "queued", "'r1'")).await;
        exec(&store, &run_row("other", "k", "queued", "NULL")).await;
        exec(&store, &run_row("dropped", "j", "skipped", "NULL")).await;
        exec(
            &store,
            "UPDATE jobhost_runs SET status = 'failed' WHERE id IN ('r1', 'r2', 'other')",
        )
        .await;
        // A later update of an ended run writes nothing again.
        exec(
            &store,
            "UPDATE jobhost_runs SET retried_by = 'x' WHERE id = 'r1'",
        )
        .await;
        let all = store
            .list_deliveries(&DeliveryFilter {
                limit: 50,
                ..Default::default()
            })
            .await
            .unwrap();
        let mut written: Vec<(String, String)> = all
            .iter()
            .map(|d| (d.run_id.clone(), d.webhook.clone()))
            .collect();
        written.sort();
        assert_eq!(
            written,
            [
                ("dropped", "audit"),
                ("r1", "audit"),
                ("r1", "ops"),
                ("r2", "audit"),
                ("r2", "ops")
            ]
            .map(|(r, w)| (r.to_string(), w.to_string())),
            "one per route of a routed ending, a run queued ended too; none for job k"
        );
        let hooks = ["ops".to_string()];
        let first = store
            .claim_deliveries(&hooks, "c1", 10, 60_000)
            .await
            .unwrap();
        assert_eq!(first.len(), 1, "r2's waits for r1's, which it retries");
        assert_eq!(first[0].run_id, "r1");
        assert!(
            store
                .claim_deliveries(&hooks, "c2", 10, 60_000)
                .await
                .unwrap()
                .is_empty()
        );
        let failed = DeliveryTry {
            host: "h",
            status_code: Some(500),
            error: Some("HTTP 500"),
            duration_ms: 3,
            next: DeliveryNext::RetryIn(0),
        };
        assert!(
            !store
                .settle_delivery(first[0].id, "c-stale", &failed)
                .await
                .unwrap(),
            "not its claim"
        );
        assert!(
            store
                .settle_delivery(first[0].id, "c1", &failed)
                .await
                .unwrap()
        );
        let again = store
            .claim_deliveries(&hooks, "c3", 10, 60_000)
            .await
            .unwrap();
        assert_eq!(again.len(), 1);
        assert_eq!(again[0].attempts, 1);
        let sent = DeliveryTry {
            status_code: Some(204),
            error: None,
            next: DeliveryNext::Delivered,
            ..failed.clone()
        };
        assert!(
            store
                .settle_delivery(again[0].id, "c3", &sent)
                .await
                .unwrap()
        );
        let next = store
            .claim_deliveries(&hooks, "c4", 10, 60_000)
            .await
            .unwrap();
        assert_eq!(next.len(), 1);
        assert_eq!(next[0].run_id, "r2", "its turn, once r1's was delivered");
        let gave_up = DeliveryTry {
            next: DeliveryNext::GiveUp,
            ..failed.clone()
        };
        assert!(
            store
                .settle_delivery(next[0].id, "c4", &gave_up)
                .await
                .unwrap()
        );
        let given_up = store.get_delivery(next[0].id).await.unwrap().unwrap();
        assert_eq!(given_up.state, "failed");
        assert_eq!(given_up.last_error.as_deref(), Some("HTTP 500"));
        assert!(
            store.retry_delivery(again[0].id).await.unwrap().is_none(),
            "delivered: not retried"
        );
        let retried = store.retry_delivery(next[0].id).await.unwrap().unwrap();
        assert_eq!(retried.state, "pending");
        let attempts = store.delivery_attempts(first[0].id, 10).await.unwrap();
        assert_eq!(
            attempts.len(),
            3,
            "each attempt recorded, the stale claim's too"
        );
        let delivered = store
            .list_deliveries(&DeliveryFilter {
                state: Some(DeliveryState::Delivered),
                run_id: Some("r1"),
                limit: 50,
                ..Default::default()
            })
            .await
            .unwrap();
        assert_eq!(delivered.len(), 1);
    }
}
