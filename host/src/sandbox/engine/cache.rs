//! Compiled components on disk, keyed by the component's digest and the engine's
//! configuration, so a second `host run` of the same component does not recompile.
//!
//! Loading a cached artifact maps native code into the process, so the cache directory
//! must be writable only by the host's operator: it is created with mode 0700, entries are
//! written to a temporary file and renamed into place, and an entry that fails to load is
//! recompiled and replaced.
//!
//! Hosts that share the directory (a fleet on one machine, a `host run` beside a `host
//! serve`, the test suite's processes) and the threads of one host compile a component
//! once between them: whoever misses takes the component's lock file and looks again
//! before compiling, so the others wait for its entry instead of each compiling the same
//! component side by side (a Python or JS first compile takes a core for many seconds).

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use wasmtime::component::Component;

/// How often a caller waiting for another's compile of the same component looks again.
const LOCK_POLL: Duration = Duration::from_millis(50);

pub struct CompileCache {
    dir: PathBuf,
    engine_key: String,
}

impl CompileCache {
    pub fn new(dir: PathBuf, engine: &wasmtime::Engine) -> std::io::Result<Self> {
        std::fs::create_dir_all(&dir)?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))?;
        }
        let mut hasher = std::hash::DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut hasher);
        Ok(CompileCache {
            dir,
            engine_key: format!("{:016x}", hasher.finish()),
        })
    }

    fn path(&self, digest: &str) -> PathBuf {
        self.dir.join(format!("{digest}-{}.cwasm", self.engine_key))
    }

    /// Whether an entry for `digest` is on disk (not whether it loads: `get` says).
    pub fn has(&self, digest: &str) -> bool {
        self.path(digest).exists()
    }

    /// The cached compilation of `digest`, if there is a usable one.
    pub fn get(&self, engine: &wasmtime::Engine, digest: &str) -> Option<Component> {
        let path = self.path(digest);
        if !path.exists() {
            return None;
        }
        // SAFETY: the file was written by `put` below from a component compiled by an
        // engine with the same configuration, into a directory only the operator writes.
        let loaded = unsafe { Component::deserialize_file(engine, &path) };
        match loaded {
            Ok(component) => Some(component),
            Err(_) => {
                tracing::warn!(digest, "discarding an unusable compile-cache entry");
                let _ = std::fs::remove_file(&path);
                None
            }
        }
    }

    /// Holds the compile of `digest` for this caller until the guard is dropped: an
    /// advisory lock (`flock`) on a file beside the entry, which excludes other processes
    /// and other threads of this one alike, and is released if the holder dies. A holder
    /// that neither finishes nor dies (a frozen host) is waited for at most `patience`, a
    /// compile's own time limit; then, or if the lock file cannot be made, `None`: the
    /// caller compiles without it.
    pub fn lock(&self, digest: &str, patience: Duration) -> Option<CompileLock> {
        let path = self.dir.join(format!("{digest}-{}.lock", self.engine_key));
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .ok()?;
        let until = Instant::now() + patience;
        loop {
            match file.try_lock() {
                Ok(()) => return Some(CompileLock { path, _file: file }),
                Err(std::fs::TryLockError::WouldBlock) if Instant::now() < until => {
                    std::thread::sleep(LOCK_POLL);
                }
                Err(_) => {
                    tracing::warn!(digest, "compiling without the compile lock");
                    return None;
                }
            }
        }
    }

    /// Keeps `artifact`, the compiled form of `digest` as `Engine::precompile_component`
    /// (or the compiler process) wrote it.
    pub fn put(&self, digest: &str, artifact: &[u8]) {
        if write_atomically(&self.path(digest), artifact).is_err() {
            tracing::warn!(digest, "could not write a compile-cache entry");
        }
    }
}

/// A compile held (`CompileCache::lock`). Dropping it removes the lock file, while still
/// holding it, then releases it: the cache keeps only its entries. Whoever waited on the
/// removed file finds the entry written; a caller arriving after makes a new lock file and
/// finds it too. Only after a failed compile may two callers then compile side by side.
pub struct CompileLock {
    path: PathBuf,
    _file: std::fs::File,
}

impl Drop for CompileLock {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_caller_holds_a_components_compile_and_the_next_has_it_once_released() {
        let dir = tempfile::tempdir().unwrap();
        let cache =
            CompileCache::new(dir.path().to_path_buf(), &wasmtime::Engine::default()).unwrap();
        let held = cache
            .lock("d1", Duration::ZERO)
            .expect("a free lock is taken");
        assert!(
            cache.lock("d1", Duration::ZERO).is_none(),
            "a second caller does not get a held compile"
        );
        assert!(
            cache.lock("d2", Duration::ZERO).is_some(),
            "another component's compile is not held up"
        );
        drop(held);
        let again = cache
            .lock("d1", Duration::ZERO)
            .expect("a released lock is taken");
        drop(again);
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            0,
            "no lock file is left in the cache"
        );
    }
}
