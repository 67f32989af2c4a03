//! Per-tenant fan-out: a fire or kick of a `per_tenant` job queues one child run per
//! active tenant, run as that tenant (its context, its files, its rows).
//!
//! A child's instance is its tenant, so each tenant's child holds a lease of its own and
//! one tenant's long run never makes another's skip. A child's id is derived from the job,
//! the occasion (a schedule tick, or one kick) and the tenant: a fan-out that is retried,
//! or raced by two hosts, inserts the same ids, and the second insert changes nothing.
//! Children share the template's trace: one fire or kick, one trace.

use crate::store::NewRun;
use sha2::{Digest, Sha256};

/// The run id of `tenant`'s child of `job` for `occasion`.
pub fn child_id(job: &str, occasion: &str, tenant: &str) -> String {
    let digest = Sha256::digest(format!("{job}\0{occasion}\0{tenant}").as_bytes());
    let bytes: [u8; 16] = digest[..16].try_into().expect("16 bytes");
    uuid::Builder::from_custom_bytes(bytes)
        .into_uuid()
        .to_string()
}

/// The occasion of a schedule tick.
pub fn tick_occasion(scheduled_for: i64) -> String {
    format!("tick:{scheduled_for}")
}

/// One child of `template` per tenant: the template's job, payload and origin, with the
/// tenant as its tenant and instance.
pub fn children(template: &NewRun, occasion: &str, tenants: &[String]) -> Vec<NewRun> {
    tenants
        .iter()
        .map(|tenant| NewRun {
            id: child_id(&template.job, occasion, tenant),
            instance: tenant.clone(),
            tenant: tenant.clone(),
            ..template.clone()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Origin;

    fn template() -> NewRun {
        NewRun {
            id: "t".into(),
            job: "nightly".into(),
            instance: "default".into(),
            tenant: "default".into(),
            origin: Origin::Cron,
            payload: "{}".into(),
            cursor: None,
            component_digest: None,
            scheduled_for: Some(1000),
            rerun_of: None,
            delay_ms: 0,
            trace_parent: crate::rules::trace::TraceParent::parse(
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            ),
        }
    }

    #[test]
    fn a_tick_gives_each_tenant_one_child_with_a_stable_id() {
        let tenants = vec!["acme".to_string(), "globex".to_string()];
        let first = children(&template(), &tick_occasion(1000), &tenants);
        let again = children(&template(), &tick_occasion(1000), &tenants);
        assert_eq!(first, again, "a retried or raced fan-out has the same ids");
        assert_eq!(first[0].tenant, "acme");
        assert_eq!(first[0].instance, "acme");
        assert_eq!(
            first[0].trace_parent, first[1].trace_parent,
            "one fan-out, one trace"
        );
        assert_ne!(first[0].id, first[1].id);
        let later = children(&template(), &tick_occasion(2000), &tenants);
        assert_ne!(first[0].id, later[0].id);
        assert!(uuid::Uuid::parse_str(&first[0].id).is_ok());
        // The separator keeps (job, occasion, tenant) apart from a shifted split.
        assert_ne!(child_id("a", "b", "c"), child_id("a", "bc", ""));
    }
}
