//! Claims and endings on Postgres: each batch one call of a function whose current text is
//! in `migrations/postgres/functions` (`claim_runs.sql`, `record_attempts.sql`); an
//! ending's items go as one binary array. A kick is two statements of `store::queries`
//! in one transaction.

use super::{ClaimRequest, ClaimedRow, Claims, Recorded, Recording, RunChange};
use crate::store::pool::Exclusive;
use crate::store::runs::queue;
use crate::store::{NewRun, Result, RunRecord, Store, StoreError};
use sqlx::Connection;
use std::collections::BTreeMap;
use tokio::time::Instant;

/// The claim and ending writes of a Postgres store.
pub(crate) struct PostgresClaims<'s> {
    pub store: &'s Store,
    pub pool: &'s sqlx::PgPool,
}

impl Claims for PostgresClaims<'_> {
    async fn claim(&self, request: &ClaimRequest<'_>) -> Result<Vec<ClaimedRow>> {
        let tenants = match request.run_id {
            Some(_) => Vec::new(),
            None => self.store.queued_tenants.read(self.pool).await?,
        };
        self.store
            .retrying(|| async {
                Ok(sqlx::query_as::<_, ClaimedRow>(
                    "SELECT * FROM jobhost_claim_runs($1, $2, $3, $4, $5, $6)",
                )
                .bind(request.host)
                .bind(i32::try_from(request.limit).unwrap_or(i32::MAX))
                .bind(sqlx::types::Json(request.terms))
                .bind(request.run_id)
                .bind(request.paused)
                .bind(&tenants)
                .fetch_all(self.pool)
                .await?)
            })
            .await
    }

    /// A batch the database refuses as a whole is tried again item by item, so one item
    /// it will not store cannot fail the others.
    async fn record(&self, items: &[Recording]) -> Vec<Result<Recorded>> {
        let mut order: Vec<usize> = (0..items.len()).collect();
        order.sort_by(|&a, &b| items[a].lock_key().cmp(&items[b].lock_key()));
        match self.record_in_order(items, &order).await {
            Ok(answers) => answers,
            Err(e) if items.len() == 1 => vec![Err(e)],
            Err(e) if e.is_unavailable() => {
                items.iter().map(|_| Err(StoreError::Unreachable)).collect()
            }
            Err(_) => {
                let mut answers = Vec::with_capacity(items.len());
                for i in 0..items.len() {
                    answers.push(match self.record_in_order(items, &[i]).await {
                        Ok(mut one) => one.pop().unwrap_or(Err(StoreError::Unreadable)),
                        Err(e) => Err(e),
                    });
                }
                answers
            }
        }
    }

    async fn kick(&self, run: &NewRun) -> Result<Option<RunRecord>> {
        let store = self.store;
        store
            .retrying(|| async {
                let q = store.q;
                let mut conn = Exclusive::acquire(self.pool).await?;
                let mut tx = conn.begin_with(store.dialect.begin_write).await?;
                let pending = sqlx::query(q.set_pending.as_str())
                    .bind(&run.job)
                    .bind(&run.instance)
                    .execute(&mut *tx)
                    .await?
                    .rows_affected()
                    == 1;
                let queued = if pending {
                    None
                } else {
                    let queued = queue(&mut tx, q, q.queue_run.as_str(), run).await?;
                    Some(queued.ok_or(StoreError::Unreadable)?)
                };
                tx.commit().await?;
                conn.release();
                Ok(queued)
            })
            .await
    }
}

impl PostgresClaims<'_> {
    /// One call of `jobhost_record_attempts` for `items[i]`, `i` in `order` (the order in
    /// which the database takes them); the answers by ascending `i`, so for every item
    /// in the items' own order (`order` must list each index once).
    async fn record_in_order(
        &self,
        items: &[Recording],
        order: &[usize],
    ) -> Result<Vec<Result<Recorded>>> {
        let wire = order
            .iter()
            .map(|&i| {
                Ok(WireItem::new(
                    i32::try_from(i).map_err(|_| StoreError::Unreadable)?,
                    &items[i],
                ))
            })
            .collect::<Result<Vec<WireItem<'_>>>>()?;
        let rows: Vec<WireResult> = self
            .store
            .retrying(|| async {
                Ok(sqlx::query_as("SELECT * FROM jobhost_record_attempts($1)")
                    .bind(&wire)
                    .fetch_all(self.pool)
                    .await?)
            })
            .await?;
        let mut answers: BTreeMap<usize, Result<Recorded>> = BTreeMap::new();
        for row in rows {
            let idx = usize::try_from(row.idx).unwrap_or(usize::MAX);
            answers.insert(idx, recorded(&row.result, row.follow_up));
        }
        let mut asked = order.to_vec();
        asked.sort_unstable();
        Ok(asked
            .iter()
            .map(|i| answers.remove(i).unwrap_or(Err(StoreError::Unreadable)))
            .collect())
    }
}

