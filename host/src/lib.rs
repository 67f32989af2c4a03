//! jobhost: runs untrusted jobs, compiled to WebAssembly components, in a wasmtime sandbox
//! that can do only what each job was granted, with every write fenced by the attempt's
//! lease. See docs/architecture.md for the modules and the protocol.

pub mod app;
pub mod backlog;
pub mod capability;
pub mod catalog;
pub mod cli;
pub mod controls;
pub mod drive;
pub mod engine;
pub mod event_filter;
pub mod events;
pub mod failure;
pub mod family;
pub mod fan_out;
pub mod files;
#[cfg(test)]
pub(crate) mod fuzzing;
pub mod grants;
pub mod guest_text;
pub mod http;
pub mod inspect;
pub mod job;
pub mod journal;
pub mod json_rule;
pub mod kick;
pub mod languages;
pub mod lease;
pub mod links;
pub mod manifest;
pub mod metrics;
pub mod name_rule;
pub mod otlp;
pub mod pause;
pub mod quota;
pub mod registration;
pub mod report;
pub mod retention;
pub mod runner;
pub mod schedule;
pub mod serve;
pub mod store;
pub mod tenant;
pub mod test_cases;
pub mod trace;
pub mod units;
pub mod views;
