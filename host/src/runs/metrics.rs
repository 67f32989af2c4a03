//! Prometheus metrics of one host process: counters and histograms the runner and the
//! serve loop record, rendered with the fleet-wide gauges read from the database.
//!
//! Labels carry fixed codes, lanes, and the names of jobs and tenants (`job`, `tenant`).
//! Which names a scrape may see is its [`View`]'s: none without a token, its own tenant's
//! with a tenant's token, all with the operator's (`docs/security.md`).

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;
use std::time::Duration;

type Labels = Vec<(&'static str, String)>;

/// The labels whose values name what tenants own, or the operator's mounts and webhooks.
/// Every series that names a job also names its tenant, so a tenant's view can pick its
/// own; a mount's or webhook's series name no tenant, so only the operator sees them.
const NAME_LABELS: [&str; 4] = ["job", "tenant", "mount", "webhook"];

/// Who a scrape is for, and so which names its series may carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum View<'a> {
    /// No token: no names. Counters and histograms are summed over their name labels;
    /// gauges by tenant are left out (their fleet-wide figures are gauges of their own).
    Open,
    /// The operator's token: every series.
    Operator,
    /// A tenant's token: its own tenant's series, and those that name no one.
    Tenant(&'a str),
}

impl View<'_> {
    /// Whether a series with these labels is shown as it is.
    fn shows(self, labels: &Labels) -> bool {
        let names = labels.iter().any(|(k, _)| NAME_LABELS.contains(k));
        match self {
            View::Operator => true,
            View::Open => !names,
            View::Tenant(own) => !names || labels.iter().any(|(k, v)| *k == "tenant" && v == own),
        }
    }

    /// A family's series as this view shows them: in the open view without their name
    /// labels, the series that then coincide merged.
    fn series<T: Default>(
        self,
        series: &BTreeMap<Labels, T>,
        merge: impl Fn(&mut T, &T),
    ) -> BTreeMap<Labels, T> {
        let mut shown = BTreeMap::new();
        for (labels, value) in series {
            let labels = match self {
                View::Open => labels
                    .iter()
                    .filter(|(k, _)| !NAME_LABELS.contains(k))
                    .cloned()
                    .collect(),
                _ if self.shows(labels) => labels.clone(),
                _ => continue,
            };
            merge(shown.entry(labels).or_default(), value);
        }
        shown
    }
}

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

    fn merge(&mut self, other: &Histogram) {
        for (mine, theirs) in self.buckets.iter_mut().zip(other.buckets) {
            *mine += theirs;
        }
        self.count += other.count;
        self.sum += other.sum;
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

    /// Sets a counter kept elsewhere to its current total.
    fn set(&self, name: &'static str, help: &'static str, labels: Labels, value: f64) {
        let mut r = self.registry.lock().expect("metrics lock");
        let family = r.counters.entry(name).or_insert_with(|| Family {
            help,
            series: BTreeMap::new(),
        });
        family.series.insert(labels, value);
    }

    fn observe(&self, name: &'static str, help: &'static str, labels: Labels, value: f64) {
        let mut r = self.registry.lock().expect("metrics lock");
        let family = r.histograms.entry(name).or_insert_with(|| Family {
            help,
            series: BTreeMap::new(),
        });
        family.series.entry(labels).or_default().observe(value);
    }

    /// An attempt's end, and what it used, by job (with its run's tenant) and by tenant
    /// (what a tenant's use of the fleet over any window is computed from).
    pub fn attempt_finished(
        &self,
        job: &str,
        tenant: &str,
        status: &str,
        code: Option<&str>,
        duration: Duration,
        fuel: u64,
    ) {
        let of_job = || vec![("job", job.to_string()), ("tenant", tenant.to_string())];
        let mut labels = of_job();
        labels.push(("status", status.to_string()));
        labels.push(("code", code.unwrap_or("").to_string()));
        self.add(
            "jobhost_attempts_total",
            "Attempts finished, by job, status and failure code.",
            labels,
            1.0,
        );
        self.observe(
            "jobhost_attempt_duration_seconds",
            "Duration of attempts, by job.",
            of_job(),
            duration.as_secs_f64(),
        );
        self.add(
            "jobhost_fuel_used_total",
            "Wasm fuel consumed by attempts, by job.",
            of_job(),
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

    pub fn run_finished(&self, job: &str, tenant: &str, status: &str, code: Option<&str>) {
        let labels = vec![
            ("job", job.to_string()),
            ("tenant", tenant.to_string()),
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

    /// A kick of `job` for `tenant` (the tenant whose runs it queues).
    pub fn kick(&self, job: &str, tenant: &str, result: &str) {
        let labels = vec![
            ("job", job.to_string()),
            ("tenant", tenant.to_string()),
            ("result", result.to_string()),
        ];
        self.add(
            "jobhost_kicks_total",
            "Kicks received, by job and what they did.",
            labels,
            1.0,
        );
    }

    /// An operator's action on a run (`cancel` or `retry`) through this host.
    pub fn control(&self, action: &str, job: &str, tenant: &str) {
        let labels = vec![
            ("action", action.to_string()),
            ("job", job.to_string()),
            ("tenant", tenant.to_string()),
        ];
        self.add(
            "jobhost_operator_actions_total",
            "Runs cancelled and retried by operators through this host, by job and tenant.",
            labels,
            1.0,
        );
    }

    /// An operator paused (`pause`) or resumed (`resume`) a job, tenant or lane through this
    /// host; labelled `job`, `tenant` or `lane` with its name, so a view hides what it must.
    pub fn pause_changed(&self, action: &str, scope: &'static str, name: &str) {
        let labels = vec![("action", action.to_string()), (scope, name.to_string())];
        self.add(
            "jobhost_pause_changes_total",
            "Pauses and resumes through this host, by what they named.",
            labels,
            1.0,
        );
    }

    /// What calls of `mount` met at its limits on this host (`links::limits`): the mount
    /// keeps the totals, a scrape copies them here.
    pub fn mount_limits(&self, mount: &str, waited: u64, wait: Duration, refused: u64) {
        let labels = || vec![("mount", mount.to_string())];
        self.set(
            "jobhost_mount_calls_waited_total",
            "Calls of a mount that waited for its rate or concurrency, then went.",
            labels(),
            waited as f64,
        );
        self.set(
            "jobhost_mount_wait_seconds_total",
            "Time calls of a mount waited for its limits, refused calls included.",
            labels(),
            wait.as_secs_f64(),
        );
        self.set(
            "jobhost_mount_calls_refused_total",
            "Calls of a mount refused rate-limited: its limits held them past max_wait.",
            labels(),
            refused as f64,
        );
    }

    /// An attempt at delivering an ending to `webhook` through this host, by what followed
    /// it: `delivered`, `retry` (it failed and is tried again later) or `given_up` (it
    /// failed past the webhook's `retry_for`).
    pub fn delivery_attempt(&self, webhook: &str, result: &'static str) {
        self.add(
            "jobhost_delivery_attempts_total",
            "Attempts at delivering endings to webhooks through this host, by webhook and result: `delivered`, `retry` (failed, tried again later), `given_up` (failed past retry_for).",
            vec![
                ("webhook", webhook.to_string()),
                ("result", result.to_string()),
            ],
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

    /// The Prometheus text exposition of everything recorded, plus `gauges`, as `view`
    /// may see them.
    pub fn render(&self, gauges: &[Gauge], view: View<'_>) -> String {
        let r = self.registry.lock().expect("metrics lock");
        let mut out = String::new();
        for (name, family) in &r.counters {
            let series = view.series(&family.series, |total, value| *total += value);
            if series.is_empty() {
                continue;
            }
            let _ = writeln!(out, "# HELP {name} {}\n# TYPE {name} counter", family.help);
            for (labels, value) in &series {
                let _ = writeln!(out, "{name}{} {value}", render_labels(labels, None));
            }
        }
        for (name, family) in &r.histograms {
            let series = view.series(&family.series, Histogram::merge);
            if series.is_empty() {
                continue;
            }
            let _ = writeln!(
                out,
                "# HELP {name} {}\n# TYPE {name} histogram",
                family.help
            );
            for (labels, h) in &series {
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
        let gauges: Vec<&Gauge> = gauges.iter().filter(|g| view.shows(&g.labels)).collect();
        let mut names: Vec<&str> = Vec::new();
        for g in &gauges {
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
        let text = m.render(
            &[
                gauge("jobhost_runs", vec![("status", "queued".into())], 3.0),
                gauge("jobhost_due", vec![("tenant", "a".into())], 1.0),
                gauge("jobhost_lag", vec![("tenant", "a".into())], 0.5),
                gauge("jobhost_due", vec![("tenant", "b".into())], 2.0),
            ],
            View::Operator,
        );
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
            text.contains(r#"jobhost_attempts_total{job="a\"b",tenant="acme",status="failed",code="timeout"} 2"#),
            "{text}"
        );
        assert!(
            text.contains(r#"jobhost_fuel_used_total{job="a\"b",tenant="acme"} 150"#),
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
            text.contains(
                r#"jobhost_attempt_duration_seconds_bucket{job="a\"b",tenant="acme",le="0.05"} 1"#
            ),
            "{text}"
        );
        assert!(
            text.contains(
                r#"jobhost_attempt_duration_seconds_bucket{job="a\"b",tenant="acme",le="+Inf"} 2"#
            ),
            "{text}"
        );
        assert!(
            text.contains("# TYPE jobhost_runs gauge\njobhost_runs{status=\"queued\"} 3"),
            "{text}"
        );
    }

    #[test]
    fn a_view_shows_only_the_names_it_may() {
        let m = Metrics::default();
        let second = Duration::from_secs(1);
        m.attempt_finished("acme-sync", "acme", "succeeded", None, second, 10);
        m.attempt_finished("globex-sync", "globex", "succeeded", None, second, 5);
        m.kick("acme-sync", "acme", "queued");
        m.run_claimed(second);
        let gauges = [
            Gauge {
                name: "jobhost_queue_due",
                help: "Help.",
                labels: Vec::new(),
                value: 2.0,
            },
            Gauge {
                name: "jobhost_tenant_queue_due",
                help: "Help.",
                labels: vec![("tenant", "acme".into())],
                value: 1.0,
            },
            Gauge {
                name: "jobhost_tenant_queue_due",
                help: "Help.",
                labels: vec![("tenant", "globex".into())],
                value: 1.0,
            },
        ];

        let open = m.render(&gauges, View::Open);
        for name in ["acme", "globex", "job=", "tenant="] {
            assert!(!open.contains(name), "{name} in\n{open}");
        }
        for series in [
            r#"jobhost_attempts_total{status="succeeded",code=""} 2"#,
            "jobhost_fuel_used_total 15",
            "jobhost_tenant_fuel_used_total 15",
            r#"jobhost_attempt_duration_seconds_bucket{le="+Inf"} 2"#,
            r#"jobhost_kicks_total{result="queued"} 1"#,
            "jobhost_claim_lag_seconds_count 1",
            "jobhost_queue_due 2",
        ] {
            assert!(open.contains(series), "missing {series} in\n{open}");
        }
        assert!(!open.contains("jobhost_tenant_queue_due"), "{open}");

        let acme = m.render(&gauges, View::Tenant("acme"));
        assert!(!acme.contains("globex"), "{acme}");
        for series in [
            r#"jobhost_fuel_used_total{job="acme-sync",tenant="acme"} 10"#,
            r#"jobhost_tenant_queue_due{tenant="acme"} 1"#,
            "jobhost_claim_lag_seconds_count 1",
            "jobhost_queue_due 2",
        ] {
            assert!(acme.contains(series), "missing {series} in\n{acme}");
        }

        let operator = m.render(&gauges, View::Operator);
        for series in [
            r#"jobhost_fuel_used_total{job="acme-sync",tenant="acme"} 10"#,
            r#"jobhost_fuel_used_total{job="globex-sync",tenant="globex"} 5"#,
            r#"jobhost_tenant_queue_due{tenant="globex"} 1"#,
        ] {
            assert!(operator.contains(series), "missing {series} in\n{operator}");
        }
    }

    #[test]
    fn a_mounts_limits_are_copied_as_counters_and_shown_only_to_the_operator() {
        let m = Metrics::default();
        m.mount_limits("billing", 2, Duration::from_millis(500), 1);
        m.mount_limits("billing", 3, Duration::from_millis(1500), 1);
        let operator = m.render(&[], View::Operator);
        for line in [
            "# TYPE jobhost_mount_calls_waited_total counter",
            "jobhost_mount_calls_waited_total{mount=\"billing\"} 3\n",
            "jobhost_mount_wait_seconds_total{mount=\"billing\"} 1.5\n",
            "jobhost_mount_calls_refused_total{mount=\"billing\"} 1\n",
        ] {
            assert!(operator.contains(line), "{line} in {operator}");
        }
        assert!(!m.render(&[], View::Tenant("acme")).contains("mount"));
        let open = m.render(&[], View::Open);
        assert!(
            open.contains("jobhost_mount_calls_waited_total 3\n") && !open.contains("billing"),
            "{open}"
        );
    }

    #[test]
    fn deliveries_are_counted_by_webhook_and_named_only_to_the_operator() {
        let m = Metrics::default();
        m.delivery_attempt("ops", "retry");
        m.delivery_attempt("ops", "retry");
        m.delivery_attempt("ops", "delivered");
        m.delivery_attempt("billing", "given_up");
        let operator = m.render(&[], View::Operator);
        for line in [
            "jobhost_delivery_attempts_total{webhook=\"ops\",result=\"retry\"} 2\n",
            "jobhost_delivery_attempts_total{webhook=\"ops\",result=\"delivered\"} 1\n",
            "jobhost_delivery_attempts_total{webhook=\"billing\",result=\"given_up\"} 1\n",
        ] {
            assert!(operator.contains(line), "{line} in {operator}");
        }
        assert!(
            !m.render(&[], View::Tenant("acme"))
                .contains("jobhost_delivery")
        );
        let open = m.render(&[], View::Open);
        assert!(
            open.contains("jobhost_delivery_attempts_total{result=\"retry\"} 2\n")
                && !open.contains("ops")
                && !open.contains("billing"),
            "{open}"
        );
    }
}
