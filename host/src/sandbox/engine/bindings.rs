//! Host bindings generated from `wit/jobhost.wit`.

wasmtime::component::bindgen!({
    path: "../wit",
    world: "job",
    imports: { default: async },
    exports: { default: async },
    // The flight recorder keeps what each call answered (`journal`).
    additional_derives: [serde::Serialize, serde::Deserialize],
    with: {
        "jobhost:job/db.transaction": crate::sandbox::capability::db::TxHandle,
        "jobhost:job/files.upload": crate::sandbox::capability::files::UploadHandle,
    },
});

/// The WIT package this host implements, as it appears in import and export names.
pub const PACKAGE: &str = "jobhost:job";
pub const PACKAGE_VERSION: (u64, u64, u64) = (0, 1, 4);
