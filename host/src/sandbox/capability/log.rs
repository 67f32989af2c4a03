//! `jobhost:job/log`: lines into the attempt's bounded log. Linked through a projection
//! to the log alone (`HasSelf<AttemptLog>`): a log line is not journaled; an `error` line
//! reporting a panic (the SDK's hook) is noted in the log for the trap that follows
//! (`engine::trap`), so it needs no view of the attempt.

use crate::sandbox::engine::bindings::jobhost::job::log::{Host, Level};
use crate::sandbox::engine::output::AttemptLog;

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
