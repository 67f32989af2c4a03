//! Why a host call was refused, in the host's words: the reason an attempt that then
//! failed carries to its run's last error and its report (`query_refused: ...`). It names
//! the rule that refused the call and what the job was granted. Only host-known names are
//! quoted — the tables, collections, mounts and actions of the job's grant, as the
//! operator's manifest spells them — never a name the guest chose, so the reason is free
//! of guest text; it is bounded, and quoted names are escaped, so a terminal shows it as
//! it is.

use crate::rules::failure::FailureCode;
use crate::rules::grants::{DbGrant, FilesGrant};
use crate::store::guest::Refusal;
use std::collections::BTreeSet;

/// Longest reason, in bytes.
pub const MAX_REASON: usize = 512;
/// Most names of a grant a reason lists.
const MAX_NAMES: usize = 8;
/// Longest name a reason quotes, in bytes (a longer one is cut).
const MAX_NAME: usize = 64;

/// The first refusal a host call returned in an attempt, with its reason.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Refused {
    pub code: FailureCode,
    pub reason: String,
    /// Another attempt would be refused the same: the statement or the grant is at fault,
    /// not the data or the moment, so the runner ends the run rather than retry it.
    #[serde(default)]
    pub deterministic: bool,
}

impl Refused {
    fn new(code: FailureCode, reason: String) -> Refused {
        Refused {
            code,
            reason: crate::rules::guest_text::for_storage(&reason, MAX_REASON),
            deterministic: false,
        }
    }

    fn deterministic(self) -> Refused {
        Refused {
            deterministic: true,
            ..self
        }
    }

    /// The run's last error: the code and the reason, then the guest's own message.
    pub fn with_guest_message(&self, message: &str) -> String {
        if message.is_empty() {
            format!("{}: {}", self.code.as_str(), self.reason)
        } else {
            format!(
                "{}: {}; the guest's error: {message}",
                self.code.as_str(),
                self.reason
            )
        }
    }
}

/// `names` quoted and escaped, at most [`MAX_NAMES`] of them, or `none`.
fn listed<'a>(names: impl IntoIterator<Item = &'a str>) -> String {
    let names: Vec<&str> = names.into_iter().collect();
    if names.is_empty() {
        return "none".into();
    }
    let mut shown: Vec<String> = names.iter().take(MAX_NAMES).map(|n| quoted(n)).collect();
    if names.len() > MAX_NAMES {
        shown.push(format!("and {} more", names.len() - MAX_NAMES));
    }
    shown.join(", ")
}

fn quoted(name: &str) -> String {
    format!(
        "{:?}",
        crate::rules::guest_text::for_storage(name, MAX_NAME)
    )
}

fn set(names: &BTreeSet<String>) -> impl Iterator<Item = &str> {
    names.iter().map(String::as_str)
}

/// A `jobs` call the grant or the tenant rule refused (`reason` is the host-error's).
pub fn start(reason: &str, grant: Option<&BTreeSet<String>>) -> Refused {
    let rule = match reason {
        "job-not-granted" => "the job may start only the jobs its grant names",
        "event-not-granted" => "the job may emit only the events its grant names",
        "job-of-another-tenant" => "a run may start only its own tenant's jobs and per-tenant jobs",
        _ => "the call was refused",
    };
    Refused::new(
        FailureCode::CapabilityRefused,
        format!(
            "{reason}: {rule} (the job may start {})",
            listed(grant.into_iter().flat_map(set))
        ),
    )
}

/// An attempt past the runs it may start (`runs` of `payload_bytes` in all, the `jobs`
/// capability's bounds).
pub fn run_limit(runs: usize, payload_bytes: usize) -> Refused {
    Refused::new(
        FailureCode::RunLimit,
        format!(
            "run-limit: an attempt may start at most {runs} runs with {} MiB of payload in all",
            payload_bytes >> 20
        ),
    )
}

/// A `jobs` call whose runs would pass a queued cap (`backlog`).
pub fn queue_full(full: &crate::queue::backlog::Full) -> Refused {
    Refused::new(FailureCode::QueueFull, format!("queue-full: {full}"))
}

/// A `jobs` call whose runs would be deeper in their family than the host allows.
pub fn family_too_deep() -> Refused {
    Refused::new(
        FailureCode::FamilyTooDeep,
        format!(
            "family-too-deep: a run may be at most {} deep in its family (a child of a child ...)",
            crate::queue::backlog::MAX_FAMILY_DEPTH
        ),
    )
}

