//! Compiling a component in a child process under limits.
//!
//! Compiling is the one thing the host does with a tenant's component before a sandbox
//! holds it, and the compiler's memory and time grow with what the component asks for: a
//! hostile one could take the host's memory or a core for as long as it likes. So the
//! host compiles in a child, the host binary itself (`host compile-component`), whose
//! data segment is capped (`RLIMIT_DATA`: its heap and anonymous mappings) and which is
//! killed past its time. The child reads the component on stdin and writes the compiled
//! artifact on stdout; the host loads the artifact into its own engine, which checks that
//! it was compiled for the same configuration.

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// Largest component file the host loads.
pub const MAX_COMPONENT_BYTES: u64 = 64 << 20;
/// The guest's wasm stack; async fiber stacks are sized above it.
const WASM_STACK: usize = 1 << 20;
/// The exit code of a child that refused the component as invalid (the reason on stderr).
pub const EXIT_INVALID: i32 = 3;
/// The exit code of a child whose compiler was refused memory it asked for (and could say
/// so: an allocation Rust cannot recover from aborts instead).
pub const EXIT_OVER_MEMORY: i32 = 4;
/// Largest artifact the host accepts from the child, per byte of component (native code
/// and its metadata are a small multiple of the wasm), and at least, and at most.
const ARTIFACT_PER_BYTE: u64 = 16;
const MIN_ARTIFACT_BYTES: u64 = 16 << 20;
const MAX_ARTIFACT_BYTES: u64 = 1 << 30;
/// Most of the child's stderr kept: one reason line.
const MAX_REASON_BYTES: u64 = 4 << 10;
/// How often the host looks whether the child has ended.
const POLL: Duration = Duration::from_millis(2);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompileLimits {
    /// The child's data segment, in bytes.
    pub memory: u64,
    /// The child's wall time.
    pub time: Duration,
}

impl Default for CompileLimits {
    fn default() -> Self {
        CompileLimits {
            memory: 4 << 30,
            time: Duration::from_secs(120),
        }
    }
}

/// The configuration the child compiles for; it must match the host engine's, or the
/// host refuses the artifact.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Profile {
    pub fuel: bool,
    pub epochs: bool,
}

/// Where compiling runs: a child started from `program` under `limits`, compiling a
/// component's functions on `threads` threads at once.
#[derive(Debug, Clone)]
pub struct Compiler {
    pub program: PathBuf,
    pub limits: CompileLimits,
    pub threads: usize,
}

/// The threads a compile uses when the operator does not say: every core this process
/// may run on (a Python or JS component's first compile is 16–19 s on one).
pub fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CompileFailure {
    #[error("{0}")]
    Invalid(String),
    #[error("compiling it needs more memory than the host's limit ({0} bytes)")]
    OverMemory(u64),
    #[error("compiling it takes longer than the host's limit ({0:?})")]
    OverTime(Duration),
    /// The child could not be started, or ended in a way none of the above explains.
    #[error("the compiler process failed")]
    Failed,
}

