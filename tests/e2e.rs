//! Every end-to-end test in one binary: each file below is a module, so the suite is
//! compiled and linked once (each test binary is a link of the whole host), shares one
//! build of the guests (`common::guest`) and one compiled-component cache, and runs its
//! tests from every file in one pool. Run one file's tests with
//! `cargo test --test e2e steps::`.

#[macro_use]
mod common;

mod adversary;
mod api_fuzz;
mod api_limits;
mod apps;
mod audit;
mod authors;
mod chaos;
mod cli;
mod console;
mod controls;
mod deliveries;
mod enqueue;
mod events;
mod family;
mod files;
mod fleet;
mod flow;
mod fuel;
mod functions;
mod fuzz_components;
mod guest_sql;
mod guide;
mod jobs;
mod journals;
mod lanes;
mod lease_model;
mod limits;
mod links;
mod live;
mod mount_limits;
mod openapi;
mod page;
mod polyglot;
mod replay;
mod run;
mod serve;
mod signals;
mod steps;
mod store_conformance;
mod tenants;
mod trace;