/// A call to a capability the job was not granted at all.
pub fn capability_not_granted(capability: &str) -> Refused {
    Refused::new(
        FailureCode::CapabilityRefused,
        format!("the job is not granted `{capability}`"),
    )
}

/// The tables of a db grant, each with what the job may do to it, at most [`MAX_NAMES`]
/// of them: `"orders" (write), "prices" (read)`, or `none`.
fn tables_granted(grant: &DbGrant) -> String {
    let tables: Vec<String> = grant
        .write
        .iter()
        .map(|t| format!("{} (write)", quoted(t)))
        .chain(
            grant
                .read
                .iter()
                .filter(|t| !grant.write.contains(*t))
                .map(|t| format!("{} (read)", quoted(t))),
        )
        .collect();
    if tables.is_empty() {
        return "none".into();
    }
    let mut shown: Vec<String> = tables.iter().take(MAX_NAMES).cloned().collect();
    if tables.len() > MAX_NAMES {
        shown.push(format!("and {} more", tables.len() - MAX_NAMES));
    }
    shown.join(", ")
}

/// A guest statement the database port refused. One the statement or the grant is at
/// fault for (not granted, read-only, forbidden, invalid) is refused alike on every
/// attempt; a constraint, a deadline, a rollback or a failure depends on the data and the
/// moment.
pub fn query(refusal: Refusal, grant: &DbGrant) -> Refused {
    let granted = || format!("(tables granted: {})", tables_granted(grant));
    let reason = match refusal {
        Refusal::NotGranted => format!(
            "not-granted: a table the statement names is outside the job's db grant, or is \
             granted only for reading and the statement writes it {}",
            granted()
        ),
        Refusal::ReadOnly => format!(
            "read-only: a write outside a transaction, or to a table granted only for \
             reading {}",
            granted()
        ),
        Refusal::Forbidden => "forbidden: a schema change, pragma, attach, transaction control, \
            role change or function no guest may use"
            .into(),
        Refusal::InvalidStatement => {
            "invalid-statement: the statement does not parse, or names something that does \
             not exist"
                .into()
        }
        Refusal::Constraint => "constraint: a constraint of the table rejected the write".into(),
        Refusal::Interrupted => "interrupted: the statement ran into the deadline".into(),
        Refusal::TransactionTimeout => {
            "transaction-timeout: the transaction stayed open past its bound and was rolled back"
                .into()
        }
        Refusal::RolledBack => "rolled-back: the database rolled the transaction back".into(),
        Refusal::Failed => "failed: the database refused the statement".into(),
    };
    let refused = Refused::new(FailureCode::QueryRefused, reason);
    match refusal {
        Refusal::NotGranted
        | Refusal::ReadOnly
        | Refusal::Forbidden
        | Refusal::InvalidStatement => refused.deterministic(),
        Refusal::Constraint
        | Refusal::Interrupted
        | Refusal::TransactionTimeout
        | Refusal::RolledBack
        | Refusal::Failed => refused,
    }
}

/// A `files` call on `collection` for `using` (`read`, `write`, `scan`) the grant does not
/// allow: the collection is named only if the grant names it for another use.
pub fn collection(collection: &str, using: &str, grant: Option<&FilesGrant>) -> Refused {
    let Some(grant) = grant else {
        return capability_not_granted("files");
    };
    let known = grant.read.contains(collection)
        || grant.write.contains(collection)
        || grant.scan.contains(collection);
    let what = if known {
        format!("{using} of collection {} not granted", quoted(collection))
    } else {
        format!("{using} of a collection outside the job's files grant")
    };
    Refused::new(
        FailureCode::CapabilityRefused,
        format!(
            "not-granted: {what} (the job may read {}; write {}; scan {})",
            listed(set(&grant.read)),
            listed(set(&grant.write)),
            listed(set(&grant.scan))
        ),
    )
}

/// A collection the job was granted that this host's manifest does not declare.
pub fn undeclared_collection() -> Refused {
    Refused::new(
        FailureCode::CapabilityRefused,
        "not-granted: a collection of the job's grant that this host's manifest does not declare"
            .into(),
    )
}

/// A link or special file met under a granted local collection (the operator's log and
/// the `path_refused` report say where).
pub fn path_refused() -> Refused {
    Refused::new(
        FailureCode::PathRefused,
        "path-refused: a symbolic link or special file stands in an object's path under a \
         local collection (see the path_refused report)"
            .into(),
    )
}

