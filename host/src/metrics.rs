//! Prometheus metrics of one host process: counters and histograms the runner and the
//! serve loop record, rendered with the fleet-wide gauges read from the database.
//!
//! Labels carry job names and fixed codes only.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;
use std::time::Duration;

type Labels = Vec<(&'static str, String)>;

const DURATION_BUCKETS: [f64; 14] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0,
];

#[derive(Default)]
struct Histogram {
    buckets: [u64; DURATION_BUCKETS.len()],
    count: u64,
    sum: f64,
}

impl Histogram {
    fn observe(&mut self, value: f64) {
        for (i, bound) in DURATION_BUCKETS.iter().enumerate() {
            if value <= *bound {
                self.buckets[i] += 1;
            }
        }
        self.count += 1;
        self.sum += value;
    }
}

struct Family<T> {
    help: &'static str,
    series: BTreeMap<Labels, T>,
}

#[derive(Default)]
struct Registry {
    counters: BTreeMap<&'static str, Family<f64>>,
    histograms: BTreeMap<&'static str, Family<Histogram>>,
}

/// A gauge read at scrape time (from the database).
pub struct Gauge {
    pub name: &'static str,
    pub help: &'static str,
    pub labels: Labels,
    pub value: f64,
}

#[derive(Default)]
pub struct Metrics {
    registry: Mutex<Registry>,
}

impl Metrics {
    fn add(&self, name: &'static str, help: &'static str, labels: Labels, value: f64) {
        let mut r = self.registry.lock().expect("metrics lock");
        let family = r.counters.entry(name).or_insert_with(|| Family {
            help,
            series: BTreeMap::new(),
        });
        *family.series.entry(labels).or_default() += value;
    }

    fn observe(&self, name: &'static str, help: &'static str, labels: Labels, value: f64) {
        let mut r = self.registry.lock().expect("metrics lock");
        let family = r.histograms.entry(name).or_insert_with(|| Family {
            help,
            series: BTreeMap::new(),
        });
        family.series.entry(labels).or_default().observe(value);
    }

    /// An attempt's end, and what it used, by job and by its run's tenant (what a tenant's
    /// use of the fleet over any window is computed from).
    pub fn attempt_finished(
        &self,
        job: &str,
        tenant: &str,
        status: &str,
        code: Option<&str>,
        duration: Duration,
        fuel: u64,
    ) {
        let labels = vec![
            ("job", job.to_string()),
            ("status", status.to_string()),
            ("code", code.unwrap_or("").to_string()),
        ];
        self.add(
            "jobhost_attempts_total",
            "Attempts finished, by job, status and failure code.",
            labels,
            1.0,
        );
        self.observe(
            "jobhost_attempt_duration_seconds",
            "Duration of attempts, by job.",
            vec![("job", job.to_string())],
            duration.as_secs_f64(),
        );
        self.add(
            "jobhost_fuel_used_total",
            "Wasm fuel consumed by attempts, by job.",
            vec![("job", job.to_string())],
            fuel as f64,
        );
        self.add(
            "jobhost_tenant_fuel_used_total",
            "Wasm fuel consumed by attempts, by their run's tenant.",
            vec![("tenant", tenant.to_string())],
            fuel as f64,
        );
        self.add(
            "jobhost_tenant_attempt_seconds_total",
            "Wall time of attempts, by their run's tenant.",
            vec![("tenant", tenant.to_string())],
            duration.as_secs_f64(),
        );
    }

    pub fn run_finished(&self, job: &str, status: &str, code: Option<&str>) {
        let labels = vec![
            ("job", job.to_string()),
            ("status", status.to_string()),
            ("code", code.unwrap_or("").to_string()),
        ];
        self.add(
            "jobhost_runs_finished_total",
            "Runs this host ended, by job, status and failure code.",
            labels,
            1.0,
        );
    }

    /// How late a run was claimed after it became due.
    pub fn run_claimed(&self, lag: Duration) {
        self.observe(
            "jobhost_claim_lag_seconds",
            "Time from a run being due to a host claiming it.",
            Vec::new(),
            lag.as_secs_f64(),
        );
    }

    pub fn kick(&self, job: &str, result: &str) {
        let labels = vec![("job", job.to_string()), ("result", result.to_string())];
        self.add(
            "jobhost_kicks_total",
            "Kicks received, by job and what they did.",
            labels,
            1.0,
        );
    }

    pub fn report(&self, kind: &str, sink: &str, result: &str) {
        let labels = vec![
            ("kind", kind.to_string()),
            ("sink", sink.to_string()),
            ("result", result.to_string()),
        ];
        self.add(
            "jobhost_reports_total",
            "Reports handed to a sink, by kind, sink and result.",
            labels,
            1.0,
        );
    }

