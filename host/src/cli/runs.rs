//! `host runs list`, `show`, `wait`, `cancel`, `retry` and `signal`; `host pause`,
//! `resume` and `pauses`.

use super::failure::Failure;
use super::global::Global;
use super::output;
use crate::rules::units::{parse_duration, readable_count, readable_ms, readable_size};
use crate::runs::controls::{Action, Actor, ControlError, Controls};
use crate::runs::metrics::Metrics;
use crate::service::views::{self, time};
use crate::store::{RunFilter, RunStatus, Store};
use clap::Subcommand;
use std::time::Duration;

#[derive(Subcommand, Debug)]
pub enum RunsCommand {
    /// The most recent runs, newest first.
    List {
        /// Only the runs of this job.
        #[arg(long)]
        job: Option<String>,
        /// Only the runs of this instance (a per-tenant job's: its tenant).
        #[arg(long)]
        instance: Option<String>,
        /// Only the runs in this state: queued, running, succeeded, failed, cancelled,
        /// crashed or skipped.
        #[arg(long, value_parser = parse_status)]
        status: Option<RunStatus>,
        /// Only runs created within this long, e.g. 1h.
        #[arg(long, value_parser = parse_duration)]
        since: Option<Duration>,
        /// How many, newest first (at most 500, as the API's `GET /runs`).
        #[arg(long, default_value_t = views::DEFAULT_PAGE)]
        limit: i64,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// One run with its attempts and their logs.
    Show {
        id: String,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Wait for a run to end; print its ending and result (exit 0 succeeded, 1 failed,
    /// crashed or cancelled, 3 skipped, 6 not ended within the timeout).
    Wait {
        id: String,
        /// How long to wait (e.g. 30s, 10m).
        #[arg(long, default_value = "60s", value_parser = parse_duration)]
        timeout: Duration,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Follow a run: its log lines as they are written and each change of its status,
    /// until it ends; exits as `host run` does for that ending (0 succeeded, 1 failed, 3
    /// skipped). Works whichever host of the fleet runs it.
    Tail {
        id: String,
        /// One JSON object a line: `status`, `log`, `attempt` and, last, `end` events.
        #[arg(long)]
        json: bool,
    },
    /// Print an attempt's journal (the JSON `host replay --from` reads), to replay it
    /// elsewhere: on a laptop with no access to this database.
    Export {
        id: String,
        /// The attempt (its number in `host runs show`); the run's last recorded one if
        /// not given.
        #[arg(long)]
        attempt: Option<i64>,
    },
    /// Cancel queued or running runs: by id, or every one a filter matches. A running
    /// attempt is stopped and fenced: nothing it writes afterwards commits.
    Cancel(ActionArgs),
    /// Retry failed, crashed or cancelled runs now: by id, or every one a filter matches
    /// (each run is retried once).
    Retry(ActionArgs),
    /// Delete the ended runs a filter matches (their endings delivered), with their
    /// attempts, logs, journals and steps, whatever the retention; without `--yes`, only
    /// say how many, as `POST /runs/purge` does.
    Purge(FilterArgs),
    /// The newest runs whose payload contains a JSON object, e.g. '{"customer": 42}', as
    /// `GET /runs/search` finds them (on SQLite within the newest 10 000 runs).
    Search {
        payload: String,
        /// Only the runs of this job.
        #[arg(long)]
        job: Option<String>,
        /// Only the runs of this tenant.
        #[arg(long)]
        tenant: Option<String>,
        /// How many, newest first (at most 500).
        #[arg(long, default_value_t = views::DEFAULT_PAGE)]
        limit: i64,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Send a run the signal NAME, which a pass waits for (`run.wait-for-signal`) and
    /// reads (`run.signal`), as `POST /runs/{id}/signals/{name}` does. Exit 0 sent (or
    /// sent before with the same id), 1 the run has ended, 2 refused.
    Signal {
        id: String,
        name: String,
        /// The signal's payload, JSON (at most 64 KiB); null if not given.
        #[arg(long)]
        payload: Option<String>,
        /// The sender's id for the signal: sending it again is the same signal. One of
        /// the host's if not given.
        #[arg(long = "id", value_name = "SIGNAL_ID")]
        signal_id: Option<String>,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
}

#[derive(clap::Args, Debug)]
pub struct ActionArgs {
    /// The runs, by id.
    pub(super) ids: Vec<String>,
    /// Instead of ids, a filter.
    #[command(flatten)]
    pub(super) filter: FilterArgs,
}

/// The runs an action by filter takes: every one that matches, previewed as a count
/// unless `--yes`.
#[derive(clap::Args, Debug)]
pub struct FilterArgs {
    /// Every run of this job...
    #[arg(long)]
    job: Option<String>,
    /// ... with this status ...
    #[arg(long, value_parser = parse_status)]
    status: Option<RunStatus>,
    /// ... whose last failure code is this ...
    #[arg(long)]
    code: Option<String>,
    /// ... of this tenant ...
    #[arg(long)]
    tenant: Option<String>,
    /// ... created within this long, e.g. 1h ...
    #[arg(long, value_parser = parse_duration)]
    since: Option<Duration>,
    /// ... created longer ago than this, e.g. 30d.
    #[arg(long, value_parser = parse_duration)]
    until: Option<Duration>,
    /// Act on what the filter matches; without it, only say how many runs that is.
    #[arg(long)]
    pub(super) yes: bool,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

impl FilterArgs {
    fn given(&self) -> bool {
        self.job.is_some()
            || self.status.is_some()
            || self.code.is_some()
            || self.tenant.is_some()
            || self.since.is_some()
            || self.until.is_some()
    }

    /// The filter, every part checked before any query.
    async fn run_filter(&self, store: &Store) -> Result<RunFilter, Failure> {
        if let Some(code) = &self.code
            && crate::rules::failure::FailureCode::parse(code).is_none()
        {
            return Err(Failure::usage(format!(
                "{code:?} is not a failure code (`host codes` lists them)"
            )));
        }
        let now = store.now().await?;
        let back =
            |d: Duration| now.saturating_sub(i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
        Ok(RunFilter {
            job: self.job.clone(),
            statuses: self.status.into_iter().collect(),
            tenant: self.tenant.clone(),
            code: self.code.clone(),
            since: self.since.map(back),
            until: self.until.map(back),
            ..Default::default()
        })
    }
}

#[derive(Subcommand, Debug)]
pub enum PauseScope {
    /// A job, by name: none of its runs is claimed.
    Job { name: String },
    /// A tenant: none of its runs is claimed, whatever the job.
    Tenant { name: String },
    /// A lane: its workers claim nothing.
    Lane { name: String },
}

impl PauseScope {
    /// What is paused, as the audit log names it (`job hello`).
    pub(super) fn object(&self) -> String {
        let (scope, name) = self.parts();
        format!("{scope} {name}")
    }

    fn parts(&self) -> (&'static str, &str) {
        match self {
            PauseScope::Job { name } => ("job", name),
            PauseScope::Tenant { name } => ("tenant", name),
            PauseScope::Lane { name } => ("lane", name),
        }
    }
}

fn parse_status(text: &str) -> Result<RunStatus, String> {
    RunStatus::parse(text).ok_or_else(|| {
        let all: Vec<_> = RunStatus::ALL.iter().map(|s| s.as_str()).collect();
        format!("unknown status {text:?} (one of: {})", all.join(", "))
    })
}

/// `host runs ...`; what a purge deleted goes to `noted` (its audit row's object).
pub async fn runs(
    global: &Global,
    cmd: RunsCommand,
    noted: &mut Option<String>,
) -> Result<u8, Failure> {
    let store = Store::open(&global.db_url(None)).await?;
    let code = match cmd {
        RunsCommand::List {
            job,
            instance,
            status,
            since,
            limit,
            json,
        } => {
            if let Some(instance) = &instance {
                crate::rules::job::validate_instance(instance)?;
            }
            let since = match since {
                Some(d) => Some(store.now().await? - d.as_millis() as i64),
                None => None,
            };
            let runs = store
                .list_runs(&RunFilter {
                    job,
                    instance,
                    statuses: status.into_iter().collect(),
                    since,
                    limit: views::page_size(Some(limit)),
                    ..Default::default()
                })
                .await?;
            print_runs(&runs, json);
            0
        }
        RunsCommand::Wait { id, timeout, json } => wait(&store, &id, timeout, json).await?,
        RunsCommand::Cancel(args) => act(&store, Action::Cancel, args).await?,
        RunsCommand::Retry(args) => act(&store, Action::Retry, args).await?,
        RunsCommand::Purge(args) => purge(&store, args, noted).await?,
        RunsCommand::Search {
            payload,
            job,
            tenant,
            limit,
            json,
        } => {
            search(
                &store,
                &payload,
                job.as_deref(),
                tenant.as_deref(),
                limit,
                json,
            )
            .await?
        }
        RunsCommand::Show { id, json } => {
            let Some(run) = store.get_run(&id).await? else {
                return Err(Failure::usage(format!("no run with id {id:?}")));
            };
            let attempts = store.list_attempts(&id, views::ATTEMPTS_SHOWN).await?;
            let live = store.live_log(&id).await?;
            let steps = store.run_steps(&id).await?;
            let failed_steps = store.run_step_failures(&id).await?;
            let journals = store.run_journals(&id).await?;
            let lease = store.get_lease(&run.job, &run.instance).await?;
            let kicks_pending = views::kicks_pending(&run, lease.as_ref());
            // Quotas are the serving hosts' (their manifests'): this command names the
            // other holds only.
            let pauses = crate::queue::pause::Pauses::new(store.clone())
                .current()
                .await?;
            let held_by = crate::queue::waits::why_waiting(&store, &pauses, &[], &run).await?;
            let actions = store
                .list_audit(&crate::store::AuditFilter {
                    run_id: Some(id.clone()),
                    limit: views::ACTIONS_SHOWN,
                    ..Default::default()
                })
                .await?;
            let deliveries = store
                .list_deliveries(&crate::store::DeliveryFilter {
                    run_id: Some(&id),
                    limit: views::MAX_PAGE,
                    ..Default::default()
                })
                .await?;
            if json {
                let mut detail =
                    views::run_detail(&run, &attempts, live.as_ref(), &steps, &failed_steps);
                detail["journals"] = serde_json::json!(journals);
                detail["deliveries"] = deliveries.iter().map(views::delivery).collect();
                detail["kicks_pending"] = kicks_pending.into();
                detail["held_by"] = serde_json::json!(held_by);
                detail["actions"] = actions
                    .iter()
                    .map(|a| views::run_action(a, false))
                    .collect();
                println!("{detail}");
            } else {
                output::run_result(&run, false);
                if let Some(held_by) = &held_by {
                    println!("  held back by: {held_by}");
                }
                if kicks_pending > 0 {
                    println!(
                        "  {kicks_pending} kick pending: the job runs once more when this run ends"
                    );
                }
                println!("  trace {}", run.trace().trace_id());
                for a in actions.iter().rev() {
                    println!(
                        "  {} {} by {}: {}",
                        time(a.at),
                        a.action,
                        crate::rules::guest_text::for_terminal(&views::who(a)),
                        a.result
                    );
                }
                output::progress(&run, &steps);
                output::failed_steps(&failed_steps);
                for a in &attempts {
                    println!(
                        "  attempt {} (pass {}, try {}, generation {}): {}{} in {}, fuel {}, peak memory {}",
                        a.seq,
                        a.pass,
                        a.attempt,
                        a.generation,
                        a.status,
                        a.code
                            .as_deref()
                            .map(|c| format!(" ({c})"))
                            .unwrap_or_default(),
                        readable_ms(a.duration_ms.unwrap_or(0).max(0) as u64),
                        readable_count(a.fuel_used.unwrap_or(0).max(0) as u64),
                        readable_size(a.peak_memory.unwrap_or(0).max(0) as u64),
                    );
                    output::log(a);
                    if let Some(journal) = journals.iter().find(|j| j.seq == a.seq) {
                        println!(
                            "    journal: {} host calls{}; replay it with `host replay {id} --attempt {}`",
                            journal.calls,
                            if journal.replayable == 1 {
                                ""
                            } else {
                                " (truncated at its cap)"
                            },
                            a.seq
                        );
                    }
                }
                let live = views::live_attempt(&run, &attempts, live.as_ref());
                if !live.is_null() {
                    println!("  {}", super::tail::live_header(&live));
                    output::log_text(
                        live["log"].as_str().unwrap_or_default(),
                        live["log_truncated"] == true,
                    );
                }
                for d in &deliveries {
                    println!("  delivery {}", super::deliveries::line(d).trim_start());
                }
            }
            0
        }
        RunsCommand::Tail { id, json } => super::tail::tail(&store, &id, json).await?,
        RunsCommand::Signal {
            id,
            name,
            payload,
            signal_id,
            json,
        } => signal(&store, &id, &name, payload, signal_id, json).await?,
        RunsCommand::Export { id, attempt } => {
            let Some(journal) = store.journal(&id, attempt).await? else {
                return Err(Failure::usage(match attempt {
                    Some(seq) => format!("run {id:?} has no journal of attempt {seq}"),
                    None => format!("run {id:?} has no journal"),
                }));
            };
            println!("{}", journal.body);
            0
        }
    };
    store.close().await;
    Ok(code)
}

/// Runs as a table (newest first, as given), or as a JSON array of their views.
fn print_runs(runs: &[crate::store::RunRecord], json: bool) {
    if json {
        let all: Vec<_> = runs.iter().map(views::run).collect();
        println!("{}", serde_json::Value::Array(all));
        return;
    }
    if runs.is_empty() {
        println!("no runs");
        return;
    }
    println!(
        "{:<36}  {:<20}  {:<9}  {:>8}  {:<18}  CREATED",
        "RUN", "JOB", "STATUS", "ATTEMPTS", "CODE"
    );
    for r in runs {
        println!(
            "{:<36}  {:<20}  {:<9}  {:>8}  {:<18}  {}",
            r.id,
            r.job,
            r.shown_status(),
            r.attempts,
            r.last_code.as_deref().unwrap_or("-"),
            time(r.created_at)
        );
    }
}

/// `host runs purge`: the count and the deletes `POST /runs/purge` makes, in batches
/// until none is left.
async fn purge(store: &Store, args: FilterArgs, noted: &mut Option<String>) -> Result<u8, Failure> {
    use crate::service::retention::PURGE_BATCH;
    if !args.given() {
        return Err(Failure::usage(
            "name the runs to purge by a filter (--job, --status, --code, --tenant, --since, --until)",
        ));
    }
    let filter = args.run_filter(store).await?;
    if !args.yes {
        let count = store.count_purgeable(&filter, i64::MAX).await?;
        if args.json {
            println!(
                "{}",
                serde_json::json!({"count": count, "confirmed": false})
            );
        } else {
            let matching = match count {
                1 => "1 ended run matches".to_string(),
                n => format!("{n} ended runs match"),
            };
            println!(
                "{matching}; add --yes to delete them with their attempts, logs, journals and steps"
            );
        }
        return Ok(0);
    }
    let mut total = 0;
    loop {
        let done = store.purge_runs(&filter, PURGE_BATCH).await?;
        total += done;
        if done < PURGE_BATCH as u64 {
            break;
        }
    }
    *noted = Some(format!("runs: {total} purged by filter"));
    if args.json {
        println!("{}", serde_json::json!({"done": total}));
    } else {
        println!("{total} run{} purged", if total == 1 { "" } else { "s" });
    }
    Ok(0)
}

/// `host runs search`: the search `GET /runs/search` makes, as the operator.
async fn search(
    store: &Store,
    payload: &str,
    job: Option<&str>,
    tenant: Option<&str>,
    limit: i64,
    json: bool,
) -> Result<u8, Failure> {
    use crate::rules::payload_match;
    use crate::store::payload_search::{SCAN_ROWS, SEARCH_BOUND};
    let needle = payload_match::needle(payload).map_err(Failure::usage)?;
    let found = store
        .search_payloads(&needle, job, tenant, views::page_size(Some(limit)))
        .await
        .map_err(|e| match e {
            crate::store::StoreError::TimedOut => Failure {
                exit: 1,
                message: payload_match::timed_out(SEARCH_BOUND),
            },
            other => other.into(),
        })?;
    if json {
        println!(
            "{}",
            serde_json::json!({
                "runs": found.runs.iter().map(views::run).collect::<Vec<_>>(),
                "complete": found.complete,
                "scan_limit": SCAN_ROWS,
            })
        );
        return Ok(0);
    }
    print_runs(&found.runs, false);
    if !found.complete {
        println!(
            "(only the newest {} runs were read: narrow it by --job or --tenant)",
            readable_count(SCAN_ROWS as u64)
        );
    }
    Ok(0)
}

/// `host runs signal`: the checks and the write `POST /runs/{id}/signals/{name}` makes, as
/// the operator.
async fn signal(
    store: &Store,
    id: &str,
    name: &str,
    payload: Option<String>,
    signal_id: Option<String>,
    json: bool,
) -> Result<u8, Failure> {
    use crate::rules::signal::{check_id, check_name, check_payload};
    use crate::store::signals::{NewSignal, Signalled};
    check_name(name).map_err(Failure::usage)?;
    let payload = check_payload(payload.as_deref().unwrap_or("null").as_bytes())
        .map_err(|refusal| Failure::usage(format!("--{refusal}")))?;
    let signal_id = match signal_id {
        Some(given) => {
            check_id(&given).map_err(|refusal| Failure::usage(format!("--{refusal}")))?;
            given
        }
        None => crate::store::records::new_run_id(),
    };
    let sent = store
        .send_signal(&NewSignal {
            run_id: id,
            tenant: None,
            name,
            signal_id: &signal_id,
            payload: &payload,
        })
        .await?;
    let (duplicate, woke) = match sent {
        Signalled::Sent { woke } => (false, woke),
        Signalled::Duplicate => (true, false),
        Signalled::UnknownRun => return Err(Failure::usage(format!("no run with id {id:?}"))),
        Signalled::Ended(status) => {
            return Err(Failure {
                message: format!("run {id:?} has ended ({status}): no pass will read a signal"),
                exit: 1,
            });
        }
        Signalled::IdReused => {
            return Err(Failure::usage(format!(
                "--id: the signal {signal_id:?} was sent to run {id:?} before with another name or payload"
            )));
        }
        Signalled::TooMany => {
            return Err(Failure::usage(format!(
                "run {id:?} keeps {} unread signals already",
                crate::rules::signal::MAX_UNREAD
            )));
        }
    };
    if json {
        println!(
            "{}",
            serde_json::json!({"run_id": id, "name": name, "signal_id": signal_id,
                "duplicate": duplicate, "woke": woke})
        );
    } else if duplicate {
        println!("{id}: signal {name} {signal_id} was sent before");
    } else if woke {
        println!("{id}: signal {name} sent as {signal_id}; the run waited for it and is due now");
    } else {
        println!("{id}: signal {name} sent as {signal_id}");
    }
    Ok(0)
}

/// A cancel or retry from the command line: by ids, or by filter (a preview without
/// `--yes`). The serving host that runs a cancelled attempt stops it within
/// `controls::CANCEL_POLL`; the fence holds from the cancel's commit.
async fn act(store: &Store, action: Action, args: ActionArgs) -> Result<u8, Failure> {
    let metrics = Metrics::default();
    let controls = Controls {
        store,
        metrics: &metrics,
        runner: None,
    };
    let operator = Actor { tenant: None };
    let verb = match action {
        Action::Cancel => "cancelled",
        Action::Retry => "retried",
    };
    if args.ids.is_empty() != args.filter.given() {
        return Err(Failure::usage(
            "name the runs by id, or by a filter (--job, --status, --code, --tenant, --since, --until): one of the two",
        ));
    }
    if !args.ids.is_empty() {
        let mut refused = 0;
        let mut results = Vec::new();
        for id in &args.ids {
            let done = match action {
                Action::Cancel => controls.cancel(operator, id).await.map(|run| (run, None)),
                Action::Retry => controls
                    .retry(operator, id)
                    .await
                    .map(|retry| (retry.run, Some(id.clone()))),
            };
            match done {
                Ok((run, retry_of)) => {
                    if args.filter.json {
                        results.push(
                            serde_json::json!({"run": views::run(&run), "retry_of": retry_of}),
                        );
                    } else if let Some(original) = retry_of {
                        println!("{original}: retried as {}", run.id);
                    } else {
                        println!("{}: {verb}", run.id);
                    }
                }
                Err(ControlError::Store(e)) => return Err(e.into()),
                Err(e) => {
                    refused += 1;
                    if args.filter.json {
                        results.push(serde_json::json!({"id": id, "error": e.to_string()}));
                    } else {
                        eprintln!("{e}");
                    }
                }
            }
        }
        if args.filter.json {
            println!("{}", serde_json::Value::Array(results));
        }
        return Ok(u8::from(refused > 0));
    }
    let filter = args.filter.run_filter(store).await?;
    if !args.filter.yes {
        let count = controls.preview(action, &filter, i64::MAX).await?;
        if args.filter.json {
            println!(
                "{}",
                serde_json::json!({"count": count, "confirmed": false})
            );
        } else {
            println!("{count} runs match; add --yes to have them {verb}");
        }
        return Ok(0);
    }
    let mut total = 0;
    loop {
        let bulk = controls.apply(operator, action, &filter).await?;
        total += bulk.done;
        if !bulk.more || bulk.done == 0 {
            break;
        }
    }
    if args.filter.json {
        println!("{}", serde_json::json!({"done": total}));
    } else {
        println!("{total} runs {verb}");
    }
    Ok(0)
}

/// `host pause`, `host resume`.
pub async fn pause(global: &Global, scope: PauseScope, paused: bool) -> Result<u8, Failure> {
    let (scope, name) = scope.parts();
    let scope =
        crate::queue::pause::validate(scope, name).map_err(|e| Failure::usage(e.to_string()))?;
    let store = Store::open(&global.db_url(None)).await?;
    let pauses = crate::queue::pause::Pauses::new(store.clone());
    let changed = if paused {
        pauses.pause(scope, name).await?
    } else {
        pauses.resume(scope, name).await?
    };
    store.close().await;
    let state = if paused { "paused" } else { "resumed" };
    match changed {
        true => println!("{} {name}: {state}", scope.as_str()),
        false => println!("{} {name}: already {state}", scope.as_str()),
    }
    Ok(0)
}

/// `host pauses`.
pub async fn pauses(global: &Global, json: bool) -> Result<u8, Failure> {
    let store = Store::open(&global.db_url(None)).await?;
    let (pauses, _) = store.pause_state().await?;
    store.close().await;
    if json {
        println!("{}", serde_json::to_value(&pauses).expect("serialisable"));
    } else if pauses.is_empty() {
        println!("nothing is paused");
    } else {
        for p in &pauses {
            println!("{:<7} {:<32} since {}", p.scope, p.name, time(p.paused_at));
        }
    }
    Ok(0)
}

/// How often `host runs wait` reads its run: one process waits for one run.
const WAIT_POLL: Duration = Duration::from_millis(250);

/// Waits up to `timeout` for run `id` to end, then prints how it ended (or its state) and
/// the result it handed back; the exit code says the ending (see `RunsCommand::Wait`).
pub(super) async fn wait(
    store: &Store,
    id: &str,
    timeout: Duration,
    json: bool,
) -> Result<u8, Failure> {
    let deadline = tokio::time::Instant::now() + timeout;
    let run = loop {
        let Some(run) = store.get_run(id).await? else {
            return Err(Failure::usage(format!("no run with id {id:?}")));
        };
        let ended = run.status().is_some_and(RunStatus::is_terminal);
        if ended || tokio::time::Instant::now() + WAIT_POLL > deadline {
            break run;
        }
        tokio::time::sleep(WAIT_POLL).await;
    };
    let status = run.status();
    if json {
        let mut view = views::run(&run);
        view["ended"] = status.is_some_and(RunStatus::is_terminal).into();
        println!("{view}");
    } else {
        output::run_result(&run, false);
        println!("result: {}", run.result.as_deref().unwrap_or("none"));
    }
    Ok(match status {
        Some(RunStatus::Succeeded) => 0,
        Some(RunStatus::Skipped) => 3,
        Some(RunStatus::Queued | RunStatus::Running) | None => super::failure::EXIT_NOT_ENDED,
        _ => 1,
    })
}