impl Compiler {
    /// The compiled artifact of `component`, for an engine of `profile`.
    pub fn compile(&self, component: &[u8], profile: Profile) -> Result<Vec<u8>, CompileFailure> {
        let mut child = Command::new(&self.program)
            .arg("compile-component")
            .arg(format!("--fuel={}", profile.fuel))
            .arg(format!("--epochs={}", profile.epochs))
            .arg(format!("--memory-limit={}", self.limits.memory))
            .arg(format!("--threads={}", self.threads.max(1)))
            // Nothing of the host's environment (database URLs, credentials) reaches the
            // process that reads a hostile component; only the size of the compiler's
            // thread pool (wasmtime compiles in parallel on rayon's global pool).
            .env_clear()
            .env("RAYON_NUM_THREADS", self.threads.max(1).to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| {
                tracing::error!(kind = ?e.kind(), "cannot start the compiler process");
                CompileFailure::Failed
            })?;
        let (Some(mut stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            let _ = child.kill();
            let _ = child.wait();
            return Err(CompileFailure::Failed);
        };
        let deadline = Instant::now() + self.limits.time;
        let max_artifact = (component.len() as u64)
            .saturating_mul(ARTIFACT_PER_BYTE)
            .clamp(MIN_ARTIFACT_BYTES, MAX_ARTIFACT_BYTES);
        let (status, artifact, reason) = std::thread::scope(|scope| {
            scope.spawn(move || {
                // A child that ends early closes the pipe: its status says why.
                let _ = stdin.write_all(component);
            });
            let artifact = scope.spawn(move || read_bounded(stdout, max_artifact));
            let reason = scope.spawn(move || read_bounded(stderr, MAX_REASON_BYTES));
            let status = wait_until(&mut child, deadline);
            let artifact = artifact.join().unwrap_or_default();
            let reason = reason.join().unwrap_or_default();
            (status, artifact, reason)
        });
        let reason = String::from_utf8_lossy(&reason);
        match status {
            None => Err(CompileFailure::OverTime(self.limits.time)),
            Some(status) if status.success() && (artifact.len() as u64) <= max_artifact => {
                Ok(artifact)
            }
            Some(status) if status.code() == Some(EXIT_INVALID) => {
                Err(CompileFailure::Invalid(one_line(&reason)))
            }
            Some(status) if status.code() == Some(EXIT_OVER_MEMORY) => {
                Err(CompileFailure::OverMemory(self.limits.memory))
            }
            // Rust's allocator aborts with this message when the cap refuses memory.
            Some(_) if reason.contains("memory allocation of") => {
                Err(CompileFailure::OverMemory(self.limits.memory))
            }
            Some(status) => {
                tracing::warn!(status = %status, "the compiler process failed");
                Err(CompileFailure::Failed)
            }
        }
    }
}

/// The child's status once it ends, or `None` if it was still running at `deadline` (it
/// is killed then).
fn wait_until(child: &mut std::process::Child, deadline: Instant) -> Option<ExitStatus> {
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Some(status),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(POLL),
            Ok(None) | Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
        }
    }
}

/// Up to `limit + 1` bytes of `from` (one past the limit says it was over); the rest is
/// read and dropped, so the child never blocks on a full pipe.
fn read_bounded(mut from: impl Read, limit: u64) -> Vec<u8> {
    let mut bytes = Vec::new();
    let _ = (&mut from).take(limit + 1).read_to_end(&mut bytes);
    let _ = std::io::copy(&mut from, &mut std::io::sink());
    bytes
}

/// The child's side (`host compile-component`): caps its own data segment, reads a
/// component on stdin, writes its compiled artifact on stdout, and exits 0; or writes why
/// the component is invalid on stderr and exits [`EXIT_INVALID`]. With more than one
/// thread its functions are compiled in parallel, on the pool the parent sized.
pub fn compile_stdin(profile: Profile, memory_limit: u64, threads: usize) -> i32 {
    if let Err(e) = cap_data_segment(memory_limit) {
        eprintln!("cannot limit the compiler's memory: {e}");
        return 1;
    }
    let mut component = Vec::new();
    let read = std::io::stdin()
        .lock()
        .take(MAX_COMPONENT_BYTES + 1)
        .read_to_end(&mut component);
    if read.is_err() || component.len() as u64 > MAX_COMPONENT_BYTES {
        eprintln!("the component could not be read whole");
        return EXIT_INVALID;
    }
    let mut config = base_config(profile);
    // The threads' stacks count against the cap like the rest of the data segment; a few
    // MiB each. Parallelism is not part of an artifact's compatibility.
    config.parallel_compilation(threads > 1);
    let engine = match wasmtime::Engine::new(&config) {
        Ok(engine) => engine,
        Err(_) => {
            eprintln!("cannot configure the WebAssembly engine");
            return 1;
        }
    };
    let artifact = match engine.precompile_component(&component) {
        Ok(artifact) => artifact,
        Err(e) if e.chain().any(|cause| cause.is::<wasmtime::OutOfMemory>()) => {
            return EXIT_OVER_MEMORY;
        }
        Err(e) => {
            eprintln!("{}", one_line(&e.to_string()));
            return EXIT_INVALID;
        }
    };
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(&artifact).and_then(|()| stdout.flush()) {
        Ok(()) => 0,
        Err(_) => 1,
    }
}

