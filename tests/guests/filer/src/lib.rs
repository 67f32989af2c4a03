//! A test guest for `files` (`tests/files.rs`). The payload's `mode` picks what it does:
//!
//! - `put`: writes `size` bytes of `fill` as `name`, attaching it in a fenced transaction
//!   of its own (`how = "own"`), inside a database transaction that also writes `rows`
//!   ledger rows (`"in-tx"`, rolled back instead with `rollback`), inside a transaction
//!   opened before the upload started (`"tx-first"`), or not at all (`"none"`); waits
//!   `wait_ms` before attaching;
//! - `read`: logs the object's size and digest (fails if there is none);
//! - `list`: logs the names under `prefix`, page by page, from `cursor` if given;
//! - `remove`: removes `name`;
//! - `uploads`: opens `count` uploads at once (one after another, each dropped before the
//!   next starts, with `drop`);
//! - `chunk`: writes one chunk of `size` bytes straight through the host call;
//! - `churn-put`: puts `size` bytes of `fill` as `name` again and again (at most `count`
//!   times) until a ledger row of run `churn-done` appears;
//! - `churn-read`: once `name` exists, reads it whole `count` times with `read_all` and
//!   logs how many reads were exactly `size` bytes of `fill`, exactly `size` bytes of
//!   `other`, anything else (`mixed`), or gave up on a name replaced at every attempt;
//!   then writes the `churn-done` row.

use jobhost_guest::bindings::jobhost::job::files as raw;
use jobhost_guest::files::ReadError;
use jobhost_guest::{Context, Job, JobError, Outcome, db, files, log};
use serde::Deserialize;
use std::time::Duration;

#[derive(Deserialize)]
struct Payload {
    mode: String,
    #[serde(default = "collection")]
    collection: String,
    #[serde(default)]
    name: String,
    #[serde(default)]
    size: usize,
    #[serde(default = "fill")]
    fill: String,
    #[serde(default = "own")]
    how: String,
    #[serde(default)]
    rows: i64,
    #[serde(default)]
    rollback: bool,
    #[serde(default)]
    wait_ms: u64,
    #[serde(default)]
    prefix: String,
    #[serde(default)]
    count: usize,
    #[serde(default)]
    cursor: Option<String>,
    #[serde(default)]
    drop: bool,
    #[serde(default)]
    other: String,
}

fn collection() -> String {
    "docs".into()
}

fn fill() -> String {
    "x".into()
}

fn own() -> String {
    "own".into()
}

struct Filer;

/// A transaction that has written the payload's `rows` ledger rows.
fn begin_with_rows(ctx: &Context<Payload>) -> Result<db::Transaction, JobError> {
    let tx = db::begin()?;
    for n in 0..ctx.payload.rows {
        tx.execute(
            "INSERT INTO ledger (run_id, attempt, n) VALUES ($1, $2, $3)",
            &[ctx.run_id.as_str().into(), ctx.attempt.into(), n.into()],
        )?;
    }
    Ok(tx)
}

impl Job for Filer {
    type Payload = Payload;

