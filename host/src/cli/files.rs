//! `host files put | get | ls`: objects in a collection, as the jobs granted it see them,
//! for an operator seeding or inspecting a collection and an author running a files job
//! for real. A put goes through the write an attempt makes — upload under a fresh key,
//! then a fenced attach under a lease of its own — so quotas, the scan and the collector
//! treat it like any other.

use super::failure::Failure;
use super::global::Global;
use crate::rules::guest_text::for_terminal;
use crate::rules::tenant::OPERATOR_TENANT;
use crate::rules::units::readable_size;
use crate::sandbox::files::{CollectionSpec, Files, FilesError, MAX_CHUNK, Uploader};
use crate::service::manifest::Manifest;
use crate::store::guest::Fence;
use crate::store::{FileRecord, LeaseRequest, Store};
use bytes::Bytes;
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

/// The job a put's lease is taken for, at an instance of the put's own (no run's), the
/// lease row dropped once the put ends.
const PUT_JOB: &str = "host-files";
/// How long a put may take from its lease to its attach.
const PUT_HOLD_MS: i64 = 15 * 60 * 1000;

#[derive(clap::Args, Debug)]
pub struct Where {
    /// The collection, declared in the manifest or else the one under the host's home of
    /// that name (as `host run --grant files.write=NAME` has it).
    collection: String,
    /// The manifest whose `[collections.*]` to use.
    #[arg(long)]
    manifest: Option<PathBuf>,
    /// Whose objects: each tenant sees only its own.
    #[arg(long, default_value = OPERATOR_TENANT)]
    tenant: String,
}

