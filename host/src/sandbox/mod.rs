//! The sandbox: wasmtime's engine and limits, the capability imports a guest calls (one
//! file per WIT interface), the flight recorder that journals and replays those calls, the
//! host's words for a refused call (`refusal`, which the journal records), and the outside
//! parts two capabilities reach through: object storage (`files`) and outbound HTTP mounts
//! (`links`).

pub mod capability;
pub mod engine;
pub mod files;
pub mod journal;
pub mod links;
pub mod refusal;