    fn run(ctx: Context<Payload>) -> Result<Outcome, JobError> {
        let p = &ctx.payload;
        match p.mode.as_str() {
            "put" => {
                let opened_first = if p.how == "tx-first" {
                    Some(begin_with_rows(&ctx)?)
                } else {
                    None
                };
                let upload = files::upload(&p.collection)?;
                let content: Vec<u8> = p.fill.bytes().cycle().take(p.size).collect();
                upload.write(&content)?;
                std::thread::sleep(Duration::from_millis(p.wait_ms));
                match p.how.as_str() {
                    "own" => {
                        let object = upload.attach(&p.name)?;
                        log::info(&format!(
                            "attached {} {} {}",
                            object.name, object.size, object.digest
                        ));
                    }
                    "in-tx" => {
                        let tx = begin_with_rows(&ctx)?;
                        let object = upload.attach_in(&tx, &p.name)?;
                        if p.rollback {
                            tx.rollback();
                            log::info("rolled back");
                        } else {
                            tx.commit()?;
                            log::info(&format!("committed {} {}", object.name, object.size));
                        }
                    }
                    "tx-first" => {
                        let tx = opened_first.expect("opened before the upload");
                        let object = upload.attach_in(&tx, &p.name)?;
                        tx.commit()?;
                        log::info(&format!("committed {} {}", object.name, object.size));
                    }
                    _ => log::info("left unattached"),
                }
                Ok(Outcome::Done)
            }
            "read" => match files::read_all(&p.collection, &p.name)? {
                Some(bytes) => {
                    let meta = files::stat(&p.collection, &p.name)?;
                    log::info(&format!(
                        "read {} bytes, first {:?}, digest {}",
                        bytes.len(),
                        bytes.first().map(|b| *b as char),
                        meta.map(|m| m.digest).unwrap_or_default()
                    ));
                    Ok(Outcome::Done)
                }
                None => Err(JobError::failed("no such object")),
            },
            "list" => {
                let mut cursor = p.cursor.clone();
                let mut names = Vec::new();
                loop {
                    let page = files::list(&p.collection, &p.prefix, cursor.as_deref(), 2)?;
                    names.extend(page.objects.into_iter().map(|o| o.name));
                    match page.next {
                        Some(next) => cursor = Some(next),
                        None => break,
                    }
                }
                log::info(&format!("names {}", names.join(",")));
                Ok(Outcome::Done)
            }
            "remove" => {
                let removed = files::remove(&p.collection, &p.name)?;
                log::info(&format!("removed {removed}"));
                Ok(Outcome::Done)
            }
            "uploads" => {
                let mut open = Vec::new();
                for _ in 0..p.count {
                    let upload = files::upload(&p.collection)?;
                    if !p.drop {
                        open.push(upload);
                    }
                }
                Ok(Outcome::Done)
            }
            "chunk" => {
                let upload = raw::start_upload(&p.collection)?;
                upload.write(&vec![7u8; p.size])?;
                Ok(Outcome::Done)
            }
            "churn-put" => {
                let content: Vec<u8> = p.fill.bytes().cycle().take(p.size).collect();
                for _ in 0..p.count {
                    files::put(&p.collection, &p.name, &content)?;
                    let done = db::query(
                        "SELECT COUNT(*) FROM ledger WHERE run_id = 'churn-done'",
                        &[],
                    )?;
                    if done.rows[0][0].as_i64() != Some(0) {
                        break;
                    }
                }
                Ok(Outcome::Done)
            }
            "churn-read" => {
                let one: Vec<u8> = p.fill.bytes().cycle().take(p.size).collect();
                let other: Vec<u8> = p.other.bytes().cycle().take(p.size).collect();
                while files::stat(&p.collection, &p.name)?.is_none() {
                    std::thread::sleep(Duration::from_millis(10));
                }
                let (mut ones, mut others, mut mixed, mut gave_up) = (0, 0, 0, 0);
                for _ in 0..p.count {
                    match files::read_all(&p.collection, &p.name) {
                        Ok(Some(bytes)) if bytes == one => ones += 1,
                        Ok(Some(bytes)) if bytes == other => others += 1,
                        Ok(_) => mixed += 1,
                        Err(ReadError::Changed) => gave_up += 1,
                        Err(e) => return Err(e.into()),
                    }
                }
                let tx = db::begin()?;
                tx.execute(
                    "INSERT INTO ledger (run_id, attempt, n) VALUES ('churn-done', 1, 0)",
                    &[],
                )?;
                tx.commit()?;
                log::info(&format!(
                    "churn {ones} {others} mixed {mixed} gave up {gave_up}"
                ));
                Ok(Outcome::Done)
            }
            other => Err(JobError::unrecoverable(format!("unknown mode {other}"))),
        }
    }
}

jobhost_guest::export_job!(Filer);