#[derive(clap::Subcommand, Debug)]
pub enum FilesCommand {
    /// Place FILE as NAME, through the fenced write an attempt makes.
    Put {
        #[command(flatten)]
        at: Where,
        name: String,
        file: PathBuf,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Write NAME's bytes to stdout, or to --out.
    Get {
        #[command(flatten)]
        at: Where,
        name: String,
        /// The file to write the bytes to (default: stdout).
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// List the visible objects, by name.
    Ls {
        #[command(flatten)]
        at: Where,
        /// Only names starting with this.
        #[arg(long, default_value = "")]
        prefix: String,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
}

impl FilesCommand {
    /// What the command names, as the audit log keeps it.
    pub fn object(&self) -> String {
        let (at, name) = match self {
            FilesCommand::Put { at, name, .. } | FilesCommand::Get { at, name, .. } => {
                (at, name.as_str())
            }
            FilesCommand::Ls { at, prefix, .. } => (at, prefix.as_str()),
        };
        format!("file {}/{name} of tenant {}", at.collection, at.tenant)
    }
}

pub async fn files(global: &Global, cmd: FilesCommand) -> Result<u8, Failure> {
    let at = match &cmd {
        FilesCommand::Put { at, .. }
        | FilesCommand::Get { at, .. }
        | FilesCommand::Ls { at, .. } => at,
    };
    let manifest = at.manifest.as_deref().map(Manifest::load).transpose()?;
    let mut specs: BTreeMap<String, CollectionSpec> = manifest
        .as_ref()
        .map(|m| m.collections.clone())
        .unwrap_or_default();
    specs
        .entry(at.collection.clone())
        .or_insert_with(CollectionSpec::in_home);
    let store =
        Store::open(&global.db_url(manifest.as_ref().and_then(|m| m.host.db.as_deref()))).await?;
    let opened = Files::open(&specs, &global.home, store.clone());
    let result = match opened {
        Ok(files) => match cmd {
            FilesCommand::Put {
                at,
                name,
                file,
                json,
            } => put(&store, &files, &at, &name, &file, json).await,
            FilesCommand::Get { at, name, out } => get(&files, &at, &name, out.as_deref()).await,
            FilesCommand::Ls { at, prefix, json } => ls(&files, &at, &prefix, json).await,
        },
        Err(e) => Err(Failure::usage(e)),
    };
    store.close().await;
    result
}

/// A files error for people: the object and collection named, in the error's fixed words.
fn refused(at: &Where, name: &str, e: FilesError) -> Failure {
    Failure::usage(format!(
        "{}/{}: {e}",
        for_terminal(&at.collection),
        for_terminal(name)
    ))
}

async fn put(
    store: &Store,
    files: &Files,
    at: &Where,
    name: &str,
    path: &Path,
    json: bool,
) -> Result<u8, Failure> {
    crate::sandbox::files::validate_name(name).map_err(|e| refused(at, name, e))?;
    let mut source = std::fs::File::open(path)
        .map_err(|e| Failure::usage(format!("cannot read {}: {e}", path.display())))?;
    // A lease of its own per put: two puts never wait for each other, and the fence
    // checks this one's write as it checks an attempt's.
    let holder = format!("host-files-{}", uuid::Uuid::now_v7().simple());
    let lease = store
        .acquire_lease(&LeaseRequest {
            job: PUT_JOB,
            instance: &holder,
            holder: &holder,
            deadline_ms: PUT_HOLD_MS,
            expires_ms: PUT_HOLD_MS,
        })
        .await?
        .ok_or_else(|| Failure::usage("a fresh lease was refused: try again"))?;
    let fence = Fence {
        job: lease.job.clone(),
        instance: lease.instance.clone(),
        generation: lease.generation,
        holder: lease.holder.clone(),
    };
    let who = Uploader {
        tenant: at.tenant.clone(),
        run_id: PUT_JOB.into(),
        attach_by: lease.deadline_at,
    };
    let written = async {
        let mut upload = files
            .start_upload(&who, &at.collection)
            .await
            .map_err(|e| refused(at, name, e))?;
        let mut chunk = vec![0; MAX_CHUNK];
        loop {
            let n = source
                .read(&mut chunk)
                .map_err(|e| Failure::usage(format!("cannot read {}: {e}", path.display())))?;
            if n == 0 {
                break;
            }
            upload
                .write(Bytes::copy_from_slice(&chunk[..n]))
                .await
                .map_err(|e| refused(at, name, e))?;
        }
        let finished = upload.finish().await.map_err(|e| refused(at, name, e))?;
        files
            .attach(&fence, PUT_JOB, &finished, name)
            .await
            .map_err(|e| refused(at, name, e))
    }
    .await;
    store.drop_lease(PUT_JOB, &holder, &holder).await?;
    let record = written?.ok_or_else(|| {
        Failure::usage(format!(
            "{}/{}: the put outlived its lease ({} minutes): nothing was attached",
            for_terminal(&at.collection),
            for_terminal(name),
            PUT_HOLD_MS / 60_000
        ))
    })?;
    if json {
        println!("{}", serde_json::json!(record));
    } else {
        println!(
            "put {}/{} for tenant {}: {}, sha256 {}{}",
            for_terminal(&record.collection),
            for_terminal(&record.name),
            for_terminal(&record.tenant),
            readable_size(u64::try_from(record.size).unwrap_or_default()),
            record.digest,
            if record.status == "pending" {
                " (waiting for the collection's scan)"
            } else {
                ""
            }
        );
    }
    Ok(0)
}

async fn get(files: &Files, at: &Where, name: &str, out: Option<&Path>) -> Result<u8, Failure> {
    let file = files
        .stat(&at.tenant, &at.collection, name)
        .await
        .map_err(|e| refused(at, name, e))?
        .ok_or_else(|| refused(at, name, FilesError::NotFound))?;
    let mut sink: Box<dyn Write> = match out {
        Some(path) => Box::new(
            std::fs::File::create(path)
                .map_err(|e| Failure::usage(format!("cannot write {}: {e}", path.display())))?,
        ),
        None => Box::new(std::io::stdout().lock()),
    };
    // Every chunk from the version stat named: a replace meanwhile is noticed, never mixed in.
    let size = u64::try_from(file.size).unwrap_or_default();
    let mut offset = 0;
    while offset < size {
        let bytes = files
            .read_version(
                &at.tenant,
                &at.collection,
                name,
                &file.object_key,
                offset,
                MAX_CHUNK as u64,
            )
            .await
            .map_err(|e| refused(at, name, e))?
            .ok_or_else(|| {
                Failure::usage(format!(
                    "{}/{}: replaced while it was read: get it again",
                    for_terminal(&at.collection),
                    for_terminal(name)
                ))
            })?;
        if bytes.is_empty() {
            break;
        }
        sink.write_all(&bytes)
            .map_err(|e| Failure::usage(format!("cannot write the object: {e}")))?;
        offset += bytes.len() as u64;
    }
    sink.flush()
        .map_err(|e| Failure::usage(format!("cannot write the object: {e}")))?;
    Ok(0)
}

async fn ls(files: &Files, at: &Where, prefix: &str, json: bool) -> Result<u8, Failure> {
    const PAGE: u32 = 1000;
    let mut all: Vec<FileRecord> = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let (page, next) = files
            .list(&at.tenant, &at.collection, prefix, after.as_deref(), PAGE)
            .await
            .map_err(|e| refused(at, prefix, e))?;
        all.extend(page);
        match next {
            Some(next) => after = Some(next),
            None => break,
        }
    }
    if json {
        println!("{}", serde_json::json!(all));
        return Ok(0);
    }
    for file in &all {
        println!(
            "{:>10}  {}  {}",
            readable_size(u64::try_from(file.size).unwrap_or_default()),
            &file.digest[..file.digest.len().min(12)],
            for_terminal(&file.name)
        );
    }
    if all.is_empty() {
        eprintln!(
            "no objects of tenant {} in {}",
            for_terminal(&at.tenant),
            for_terminal(&at.collection)
        );
    }
    Ok(0)
}