/// One `Recording` as the Postgres function reads it: a `jobhost_attempt_item` (migration
/// 0014), sent in the binary format (see its `Encode`).
struct WireItem<'a> {
    idx: i32,
    kind: &'static str,
    run_id: &'a str,
    job: &'a str,
    instance: &'a str,
    generation: i64,
    holder: &'a str,
    seq: Option<i64>,
    a_pass: Option<i64>,
    a_attempt: Option<i64>,
    a_host: Option<&'a str>,
    a_status: Option<&'a str>,
    a_outcome: Option<&'a str>,
    a_code: Option<&'a str>,
    a_fuel_used: Option<i64>,
    a_peak_memory: Option<i64>,
    a_duration_ms: Option<i64>,
    a_log: Option<&'a str>,
    a_log_truncated: Option<i64>,
    a_started_at: Option<i64>,
    require_lease: bool,
    status: Option<&'a str>,
    code: Option<&'a str>,
    error: Option<&'a str>,
    cursor: Option<&'a str>,
    counters: Option<&'a str>,
    pass: Option<i64>,
    failures: Option<i64>,
    defers: Option<i64>,
    delay_ms: Option<i64>,
    hold_ms: Option<i64>,
    f_id: Option<&'a str>,
    f_tenant: Option<&'a str>,
    f_origin: Option<&'a str>,
    f_payload: Option<&'a str>,
    f_cursor: Option<&'a str>,
    f_component_digest: Option<&'a str>,
    f_scheduled_for: Option<i64>,
    f_rerun_of: Option<&'a str>,
    f_delay_ms: Option<i64>,
    r_kind: Option<&'a str>,
    r_code: Option<&'a str>,
    r_body: Option<&'a str>,
}

/// Field by field in the composite type's order. The list destructures the item whole, so
/// a field added to the struct and not here does not compile.
impl sqlx::Encode<'_, sqlx::Postgres> for WireItem<'_> {
    fn encode_by_ref(
        &self,
        buf: &mut sqlx::postgres::PgArgumentBuffer,
    ) -> std::result::Result<sqlx::encode::IsNull, sqlx::error::BoxDynError> {
        let mut record = sqlx::postgres::types::PgRecordEncoder::new(buf);
        let WireItem {
            idx,
            kind,
            run_id,
            job,
            instance,
            generation,
            holder,
            seq,
            a_pass,
            a_attempt,
            a_host,
            a_status,
            a_outcome,
            a_code,
            a_fuel_used,
            a_peak_memory,
            a_duration_ms,
            a_log,
            a_log_truncated,
            a_started_at,
            require_lease,
            status,
            code,
            error,
            cursor,
            counters,
            pass,
            failures,
            defers,
            delay_ms,
            hold_ms,
            f_id,
            f_tenant,
            f_origin,
            f_payload,
            f_cursor,
            f_component_digest,
            f_scheduled_for,
            f_rerun_of,
            f_delay_ms,
            r_kind,
            r_code,
            r_body,
        } = self;
        record.encode(idx)?;
        record.encode(kind)?;
        record.encode(run_id)?;
        record.encode(job)?;
        record.encode(instance)?;
        record.encode(generation)?;
        record.encode(holder)?;
        record.encode(seq)?;
        record.encode(a_pass)?;
        record.encode(a_attempt)?;
        record.encode(a_host)?;
        record.encode(a_status)?;
        record.encode(a_outcome)?;
        record.encode(a_code)?;
        record.encode(a_fuel_used)?;
        record.encode(a_peak_memory)?;
        record.encode(a_duration_ms)?;
        record.encode(a_log)?;
        record.encode(a_log_truncated)?;
        record.encode(a_started_at)?;
        record.encode(require_lease)?;
        record.encode(status)?;
        record.encode(code)?;
        record.encode(error)?;
        record.encode(cursor)?;
        record.encode(counters)?;
        record.encode(pass)?;
        record.encode(failures)?;
        record.encode(defers)?;
        record.encode(delay_ms)?;
        record.encode(hold_ms)?;
        record.encode(f_id)?;
        record.encode(f_tenant)?;
        record.encode(f_origin)?;
        record.encode(f_payload)?;
        record.encode(f_cursor)?;
        record.encode(f_component_digest)?;
        record.encode(f_scheduled_for)?;
        record.encode(f_rerun_of)?;
        record.encode(f_delay_ms)?;
        record.encode(r_kind)?;
        record.encode(r_code)?;
        record.encode(r_body)?;
        record.finish();
        Ok(sqlx::encode::IsNull::No)
    }
}

