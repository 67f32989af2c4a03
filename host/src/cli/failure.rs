//! An error at the binary's edge, and the exit codes a library error becomes there.

/// The exit code when another process held SQLite's write lock too long.
pub const EXIT_LOCKED: u8 = 4;
/// The exit code of a kick or start refused by a cap on queued runs (`backlog`).
pub const EXIT_QUEUE_FULL: u8 = 5;
/// The exit code of a wait (`host runs wait`, `host start --wait`) whose run had not
/// ended by its timeout.
pub const EXIT_NOT_ENDED: u8 = 6;

/// An error at the binary's edge: the message to print and the exit code.
#[derive(Debug)]
pub struct Failure {
    pub exit: u8,
    pub message: String,
}

impl Failure {
    pub fn usage(message: impl std::fmt::Display) -> Self {
        Failure {
            exit: 2,
            message: message.to_string(),
        }
    }
}

impl<E: std::error::Error + 'static> From<E> for Failure {
    fn from(e: E) -> Self {
        // SQLite's write lock held by another process past the busy timeout has an exit
        // code of its own: waiting longer or moving to Postgres fixes it, not the command.
        let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(&e);
        while let Some(error) = cause {
            let store = error.downcast_ref::<crate::store::StoreError>().or(
                match error.downcast_ref::<crate::service::app::AppError>() {
                    Some(crate::service::app::AppError::Store(store)) => Some(store),
                    _ => None,
                },
            );
            if store.is_some_and(crate::store::StoreError::is_locked) {
                return Failure {
                    exit: EXIT_LOCKED,
                    message: e.to_string(),
                };
            }
            cause = error.source();
        }
        Failure::usage(e)
    }
}
