//! `jobhost:job/log`: lines into the attempt's bounded log. Linked through a projection
//! to the log alone (`HasSelf<AttemptLog>`): a log line is not journaled and notes
//! nothing, so it needs no view of the attempt.

use crate::sandbox::engine::bindings::jobhost::job::log::{Host, Level};
use crate::sandbox::engine::output::AttemptLog;

impl Host for AttemptLog {
    async fn write(&mut self, level: Level, message: String) {
        let level = match level {
            Level::Trace => "trace",
            Level::Debug => "debug",
            Level::Info => "info",
            Level::Warn => "warn",
            Level::Error => "error",
        };
        self.line(level, &message);
    }
}
