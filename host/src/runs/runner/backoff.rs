//! Retry delays: exponential, capped, with half jitter (half the delay is fixed, half
//! random), so retries of many runs that failed together spread out.

use crate::rules::job::RetryPolicy;
use rand::Rng;
use std::time::Duration;

/// The delay before retry number `failures` (1 after the first failure).
pub fn delay(policy: &RetryPolicy, failures: u32, rng: &mut impl Rng) -> Duration {
    let full = ceiling(policy, failures);
    let half = full / 2;
    let jitter_ms = rng.random_range(0..=half.as_millis() as u64);
    half + Duration::from_millis(jitter_ms)
}

/// The delay without jitter: `base * 2^(failures-1)`, at most `backoff_max`.
pub fn ceiling(policy: &RetryPolicy, failures: u32) -> Duration {
    let exponent = failures.saturating_sub(1).min(32);
    policy
        .backoff_base
        .checked_mul(1u32 << exponent.min(31))
        .unwrap_or(policy.backoff_max)
        .min(policy.backoff_max)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn policy() -> RetryPolicy {
        RetryPolicy {
            retries: 10,
            backoff_base: Duration::from_millis(100),
            backoff_max: Duration::from_secs(1),
        }
    }

    #[test]
    fn doubles_then_caps() {
        let p = policy();
        let got: Vec<u64> = (1..=6).map(|n| ceiling(&p, n).as_millis() as u64).collect();
        assert_eq!(got, [100, 200, 400, 800, 1000, 1000]);
        assert_eq!(ceiling(&p, 1000), Duration::from_secs(1));
    }

    #[test]
    fn jitter_stays_in_the_upper_half() {
        let p = policy();
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let mut seen = std::collections::HashSet::new();
        for _ in 0..200 {
            let d = delay(&p, 3, &mut rng);
            assert!(
                d >= Duration::from_millis(200) && d <= Duration::from_millis(400),
                "{d:?}"
            );
            seen.insert(d);
        }
        assert!(seen.len() > 50, "jitter should vary");
    }
}
