//! Statistics of the drains: medians, rates, percentiles, and how a duration or a ratio is
//! printed.

use crate::report::Drain;
use std::time::Duration;

/// The medians (and totals) of some drains of one key.
pub struct Stats {
    pub n: usize,
    pub median: Duration,
    pub runs_per_s: f64,
    pub cpu_us_per_run: f64,
    pub db_cpu_us_per_run: Option<f64>,
    pub peak_rss_kib: Option<u64>,
    pub to_first_claim: Option<Duration>,
}

impl Stats {
    /// The names of [`Stats::columns`], aligned with them.
    pub const HEADER: &str = "  n      median   runs/s CPU µs/run DB µs/run RSS MiB   to 1st";

    /// One row of a table: samples, median, rate, CPU, database CPU, RSS, time to the
    /// first claim.
    pub fn columns(&self) -> String {
        format!(
            "{:>3} {:>11} {:>8.0} {:>10.1} {:>9} {:>7} {:>8}",
            self.n,
            fmt_duration(self.median),
            self.runs_per_s,
            self.cpu_us_per_run,
            self.db_cpu_us_per_run
                .map_or("-".to_string(), |us| format!("{us:.1}")),
            self.peak_rss_kib
                .map_or("-".to_string(), |k| format!("{:.0}", k as f64 / 1024.0)),
            self.to_first_claim.map_or("-".to_string(), fmt_duration),
        )
    }

    pub fn of(drains: &[Drain]) -> Option<Stats> {
        let first = drains.first()?;
        let elapsed = median(drains.iter().map(|d| d.elapsed.as_secs_f64()).collect());
        let runs: usize = drains.iter().map(|d| d.runs).sum();
        let cpu: f64 = drains.iter().map(|d| d.cpu.as_secs_f64()).sum();
        let to_first: Vec<f64> = drains
            .iter()
            .filter_map(|d| d.to_first_claim.map(|t| t.as_secs_f64()))
            .collect();
        Some(Stats {
            n: drains.len(),
            median: Duration::from_secs_f64(elapsed),
            runs_per_s: first.runs as f64 / elapsed,
            cpu_us_per_run: cpu * 1e6 / runs as f64,
            db_cpu_us_per_run: drains
                .iter()
                .map(|d| d.db_cpu.map(|c| c.as_secs_f64()))
                .sum::<Option<f64>>()
                .map(|db| db * 1e6 / runs as f64),
            peak_rss_kib: drains.iter().filter_map(|d| d.peak_rss_kib).max(),
            to_first_claim: (!to_first.is_empty())
                .then(|| Duration::from_secs_f64(median(to_first))),
        })
    }
}

/// The nearest-rank percentile of sorted values.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

/// The median of some values (at least one).
pub fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    if values.len() % 2 == 1 {
        values[mid]
    } else {
        (values[mid - 1] + values[mid]) / 2.0
    }
}

pub fn times(a: Option<f64>, b: Option<f64>) -> String {
    match (a, b) {
        (Some(a), Some(b)) => format!("{:.2}x", a / b),
        _ => "n/a x".to_string(),
    }
}

pub fn fmt_duration(d: Duration) -> String {
    let ms = d.as_secs_f64() * 1e3;
    if ms < 10_000.0 {
        format!("{ms:.1} ms")
    } else {
        format!("{:.2} s", ms / 1e3)
    }
}
