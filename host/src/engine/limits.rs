//! The memory cap of one attempt, and the peak it reached.

/// A `ResourceLimiter` that refuses memory growth past the job's cap (the guest sees a
/// failed `memory.grow`, as the spec says) and remembers that it did, so the trap that
/// usually follows is reported as `memory_limit` rather than a bare trap.
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
}
