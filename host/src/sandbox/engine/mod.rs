//! The sandbox's engine: wasmtime's configuration, the linker with exactly the imports a
//! job may use, the epoch ticker, and loading (validating, compiling, caching) components.

pub mod attempt;
pub mod bindings;
mod cache;
pub mod compiler;
pub mod contract;
pub mod limits;
pub mod output;
pub mod state;
pub mod trap;

use crate::rules::grants::Grants;
use bindings::JobPre;
use cache::CompileCache;
use compiler::{
    CompileFailure, CompileLimits, Compiler, MAX_COMPONENT_BYTES, Profile, base_config, one_line,
};
use contract::{ContractError, Imports};
use sha2::{Digest, Sha256};
use state::GuestState;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use wasmtime::component::{Component, Linker};
use wasmtime::{InstanceAllocationStrategy, PoolingAllocationConfig};

/// How often the epoch advances: the granularity of deadlines, and how often a running
/// guest yields to the async runtime.
pub const EPOCH_TICK: Duration = Duration::from_millis(10);
/// Most bytes of log kept per attempt.
pub const MAX_LOG_BYTES: usize = 64 << 10;
/// Of a pooled memory, what is kept resident between instances (at most, per slot): a
/// small job's stack, data and heap.
const KEEP_RESIDENT_MEMORY: usize = 2 << 20;
/// Of a pooled table, what is kept resident between instances (at most, per slot).
const KEEP_RESIDENT_TABLE: usize = 64 << 10;

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("cannot configure the WebAssembly engine")]
    Config(#[source] wasmtime::Error),
    #[error("cannot create the compile cache at {path}: {source}")]
    Cache {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Why a component was refused. Every message is one line naming the problem.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} is larger than {MAX_COMPONENT_BYTES} bytes")]
    TooLarge { path: PathBuf },
    #[error("{path} is not a WebAssembly file")]
    NotWasm { path: PathBuf },
    #[error(
        "{path} is a core WebAssembly module, not a component: build the job for wasm32-wasip2"
    )]
    CoreModule { path: PathBuf },
    #[error("{path} is not a valid component: {reason}")]
    Malformed { path: PathBuf, reason: String },
    /// Compiling went past the host's limits, or the compiler process failed.
    #[error("{path} cannot be compiled: {source}")]
    Compile {
        path: PathBuf,
        source: CompileFailure,
    },
    #[error("{path}: {source}")]
    Contract {
        path: PathBuf,
        source: ContractError,
    },
}

#[derive(Debug, Clone)]
pub struct EngineSettings {
    /// Pre-reserve instance slots (faster instantiation, more address space reserved).
    pub pooling: bool,
    /// Instances that may exist at once (pooling slots): at least the attempts the host
    /// runs at once.
    pub max_instances: u32,
    /// Where compiled components are kept; `None` compiles in memory only.
    pub cache_dir: Option<PathBuf>,
    /// Meter fuel in every attempt: what enforces a job's `fuel` cap (a deterministic
    /// bound on the instructions an attempt executes) and measures `fuel_used`. Off, guest
    /// code runs faster; the deadline still bounds every attempt's wall time (epochs are
    /// always on), an attempt reports `fuel_used` 0, and a job with a `fuel` cap fails
    /// every attempt `out_of_fuel` without running, since its cap cannot be kept.
    pub fuel: bool,
    /// Compile in a child process under limits (`compiler`); `None` compiles in this
    /// process, unbounded: only for components the operator trusts (tests, benchmarks).
    pub compiler: Option<Compiler>,
}

impl Default for EngineSettings {
    fn default() -> Self {
        EngineSettings {
            pooling: false,
            max_instances: 64,
            cache_dir: None,
            fuel: true,
            compiler: None,
        }
    }
}

/// A component as [`Engine::prepare`] leaves it.
pub enum Prepared {
    /// Compiled (or taken from a cache) and checked: ready to run.
    Ready(Arc<Loaded>),
    /// Checked by name and not compiled yet: [`Engine::load`] compiles it.
    Compiling { digest: String },
}

/// A component ready to instantiate.
pub struct Loaded {
    pub digest: String,
    pub imports: Imports,
    pub(crate) pre: JobPre<GuestState>,
}

