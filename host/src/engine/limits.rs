//! The memory cap of one attempt, and the peak it reached; and what the pooling allocator
//! reserves for the attempts it runs at once.

/// The largest memory cap a job may set (`JobSpec::validate`), and so what one linear
/// memory of the pooling allocator may grow to: no job's cap is above what the pool
/// allows. (It is also what a 32-bit memory can address, and the default reservation of
/// every memory, pooled or not, so a pool sized to it reserves no more address space.)
pub const MAX_JOB_MEMORY: u64 = 4 << 30;

/// A `ResourceLimiter` that refuses memory growth past the job's cap (the guest sees a
/// failed `memory.grow`, as the spec says) and remembers that it did, so the trap that
/// usually follows is reported as `memory_limit` rather than a bare trap. Growth the
/// engine refuses after the cap allowed it (past the pooling allocator's per-memory size,
/// or the system out of memory) counts the same way.
pub struct MemoryLimiter {
    cap: usize,
    peak: usize,
    hit: bool,
}

impl MemoryLimiter {
    pub fn new(cap: u64) -> Self {
        MemoryLimiter {
            cap: usize::try_from(cap).unwrap_or(usize::MAX),
            peak: 0,
            hit: false,
        }
    }

    pub fn peak(&self) -> usize {
        self.peak
    }

    pub fn hit(&self) -> bool {
        self.hit
    }
}

impl wasmtime::ResourceLimiter for MemoryLimiter {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.cap || maximum.is_some_and(|m| desired > m) {
            self.hit = true;
            return Ok(false);
        }
        self.peak = self.peak.max(desired);
        Ok(true)
    }

    fn memory_grow_failed(&mut self, _error: wasmtime::Error) -> wasmtime::Result<()> {
        // The cap allowed it, the engine did not: the guest still sees a failed
        // `memory.grow`, and the attempt, if it fails, fails `memory_limit`.
        self.hit = true;
        Ok(())
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        // Tables cost a pointer per element: bound them like a slice of the memory cap.
        let limit = self.cap / std::mem::size_of::<usize>();
        Ok(desired <= limit && maximum.is_none_or(|m| desired <= m))
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
        let mut l = MemoryLimiter::new(1 << 30);
        assert!(l.memory_growing(0, 2 << 20, None).unwrap());
        assert!(!l.hit());
        l.memory_grow_failed(wasmtime::Error::msg("Memory maximum size exceeded"))
            .unwrap();
        assert!(l.hit());
    }

    #[test]
    fn the_pool_allows_every_cap_a_job_may_set() {
        let mut spec = crate::job::JobSpec {
            name: "big".into(),
            tenant: "default".into(),
            component: "big.wasm".into(),
            limits: crate::job::Limits {
                memory: MAX_JOB_MEMORY,
                ..crate::job::Limits::default()
            },
            retry: crate::job::RetryPolicy::default(),
            grants: crate::grants::Grants::default(),
            actions: Default::default(),
            schedule: None,
            payload: serde_json::json!({}),
            per_tenant: false,
            on: Default::default(),
            run_on_boot: false,
            flow: Default::default(),
            lane: crate::job::DEFAULT_LANE.into(),
        };
        assert_eq!(spec.validate(), Ok(()));
        spec.limits.memory = MAX_JOB_MEMORY + 1;
        assert!(spec.validate().is_err(), "a cap above the pool's memory");
    }
}
