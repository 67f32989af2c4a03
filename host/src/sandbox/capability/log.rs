//! `jobhost:job/log`: lines into the attempt's bounded log. Linked through a projection
//! to the log alone ([`HasLog`]): a log line is not journaled; an `error` line reporting a
//! panic (the SDK's hook) is noted for the trap that follows (`engine::trap`).

use crate::sandbox::engine::bindings::jobhost::job::log::{Host, Level};
use crate::sandbox::engine::output::AttemptLog;
use wasmtime::component::HasData;

/// The `log` capability's view of the attempt's state: its log.
pub struct HasLog;

impl HasData for HasLog {
    type Data<'a> = &'a mut AttemptLog;
}

impl Host for AttemptLog {
    async fn write(&mut self, level: Level, message: String) {
        let level = match level {
            Level::Trace => "trace",
            Level::Debug => "debug",
            Level::Info => "info",
            Level::Warn => "warn",
            Level::Error => {
                if let Some(report) = crate::sandbox::engine::trap::panic_line(&message) {
                    self.note_panic(report);
                }
                "error"
            }
        };
        self.line(level, &message);
    }
}