pub struct Engine {
    engine: wasmtime::Engine,
    linker: Linker<GuestState>,
    cache: Option<CompileCache>,
    loaded: Mutex<HashMap<String, Arc<Loaded>>>,
    ticker_stop: Arc<AtomicBool>,
    /// What code is compiled for: fuel metered (`EngineSettings::fuel`), epochs.
    profile: Profile,
    compiler: Option<Compiler>,
}

impl Engine {
    pub fn new(settings: &EngineSettings) -> Result<Engine, EngineError> {
        Engine::build(settings, true)
    }

    /// An engine whose guests are never interrupted by the epoch, so no deadline stops a
    /// guest that does not call the host. Only for measuring what the epoch deadline costs
    /// (the `sandbox` benchmark); never for running jobs.
    #[doc(hidden)]
    pub fn without_epochs(settings: &EngineSettings) -> Result<Engine, EngineError> {
        Engine::build(settings, false)
    }

    fn build(settings: &EngineSettings, epochs: bool) -> Result<Engine, EngineError> {
        let profile = Profile {
            fuel: settings.fuel,
            epochs,
        };
        let mut config = base_config(profile);
        if settings.pooling {
            config.allocation_strategy(InstanceAllocationStrategy::Pooling(pool(
                settings.max_instances,
            )));
        }
        let engine = wasmtime::Engine::new(&config).map_err(EngineError::Config)?;
        let mut linker = Linker::new(&engine);
        add_wasi(&mut linker).map_err(EngineError::Config)?;
        crate::sandbox::capability::add_to_linker(&mut linker).map_err(EngineError::Config)?;
        let cache = settings
            .cache_dir
            .as_ref()
            .map(|dir| {
                CompileCache::new(dir.clone(), &engine).map_err(|source| EngineError::Cache {
                    path: dir.clone(),
                    source,
                })
            })
            .transpose()?;
        let ticker_stop = Arc::new(AtomicBool::new(false));
        if epochs {
            spawn_ticker(engine.clone(), ticker_stop.clone());
        }
        Ok(Engine {
            engine,
            linker,
            cache,
            loaded: Mutex::default(),
            ticker_stop,
            profile,
            compiler: settings.compiler.clone(),
        })
    }

    /// Whether attempts meter fuel (`EngineSettings::fuel`).
    pub fn meters_fuel(&self) -> bool {
        self.profile.fuel
    }

    /// Forgets the components loaded so far, so the next load of each reads the compile
    /// cache (or compiles). Only for measuring loads (the `sandbox` benchmark).
    #[doc(hidden)]
    pub fn forget_loaded(&self) {
        self.loaded.lock().expect("loaded map").clear();
    }

    /// Reads, validates and compiles a component (or takes it from the caches), and
    /// checks its imports against the job's grants. Compiling is CPU-bound: call this from
    /// a blocking context (`spawn_blocking`) inside async code.
    pub fn load(&self, path: &Path, grants: &Grants) -> Result<Arc<Loaded>, LoadError> {
        let bytes = read_component(path)?;
        self.load_bytes(path, &bytes, grants)
    }

    /// Like [`Engine::load`], for a component already read; `path` names it in errors.
    pub fn load_bytes(
        &self,
        path: &Path,
        bytes: &[u8],
        grants: &Grants,
    ) -> Result<Arc<Loaded>, LoadError> {
        check_header(path, bytes)?;
        let digest = hex::encode(Sha256::digest(bytes));
        let cached = self
            .loaded
            .lock()
            .expect("loaded map")
            .get(&digest)
            .cloned();
        let loaded = match cached {
            Some(loaded) => loaded,
            None => {
                let loaded = Arc::new(self.compile(path, bytes, digest.clone())?);
                self.loaded
                    .lock()
                    .expect("loaded map")
                    .insert(digest, loaded.clone());
                loaded
            }
        };
        // Grants differ per job: the same component is checked against each job's.
        contract::check_grants(&loaded.imports, grants).map_err(|source| LoadError::Contract {
            path: path.to_path_buf(),
            source,
        })?;
        Ok(loaded)
    }

