//! The queued caps a job and the manifest declare: how many runs a tenant, and a job for
//! one tenant, may have queued. A job's definition carries them, so they are a rule of
//! its own; counting the queued runs against them is the queue's (`queue::backlog`).

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A tenant's queued runs when the manifest sets no `max_queued` for it.
pub const DEFAULT_MAX_QUEUED_PER_TENANT: u64 = 100_000;
/// A job's queued runs for one tenant when the job sets no `max_queued`.
pub const DEFAULT_MAX_QUEUED_PER_JOB: u64 = 20_000;

/// The tenants' queued caps as one manifest set them (`max_queued` of `[tenants.NAME]`
/// and `[tenant_defaults]`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TenantCaps {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<u64>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tenants: BTreeMap<String, u64>,
}

impl TenantCaps {
    /// The cap of `tenant`'s queued runs.
    pub fn of(&self, tenant: &str) -> u64 {
        self.tenants
            .get(tenant)
            .copied()
            .or(self.default)
            .unwrap_or(DEFAULT_MAX_QUEUED_PER_TENANT)
    }

    pub fn is_empty(&self) -> bool {
        self.default.is_none() && self.tenants.is_empty()
    }
}

/// The caps a job's new runs are queued under, from its stored definition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caps {
    pub tenant: u64,
    pub job: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tenant_named_has_its_own_cap_the_others_the_default() {
        let caps = TenantCaps {
            default: Some(50),
            tenants: BTreeMap::from([("acme".to_string(), 5)]),
        };
        assert_eq!(caps.of("acme"), 5);
        assert_eq!(caps.of("beta"), 50);
        assert_eq!(
            TenantCaps::default().of("acme"),
            DEFAULT_MAX_QUEUED_PER_TENANT
        );
    }
}