/// A `links` call the mount's rules refused: `reason` is the guest-facing reason, the
/// mount named only if the job was granted it.
pub fn link(reason: &str, mount: &str, grant: Option<&BTreeSet<String>>) -> Refused {
    let Some(grant) = grant else {
        return capability_not_granted("links");
    };
    let named = if grant.contains(mount) {
        format!("mount {}", quoted(mount))
    } else {
        "a mount".into()
    };
    let what = match reason {
        "method-not-allowed" => format!("{named} does not allow the call's method"),
        "action-not-declared" => {
            format!("the call to {named} names an action its job does not declare")
        }
        _ => format!("{named} is outside the job's links grant"),
    };
    Refused::new(
        FailureCode::CapabilityRefused,
        format!("{reason}: {what} (the job may call {})", listed(set(grant))),
    )
}

/// A step name reached twice in one attempt.
pub fn step_reused() -> Refused {
    Refused::new(
        FailureCode::StepReused,
        "step-reused: the attempt reached one step name twice".into(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_names_only_what_the_grant_names() {
        let grant = DbGrant {
            read: ["orders".to_string()].into(),
            write: BTreeSet::new(),
        };
        let r = query(Refusal::NotGranted, &grant);
        assert_eq!(r.code, FailureCode::QueryRefused);
        assert!(
            r.reason.ends_with(r#"(tables granted: "orders" (read))"#),
            "{}",
            r.reason
        );
        let both = DbGrant {
            read: ["orders".to_string(), "prices".to_string()].into(),
            write: ["orders".to_string()].into(),
        };
        assert!(
            query(Refusal::ReadOnly, &both)
                .reason
                .ends_with(r#"(tables granted: "orders" (write), "prices" (read))"#)
        );
        assert!(
            query(Refusal::NotGranted, &DbGrant::default())
                .reason
                .ends_with("(tables granted: none)")
        );

        let files = FilesGrant {
            read: ["reports".to_string()].into(),
            ..FilesGrant::default()
        };
        let named = collection("reports", "write", Some(&files));
        assert!(
            named
                .reason
                .starts_with(r#"not-granted: write of collection "reports" not granted"#),
            "{}",
            named.reason
        );
        let guest_chosen = "\u{1b}[2Jsecret-collection";
        let unnamed = collection(guest_chosen, "read", Some(&files));
        assert!(
            !unnamed.reason.contains("secret-collection"),
            "{}",
            unnamed.reason
        );
        assert!(!unnamed.reason.contains('\u{1b}'));

        let mounts: BTreeSet<String> = ["billing".to_string()].into();
        let r = link("not-granted", "\u{1b}evil", Some(&mounts));
        assert!(
            !r.reason.contains("evil") && r.reason.contains(r#"may call "billing""#),
            "{}",
            r.reason
        );
        assert_eq!(
            collection("x", "read", None),
            capability_not_granted("files")
        );
    }

    #[test]
    fn only_a_refusal_the_statement_or_grant_is_at_fault_for_is_deterministic() {
        let grant = DbGrant::default();
        for refusal in [
            Refusal::NotGranted,
            Refusal::ReadOnly,
            Refusal::Forbidden,
            Refusal::InvalidStatement,
        ] {
            assert!(query(refusal, &grant).deterministic, "{refusal:?}");
        }
        for refusal in [
            Refusal::Constraint,
            Refusal::Interrupted,
            Refusal::TransactionTimeout,
            Refusal::RolledBack,
            Refusal::Failed,
        ] {
            assert!(!query(refusal, &grant).deterministic, "{refusal:?}");
        }
    }

    #[test]
    fn reasons_are_bounded_and_escaped() {
        let many: BTreeSet<String> = (0..20)
            .map(|i| format!("t{i:02}{}", "x".repeat(100)))
            .collect();
        let grant = DbGrant {
            read: many.clone(),
            write: many,
        };
        let r = query(Refusal::NotGranted, &grant);
        assert!(r.reason.len() <= MAX_REASON);
        let short = DbGrant {
            read: (0..20).map(|i| format!("t{i:02}")).collect(),
            write: BTreeSet::new(),
        };
        let r = query(Refusal::NotGranted, &short);
        assert!(
            r.reason.ends_with(r#""t07" (read), and 12 more)"#),
            "{}",
            r.reason
        );
        let odd = DbGrant {
            read: ["a\u{1b}[31m".to_string()].into(),
            write: BTreeSet::new(),
        };
        assert!(!query(Refusal::ReadOnly, &odd).reason.contains('\u{1b}'));
        let r = step_reused();
        assert_eq!(
            r.with_guest_message("boom"),
            "step_reused: step-reused: the attempt reached one step name twice; the guest's error: boom"
        );
    }
}