impl sqlx::Type<sqlx::Postgres> for WireItem<'_> {
    fn type_info() -> sqlx::postgres::PgTypeInfo {
        sqlx::postgres::PgTypeInfo::with_name("jobhost_attempt_item")
    }
}

impl sqlx::postgres::PgHasArrayType for WireItem<'_> {
    fn array_type_info() -> sqlx::postgres::PgTypeInfo {
        sqlx::postgres::PgTypeInfo::array_of("jobhost_attempt_item")
    }
}

impl<'a> WireItem<'a> {
    fn new(idx: i32, r: &'a Recording) -> WireItem<'a> {
        let a = r.attempt.as_ref();
        let mut item = WireItem {
            idx,
            kind: "",
            run_id: &r.run_id,
            job: &r.lease.job,
            instance: &r.lease.instance,
            generation: r.lease.generation,
            holder: &r.lease.holder,
            seq: a.map(|a| a.seq),
            a_pass: a.map(|a| a.pass),
            a_attempt: a.map(|a| a.attempt),
            a_host: a.map(|a| a.host.as_str()),
            a_status: a.map(|a| a.status),
            a_outcome: a.and_then(|a| a.outcome),
            a_code: a.and_then(|a| a.code),
            a_fuel_used: a.and_then(|a| a.fuel_used),
            a_peak_memory: a.and_then(|a| a.peak_memory),
            a_duration_ms: a.map(|a| a.duration_ms),
            a_log: a.map(|a| a.log.as_str()),
            a_log_truncated: a.map(|a| i64::from(a.log_truncated)),
            a_started_at: a.map(|a| a.started_at),
            require_lease: false,
            status: None,
            code: None,
            error: None,
            cursor: None,
            counters: None,
            pass: None,
            failures: None,
            defers: None,
            delay_ms: None,
            hold_ms: None,
            f_id: None,
            f_tenant: None,
            f_origin: None,
            f_payload: None,
            f_cursor: None,
            f_component_digest: None,
            f_scheduled_for: None,
            f_rerun_of: None,
            f_delay_ms: None,
            r_kind: None,
            r_code: None,
            r_body: None,
        };
        match &r.change {
            RunChange::Finish {
                require_lease,
                status,
                code,
                error,
                cursor,
                counters,
                pass,
                failures,
                follow_up,
                report,
            } => {
                item.kind = "finish";
                item.counters = counters.as_deref();
                item.require_lease = *require_lease;
                item.status = Some(status.as_str());
                item.code = *code;
                item.error = error.as_deref();
                item.cursor = cursor.as_deref();
                item.pass = Some(*pass);
                item.failures = Some(*failures);
                if let Some(f) = follow_up {
                    item.f_id = Some(&f.id);
                    item.f_tenant = Some(&f.tenant);
                    item.f_origin = Some(f.origin.as_str());
                    item.f_payload = Some(&f.payload);
                    item.f_cursor = f.cursor.as_deref();
                    item.f_component_digest = f.component_digest.as_deref();
                    item.f_scheduled_for = f.scheduled_for;
                    item.f_rerun_of = f.rerun_of.as_deref();
                    item.f_delay_ms = Some(f.delay_ms);
                }
                if let Some(report) = report {
                    item.r_kind = Some(report.kind.as_str());
                    item.r_code = report.code.as_deref();
                    item.r_body = Some(&report.body);
                }
            }
            RunChange::Requeue {
                delay_ms,
                hold_ms,
                pass,
                cursor,
                counters,
                failures,
                defers,
                code,
                error,
            } => {
                item.kind = "requeue";
                item.defers = Some(*defers);
                item.counters = counters.as_deref();
                item.delay_ms = Some(*delay_ms);
                item.hold_ms = Some(*hold_ms);
                item.pass = Some(*pass);
                item.cursor = cursor.as_deref();
                item.failures = Some(*failures);
                item.code = *code;
                item.error = error.as_deref();
            }
            RunChange::GiveBack { hold_ms } => {
                item.kind = "give_back";
                item.hold_ms = Some(*hold_ms);
            }
        }
        item
    }
}

/// The tenants with queued runs, for the Postgres claim's fair share (migration 0010),
/// read at most once a second: enumerating them costs more than a claim. Between reads,
/// a tenant a run was just queued for joins them as the hosts' notification names it
/// (migration 0013), so its run is taken in turn from the next claim, on every host,
/// instead of waiting for the next read behind another tenant's backlog. (The SQLite claim
/// enumerates them itself, in the writer thread.)
#[derive(Default)]
pub(crate) struct QueuedTenants {
    read: tokio::sync::Mutex<Option<(Instant, Vec<String>)>>,
    /// Named by notifications since the last read began. Never held across an await: the
    /// listener adds to it while a read waits for the database.
    notified: std::sync::Mutex<Notified>,
}

#[derive(Default)]
struct Notified(Vec<String>);

impl Notified {
    /// Most tenants notifications add between two reads: each is an index probe in every
    /// claim until the next read.
    const MAX: usize = 64;

