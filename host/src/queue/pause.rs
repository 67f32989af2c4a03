//! Pauses: an operator stops claims of a job, a tenant or a lane without touching its
//! runs. Queued runs wait, schedules keep queueing (or skipping, per the job's overlap
//! policy), running attempts finish. The set lives in `jobhost_pauses`, so every host of a
//! fleet honours it; each host reads it (with the disabled tenants) before it claims,
//! at most every [`FRESH`], and at once after a change made through it.

use crate::store::{PauseRecord, Store, StoreError};
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// How stale a host's view of the pauses may be when it claims.
pub const FRESH: Duration = Duration::from_millis(250);

/// What a pause names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    Job,
    Tenant,
    Lane,
}

impl Scope {
    pub const ALL: [Scope; 3] = [Scope::Job, Scope::Tenant, Scope::Lane];

    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Job => "job",
            Scope::Tenant => "tenant",
            Scope::Lane => "lane",
        }
    }

    pub fn parse(text: &str) -> Option<Scope> {
        Self::ALL.into_iter().find(|s| s.as_str() == text)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum PauseError {
    #[error("pause a job, a tenant or a lane: {0:?} is none of them")]
    Scope(String),
    #[error("{scope} {name:?} is not a name: use 1-64 lower-case letters, digits, '-', '_' or '.'")]
    Name { scope: &'static str, name: String },
}

/// Checks a pause's scope and name (every scope's names follow the job name rule).
pub fn validate(scope: &str, name: &str) -> Result<Scope, PauseError> {
    let scope = Scope::parse(scope).ok_or_else(|| PauseError::Scope(scope.to_string()))?;
    crate::rules::job::validate_name(name).map_err(|_| PauseError::Name {
        scope: scope.as_str(),
        name: name.to_string(),
    })?;
    Ok(scope)
}

/// The pauses and disabled tenants as read at one moment.
#[derive(Debug, Default)]
pub struct PauseSet {
    pub pauses: Vec<PauseRecord>,
    jobs: BTreeSet<String>,
    tenants: BTreeSet<String>,
    lanes: BTreeSet<String>,
    disabled: BTreeSet<String>,
}

impl PauseSet {
    pub fn new(pauses: Vec<PauseRecord>, disabled: Vec<String>) -> PauseSet {
        let named = |scope: Scope| -> BTreeSet<String> {
            pauses
                .iter()
                .filter(|p| p.scope == scope.as_str())
                .map(|p| p.name.clone())
                .collect()
        };
        PauseSet {
            jobs: named(Scope::Job),
            tenants: named(Scope::Tenant),
            lanes: named(Scope::Lane),
            disabled: disabled.into_iter().collect(),
            pauses,
        }
    }

    pub fn job(&self, name: &str) -> bool {
        self.jobs.contains(name)
    }

    pub fn lane(&self, name: &str) -> bool {
        self.lanes.contains(name)
    }

    pub fn tenant(&self, name: &str) -> bool {
        self.tenants.contains(name)
    }

    pub fn paused_tenants(&self) -> impl Iterator<Item = String> + '_ {
        self.tenants.iter().cloned()
    }

    /// A disabled tenant's queued runs end at their claim (`tenant_disabled`).
    pub fn tenant_disabled(&self, name: &str) -> bool {
        self.disabled.contains(name)
    }

    /// The pauses that hold a run of `job` of `tenant` in `lane`.
    pub fn holding(&self, job: &str, tenant: &str, lane: &str) -> Vec<(Scope, String)> {
        let mut held = Vec::new();
        if self.job(job) {
            held.push((Scope::Job, job.to_string()));
        }
        if self.tenant(tenant) {
            held.push((Scope::Tenant, tenant.to_string()));
        }
        if self.lane(lane) {
            held.push((Scope::Lane, lane.to_string()));
        }
        held
    }
}

/// A host's cached view of the pauses.
pub struct Pauses {
    store: Store,
    cached: Mutex<Option<(Instant, Arc<PauseSet>)>>,
}

impl Pauses {
    pub fn new(store: Store) -> Pauses {
        Pauses {
            store,
            cached: Mutex::new(None),
        }
    }

    /// The pauses, read again if the view is older than [`FRESH`].
    pub async fn current(&self) -> Result<Arc<PauseSet>, StoreError> {
        if let Some((at, set)) = self.lock().as_ref()
            && at.elapsed() < FRESH
        {
            return Ok(set.clone());
        }
        let (pauses, disabled) = self.store.pause_state().await?;
        let set = Arc::new(PauseSet::new(pauses, disabled));
        *self.lock() = Some((Instant::now(), set.clone()));
        Ok(set)
    }

    /// Drops the view: the next claim reads the pauses again (after a change made here).
    pub fn forget(&self) {
        *self.lock() = None;
    }

    /// Pauses `scope`/`name`; `false` if it was paused already.
    pub async fn pause(&self, scope: Scope, name: &str) -> Result<bool, StoreError> {
        let changed = self.store.pause(scope.as_str(), name).await?;
        self.forget();
        Ok(changed)
    }

    /// Resumes `scope`/`name`; `false` if it was not paused.
    pub async fn resume(&self, scope: Scope, name: &str) -> Result<bool, StoreError> {
        let changed = self.store.unpause(scope.as_str(), name).await?;
        self.forget();
        Ok(changed)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<(Instant, Arc<PauseSet>)>> {
        self.cached.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pause(scope: &str, name: &str) -> PauseRecord {
        PauseRecord {
            scope: scope.into(),
            name: name.into(),
            paused_at: 0,
        }
    }

    #[test]
    fn a_set_answers_by_scope_and_names_what_holds_a_run() {
        let set = PauseSet::new(
            vec![
                pause("job", "nightly"),
                pause("tenant", "acme"),
                pause("lane", "bulk"),
            ],
            vec!["gone".into()],
        );
        assert!(set.job("nightly") && !set.job("acme"));
        assert!(set.tenant("acme") && !set.tenant("nightly"));
        assert!(set.lane("bulk") && !set.lane("default"));
        assert!(set.tenant_disabled("gone") && !set.tenant_disabled("acme"));
        assert_eq!(
            set.holding("nightly", "acme", "default"),
            [
                (Scope::Job, "nightly".into()),
                (Scope::Tenant, "acme".into())
            ]
        );
        assert!(set.holding("other", "beta", "default").is_empty());
    }

    #[test]
    fn only_the_three_scopes_and_names_by_the_rule_are_paused() {
        assert_eq!(validate("lane", "bulk").unwrap(), Scope::Lane);
        assert!(matches!(validate("queue", "x"), Err(PauseError::Scope(_))));
        for bad in ["", "Upper", "a b", "x\0", "a/b"] {
            assert!(
                matches!(validate("job", bad), Err(PauseError::Name { .. })),
                "{bad:?}"
            );
        }
    }
}
