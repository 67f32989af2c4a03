//! Named objects in collections: where the bytes live (a local directory, confined to it
//! by `local`, or an S3-compatible store through `object_store`) and how a name comes to
//! point at them.
//!
//! An upload is written under a fresh, never-reused key (`<tenant>/<uuid>`) after its key
//! is recorded in `jobhost_uploads`; it becomes visible only when a row of `jobhost_files`
//! points its name at that key, written in a transaction fenced by the attempt's lease
//! (the same transaction deletes the upload's record). Readers resolve a name through the
//! committed row, and objects are never changed once written; a read in several calls
//! pins the key it started with (its version), so it gets the old object or the new one,
//! never part of one. Keys a name stops pointing at go to `jobhost_file_garbage`, and
//! count against their tenant's quota until the collector (`collector`) deletes them; it
//! also deletes the objects of uploads never attached once no attach can commit any more.

pub mod collector;
mod local;

use crate::store::guest::Fence;
use crate::store::{FileRecord, FileWrite, FileWritten, PendingFile, Store, StoreError};
use bytes::Bytes;
use local::{LocalDir, LocalError, LocalWrite};
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload, PutPayloadMut, WriteMultipart};
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};
use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// Most bytes one `write` or `read` moves.
pub const MAX_CHUNK: usize = 1 << 20;
/// Most objects one `list-objects` page returns.
pub const MAX_PAGE: u32 = 1000;
/// Most uploads one attempt may have open at once.
pub const MAX_OPEN_UPLOADS: usize = 2;
/// Most uploads one attempt may start in all: each leaves a row (and, unattached, an
/// object) for the collector, which a loop of start-and-drop would otherwise make at the
/// database's speed for the whole attempt.
pub const MAX_UPLOADS_PER_ATTEMPT: usize = 1000;
/// Most bytes of an object name.
pub const MAX_NAME_BYTES: usize = 512;
/// The size of the parts an upload is sent in (S3's smallest part): what one open upload
/// may hold in memory, once per part in flight.
const PART: usize = 5 << 20;
/// The default largest object of a collection.
pub const DEFAULT_MAX_OBJECT: u64 = 256 << 20;
/// The default quota of each tenant in a collection: bytes and objects attached (pending,
/// clean or rejected alike, until removed).
pub const DEFAULT_MAX_TENANT_BYTES: u64 = 10 << 30;
pub const DEFAULT_MAX_TENANT_OBJECTS: u64 = 100_000;

/// Where a collection keeps its objects, and what it allows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CollectionSpec {
    /// A local directory (`path`), or an object store URL (`s3://bucket/prefix`, endpoint
    /// and credentials from the environment).
    pub location: Location,
    pub max_object_bytes: u64,
    /// Each tenant's quota here: the bytes and the number of objects its names point at.
    pub max_tenant_bytes: u64,
    pub max_tenant_objects: u64,
    /// The job that scans files attached here; until it marks them clean, they are not
    /// visible.
    pub scan: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Location {
    /// `<home>/files/<collection>`.
    Home,
    Local(PathBuf),
    Url(String),
}