    fn add(&mut self, tenant: &str) {
        if self.0.len() < Self::MAX
            && crate::rules::tenant::validate_tenant(tenant).is_ok()
            && !self.0.iter().any(|t| t == tenant)
        {
            self.0.push(tenant.to_string());
        }
    }

    /// `read`, and after it the notified tenants it lacks.
    fn joined(&self, mut read: Vec<String>) -> Vec<String> {
        for tenant in &self.0 {
            if !read.contains(tenant) {
                read.push(tenant.clone());
            }
        }
        read
    }
}

impl QueuedTenants {
    const FRESH_FOR: std::time::Duration = std::time::Duration::from_secs(1);

    async fn read(&self, pool: &sqlx::PgPool) -> Result<Vec<String>> {
        let mut last = self.read.lock().await;
        let read = match last.as_ref() {
            Some((at, tenants)) if at.elapsed() < Self::FRESH_FOR => tenants.clone(),
            _ => {
                // Forgotten before the query, not after: a tenant notified meanwhile may
                // have committed after the query's snapshot, and is kept.
                self.notified().0.clear();
                let tenants: Vec<String> =
                    sqlx::query_scalar(super::statements::POSTGRES.queued_tenants.as_str())
                        .fetch_all(pool)
                        .await?;
                *last = Some((Instant::now(), tenants.clone()));
                tenants
            }
        };
        Ok(self.notified().joined(read))
    }

    /// A run was queued for `tenant` (a notification's payload; anything but a tenant's
    /// name is ignored).
    pub(super) fn notify(&self, tenant: &str) {
        self.notified().add(tenant);
    }

    fn notified(&self) -> std::sync::MutexGuard<'_, Notified> {
        self.notified
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

crate::record! {
    /// What the Postgres function answers per item.
    struct WireResult {
        idx: i32,
        result: String,
        follow_up: Option<String>,
    }
}

fn recorded(result: &str, follow_up: Option<String>) -> Result<Recorded> {
    Ok(match result {
        "finished" => Recorded::Finished { follow_up },
        "requeued" => Recorded::Requeued,
        "lease_lost" => Recorded::LeaseLost,
        "not_running" => Recorded::NotRunning,
        _ => return Err(StoreError::Unreadable),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(tenants: &[&str]) -> Vec<String> {
        tenants.iter().map(|t| t.to_string()).collect()
    }

    #[test]
    fn a_notified_tenant_joins_the_tenants_read_once() {
        let mut notified = Notified::default();
        notified.add("beta");
        notified.add("beta");
        notified.add("alpha");
        assert_eq!(notified.joined(names(&["alpha"])), ["alpha", "beta"]);
        assert_eq!(notified.joined(Vec::new()), ["beta", "alpha"]);
    }

    #[test]
    fn notifications_add_only_valid_names_and_a_bounded_number() {
        let mut notified = Notified::default();
        for bad in ["", "Upper", "a b", "x\0", &"t".repeat(65)] {
            notified.add(bad);
        }
        assert!(notified.0.is_empty());
        for i in 0..Notified::MAX + 10 {
            notified.add(&format!("t{i}"));
        }
        assert_eq!(notified.0.len(), Notified::MAX);
    }
}