    /// A component as `host serve` takes it on before compiling it: loaded at once when
    /// this engine or its compile cache has it, otherwise read, its imports and exports
    /// checked against the contract and the job's grants by name (what a load checks
    /// after compiling), and left for [`Engine::load`] to compile in the background. So a
    /// host refuses a bad job before it serves, without waiting for a good one's compile.
    pub fn prepare(&self, path: &Path, grants: &Grants) -> Result<Prepared, LoadError> {
        let bytes = read_component(path)?;
        check_header(path, &bytes)?;
        let digest = hex::encode(Sha256::digest(&bytes));
        let ready = self
            .loaded
            .lock()
            .expect("loaded map")
            .contains_key(&digest)
            || self.cache.as_ref().is_some_and(|c| c.has(&digest));
        if ready {
            return self.load_bytes(path, &bytes, grants).map(Prepared::Ready);
        }
        let contract = |source| LoadError::Contract {
            path: path.to_path_buf(),
            source,
        };
        let (imports, exports) =
            contract::names(&bytes).map_err(|reason| LoadError::Malformed {
                path: path.to_path_buf(),
                reason,
            })?;
        let found = contract::check(
            imports.iter().map(String::as_str),
            exports.iter().map(String::as_str),
        )
        .map_err(contract)?;
        contract::check_grants(&found, grants).map_err(contract)?;
        Ok(Prepared::Compiling { digest })
    }

    /// Compiles `path` into the compile cache (or finds it there) without checking it
    /// against any job's grants: what `host build` does so that the `host run` and `host
    /// test` after it start at once. Its digest, and whether it was compiled now (`false`:
    /// it was cached).
    pub fn warm(&self, path: &Path) -> Result<(String, bool), LoadError> {
        let bytes = read_component(path)?;
        check_header(path, &bytes)?;
        let digest = hex::encode(Sha256::digest(&bytes));
        let cached = self.cache.as_ref().is_some_and(|c| c.has(&digest));
        self.load_bytes(path, &bytes, &Grants::everything())?;
        Ok((digest, !cached))
    }

    fn compile(&self, path: &Path, bytes: &[u8], digest: String) -> Result<Loaded, LoadError> {
        let malformed = |e: wasmtime::Error| LoadError::Malformed {
            path: path.to_path_buf(),
            reason: one_line(&e.to_string()),
        };
        let mut cached = self
            .cache
            .as_ref()
            .and_then(|c| c.get(&self.engine, &digest));
        // Held until this compile's entry is written (or it failed): another host or
        // thread after the same component waits here, then finds the entry.
        let mut _compiling = None;
        if cached.is_none()
            && let Some(cache) = &self.cache
        {
            let patience = self
                .compiler
                .as_ref()
                .map_or_else(|| CompileLimits::default().time, |c| c.limits.time);
            _compiling = cache.lock(&digest, patience);
            cached = cache.get(&self.engine, &digest);
        }
        let (component, artifact) = match cached {
            Some(component) => (component, None),
            None => {
                let artifact = self.artifact(path, bytes)?;
                // SAFETY: the artifact was compiled by this binary for an engine of this
                // profile, here or in the compiler process; `deserialize` refuses one
                // compiled for another configuration. (A compiler subverted by the
                // component it compiles could write any artifact; compiling in this
                // process would give it as much.)
                let component = unsafe { Component::deserialize(&self.engine, &artifact) }
                    .map_err(malformed)?;
                (component, Some(artifact))
            }
        };
        let ty = component.component_type();
        let imports = contract::check(
            ty.imports(&self.engine).map(|(name, _)| name),
            ty.exports(&self.engine).map(|(name, _)| name),
        )
        .map_err(|source| LoadError::Contract {
            path: path.to_path_buf(),
            source,
        })?;
        let pre = self
            .linker
            .instantiate_pre(&component)
            .and_then(JobPre::new)
            .map_err(malformed)?;
        // Only a component that will run is kept: one the contract refuses leaves nothing.
        if let (Some(artifact), Some(cache)) = (&artifact, &self.cache) {
            cache.put(&digest, artifact);
        }
        tracing::info!(digest = %digest, from_cache = artifact.is_none(), "component loaded");
        Ok(Loaded {
            digest,
            imports,
            pre,
        })
    }
}

impl Engine {
    /// The compiled artifact of a component: from the compiler process, under its limits,
    /// or (`EngineSettings::compiler` unset) from this process.
    fn artifact(&self, path: &Path, bytes: &[u8]) -> Result<Vec<u8>, LoadError> {
        let Some(compiler) = &self.compiler else {
            return self
                .engine
                .precompile_component(bytes)
                .map_err(|e| LoadError::Malformed {
                    path: path.to_path_buf(),
                    reason: one_line(&e.to_string()),
                });
        };
        compiler
            .compile(bytes, self.profile)
            .map_err(|failure| match failure {
                CompileFailure::Invalid(reason) => LoadError::Malformed {
                    path: path.to_path_buf(),
                    reason,
                },
                source => LoadError::Compile {
                    path: path.to_path_buf(),
                    source,
                },
            })
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.ticker_stop.store(true, Ordering::Release);
    }
}

