//! `--watch` for `host run` and `host test`: run again whenever one of the files changes.
//! Polled by modification time, since a build replaces a component rather than editing it,
//! and a file that is mid-write settles before the next run.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// How often the files are looked at.
const POLL: Duration = Duration::from_millis(250);

/// When each of `paths` was last written (`None`: absent). Taken before a run, so that a
/// change made while it ran starts the next one.
pub fn stamps(paths: &[PathBuf]) -> Vec<Option<SystemTime>> {
    paths.iter().map(|p| modified(p)).collect()
}

/// Returns once any of `paths` differs from `before` (appeared, vanished or was written),
/// and was then left alone for a moment.
pub async fn until_changed(paths: &[PathBuf], before: Vec<Option<SystemTime>>) {
    loop {
        let now = stamps(paths);
        if now != before {
            // A write in progress: wait until it stops changing.
            let mut settled = now;
            loop {
                tokio::time::sleep(POLL).await;
                let again = stamps(paths);
                if again == settled {
                    return;
                }
                settled = again;
            }
        }
        tokio::time::sleep(POLL).await;
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
