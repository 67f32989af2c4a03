//! Host bindings generated from `wit/jobhost.wit`, and how the journal keeps their
//! `host-error`.

use self::jobhost::job::types::HostError;
use crate::sandbox::journal::{CodeOf, Placeholder};
use std::borrow::Cow;

wasmtime::component::bindgen!({
    path: "../wit",
    world: "job",
    imports: { default: async },
    exports: { default: async },
    // The flight recorder keeps what each call answered (`journal`).
    additional_derives: [serde::Serialize, serde::Deserialize],
    with: {
        "jobhost:job/db.transaction": crate::sandbox::capability::handles::TxHandle,
        "jobhost:job/files.upload": crate::sandbox::capability::handles::UploadHandle,
    },
});

/// The package these bindings are of, named where the contract checks a component's imports.
pub use super::contract::{PACKAGE, PACKAGE_VERSION};

impl<T> Placeholder for Result<T, HostError> {
    fn placeholder() -> Self {
        Err(HostError::Unavailable)
    }
}

impl<T> CodeOf for Result<T, HostError> {
    fn code_of(&self) -> Cow<'static, str> {
        match self {
            Ok(_) => Cow::Borrowed("ok"),
            Err(error) => error_code(error),
        }
    }
}

/// A host error as the timeline shows it (`query-refused(forbidden)`): its reasons are the
/// host's fixed words, never the guest's.
pub fn error_code(error: &HostError) -> Cow<'static, str> {
    match error {
        HostError::LeaseLost => Cow::Borrowed("lease-lost"),
        HostError::Unavailable => Cow::Borrowed("unavailable"),
        HostError::CapabilityRefused(reason) => Cow::Owned(format!("capability-refused({reason})")),
        HostError::QueryRefused(reason) => Cow::Owned(format!("query-refused({reason})")),
        HostError::Invalid(reason) => Cow::Owned(format!("invalid({reason})")),
    }
}