/// The pooling allocator's slots for `n` instances at once. A slot's memory may grow to the
/// largest cap a job may set ([`limits::MAX_JOB_MEMORY`]), so the job's own cap, enforced
/// by the store's limiter, is always the one that binds; growth the pool refuses anyway
/// fails the attempt `memory_limit` like growth past the cap. Instantiating with every slot
/// taken fails the attempt `resource_limit`.
fn pool(n: u32) -> PoolingAllocationConfig {
    let mut pool = PoolingAllocationConfig::default();
    pool.total_component_instances(n)
        .total_core_instances(n * limits::MAX_CORE_INSTANCES as u32)
        .total_memories(n * limits::MAX_MEMORIES as u32)
        .total_tables(n * limits::MAX_TABLES as u32)
        .max_core_instances_per_component(limits::MAX_CORE_INSTANCES as u32)
        .max_memories_per_component(limits::MAX_MEMORIES as u32)
        .max_tables_per_component(limits::MAX_TABLES as u32)
        .total_stacks(n)
        .max_memory_size(usize::try_from(limits::MAX_JOB_MEMORY).unwrap_or(usize::MAX));
    if PoolingAllocationConfig::is_pagemap_scan_available() {
        // Between two instances a slot is reset by `memset` of only the pages the first
        // dirtied (found by the kernel's page-map scan), up to these sizes, rather than
        // by `madvise`: no system call to drop them, no page faults to bring them back.
        // The next instance still starts from the component's initial memory. Without
        // the scan, keeping pages resident would `memset` all of them, slower than
        // `madvise`, so it is not done.
        pool.pagemap_scan(wasmtime::Enabled::Yes)
            .linear_memory_keep_resident(KEEP_RESIDENT_MEMORY)
            .table_keep_resident(KEEP_RESIDENT_TABLE);
    }
    pool
}

/// One thread per engine advances the epoch; every store's deadline counts its ticks.
fn spawn_ticker(engine: wasmtime::Engine, stop: Arc<AtomicBool>) {
    std::thread::Builder::new()
        .name("jobhost-epoch".into())
        .spawn(move || {
            while !stop.load(Ordering::Acquire) {
                std::thread::sleep(EPOCH_TICK);
                engine.increment_epoch();
            }
        })
        .expect("spawn the epoch ticker");
}

