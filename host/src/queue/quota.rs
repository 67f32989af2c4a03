//! Per-tenant quotas: fuel and wall time per rolling hour.
//!
//! Usage is what the database holds: the fuel and duration of every attempt that ended
//! in the last hour, summed by its run's tenant (`Store::tenant_usage`), so every host of
//! a fleet sees the same figures. Each host reads them at most once a second; a tenant
//! over either limit has its runs held by policy:
//!
//! - `wait` (default): the claim passes its due runs over (`ClaimRequest::paused`); they
//!   stay queued, using no attempt, until the hour's usage falls under the limit.
//! - `fail`: a claimed run ends `failed` with code `quota_exceeded` without running, and
//!   is reported (the runner, `Runner::attempt`).
//!
//! A quota is checked as runs start: attempts already running finish, so a tenant can go
//! over its limit by what its running attempts use (at most one attempt's timeout each).

use crate::store::{Store, StoreError, TenantUsage};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::time::Duration;
use tokio::sync::Mutex;
use tokio::time::Instant;

/// The window usage is summed over.
pub const WINDOW: Duration = Duration::from_secs(3600);

/// How old the figures a host decides on may be.
const FRESH_FOR: Duration = Duration::from_secs(1);

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OverQuota {
    /// Runs wait in the queue until usage falls under the limit.
    #[default]
    Wait,
    /// Runs end `failed` with code `quota_exceeded`.
    Fail,
}

/// One tenant's limits per rolling hour (none: unlimited).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Quota {
    pub fuel_per_hour: Option<u64>,
    pub time_per_hour: Option<Duration>,
    pub over_quota: OverQuota,
}

impl Quota {
    fn exceeded_by(&self, usage: &TenantUsage) -> bool {
        let fuel = self
            .fuel_per_hour
            .is_some_and(|max| u64::try_from(usage.fuel_used).unwrap_or(0) >= max);
        let time = self
            .time_per_hour
            .is_some_and(|max| u128::try_from(usage.wall_ms).unwrap_or(0) >= max.as_millis());
        fuel || time
    }
}

/// The operator's quotas: per tenant, and for every tenant not named.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Quotas {
    pub tenants: BTreeMap<String, Quota>,
    pub default: Option<Quota>,
}

impl Quotas {
    pub fn of(&self, tenant: &str) -> Option<&Quota> {
        self.tenants.get(tenant).or(self.default.as_ref())
    }

    /// The quota `usage` is over, if its tenant has one and it is.
    pub fn exceeded_by(&self, usage: &TenantUsage) -> Option<&Quota> {
        self.of(&usage.tenant).filter(|q| q.exceeded_by(usage))
    }

    pub fn is_empty(&self) -> bool {
        self.tenants.is_empty() && self.default.is_none()
    }
}

/// A host's view of the fleet's usage against its quotas.
pub struct QuotaBook {
    quotas: Quotas,
    store: Store,
    usage: Mutex<Option<(Instant, BTreeMap<String, TenantUsage>)>>,
}

impl QuotaBook {
    pub fn new(quotas: Quotas, store: Store) -> Self {
        QuotaBook {
            quotas,
            store,
            usage: Mutex::new(None),
        }
    }

    pub fn quotas(&self) -> &Quotas {
        &self.quotas
    }

    /// Each tenant's usage in the last hour, at most a second old.
    pub async fn usage(&self) -> Result<BTreeMap<String, TenantUsage>, StoreError> {
        let mut cached = self.usage.lock().await;
        if let Some((at, usage)) = cached.as_ref()
            && at.elapsed() < FRESH_FOR
        {
            return Ok(usage.clone());
        }
        let window_ms = i64::try_from(WINDOW.as_millis()).unwrap_or(i64::MAX);
        let usage: BTreeMap<String, TenantUsage> = self
            .store
            .tenant_usage(window_ms)
            .await?
            .into_iter()
            .map(|u| (u.tenant.clone(), u))
            .collect();
        *cached = Some((Instant::now(), usage.clone()));
        Ok(usage)
    }

    /// The tenants over a quota whose policy is `policy`.
    pub async fn over(&self, policy: OverQuota) -> Result<Vec<String>, StoreError> {
        if self.quotas.is_empty() {
            return Ok(Vec::new());
        }
        Ok(self
            .usage()
            .await?
            .values()
            .filter(|u| {
                self.quotas
                    .exceeded_by(u)
                    .is_some_and(|q| q.over_quota == policy)
            })
            .map(|u| u.tenant.clone())
            .collect())
    }

    /// Whether `tenant` is over a quota whose policy is `fail`.
    pub async fn fails(&self, tenant: &str) -> Result<bool, StoreError> {
        if self
            .quotas
            .of(tenant)
            .is_none_or(|q| q.over_quota != OverQuota::Fail)
        {
            return Ok(false);
        }
        Ok(self
            .usage()
            .await?
            .get(tenant)
            .is_some_and(|u| self.quotas.exceeded_by(u).is_some()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(tenant: &str, fuel_used: i64, wall_ms: i64) -> TenantUsage {
        TenantUsage {
            tenant: tenant.into(),
            fuel_used,
            wall_ms,
            attempts: 1,
        }
    }

    #[test]
    fn a_quota_is_exceeded_at_either_limit() {
        let q = Quota {
            fuel_per_hour: Some(100),
            time_per_hour: Some(Duration::from_secs(2)),
            over_quota: OverQuota::Wait,
        };
        assert!(!q.exceeded_by(&usage("a", 99, 1999)));
        assert!(q.exceeded_by(&usage("a", 100, 0)));
        assert!(q.exceeded_by(&usage("a", 0, 2000)));
        assert!(!Quota::default().exceeded_by(&usage("a", i64::MAX, i64::MAX)));
    }

    #[test]
    fn a_named_tenants_quota_wins_over_the_default() {
        let named = Quota {
            fuel_per_hour: Some(1),
            ..Quota::default()
        };
        let quotas = Quotas {
            tenants: BTreeMap::from([("acme".to_string(), named.clone())]),
            default: Some(Quota::default()),
        };
        assert_eq!(quotas.of("acme"), Some(&named));
        assert_eq!(quotas.of("other"), Some(&Quota::default()));
        assert_eq!(Quotas::default().of("acme"), None);
    }
}
