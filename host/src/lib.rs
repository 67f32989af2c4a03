//! jobhost: runs untrusted jobs, compiled to WebAssembly components, in a wasmtime sandbox
//! that can do only what each job was granted, with every write fenced by the attempt's
//! lease. See docs/architecture.md for the map.
//!
//! The layers, bottom to top: `rules`, `store`, `queue`, `sandbox`, `runs`, `service`,
//! `authoring`, `cli`. Each imports only those below it; `scripts/structure --check`
//! (run by CI) holds that and the width of import circles.

pub mod authoring;
pub mod cli;
pub mod queue;
pub mod rules;
pub mod runs;
pub mod sandbox;
pub mod service;
pub mod store;
