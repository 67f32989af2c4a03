//! The long-running service and its parts: the manifest it reads, `host serve`'s loop and
//! workers, the HTTP API and console, schedules and surveillance, reports, delivered endings, retention,
//! the fleet's registration, `host drive` and OpenTelemetry export.

pub mod app;
pub mod catalog;
pub mod drive;
pub mod http;
pub mod manifest;
pub mod otlp;
pub mod registration;
pub mod report;
pub mod retention;
pub mod schedule;
pub mod serve;
pub mod views;
pub mod webhooks;
