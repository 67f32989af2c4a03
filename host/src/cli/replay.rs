//! `host replay`: re-executes a recorded attempt from its journal (`journal::replay`),
//! from the database or from an exported file, and says how it ended and whether that is
//! how the attempt ended.

use super::failure::Failure;
use super::global::Global;
use crate::rules::grants::Grants;
use crate::rules::guest_text::for_terminal;
use crate::sandbox::engine::{Engine, EngineSettings, Loaded};
use crate::sandbox::journal::file::{JournalFile, SealKey, Sealed};
use crate::sandbox::journal::replay::{Replayed, Verdict};
use crate::store::Store;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The exit code of a replay that stopped before the guest ended (the component asked for
/// a call the journal does not have there), or that did not end as the attempt did —
/// unless another component (`--job`) gets past the failed attempt's failure.
pub const EXIT_DIVERGED: u8 = 1;

#[derive(clap::Args, Debug)]
pub struct ReplayArgs {
    /// The run whose attempt to replay, from the database.
    #[arg(required_unless_present = "from", conflicts_with = "from")]
    run: Option<String>,
    /// The attempt (its number in `host runs show`); the run's last recorded one if not
    /// given.
    #[arg(long)]
    attempt: Option<i64>,
    /// A journal `host runs export` wrote, instead of a run: no database is opened.
    #[arg(long, value_name = "FILE")]
    from: Option<PathBuf>,
    /// Replay with this component instead of the one that ran (a rebuilt one, with a fix
    /// or more logging): it is answered from the journal until its calls diverge from it.
    #[arg(long, value_name = "WASM")]
    job: Option<PathBuf>,
    /// With --from: check the file's seal against this installation's key (opens its
    /// database); a file whose seal does not match is refused. Without it, a file's replay
    /// is unverified.
    #[arg(long, requires = "from")]
    verify: bool,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

pub async fn replay(global: &Global, args: ReplayArgs) -> Result<u8, Failure> {
    let (journal, recorded_path, sealed) = match &args.from {
        Some(path) => {
            let journal = read_journal(path)?;
            let sealed = if args.verify {
                let store = Store::open(&global.db_url(None)).await?;
                let key = SealKey::kept(&store).await;
                store.close().await;
                check_seal(&journal, key?.as_ref())
            } else {
                Sealed::Unchecked
            };
            (journal, None, sealed)
        }
        None => {
            let run = args
                .run
                .as_deref()
                .expect("clap requires RUN without --from");
            from_database(global, run, args.attempt).await?
        }
    };
    match sealed {
        Sealed::Verified => {}
        Sealed::Broken => return Err(Failure::usage(BROKEN_SEAL)),
        Sealed::Unchecked => eprintln!(
            "note: unverified: the file's seal was not checked (--verify checks it against this installation's key), so the replay holds the component against what the file says"
        ),
        Sealed::Unsealed => eprintln!(
            "note: unverified: the journal has no seal (kept before journals were sealed), so the replay holds the component against what it says"
        ),
    }
    if !journal.replayable() {
        eprintln!(
            "note: this journal passed its cap ({} calls kept): the replay stops where it was cut",
            journal.calls.len()
        );
    }
    let component = match (&args.job, recorded_path) {
        (Some(path), _) => path.clone(),
        (None, Some(path)) => path,
        (None, None) => {
            return Err(Failure::usage(
                "a journal from a file needs its component: give it with --job",
            ));
        }
    };
    let engine = Engine::new(&EngineSettings {
        cache_dir: Some(global.cache_dir()),
        compiler: Some(global.compiler()?),
        ..EngineSettings::default()
    })?;
    let loaded = load(&engine, &component)?;
    // A component given with --job may differ: that is what it is for. One found from the
    // run's job must be the one that ran.
    let replayed = engine
        .replay(&loaded, &journal, args.job.is_some())
        .await
        .map_err(Failure::usage)?;
    if args.json {
        let shown = serde_json::json!({
            "run_id": journal.run_id,
            "attempt": journal.seq,
            "job": journal.job,
            "component": loaded.digest,
            "recorded_component": journal.component,
            "replay": replayed,
            "recorded": journal.ending,
            "sealed": sealed,
        });
        println!("{shown}");
    } else {
        print_replay(&journal, &loaded, &replayed, sealed);
    }
    let diverged = matches!(
        replayed.stopped,
        Some(
            crate::sandbox::journal::Stop::Diverged { .. }
                | crate::sandbox::journal::Stop::End { .. }
                | crate::sandbox::journal::Stop::Left { .. }
        )
    );
    // The component that ran, answered the same, must end the same: if it does not, the
    // replay did not reproduce the attempt, and says so by its exit code too.
    let recorded_component = loaded.digest == journal.component;
    let unreproduced = recorded_component && !replayed.same.all();
    // Another component that gets past the failure did what it was rebuilt for, though
    // it asked past the journal's end to do so.
    let fixed = !recorded_component && matches!(replayed.verdict, Some(Verdict::GetsPast { .. }));
    Ok(if !fixed && (diverged || unreproduced) {
        EXIT_DIVERGED
    } else {
        0
    })
}

/// Reads an exported journal, bounded before it is read whole.
pub fn read_journal(path: &Path) -> Result<JournalFile, Failure> {
    use std::io::Read as _;
    let cannot = |e: std::io::Error| Failure::usage(format!("cannot read {}: {e}", path.display()));
    let file = std::fs::File::open(path).map_err(cannot)?;
    let mut bytes = Vec::new();
    file.take(crate::sandbox::journal::file::MAX_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(cannot)?;
    JournalFile::parse(&bytes).map_err(|e| Failure::usage(format!("{}: {e}", path.display())))
}

/// Why a journal whose seal does not match is not replayed.
const BROKEN_SEAL: &str = "the journal's seal does not match this installation's key: it was changed after the host kept it (its code, limits, calls or ending), or another installation kept it; nothing was replayed";

/// Whether `journal` is as a host of this installation kept it, by `key` (`None`: no host
/// here made one, so no journal here was sealed).
fn check_seal(journal: &JournalFile, key: Option<&SealKey>) -> Sealed {
    match (key, &journal.seal) {
        (_, None) => Sealed::Unsealed,
        (Some(key), Some(_)) => key.check(journal),
        (None, Some(_)) => Sealed::Broken,
    }
}

/// The journal of a run's attempt, the component its job registered, and whether it is
/// as the host kept it.
async fn from_database(
    global: &Global,
    run: &str,
    attempt: Option<i64>,
) -> Result<(JournalFile, Option<PathBuf>, Sealed), Failure> {
    let store = Store::open(&global.db_url(None)).await?;
    if store.get_run(run).await?.is_none() {
        store.close().await;
        return Err(Failure::usage(format!("no run with id {run:?}")));
    }
    let record = store.journal(run, attempt).await?.ok_or_else(|| {
        Failure::usage(match attempt {
            Some(seq) => format!(
                "run {run:?} has no journal of attempt {seq}: `host runs show {run}` lists the attempts that kept one"
            ),
            None => format!(
                "run {run:?} has no journal: failed attempts keep one unless the job's record = \"off\""
            ),
        })
    })?;
    let journal = JournalFile::parse(record.body.as_bytes())
        .map_err(|e| Failure::usage(format!("the journal of run {run:?}: {e}")))?;
    let path = store
        .get_job(&journal.job)
        .await?
        .map(|job| PathBuf::from(job.component_path));
    let key = SealKey::kept(&store).await?;
    store.close().await;
    let sealed = check_seal(&journal, key.as_ref());
    Ok((journal, path, sealed))
}

fn load(engine: &Engine, path: &Path) -> Result<Arc<Loaded>, Failure> {
    // Every call is answered from the journal: nothing a grant guards is live, so the
    // component loads whatever it imports of the contract.
    Ok(engine.load(path, &Grants::everything())?)
}

/// A replay for people. A journal from a file may hold any text: each of its strings is
/// made terminal-safe before it is printed.
fn print_replay(journal: &JournalFile, loaded: &Loaded, replayed: &Replayed, sealed: Sealed) {
    let short =
        |digest: &str| for_terminal(&digest.chars().take(12).collect::<String>()).into_owned();
    println!(
        "replay of run {} attempt {} (job {}, component {}{})",
        for_terminal(&journal.run_id),
        journal.seq,
        for_terminal(&journal.job),
        short(&loaded.digest),
        if loaded.digest == journal.component {
            String::new()
        } else {
            format!(", recorded with {}", short(&journal.component))
        }
    );
    println!(
        "{} of {} calls answered from the journal; nothing was written anywhere",
        replayed.calls_answered, replayed.calls_recorded
    );
    println!("--- log");
    print!("{}", for_terminal(&replayed.log));
    if !replayed.log.is_empty() && !replayed.log.ends_with('\n') {
        println!();
    }
    println!("--- end of log");
    let left = matches!(
        replayed.stopped,
        Some(crate::sandbox::journal::Stop::Left { .. })
    );
    if let Some(stop) = replayed.stopped.as_ref().filter(|_| !left) {
        println!("stopped: {}", for_terminal(&stop.to_string()));
        if let Some(code) = &replayed.original_code
            && !matches!(stop, crate::sandbox::journal::Stop::Diverged { .. })
        {
            println!("the original attempt ended here: {}", for_terminal(code));
        }
    } else {
        match (replayed.outcome, replayed.code) {
            (Some(outcome), _) => println!("outcome: {outcome}"),
            (None, Some(code)) if replayed.at_original_stop => println!(
                "failed: {code} (stopped where the original attempt was, after the {} fuel it used)",
                replayed.fuel_used
            ),
            (None, Some(code)) => println!("failed: {code}"),
            (None, None) => {}
        }
        if let Some(message) = &replayed.message {
            for line in message.lines() {
                println!("  {}", for_terminal(line));
            }
        }
        if let Some(stop) = replayed.stopped.as_ref().filter(|_| left) {
            println!("diverged: {stop}");
        }
    }
    let recorded = for_terminal(match (&journal.ending.outcome, &journal.ending.code) {
        (Some(outcome), _) => outcome,
        (None, Some(code)) => code,
        (None, None) => &journal.ending.status,
    });
    let said = |same: bool| if same { "the same" } else { "different" };
    let fuel = if replayed.fuel_metered {
        format!(
            "fuel {} ({} recorded, {} replayed)",
            said(replayed.same.fuel),
            journal.ending.fuel_used,
            replayed.fuel_used
        )
    } else {
        "fuel not metered".to_string()
    };
    let unverified = if sealed == Sealed::Verified {
        ""
    } else {
        " (as the journal says, unverified)"
    };
    println!(
        "the original attempt{unverified}: {recorded}; outcome {}, log {}, {fuel}",
        said(replayed.same.outcome),
        said(replayed.same.log),
    );
    if let Some(verdict) = &replayed.verdict {
        println!("verdict: {}", for_terminal(&verdict.to_string()));
    }
}