/// Caps the data segment at `bytes`, or at the hard limit the process already has if
/// that is lower (a container's, say: raising it would be refused).
fn cap_data_segment(bytes: u64) -> std::io::Result<()> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `getrlimit` and `setrlimit` only read and write the struct passed.
    if unsafe { libc::getrlimit(libc::RLIMIT_DATA, &mut limit) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let cap = bytes.min(limit.rlim_max);
    let limit = libc::rlimit {
        rlim_cur: cap,
        rlim_max: cap,
    };
    if unsafe { libc::setrlimit(libc::RLIMIT_DATA, &limit) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// The engine configuration code is compiled for; the host's engine adds only how
/// instances are allocated, which compiled code does not depend on.
pub(super) fn base_config(profile: Profile) -> wasmtime::Config {
    let mut config = wasmtime::Config::new();
    config
        .wasm_component_model(true)
        .epoch_interruption(profile.epochs)
        .consume_fuel(profile.fuel)
        .max_wasm_stack(WASM_STACK)
        .async_stack_size(WASM_STACK * 2)
        // Set, not read from `WASMTIME_BACKTRACE_DETAILS`: the compiler process has no
        // environment, and an artifact must be compiled for the host's exact settings.
        .wasm_backtrace_details(wasmtime::WasmBacktraceDetails::Disable);
    config
}

/// Why a component was refused, as the operator is shown it: the first line of the
/// reason (a validation error from wasmtime describes the component, not the host),
/// without control characters, at most 500 characters, since a hostile component chose
/// what the compiler read.
pub(super) fn one_line(text: &str) -> String {
    let line = text.lines().next().unwrap_or_default().trim();
    let line: String = line.chars().filter(|c| !c.is_control()).take(500).collect();
    if line.is_empty() {
        "invalid".to_string()
    } else {
        line
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::engine::{Engine, EngineSettings};
    use wasmtime::component::Component;

    /// What the child compiles loads into the host's pooling engine of the same profile,
    /// and is refused by one of another profile: the check the host's `deserialize`
    /// relies on.
    #[test]
    fn an_artifact_loads_only_into_an_engine_of_its_profile() {
        let component = wat::parse_str("(component (core module (func)))").unwrap();
        let profile = Profile {
            fuel: true,
            epochs: true,
        };
        let artifact = wasmtime::Engine::new(&base_config(profile))
            .unwrap()
            .precompile_component(&component)
            .unwrap();
        let pooled = Engine::new(&EngineSettings {
            pooling: true,
            max_instances: 2,
            ..EngineSettings::default()
        })
        .unwrap();
        // SAFETY: compiled just above, by this process.
        unsafe { Component::deserialize(&pooled.engine, &artifact) }.unwrap();
        let unfueled = Engine::new(&EngineSettings {
            fuel: false,
            ..EngineSettings::default()
        })
        .unwrap();
        // SAFETY: as above; it must be refused before any of it is used.
        assert!(unsafe { Component::deserialize(&unfueled.engine, &artifact) }.is_err());
    }

    #[test]
    fn a_refusal_is_one_bounded_line_of_printable_text() {
        assert_eq!(one_line("bad\x1b[31m type\nsecond"), "bad[31m type");
        assert_eq!(one_line(""), "invalid");
        assert_eq!(one_line(&"x".repeat(10_000)).len(), 500);
    }
}