impl CollectionSpec {
    /// A collection under the host's home: what `host run` uses for a collection it was
    /// granted without a manifest declaring it.
    pub fn in_home() -> Self {
        CollectionSpec {
            location: Location::Home,
            max_object_bytes: DEFAULT_MAX_OBJECT,
            max_tenant_bytes: DEFAULT_MAX_TENANT_BYTES,
            max_tenant_objects: DEFAULT_MAX_TENANT_OBJECTS,
            scan: None,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum FilesError {
    #[error("cannot open collection {name}: {reason}")]
    Open { name: String, reason: String },
    #[error("unknown collection")]
    UnknownCollection,
    #[error("invalid object name")]
    InvalidName,
    #[error("the object is larger than its collection allows")]
    ObjectTooLarge,
    #[error("the tenant's files would pass its quota in the collection")]
    QuotaExceeded,
    #[error("the chunk is larger than 1 MiB")]
    ChunkTooLarge,
    #[error("a page of objects is 1 to 1000 long")]
    PageTooLarge,
    #[error("no such object")]
    NotFound,
    /// A symbolic link (or another thing that is not a plain directory or file) under a
    /// local collection, where the object's path goes: refused, never followed.
    #[error("a path under the collection is refused")]
    PathRefused,
    #[error("the object store failed: {0}")]
    Objects(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl From<object_store::Error> for FilesError {
    fn from(e: object_store::Error) -> Self {
        // The kind only: a store's message can quote an endpoint or a key.
        let kind = match e {
            object_store::Error::NotFound { .. } => return FilesError::NotFound,
            object_store::Error::Generic { store, .. } => format!("{store} failed"),
            object_store::Error::PermissionDenied { .. }
            | object_store::Error::Unauthenticated { .. } => "access refused".into(),
            _ => "request failed".into(),
        };
        FilesError::Objects(kind)
    }
}

struct Collection {
    spec: CollectionSpec,
    objects: Objects,
}

/// Where a collection's bytes are.
enum Objects {
    Local(Arc<LocalDir>),
    Remote(Arc<dyn ObjectStore>),
}

/// The `job` of a report about a collection's storage: the host's own, so no tenant's
/// listing of reports shows it.
const REPORTER: &str = "jobhost:files";

/// Every collection a host knows, and the rows that name their objects.
pub struct Files {
    collections: BTreeMap<String, Collection>,
    store: Store,
    /// The refused paths (collection, path) this host has reported: each is reported
    /// once, not once per call that meets it.
    reported: Arc<Mutex<HashSet<(String, String)>>>,
}

/// How long a call that met a refused path waits for its report to be recorded. It is
/// normally at once; on SQLite a guest's own open write transaction holds the lock the
/// report needs, and then the report is recorded when that transaction ends, after the
/// call answered.
const REPORT_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// Who uploads: the tenant the object belongs to, the run that makes it, and until when
/// (database clock) its attempt could still attach it.
#[derive(Debug, Clone)]
pub struct Uploader {
    pub tenant: String,
    pub run_id: String,
    pub attach_by: i64,
}

/// An object being written. While it fits in one part it is only held here and sent
/// with one put when finished (one request to the store, not three); past that it
/// becomes a multipart upload. Its digest is computed beside the writes, off the async
/// threads.
pub struct Upload {
    collection: String,
    tenant: String,
    key: String,
    sink: Sink,
    digest: Digest,
    size: u64,
    max: u64,
    /// The tenant's quota in the collection: no object of it can be larger.
    quota: u64,
}

/// Where an upload's bytes go.
enum Sink {
    /// Written straight to the object's part file (`None` only while a write runs on a
    /// blocking thread).
    Local(Option<LocalWrite>),
    Remote {
        objects: Arc<dyn ObjectStore>,
        /// The whole object so far, until it outgrows one part.
        held: PutPayloadMut,
        multipart: Option<WriteMultipart>,
    },
}

/// A SHA-256 that runs beside the upload: each large chunk is hashed on a blocking
/// thread while the next one is produced and sent.
enum Digest {
    Ready(Sha256),
    Running(tokio::task::JoinHandle<Sha256>),
}

/// Chunks smaller than this are hashed in place: handing them to another thread costs
/// more than hashing them.
const HASH_INLINE: usize = 64 << 10;

impl Digest {
    async fn state(&mut self) -> Result<Sha256, FilesError> {
        match std::mem::replace(self, Digest::Ready(Sha256::new())) {
            Digest::Ready(hasher) => Ok(hasher),
            Digest::Running(task) => task
                .await
                .map_err(|_| FilesError::Objects("hashing failed".into())),
        }
    }

    async fn update(&mut self, chunk: Bytes) -> Result<(), FilesError> {
        let mut hasher = self.state().await?;
        *self = if chunk.len() < HASH_INLINE {
            hasher.update(&chunk);
            Digest::Ready(hasher)
        } else {
            Digest::Running(tokio::task::spawn_blocking(move || {
                hasher.update(&chunk);
                hasher
            }))
        };
        Ok(())
    }

    async fn finish(&mut self) -> Result<String, FilesError> {
        Ok(hex::encode(self.state().await?.finalize()))
    }
}

/// A finished upload, ready to be attached.
#[derive(Debug, Clone)]
pub struct Finished {
    pub collection: String,
    pub tenant: String,
    pub key: String,
    pub size: u64,
    pub digest: String,
}

impl Files {
    /// Opens every declared collection (creating local directories; `home` holds the
    /// default ones).
    pub fn open(
        specs: &BTreeMap<String, CollectionSpec>,
        home: &Path,
        store: Store,
    ) -> Result<Files, FilesError> {
        let mut collections = BTreeMap::new();
        for (name, spec) in specs {
            let open_err = |reason: String| FilesError::Open {
                name: name.clone(),
                reason,
            };
            // The operator's own path is taken as given; from there on, nothing is
            // followed (under the home: neither `files` nor the collection's directory).
            let objects = match &spec.location {
                Location::Home => Objects::Local(Arc::new(
                    LocalDir::open(home, &["files", name]).map_err(open_err)?,
                )),
                Location::Local(dir) => {
                    Objects::Local(Arc::new(LocalDir::open(dir, &[]).map_err(open_err)?))
                }
                Location::Url(url) => Objects::Remote(open_url(url).map_err(open_err)?),
            };
            collections.insert(
                name.clone(),
                Collection {
                    spec: spec.clone(),
                    objects,
                },
            );
        }
        Ok(Files {
            collections,
            store,
            reported: Arc::default(),
        })
    }

    pub fn spec(&self, collection: &str) -> Option<&CollectionSpec> {
        self.collections.get(collection).map(|c| &c.spec)
    }

    fn collection(&self, name: &str) -> Result<&Collection, FilesError> {
        self.collections
            .get(name)
            .ok_or(FilesError::UnknownCollection)
    }

    /// The visible object `name` of `tenant`, if any.
    pub async fn stat(
        &self,
        tenant: &str,
        collection: &str,
        name: &str,
    ) -> Result<Option<FileRecord>, FilesError> {
        self.collection(collection)?;
        validate_name(name)?;
        Ok(self
            .store
            .get_file(tenant, collection, name)
            .await?
            .filter(|f| f.status == "clean"))
    }

    /// Up to `len` bytes (at most [`MAX_CHUNK`]) of a visible object from `offset`.
    pub async fn read(
        &self,
        tenant: &str,
        collection: &str,
        name: &str,
        offset: u64,
        len: u64,
    ) -> Result<Vec<u8>, FilesError> {
        let file = self
            .stat(tenant, collection, name)
            .await?
            .ok_or(FilesError::NotFound)?;
        self.read_key(collection, &file.object_key, file.size, offset, len)
            .await
    }

    /// Up to `len` bytes of `version` (an object key) of the visible object `name`, from
    /// `offset`; `None` once `name` points elsewhere. The bytes come from the version's
    /// key, which is never written again, so every chunk of one version is one object's;
    /// the name is checked first, so a reader learns of a replacement at its next call.
    /// A version the collector deleted meanwhile was replaced too.
    pub async fn read_version(
        &self,
        tenant: &str,
        collection: &str,
        name: &str,
        version: &str,
        offset: u64,
        len: u64,
    ) -> Result<Option<Vec<u8>>, FilesError> {
        let Some(file) = self
            .stat(tenant, collection, name)
            .await?
            .filter(|f| f.object_key == version)
        else {
            return Ok(None);
        };
        match self
            .read_key(collection, &file.object_key, file.size, offset, len)
            .await
        {
            Ok(bytes) => Ok(Some(bytes)),
            Err(FilesError::NotFound) => Ok(None),
            Err(e) => Err(e),
        }
    }

    async fn read_key(
        &self,
        collection: &str,
        key: &str,
        size: i64,
        offset: u64,
        len: u64,
    ) -> Result<Vec<u8>, FilesError> {
        if len > MAX_CHUNK as u64 {
            return Err(FilesError::ChunkTooLarge);
        }
        let size = size.max(0) as u64;
        let start = offset.min(size);
        let end = offset.saturating_add(len).min(size);
        if start == end {
            return Ok(Vec::new());
        }
        match &self.collection(collection)?.objects {
            Objects::Local(dir) => {
                let (dir, key_owned) = (Arc::clone(dir), key.to_string());
                let read = blocking(move || dir.read(&key_owned, start, end)).await?;
                self.local(collection, read).await
            }
            Objects::Remote(objects) => Ok(objects
                .get_range(&ObjectPath::from(key), start..end)
                .await?
                .to_vec()),
        }
    }

    /// A local storage call's result: a refused path is reported to the operator (once)
    /// and answered with a fixed code, never with the path.
    async fn local<T>(
        &self,
        collection: &str,
        result: Result<T, LocalError>,
    ) -> Result<T, FilesError> {
        match result {
            Ok(value) => Ok(value),
            Err(LocalError::NotFound) => Err(FilesError::NotFound),
            Err(e @ LocalError::Io(_)) => Err(local_failed(e)),
            Err(LocalError::Refused(path)) => {
                self.report_refused(collection, &path).await;
                Err(FilesError::PathRefused)
            }
        }
    }

    /// Reports a refused path once per collection and path: this host remembers what it
    /// reported, and the outbox keeps one report of each for every host (until retention
    /// prunes it). The path is under the collection's root, made of a tenant's name and a
    /// key the host made: nothing a guest wrote.
    async fn report_refused(&self, collection: &str, path: &str) {
        let first = self
            .reported
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .insert((collection.to_string(), path.to_string()));
        if !first {
            return;
        }
        let code = crate::rules::failure::FailureCode::PathRefused;
        tracing::error!(
            collection,
            path,
            code = code.as_str(),
            "a path under a local collection is a link or not a plain file: refused"
        );
        let report = crate::store::NewReport::about_storage(
            crate::store::ReportKind::PathRefused,
            REPORTER,
            code,
            serde_json::json!({ "collection": collection, "path": path }),
        );
        let (store, reported) = (self.store.clone(), Arc::clone(&self.reported));
        let key = (collection.to_string(), path.to_string());
        let recording = tokio::spawn(async move {
            if let Err(e) = store.insert_report_once(&report).await {
                tracing::warn!(collection = %key.0, code = "driver_failed", error = %e, "could not record a report");
                // Not remembered, so the next call that meets it reports it.
                reported
                    .lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner())
                    .remove(&key);
            }
        });
        // Past the wait the report is still recorded, by the task.
        let _ = tokio::time::timeout(REPORT_WAIT, recording).await;
    }

    /// Visible objects of `tenant` whose name starts with `prefix`, after `after`.
    pub async fn list(
        &self,
        tenant: &str,
        collection: &str,
        prefix: &str,
        after: Option<&str>,
        limit: u32,
    ) -> Result<(Vec<FileRecord>, Option<String>), FilesError> {
        self.collection(collection)?;
        // A prefix and a cursor are parts of names, bounded and checked like them before
        // they reach the database (which refuses a NUL as its own failure).
        if [Some(prefix), after]
            .into_iter()
            .flatten()
            .any(|part| !part.is_empty() && !crate::rules::name_rule::is_name(part, MAX_NAME_BYTES))
        {
            return Err(FilesError::InvalidName);
        }
        if !(1..=MAX_PAGE).contains(&limit) {
            return Err(FilesError::PageTooLarge);
        }
        let files = self
            .store
            .list_files(tenant, collection, prefix, after, i64::from(limit) + 1)
            .await?;
        let more = files.len() > limit as usize;
        let page: Vec<FileRecord> = files.into_iter().take(limit as usize).collect();
        let next = more.then(|| page.last().map(|f| f.name.clone())).flatten();
        Ok((page, next))
    }

    /// Starts an upload: its key is recorded before anything is written, so the collector
    /// finds it even if the host dies mid-write.
    pub async fn start_upload(
        &self,
        who: &Uploader,
        collection: &str,
    ) -> Result<Upload, FilesError> {
        let c = self.collection(collection)?;
        let key = format!("{}/{}", who.tenant, uuid::Uuid::now_v7().simple());
        self.store
            .insert_upload(&key, &who.tenant, collection, &who.run_id, who.attach_by)
            .await?;
        let sink = match &c.objects {
            Objects::Local(dir) => {
                let (dir, key) = (Arc::clone(dir), key.clone());
                let created = blocking(move || dir.create(&key)).await?;
                Sink::Local(Some(self.local(collection, created).await?))
            }
            Objects::Remote(objects) => Sink::Remote {
                objects: Arc::clone(objects),
                held: PutPayloadMut::new(),
                multipart: None,
            },
        };
        Ok(Upload {
            collection: collection.to_string(),
            tenant: who.tenant.clone(),
            key,
            sink,
            digest: Digest::Ready(Sha256::new()),
            size: 0,
            max: c.spec.max_object_bytes,
            quota: c.spec.max_tenant_bytes,
        })
    }

    /// Attaches a finished upload as `name` in a fenced transaction of its own. `None`:
    /// the lease was lost, and it never became visible.
    pub async fn attach(
        &self,
        fence: &Fence,
        run_id: &str,
        finished: &Finished,
        name: &str,
    ) -> Result<Option<FileRecord>, FilesError> {
        let write = self.attach_write(run_id, finished, name)?;
        match self.store.file_write_fenced(fence, &write).await? {
            Some(FileWritten::OverQuota) => {
                self.discard(finished).await;
                Err(FilesError::QuotaExceeded)
            }
            written => Ok(written.map(|w| self.attached(&write, &w))),
        }
    }

    /// Writes `bytes` as `name` and attaches it under `fence`, as an attempt would: how
    /// `host test` places a case's objects before its run. `None` if the lease was lost.
    pub async fn place(
        &self,
        fence: &Fence,
        who: &Uploader,
        collection: &str,
        name: &str,
        bytes: &[u8],
    ) -> Result<Option<FileRecord>, FilesError> {
        validate_name(name)?;
        let mut upload = self.start_upload(who, collection).await?;
        for chunk in bytes.chunks(MAX_CHUNK) {
            upload.write(Bytes::copy_from_slice(chunk)).await?;
        }
        let finished = upload.finish().await?;
        self.attach(fence, &who.run_id, &finished, name).await
    }

    /// The row change that attaches a finished upload as `name`, to commit in a
    /// transaction of the caller's (fenced like every guest write).
    pub fn attach_write(
        &self,
        run_id: &str,
        finished: &Finished,
        name: &str,
    ) -> Result<FileWrite, FilesError> {
        validate_name(name)?;
        let c = self.collection(&finished.collection)?;
        Ok(FileWrite::Attach {
            tenant: finished.tenant.clone(),
            collection: finished.collection.clone(),
            name: name.to_string(),
            object_key: finished.key.clone(),
            size: finished.size as i64,
            digest: finished.digest.clone(),
            status: if c.spec.scan.is_some() {
                "pending"
            } else {
                "clean"
            },
            run_id: run_id.to_string(),
            max_objects: i64::try_from(c.spec.max_tenant_objects).unwrap_or(i64::MAX),
            max_bytes: i64::try_from(c.spec.max_tenant_bytes).unwrap_or(i64::MAX),
        })
    }

    /// What an attach made visible (or will, once scanned).
    pub fn attached(&self, write: &FileWrite, written: &FileWritten) -> FileRecord {
        let FileWrite::Attach {
            tenant,
            collection,
            name,
            object_key,
            size,
            digest,
            status,
            run_id,
            ..
        } = write
        else {
            unreachable!("an attach")
        };
        FileRecord {
            tenant: tenant.clone(),
            collection: collection.clone(),
            name: name.clone(),
            object_key: object_key.clone(),
            size: *size,
            digest: digest.clone(),
            status: status.to_string(),
            run_id: run_id.clone(),
            created_at: match written {
                FileWritten::Attached { created_at } => *created_at,
                _ => 0,
            },
        }
    }

    /// The row change that removes `name`.
    pub fn remove_write(
        &self,
        tenant: &str,
        collection: &str,
        name: &str,
    ) -> Result<FileWrite, FilesError> {
        self.collection(collection)?;
        validate_name(name)?;
        Ok(FileWrite::Remove {
            tenant: tenant.to_string(),
            collection: collection.to_string(),
            name: name.to_string(),
        })
    }

    /// Removes `name` in a fenced transaction of its own: `None` if the lease was lost,
    /// else whether there was such an object.
    pub async fn remove(
        &self,
        fence: &Fence,
        tenant: &str,
        collection: &str,
        name: &str,
    ) -> Result<Option<bool>, FilesError> {
        let write = self.remove_write(tenant, collection, name)?;
        Ok(self
            .store
            .file_write_fenced(fence, &write)
            .await?
            .map(|w| w == FileWritten::Changed(true)))
    }

    /// Files of every tenant waiting for `collection`'s scan.
    pub async fn pending(
        &self,
        collection: &str,
        limit: u32,
    ) -> Result<Vec<PendingFile>, FilesError> {
        self.collection(collection)?;
        if !(1..=MAX_PAGE).contains(&limit) {
            return Err(FilesError::PageTooLarge);
        }
        Ok(self
            .store
            .pending_files(collection, i64::from(limit))
            .await?)
    }

    /// Reads a waiting file by its id (its object key).
    pub async fn read_pending(
        &self,
        collection: &str,
        id: &str,
        offset: u64,
        len: u64,
    ) -> Result<Vec<u8>, FilesError> {
        validate_id(id)?;
        let file = self
            .store
            .get_file_by_key(collection, id)
            .await?
            .filter(|f| f.status == "pending")
            .ok_or(FilesError::NotFound)?;
        self.read_key(collection, &file.object_key, file.size, offset, len)
            .await
    }

    /// Gives a waiting file its verdict in a fenced transaction: `None` if the lease was
    /// lost, else whether the file was waiting.
    pub async fn mark(
        &self,
        fence: &Fence,
        collection: &str,
        id: &str,
        clean: bool,
    ) -> Result<Option<bool>, FilesError> {
        self.collection(collection)?;
        validate_id(id)?;
        let write = FileWrite::Mark {
            collection: collection.to_string(),
            object_key: id.to_string(),
            status: if clean { "clean" } else { "rejected" },
        };
        Ok(self
            .store
            .file_write_fenced(fence, &write)
            .await?
            .map(|w| w == FileWritten::Changed(true)))
    }

    /// Kicks a collection's scan job: files wait for it. A failed kick is only logged —
    /// the scan job's own schedule finds the files too.
    pub async fn kick_scan(&self, job: &str) {
        if let Err(e) =
            crate::queue::kick::kick(&self.store, job, crate::queue::kick::DEFAULT_INSTANCE, None)
                .await
        {
            tracing::warn!(job, code = "driver_failed", error = %e, "could not kick the scan job");
        }
    }

    /// Deletes the object of an upload whose attach the quota refused: the guest gave
    /// the upload up with the call, so nothing can attach it, and its bytes are not left
    /// on the storage past the quota until the collector comes. Its record stays for the
    /// collector, which finds nothing left to delete (and on SQLite a guest's open
    /// transaction may hold the write lock). A failed delete is left to the collector too.
    pub async fn discard(&self, finished: &Finished) {
        if let Err(e) = self
            .delete_object(&finished.collection, &finished.key)
            .await
        {
            tracing::warn!(code = "driver_failed", error = %e, "could not delete a refused upload");
        }
    }

    /// Deletes an object (the collector's, once no row can point at it).
    pub(crate) async fn delete_object(
        &self,
        collection: &str,
        key: &str,
    ) -> Result<(), FilesError> {
        match &self.collection(collection)?.objects {
            Objects::Local(dir) => {
                let (dir, key) = (Arc::clone(dir), key.to_string());
                let deleted = blocking(move || dir.delete(&key)).await?;
                self.local(collection, deleted).await
            }
            Objects::Remote(objects) => match objects.delete(&ObjectPath::from(key)).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
                Err(e) => Err(e.into()),
            },
        }
    }
}

impl Upload {
    pub fn collection(&self) -> &str {
        &self.collection
    }

    /// Appends a chunk: bounded, and refused past the collection's largest object.
    pub async fn write(&mut self, chunk: Bytes) -> Result<(), FilesError> {
        if chunk.len() > MAX_CHUNK {
            return Err(FilesError::ChunkTooLarge);
        }
        let size = self.size + chunk.len() as u64;
        if size > self.max {
            return Err(FilesError::ObjectTooLarge);
        }
        if size > self.quota {
            return Err(FilesError::QuotaExceeded);
        }
        match &mut self.sink {
            Sink::Local(write) => {
                let mut file = write
                    .take()
                    .ok_or_else(|| FilesError::Objects("an earlier write did not finish".into()))?;
                let bytes = chunk.clone();
                let (file, written) = blocking(move || {
                    let written = file.write(&bytes);
                    (file, written)
                })
                .await?;
                *write = Some(file);
                written.map_err(local_failed)?;
            }
            Sink::Remote {
                objects,
                held,
                multipart,
            } => {
                if multipart.is_none() && held.content_length() + chunk.len() > PART {
                    let path = ObjectPath::from(self.key.as_str());
                    let upload = objects.put_multipart(&path).await?;
                    let mut writer = WriteMultipart::new_with_chunk_size(upload, PART);
                    for part in PutPayload::from(std::mem::take(held)).iter() {
                        writer.put(part.clone());
                    }
                    *multipart = Some(writer);
                }
                match multipart {
                    Some(writer) => {
                        // At most one part in flight besides the one filling: an open
                        // upload holds at most two parts of memory.
                        writer.wait_for_capacity(1).await?;
                        writer.put(chunk.clone());
                    }
                    None => held.push(chunk.clone()),
                }
            }
        }
        self.size += chunk.len() as u64;
        self.digest.update(chunk).await?;
        Ok(())
    }

    /// Completes the object under its key (still invisible).
    pub async fn finish(mut self) -> Result<Finished, FilesError> {
        match &mut self.sink {
            Sink::Local(write) => {
                let file = write
                    .take()
                    .ok_or_else(|| FilesError::Objects("an earlier write did not finish".into()))?;
                blocking(move || file.finish())
                    .await?
                    .map_err(local_failed)?;
            }
            Sink::Remote {
                objects,
                held,
                multipart,
            } => match multipart.take() {
                Some(writer) => {
                    writer.finish().await?;
                }
                None => {
                    let held = PutPayload::from(std::mem::take(held));
                    objects
                        .put(&ObjectPath::from(self.key.as_str()), held)
                        .await?;
                }
            },
        }
        Ok(Finished {
            collection: std::mem::take(&mut self.collection),
            tenant: std::mem::take(&mut self.tenant),
            key: std::mem::take(&mut self.key),
            size: self.size,
            digest: self.digest.finish().await?,
        })
    }
}

impl Drop for Upload {
    /// Dropped unattached: the parts written so far are discarded (the collector deletes
    /// whatever the store still keeps under the key). Nothing was sent while the object
    /// fitted in one part; a local part file is deleted as its writer drops.
    fn drop(&mut self) {
        if let Sink::Remote { multipart, .. } = &mut self.sink
            && let Some(writer) = multipart.take()
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            runtime.spawn(async move {
                let _ = writer.abort().await;
            });
        }
    }
}

/// A local write's failure (only the filesystem's: a write never resolves a path).
fn local_failed(e: LocalError) -> FilesError {
    FilesError::Objects(match e {
        LocalError::Io(kind) => format!("local storage: {kind}"),
        _ => "local storage refused the write".into(),
    })
}

/// Runs a call on the local filesystem on a blocking thread.
async fn blocking<T: Send + 'static>(
    call: impl FnOnce() -> T + Send + 'static,
) -> Result<T, FilesError> {
    tokio::task::spawn_blocking(call)
        .await
        .map_err(|_| FilesError::Objects("a local storage call was cancelled".into()))
}

/// Opens an object store URL: `s3://bucket[/prefix]`, with the endpoint, region and
/// credentials from the environment (`AWS_ENDPOINT`, `AWS_ACCESS_KEY_ID`, ...).
fn open_url(url: &str) -> Result<Arc<dyn ObjectStore>, String> {
    let parsed = url::Url::parse(url).map_err(|_| format!("{url:?} is not a URL"))?;
    if parsed.scheme() != "s3" {
        return Err(format!(
            "unsupported scheme {:?}: use a local path or s3://bucket/prefix",
            parsed.scheme()
        ));
    }
    let bucket = parsed
        .host_str()
        .filter(|b| !b.is_empty())
        .ok_or_else(|| "the URL names no bucket".to_string())?;
    let s3 = object_store::aws::AmazonS3Builder::from_env()
        .with_bucket_name(bucket)
        .build()
        .map_err(|_| "invalid S3 settings (check the AWS_* environment)".to_string())?;
    let prefix = parsed.path().trim_matches('/');
    Ok(if prefix.is_empty() {
        Arc::new(s3)
    } else {
        Arc::new(object_store::prefix::PrefixStore::new(s3, prefix))
    })
}

/// An object name: a name by [`crate::rules::name_rule`] of at most 512 bytes (so no control,
/// formatting or invisible character), no absolute path, no `.` or `..` segment, no empty
/// segment, no backslash. Names are keys of rows, never paths; they are held to this
/// anyway, so no tool downstream is surprised, and shown as written.
pub fn validate_name(name: &str) -> Result<(), FilesError> {
    let valid = crate::rules::name_rule::is_name(name, MAX_NAME_BYTES)
        && !name.starts_with('/')
        && !name.contains('\\')
        && name
            .split('/')
            .all(|s| !s.is_empty() && s != "." && s != "..");
    if valid {
        Ok(())
    } else {
        Err(FilesError::InvalidName)
    }
}

/// A waiting file's id is an object key the host made (`<tenant>/<uuid>`): one that is
/// not shaped like a name names no file, and never reaches the database.
fn validate_id(id: &str) -> Result<(), FilesError> {
    validate_name(id).map_err(|_| FilesError::NotFound)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked() {
        for ok in [
            "report.csv",
            "2026/11/report.csv",
            "a b",
            "é",
            &"x".repeat(512),
        ] {
            assert!(validate_name(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "/etc/passwd",
            "../x",
            "a/../b",
            "a/./b",
            "a//b",
            "a/",
            "a\0b",
            "a\nb",
            "a\\b",
            "\u{1b}[2J",
            "invoice\u{202e}fdp.exe",
            "a\u{200b}b",
            "a\u{61c}b",
            "a\u{2060}b",
            "soft\u{ad}hyphen",
            "line\u{2028}sep",
            "private\u{e000}",
            &"x".repeat(513),
        ] {
            assert!(validate_name(bad).is_err(), "{bad:?}");
        }
    }
}
