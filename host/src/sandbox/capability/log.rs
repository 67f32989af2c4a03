//! `jobhost:job/log`: lines into the attempt's bounded log.

use crate::sandbox::engine::bindings::jobhost::job::log::{Host, Level};
use crate::sandbox::engine::state::GuestState;

impl Host for GuestState {
    async fn write(&mut self, level: Level, message: String) {
        let level = match level {
            Level::Trace => "trace",
            Level::Debug => "debug",
            Level::Info => "info",
            Level::Warn => "warn",
            Level::Error => "error",
        };
        self.log.line(level, &message);
    }
}
