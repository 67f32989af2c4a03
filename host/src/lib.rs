//! jobhost: runs untrusted jobs, compiled to WebAssembly components, in a wasmtime sandbox
//! that can do only what each job was granted, with every write fenced by the attempt's
//! lease. See docs/architecture.md for the modules and the protocol.

pub mod failure;
pub mod grants;
pub mod job;
pub mod manifest;
pub mod store;
pub mod units;
pub mod capability;
pub mod engine;
pub mod lease;
pub mod runner;
pub mod cli;
pub mod app;
pub mod metrics;
pub mod catalog;
pub mod kick;
pub mod schedule;
pub mod report;
pub mod views;
pub mod http;
pub mod serve;