fn read_component(path: &Path) -> Result<Vec<u8>, LoadError> {
    let read_err = |source| LoadError::Read {
        path: path.to_path_buf(),
        source,
    };
    // Read at most one byte past the bound, whatever the file's size said a moment ago
    // (it may be growing, or not a regular file).
    use std::io::Read as _;
    let file = std::fs::File::open(path).map_err(read_err)?;
    let mut bytes = Vec::new();
    file.take(MAX_COMPONENT_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(read_err)?;
    if bytes.len() as u64 > MAX_COMPONENT_BYTES {
        return Err(LoadError::TooLarge {
            path: path.to_path_buf(),
        });
    }
    Ok(bytes)
}

/// Magic, then a version/layer word: 1 for a core module, 0x0001000d for a component.
fn check_header(path: &Path, bytes: &[u8]) -> Result<(), LoadError> {
    if bytes.len() as u64 > MAX_COMPONENT_BYTES {
        return Err(LoadError::TooLarge {
            path: path.to_path_buf(),
        });
    }
    if bytes.len() < 8 || &bytes[..4] != b"\0asm" {
        return Err(LoadError::NotWasm {
            path: path.to_path_buf(),
        });
    }
    if bytes[4..8] == [1, 0, 0, 0] {
        return Err(LoadError::CoreModule {
            path: path.to_path_buf(),
        });
    }
    Ok(())
}

/// The WASI a sandboxed job gets: clocks, random, stdio and an empty filesystem (Rust's
/// standard library imports it), and nothing else — no sockets, no HTTP.
fn add_wasi(linker: &mut Linker<GuestState>) -> wasmtime::Result<()> {
    use wasmtime_wasi::WasiView;
    use wasmtime_wasi::cli::WasiCli;
    use wasmtime_wasi::cli::WasiCliView;
    use wasmtime_wasi::clocks::WasiClocks;
    use wasmtime_wasi::clocks::WasiClocksView;
    use wasmtime_wasi::filesystem::WasiFilesystem;
    use wasmtime_wasi::filesystem::WasiFilesystemView;
    use wasmtime_wasi::p2::bindings::{cli, clocks, filesystem, random, sockets};
    use wasmtime_wasi::random::WasiRandom;
    use wasmtime_wasi::sockets::{WasiSockets, WasiSocketsView};
    use wasmtime_wasi_io::bindings::wasi::io;

    struct HasIo;
    impl wasmtime::component::HasData for HasIo {
        type Data<'a> = &'a mut wasmtime::component::ResourceTable;
    }

    let l = linker;
    io::error::add_to_linker::<GuestState, HasIo>(l, |t| &mut t.attempt.table)?;
    io::poll::add_to_linker::<GuestState, HasIo>(l, |t| &mut t.attempt.table)?;
    io::streams::add_to_linker::<GuestState, HasIo>(l, |t| &mut t.attempt.table)?;
    clocks::wall_clock::add_to_linker::<GuestState, WasiClocks>(l, GuestState::clocks)?;
    clocks::monotonic_clock::add_to_linker::<GuestState, WasiClocks>(l, GuestState::clocks)?;
    random::random::add_to_linker::<GuestState, WasiRandom>(l, |t| t.ctx().ctx.random())?;
    random::insecure::add_to_linker::<GuestState, WasiRandom>(l, |t| t.ctx().ctx.random())?;
    random::insecure_seed::add_to_linker::<GuestState, WasiRandom>(l, |t| t.ctx().ctx.random())?;
    cli::exit::add_to_linker::<GuestState, WasiCli>(l, GuestState::cli)?;
    cli::environment::add_to_linker::<GuestState, WasiCli>(l, GuestState::cli)?;
    cli::stdin::add_to_linker::<GuestState, WasiCli>(l, GuestState::cli)?;
    cli::stdout::add_to_linker::<GuestState, WasiCli>(l, GuestState::cli)?;
    cli::stderr::add_to_linker::<GuestState, WasiCli>(l, GuestState::cli)?;
    cli::terminal_input::add_to_linker::<GuestState, WasiCli>(l, GuestState::cli)?;
    cli::terminal_output::add_to_linker::<GuestState, WasiCli>(l, GuestState::cli)?;
    cli::terminal_stdin::add_to_linker::<GuestState, WasiCli>(l, GuestState::cli)?;
    cli::terminal_stdout::add_to_linker::<GuestState, WasiCli>(l, GuestState::cli)?;
    cli::terminal_stderr::add_to_linker::<GuestState, WasiCli>(l, GuestState::cli)?;
    filesystem::types::add_to_linker::<GuestState, WasiFilesystem>(l, GuestState::filesystem)?;
    filesystem::preopens::add_to_linker::<GuestState, WasiFilesystem>(l, GuestState::filesystem)?;
    // Sockets are linked so that a language runtime whose libc imports them (CPython's)
    // loads, and every use is refused: the context allows no TCP, no UDP and no name
    // lookup, so creating a socket fails before the host makes one (`GuestState::new`).
    let sockets_options = sockets::network::LinkOptions::default();
    sockets::network::add_to_linker::<GuestState, WasiSockets>(l, &sockets_options, |t| {
        t.sockets()
    })?;
    sockets::instance_network::add_to_linker::<GuestState, WasiSockets>(l, |t| t.sockets())?;
    sockets::tcp::add_to_linker::<GuestState, WasiSockets>(l, |t| t.sockets())?;
    sockets::tcp_create_socket::add_to_linker::<GuestState, WasiSockets>(l, |t| t.sockets())?;
    sockets::udp::add_to_linker::<GuestState, WasiSockets>(l, |t| t.sockets())?;
    sockets::udp_create_socket::add_to_linker::<GuestState, WasiSockets>(l, |t| t.sockets())?;
    sockets::ip_name_lookup::add_to_linker::<GuestState, WasiSockets>(l, |t| t.sockets())?;
    Ok(())
}
