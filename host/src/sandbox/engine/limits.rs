//! The memory cap of one attempt, and the peak it reached; what the pooling allocator
//! reserves for the attempts it runs at once; and the fuel an attempt has burnt so far.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// The largest memory cap a job may set (`JobSpec::validate`), and so what one linear
/// memory of the pooling allocator may grow to: no job's cap is above what the pool
/// allows. (It is also what a 32-bit memory can address, and the default reservation of
/// every memory, pooled or not, so a pool sized to it reserves no more address space.)
pub const MAX_JOB_MEMORY: u64 = 4 << 30;

/// Most linear memories, tables and core instances one attempt's store may create. A
/// component is several core modules, each of which may define memories and tables; these
/// match what the pooling allocator reserves per attempt (`pool`), so an attempt is bound
/// the same with pooling or without.
pub const MAX_MEMORIES: usize = 2;
pub const MAX_TABLES: usize = 8;
/// A component built by componentize-py instantiates 14 core modules (CPython, its libc
/// and adapters); Rust components, 1 to 3.
pub const MAX_CORE_INSTANCES: usize = 32;

/// Most bytes wasmtime lifts out of a guest's memory for one host call (its strings and
/// lists together): the attempt's memory cap. No argument of an honest guest is larger
/// than its memory; but a list may name the same bytes many times over, and without this
/// a guest of a few KiB could have the host copy wasmtime's default of 128 MiB per call.
/// Past it the call traps, and the attempt ends `trap`.
pub fn hostcall_bytes(memory_cap: u64) -> usize {
    usize::try_from(memory_cap).unwrap_or(usize::MAX)
}

/// A `ResourceLimiter` that refuses growth that would take the attempt's linear memories
/// and tables (at a pointer per element), all together, past the job's cap (the guest sees
/// a failed `memory.grow` or `table.grow`, as the spec says) and remembers that it did, so
/// the trap that usually follows is reported as `memory_limit` rather than a bare trap.
/// Growth the engine refuses after the cap allowed it (past the pooling allocator's
/// per-memory size, or the system out of memory) counts the same way, and stays counted:
/// the attempt is left less room, never more.
pub struct MemoryLimiter {
    cap: usize,
    /// Bytes of all the store's memories and tables now.
    used: usize,
    peak: usize,
    hit: bool,
}

/// What a table element costs against the cap.
const TABLE_ELEMENT_BYTES: usize = std::mem::size_of::<usize>();

impl MemoryLimiter {
    pub fn new(cap: u64) -> Self {
        MemoryLimiter {
            cap: usize::try_from(cap).unwrap_or(usize::MAX),
            used: 0,
            peak: 0,
            hit: false,
        }
    }

    /// The memory cap, in bytes.
    pub fn cap(&self) -> u64 {
        self.cap as u64
    }

    /// The most bytes the attempt's memories and tables held together.
    pub fn peak(&self) -> usize {
        self.peak
    }

    pub fn hit(&self) -> bool {
        self.hit
    }

    /// Takes `added` bytes of the cap, if they fit and the growth stays within the
    /// object's own maximum.
    fn grow(&mut self, added: usize, within_maximum: bool) -> bool {
        let total = self.used.saturating_add(added);
        if total > self.cap || !within_maximum {
            self.hit = true;
            return false;
        }
        self.used = total;
        self.peak = self.peak.max(total);
        true
    }
}

