//! What one attempt's wasmtime store holds.

use super::limits::MemoryLimiter;
use super::output::AttemptLog;
use crate::capability::db::DbCapability;
use crate::capability::files::FilesCapability;
use crate::capability::jobs::JobsCapability;
use crate::capability::links::LinksCapability;
use crate::capability::refusal::Refused;
use crate::capability::run::RunCapability;
use crate::capability::steps::StepsCapability;
use crate::failure::FailureCode;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

/// What host calls noticed during the attempt, so its failure gets the right code even
/// when the guest swallowed the error or turned it into its own message.
#[derive(Debug, Default)]
pub struct Signals {
    /// A commit's fence failed: the attempt no longer held its lease.
    pub lease_lost: bool,
    /// The first refusal a host call returned, with the host's reason.
    pub refused: Option<Refused>,
    /// A host call could not reach the database.
    pub unavailable: bool,
}

impl Signals {
    /// Notes a refusal, unless one was noted before: the first is why.
    pub fn refuse(&mut self, refused: Refused) {
        self.refused.get_or_insert(refused);
    }

    /// The code of the refusal noted, if any.
    pub fn refused_code(&self) -> Option<FailureCode> {
        self.refused.as_ref().map(|r| r.code)
    }
}

/// Most host resources (handles: streams, transactions, uploads...) an attempt may hold
/// at once; past it, the call that would create one traps (`resource_limit`).
pub const MAX_RESOURCES: usize = 1000;
/// Most random bytes one `get-random-bytes` call may ask for (more traps): the host fills
/// its buffer before the guest's allocation of it can fail, so WASI's default of 64 MiB
/// let a guest of any size have the host make 64 MiB per call.
pub const MAX_RANDOM_BYTES: u64 = 1 << 20;

pub struct GuestState {
    wasi: WasiCtx,
    pub(crate) table: ResourceTable,
    pub(crate) limiter: MemoryLimiter,
    pub(crate) log: AttemptLog,
    pub(crate) db: DbCapability,
    pub(crate) files: FilesCapability,
    pub(crate) links: LinksCapability,
    pub(crate) steps: StepsCapability,
    pub(crate) jobs: JobsCapability,
    pub(crate) run: RunCapability,
    pub(crate) signals: Signals,
}

/// The capabilities one attempt was given.
pub struct Capabilities {
    pub db: DbCapability,
    pub files: FilesCapability,
    pub links: LinksCapability,
    pub steps: StepsCapability,
    pub jobs: JobsCapability,
    pub run: RunCapability,
}

impl Capabilities {
    /// No capability granted (each session `None`): start from this and set the ones a
    /// job was given.
    pub fn none() -> Capabilities {
        Capabilities {
            db: DbCapability::new(None),
            files: FilesCapability::new(None),
            links: LinksCapability::new(None),
            steps: StepsCapability::new(None),
            jobs: JobsCapability::new(None),
            run: RunCapability::new(None),
        }
    }
}

impl GuestState {
    pub fn new(memory_cap: u64, log: AttemptLog, capabilities: Capabilities) -> Self {
        // No preopens, no environment, no arguments, no network (no TCP, UDP or name
        // lookup: said here rather than left to the defaults): stdout and stderr go to the
        // attempt's log; stdin is empty.
        let wasi = WasiCtx::builder()
            .stdout(log.clone())
            .stderr(log.clone())
            .max_random_size(MAX_RANDOM_BYTES)
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false)
            .build();
        let mut table = ResourceTable::new();
        table.set_max_capacity(MAX_RESOURCES);
        GuestState {
            wasi,
            table,
            limiter: MemoryLimiter::new(memory_cap),
            log,
            db: capabilities.db,
            files: capabilities.files,
            links: capabilities.links,
            steps: capabilities.steps,
            jobs: capabilities.jobs,
            run: capabilities.run,
            signals: Signals::default(),
        }
    }
}

impl WasiView for GuestState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}