    /// The Prometheus text exposition of everything recorded, plus `gauges`.
    pub fn render(&self, gauges: &[Gauge]) -> String {
        let r = self.registry.lock().expect("metrics lock");
        let mut out = String::new();
        for (name, family) in &r.counters {
            let _ = writeln!(out, "# HELP {name} {}\n# TYPE {name} counter", family.help);
            for (labels, value) in &family.series {
                let _ = writeln!(out, "{name}{} {value}", render_labels(labels, None));
            }
        }
        for (name, family) in &r.histograms {
            let _ = writeln!(
                out,
                "# HELP {name} {}\n# TYPE {name} histogram",
                family.help
            );
            for (labels, h) in &family.series {
                for (bound, count) in DURATION_BUCKETS.iter().zip(h.buckets) {
                    let le = Some(("le", bound.to_string()));
                    let _ = writeln!(out, "{name}_bucket{} {count}", render_labels(labels, le));
                }
                let inf = Some(("le", "+Inf".to_string()));
                let _ = writeln!(
                    out,
                    "{name}_bucket{} {}",
                    render_labels(labels, inf),
                    h.count
                );
                let _ = writeln!(out, "{name}_sum{} {}", render_labels(labels, None), h.sum);
                let _ = writeln!(
                    out,
                    "{name}_count{} {}",
                    render_labels(labels, None),
                    h.count
                );
            }
        }
        // Each family once, with all its series, in the order families first appear.
        let mut names: Vec<&str> = Vec::new();
        for g in gauges {
            if !names.contains(&g.name) {
                names.push(g.name);
            }
        }
        for name in names {
            let mut family = gauges.iter().filter(|g| g.name == name).peekable();
            if let Some(first) = family.peek() {
                let _ = writeln!(out, "# HELP {name} {}\n# TYPE {name} gauge", first.help);
            }
            for g in family {
                let _ = writeln!(out, "{name}{} {}", render_labels(&g.labels, None), g.value);
            }
        }
        out
    }
}

fn render_labels(labels: &Labels, extra: Option<(&'static str, String)>) -> String {
    let all: Vec<String> = labels
        .iter()
        .cloned()
        .chain(extra)
        .map(|(k, v)| format!("{k}=\"{}\"", escape(&v)))
        .collect();
    if all.is_empty() {
        String::new()
    } else {
        format!("{{{}}}", all.join(","))
    }
}

fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counters_histograms_and_gauges() {
        let m = Metrics::default();
        m.attempt_finished(
            "a\"b",
            "acme",
            "failed",
            Some("timeout"),
            Duration::from_millis(30),
            100,
        );
        m.attempt_finished(
            "a\"b",
            "acme",
            "failed",
            Some("timeout"),
            Duration::from_secs(2),
            50,
        );
        let gauge = |name, labels: Labels, value| Gauge {
            name,
            help: "Help.",
            labels,
            value,
        };
        let text = m.render(&[
            gauge("jobhost_runs", vec![("status", "queued".into())], 3.0),
            gauge("jobhost_due", vec![("tenant", "a".into())], 1.0),
            gauge("jobhost_lag", vec![("tenant", "a".into())], 0.5),
            gauge("jobhost_due", vec![("tenant", "b".into())], 2.0),
        ]);
        // Interleaved families are rendered each once, with all their series.
        assert_eq!(
            text.matches("# TYPE jobhost_due gauge").count(),
            1,
            "{text}"
        );
        assert!(
            text.contains("jobhost_due{tenant=\"a\"} 1\njobhost_due{tenant=\"b\"} 2\n"),
            "{text}"
        );
        assert!(
            text.contains(r#"jobhost_attempts_total{job="a\"b",status="failed",code="timeout"} 2"#),
            "{text}"
        );
        assert!(
            text.contains(r#"jobhost_fuel_used_total{job="a\"b"} 150"#),
            "{text}"
        );
        assert!(
            text.contains(r#"jobhost_tenant_fuel_used_total{tenant="acme"} 150"#),
            "{text}"
        );
        assert!(
            text.contains(r#"jobhost_tenant_attempt_seconds_total{tenant="acme"} 2.03"#),
            "{text}"
        );
        assert!(
            text.contains(r#"jobhost_attempt_duration_seconds_bucket{job="a\"b",le="0.05"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(r#"jobhost_attempt_duration_seconds_bucket{job="a\"b",le="+Inf"} 2"#),
            "{text}"
        );
        assert!(
            text.contains("# TYPE jobhost_runs gauge\njobhost_runs{status=\"queued\"} 3"),
            "{text}"
        );
    }
}
