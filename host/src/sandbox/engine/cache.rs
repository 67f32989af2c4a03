//! Compiled components on disk, keyed by the component's digest and the engine's
//! configuration, so a second `host run` of the same component does not recompile.
//!
//! Loading a cached artifact maps native code into the process, so the cache directory
//! must be writable only by the host's operator: it is created with mode 0700, entries are
//! written to a temporary file and renamed into place, and an entry that fails to load is
//! recompiled and replaced.

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use wasmtime::component::Component;

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

    /// Keeps `artifact`, the compiled form of `digest` as `Engine::precompile_component`
    /// (or the compiler process) wrote it.
    pub fn put(&self, digest: &str, artifact: &[u8]) {
        if write_atomically(&self.path(digest), artifact).is_err() {
            tracing::warn!(digest, "could not write a compile-cache entry");
        }
    }
}

fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path)
}
