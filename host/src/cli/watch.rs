//! `--watch` for `host run` and `host test`: run again whenever one of the files changes.
//! Polled by modification time, since a build replaces a component rather than editing it,
//! and a file that is mid-write settles before the next run.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// How often the files are looked at.
const POLL: Duration = Duration::from_millis(250);

/// Returns once any of `paths` changed (appeared, vanished or was written), and was then
/// left alone for a moment.
pub async fn until_changed(paths: &[PathBuf]) {
    let stamps = || -> Vec<Option<SystemTime>> { paths.iter().map(|p| modified(p)).collect() };
    let before = stamps();
    loop {
        tokio::time::sleep(POLL).await;
        let now = stamps();
        if now != before {
            // A write in progress: wait until it stops changing.
            let mut settled = now;
            loop {
                tokio::time::sleep(POLL).await;
                let again = stamps();
                if again == settled {
                    return;
                }
                settled = again;
            }
        }
    }
}

fn modified(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

/// What `--watch` says between runs.
pub fn waiting(paths: &[PathBuf]) {
    let names: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
    println!("\nwatching {} for changes (Ctrl-C stops)", names.join(", "));
}