impl wasmtime::ResourceLimiter for MemoryLimiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let within = maximum.is_none_or(|m| desired <= m);
        Ok(self.grow(desired.saturating_sub(current), within))
    }

    fn memory_grow_failed(&mut self, _error: wasmtime::Error) -> wasmtime::Result<()> {
        // The cap allowed it, the engine did not: the guest still sees a failed
        // `memory.grow`, and the attempt, if it fails, fails `memory_limit`.
        self.hit = true;
        Ok(())
    }

    fn table_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let within = maximum.is_none_or(|m| desired <= m);
        let added = desired.saturating_sub(current);
        Ok(self.grow(added.saturating_mul(TABLE_ELEMENT_BYTES), within))
    }

    fn memories(&self) -> usize {
        MAX_MEMORIES
    }

    fn tables(&self) -> usize {
        MAX_TABLES
    }

    fn instances(&self) -> usize {
        MAX_CORE_INSTANCES
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasmtime::ResourceLimiter;

    #[test]
    fn refuses_past_the_cap_and_tracks_the_peak() {
        let mut l = MemoryLimiter::new(1 << 20);
        assert!(l.memory_growing(0, 65536, None).unwrap());
        assert!(l.memory_growing(65536, 1 << 20, None).unwrap());
        assert!(!l.hit());
        assert!(!l.memory_growing(1 << 20, (1 << 20) + 65536, None).unwrap());
        assert!(l.hit());
        assert_eq!(l.peak(), 1 << 20);
    }

    #[test]
    fn growth_the_engine_refuses_counts_as_the_memory_limit() {
        let mut l = MemoryLimiter::new(4 << 20);
        assert!(l.memory_growing(0, 2 << 20, None).unwrap());
        assert!(!l.hit());
        l.memory_grow_failed(wasmtime::Error::msg("Memory maximum size exceeded"))
            .unwrap();
        assert!(l.hit());
        // What the engine refused stays counted: less room, never more.
        assert!(!l.memory_growing(0, 4 << 20, None).unwrap());
    }

    #[test]
    fn memories_and_tables_count_together_against_the_cap() {
        let mut l = MemoryLimiter::new(1 << 20);
        assert!(l.memory_growing(0, 256 << 10, None).unwrap());
        assert!(l.memory_growing(0, 256 << 10, None).unwrap());
        let half = (512 << 10) / TABLE_ELEMENT_BYTES;
        assert!(l.table_growing(0, half, None).unwrap());
        assert!(!l.hit());
        assert_eq!(l.peak(), 1 << 20);
        assert!(
            !l.memory_growing(0, 65536, None).unwrap(),
            "a memory past the cap"
        );
        assert!(
            !l.table_growing(half, half + 1, None).unwrap(),
            "a table past the cap"
        );
        assert!(l.hit());
    }

    /// Instantiates each module (WAT) in turn in one store under a cap of `cap` bytes:
    /// how many of them instantiated.
    fn instantiated(cap: u64, modules: &[&str]) -> usize {
        let engine = wasmtime::Engine::default();
        let mut store = wasmtime::Store::new(&engine, MemoryLimiter::new(cap));
        store.limiter(|l| l);
        modules
            .iter()
            .map(|text| wasmtime::Module::new(&engine, wat::parse_str(text).unwrap()).unwrap())
            .take_while(|module| wasmtime::Instance::new(&mut store, module, &[]).is_ok())
            .count()
    }

    #[test]
    fn an_attempt_cannot_spread_past_its_cap_over_several_memories() {
        let ten_pages = "(module (memory 10))";
        assert_eq!(instantiated(1 << 20, &[ten_pages, ten_pages]), 1);
        assert_eq!(instantiated(2 << 20, &[ten_pages, ten_pages]), 2);
        // Many small memories, in one module or many: refused by count.
        assert_eq!(
            instantiated(64 << 20, &["(module (memory 1) (memory 1) (memory 1))"]),
            0
        );
        assert_eq!(
            instantiated(64 << 20, &["(module (memory 1))"; 4]),
            MAX_MEMORIES
        );
        assert_eq!(
            instantiated(64 << 20, &["(module)"; MAX_CORE_INSTANCES + 8]),
            MAX_CORE_INSTANCES
        );
        let big_table = "(module (table 100000 funcref))";
        assert_eq!(instantiated(1 << 20, &[big_table, big_table]), 1);
        assert_eq!(
            instantiated(1 << 20, &[ten_pages, big_table]),
            1,
            "memory and tables together"
        );
    }

    #[test]
    fn the_pool_allows_every_cap_a_job_may_set() {
        let mut spec = crate::rules::job::JobSpec {
            name: "big".into(),
            tenant: "default".into(),
            component: "big.wasm".into(),
            limits: crate::rules::job::Limits {
                memory: MAX_JOB_MEMORY,
                ..crate::rules::job::Limits::default()
            },
            retry: crate::rules::job::RetryPolicy::default(),
            grants: crate::rules::grants::Grants::default(),
            actions: Default::default(),
            schedule: None,
            payload: serde_json::json!({}),
            per_tenant: false,
            on: Default::default(),
            on_where: Default::default(),
            run_on_boot: false,
            flow: Default::default(),
            lane: crate::rules::job::DEFAULT_LANE.into(),
            recorder: Default::default(),
            deliver: Default::default(),
        };
        assert_eq!(spec.validate(), Ok(()));
        spec.limits.memory = MAX_JOB_MEMORY + 1;
        assert!(spec.validate().is_err(), "a cap above the pool's memory");
    }
}

/// The fuel a running attempt has burnt so far, for its live view (`runs::runner::live`):
/// its store's count as the epoch callback last read it, every `EPOCH_TICK` while the guest
/// runs. Compiled code keeps the count in a register and saves it only at calls, returns
/// and every `FUEL_SAVE_INTERVAL` units, so the figure may trail by that much; the
/// attempt's recorded `fuel_used` is exact. Unset (`None`) until read, and always when
/// the engine does not meter fuel.
#[derive(Debug, Clone)]
pub struct FuelGauge(Arc<AtomicU64>);

impl FuelGauge {
    const UNSET: u64 = u64::MAX;

    pub fn used(&self) -> Option<u64> {
        let used = self.0.load(Ordering::Relaxed);
        (used != Self::UNSET).then_some(used)
    }

    pub(crate) fn set(&self, used: u64) {
        self.0.store(used.min(Self::UNSET - 1), Ordering::Relaxed);
    }
}

impl Default for FuelGauge {
    fn default() -> Self {
        FuelGauge(Arc::new(AtomicU64::new(Self::UNSET)))
    }
}
