//! The audit log's words: the fixed name of each change the API, the console and the CLI
//! can make, and how the object a change names is kept. One list, so `host audit
//! --action` and `GET /audit?action=` refuse a name no change has.

/// Each change, by its fixed name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    RunKick,
    RunStart,
    RunStartBatch,
    RunCancel,
    RunRetry,
    RunsCancel,
    RunsRetry,
    Pause,
    Resume,
    EventEmit,
    TenantAdd,
    TenantDisable,
    TenantEnable,
    TokenCreate,
    TokenRevoke,
    FilePut,
    DeliveryRetry,
    RunSignal,
    AppGrant,
    AppRevoke,
    RunsPurge,
}

impl Action {
    pub const ALL: [Action; 21] = [
        Action::RunKick,
        Action::RunStart,
        Action::RunStartBatch,
        Action::RunCancel,
        Action::RunRetry,
        Action::RunsCancel,
        Action::RunsRetry,
        Action::Pause,
        Action::Resume,
        Action::EventEmit,
        Action::TenantAdd,
        Action::TenantDisable,
        Action::TenantEnable,
        Action::TokenCreate,
        Action::TokenRevoke,
        Action::FilePut,
        Action::DeliveryRetry,
        Action::RunSignal,
        Action::AppGrant,
        Action::AppRevoke,
        Action::RunsPurge,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Action::RunKick => "run.kick",
            Action::RunStart => "run.start",
            Action::RunStartBatch => "run.start_batch",
            Action::RunCancel => "run.cancel",
            Action::RunRetry => "run.retry",
            Action::RunsCancel => "runs.cancel",
            Action::RunsRetry => "runs.retry",
            Action::Pause => "pause",
            Action::Resume => "resume",
            Action::EventEmit => "event.emit",
            Action::TenantAdd => "tenant.add",
            Action::TenantDisable => "tenant.disable",
            Action::TenantEnable => "tenant.enable",
            Action::TokenCreate => "token.create",
            Action::TokenRevoke => "token.revoke",
            Action::FilePut => "file.put",
            Action::DeliveryRetry => "delivery.retry",
            Action::RunSignal => "run.signal",
            Action::AppGrant => "app.grant",
            Action::AppRevoke => "app.revoke",
            Action::RunsPurge => "runs.purge",
        }
    }

    pub fn parse(name: &str) -> Option<Action> {
        Action::ALL.into_iter().find(|a| a.as_str() == name)
    }

    /// The refusal of a name that is no action, listing them.
    pub fn unknown(name: &str) -> String {
        let all: Vec<_> = Action::ALL.iter().map(|a| a.as_str()).collect();
        format!(
            "unknown action {:?}: one of {}",
            object(name),
            all.join(", ")
        )
    }
}

/// The result of a change that was made.
pub const OK: &str = "ok";
/// The result of a change a read-only token asked for.
pub const READ_ONLY: &str = "read_only";

/// Longest object text kept.
pub const MAX_OBJECT: usize = 200;

/// The object a change names, as kept: from the caller's text, so bounded, with every
/// control character shown as `?` (it is printed on terminals and pages).
pub fn object(text: &str) -> String {
    let kept: String = text
        .chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect();
    crate::rules::guest_text::for_storage(&kept, MAX_OBJECT)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_action_has_one_name_that_parses_back() {
        let mut names: Vec<_> = Action::ALL.iter().map(|a| a.as_str()).collect();
        for action in Action::ALL {
            assert_eq!(Action::parse(action.as_str()), Some(action));
        }
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), Action::ALL.len());
        assert_eq!(Action::parse("run.delete"), None);
        assert!(Action::unknown("x\u{1b}[2J").contains("run.kick"));
        assert!(!Action::unknown("x\u{1b}[2J").contains('\u{1b}'));
    }

    #[test]
    fn an_object_is_bounded_and_holds_no_control_character() {
        assert_eq!(object("job hello"), "job hello");
        assert_eq!(object("a\0b\u{1b}[31m\n"), "a?b?[31m?");
        let long = "é".repeat(500);
        let kept = object(&long);
        assert!(kept.len() <= MAX_OBJECT && kept.starts_with('é'));
    }
}
