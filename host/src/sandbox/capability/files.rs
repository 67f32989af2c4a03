//! `jobhost:job/files`: the guest's calls on collections, through [`Files`]. This only
//! translates: it checks the call against the job's grant, passes the run's tenant and
//! lease along, and turns failures into fixed `host-error` reasons.

use crate::rules::grants::FilesGrant;
use crate::sandbox::capability::context::AttemptContext;
use crate::sandbox::capability::handles::UploadHandle;
use crate::sandbox::engine::bindings::jobhost::job::files::{
    Host, HostUpload, ObjectMetadata, ObjectPage, ObjectVersion, PendingFile, ReadError, Verdict,
};
use crate::sandbox::engine::bindings::jobhost::job::types::HostError;
use crate::sandbox::engine::state::GuestState;
use crate::sandbox::files::{
    Files, FilesError, MAX_OPEN_UPLOADS, MAX_UPLOADS_PER_ATTEMPT, Upload, Uploader,
};
use crate::sandbox::refusal;
use crate::store::guest::{Applied, Fence, GuestDbError, TxEffect};
use crate::store::{FileRecord, FileWritten};
use std::sync::Arc;
use wasmtime::component::Resource;

/// What one attempt may do with files.
pub struct FilesSession {
    pub files: Arc<Files>,
    pub grant: Arc<FilesGrant>,
    pub uploader: Uploader,
    pub fence: Fence,
}

impl FilesSession {
    /// The collections of `cx`'s attempt, if its job was granted `files`.
    pub fn for_attempt(cx: &AttemptContext) -> Option<FilesSession> {
        let grant = cx.spec.grants.files.clone()?;
        Some(FilesSession {
            files: cx.host.files.clone(),
            grant: Arc::new(grant),
            uploader: Uploader {
                tenant: cx.run.tenant.clone(),
                run_id: cx.run.id.clone(),
                attach_by: cx.lease.deadline_at,
            },
            fence: cx.fence(),
        })
    }
}

/// The `files` capability's per-attempt state: `None` when the job was not granted files.
pub struct FilesCapability {
    session: Option<FilesSession>,
    open_uploads: usize,
    uploads_started: usize,
    /// Scan jobs to kick once the guest's transaction that attached files commits: each
    /// once, however many files it attached.
    scans_after_commit: std::collections::BTreeSet<String>,
}

impl FilesCapability {
    pub fn new(session: Option<FilesSession>) -> Self {
        FilesCapability {
            session,
            open_uploads: 0,
            uploads_started: 0,
            scans_after_commit: Default::default(),
        }
    }

    /// Kicks the scan jobs of files the committed transaction attached.
    pub(crate) async fn committed(&mut self) {
        let jobs = std::mem::take(&mut self.scans_after_commit);
        if let Some(session) = &self.session {
            for job in jobs {
                session.files.kick_scan(&job).await;
            }
        }
    }

    pub(crate) fn rolled_back(&mut self) {
        self.scans_after_commit.clear();
    }
}

/// How a capability may be used on a collection.
#[derive(Clone, Copy)]
enum Use {
    Read,
    Write,
    Scan,
}

impl GuestState {
    /// The session, if the job may use `collection` this way.
    fn files_for(&mut self, collection: &str, using: Use) -> Result<&FilesSession, HostError> {
        let allowed = self.files.session.as_ref().is_some_and(|s| match using {
            Use::Read => s.grant.may_read(collection),
            Use::Write => s.grant.may_write(collection),
            Use::Scan => s.grant.may_scan(collection),
        });
        if !allowed {
            let using = match using {
                Use::Read => "read",
                Use::Write => "write",
                Use::Scan => "scan",
            };
            let grant = self.files.session.as_ref().map(|s| s.grant.clone());
            self.attempt
                .signals
                .refuse(refusal::collection(collection, using, grant.as_deref()));
            return Err(HostError::CapabilityRefused("not-granted".into()));
        }
        Ok(self.files.session.as_ref().expect("checked above"))
    }

    fn files_error(&mut self, error: FilesError) -> HostError {
        match error {
            FilesError::UnknownCollection => {
                self.attempt
                    .signals
                    .refuse(refusal::undeclared_collection());
                HostError::CapabilityRefused("not-granted".into())
            }
            FilesError::InvalidName => HostError::Invalid("invalid-name".into()),
            FilesError::ObjectTooLarge => HostError::Invalid("object-too-large".into()),
            FilesError::QuotaExceeded => HostError::Invalid("quota-exceeded".into()),
            FilesError::ChunkTooLarge => HostError::Invalid("chunk-too-large".into()),
            FilesError::PageTooLarge => HostError::Invalid("page-too-large".into()),
            FilesError::NotFound => HostError::Invalid("not-found".into()),
            // The operator was told where; the guest learns only that the host refused.
            FilesError::PathRefused => {
                self.attempt.signals.refuse(refusal::path_refused());
                HostError::CapabilityRefused("path-refused".into())
            }
            FilesError::Open { .. } | FilesError::Objects(_) | FilesError::Store(_) => {
                tracing::warn!(code = "driver_failed", error = %error, "a files call failed");
                self.attempt.signals.unavailable = true;
                HostError::Unavailable
            }
        }
    }

    fn lease_lost(&mut self) -> HostError {
        self.attempt.signals.lease_lost = true;
        HostError::LeaseLost
    }
}

fn metadata(file: &FileRecord) -> ObjectMetadata {
    ObjectMetadata {
        name: file.name.clone(),
        size: file.size.max(0) as u64,
        digest: file.digest.clone(),
        created_at: file.created_at.max(0) as u64,
    }
}

impl Host for GuestState {
    async fn stat(
        &mut self,
        collection: String,
        name: String,
    ) -> Result<Option<ObjectMetadata>, HostError> {
        crate::journaled!(self.attempt, "files.stat", (&collection, &name), async {
            let s = self.files_for(&collection, Use::Read)?;
            let (files, tenant) = (s.files.clone(), s.uploader.tenant.clone());
            match files.stat(&tenant, &collection, &name).await {
                Ok(file) => Ok(file.as_ref().map(metadata)),
                Err(e) => Err(self.files_error(e)),
            }
        })
    }

    async fn read(
        &mut self,
        collection: String,
        name: String,
        offset: u64,
        len: u64,
    ) -> Result<Vec<u8>, HostError> {
        crate::journaled!(
            self.attempt,
            "files.read",
            (&collection, &name, offset, len),
            async {
                let s = self.files_for(&collection, Use::Read)?;
                let (files, tenant) = (s.files.clone(), s.uploader.tenant.clone());
                let read = files.read(&tenant, &collection, &name, offset, len).await;
                read.map_err(|e| self.files_error(e))
            }
        )
    }

    async fn stat_version(
        &mut self,
        collection: String,
        name: String,
    ) -> Result<Option<ObjectVersion>, HostError> {
        crate::journaled!(
            self.attempt,
            "files.stat-version",
            (&collection, &name),
            async {
                let s = self.files_for(&collection, Use::Read)?;
                let (files, tenant) = (s.files.clone(), s.uploader.tenant.clone());
                match files.stat(&tenant, &collection, &name).await {
                    Ok(file) => Ok(file.map(|f| ObjectVersion {
                        metadata: metadata(&f),
                        version: f.object_key,
                    })),
                    Err(e) => Err(self.files_error(e)),
                }
            }
        )
    }

    async fn read_version(
        &mut self,
        collection: String,
        name: String,
        version: String,
        offset: u64,
        len: u64,
    ) -> Result<Vec<u8>, ReadError> {
        let args = (&collection, &name, &version, offset, len);
        crate::journaled!(self.attempt, "files.read-version", args, async {
            let s = self
                .files_for(&collection, Use::Read)
                .map_err(ReadError::Host)?;
            let (files, tenant) = (s.files.clone(), s.uploader.tenant.clone());
            let read = files
                .read_version(&tenant, &collection, &name, &version, offset, len)
                .await;
            match read {
                Ok(Some(bytes)) => Ok(bytes),
                Ok(None) => Err(ReadError::Changed),
                Err(e) => Err(ReadError::Host(self.files_error(e))),
            }
        })
    }

    async fn list_objects(
        &mut self,
        collection: String,
        prefix: String,
        cursor: Option<String>,
        limit: u32,
    ) -> Result<ObjectPage, HostError> {
        let args = (&collection, &prefix, &cursor, limit);
        crate::journaled!(self.attempt, "files.list-objects", args, async {
            let s = self.files_for(&collection, Use::Read)?;
            let (files, tenant) = (s.files.clone(), s.uploader.tenant.clone());
            match files
                .list(&tenant, &collection, &prefix, cursor.as_deref(), limit)
                .await
            {
                Ok((page, next)) => Ok(ObjectPage {
                    objects: page.iter().map(metadata).collect(),
                    next,
                }),
                Err(e) => Err(self.files_error(e)),
            }
        })
    }

    async fn start_upload(
        &mut self,
        collection: String,
    ) -> Result<Resource<UploadHandle>, HostError> {
        let started: Result<Option<Upload>, HostError> = crate::journaled!(self.attempt, "files.start-upload", (&collection,), resource async {
            let s = self.files_for(&collection, Use::Write)?;
            let (files, uploader) = (s.files.clone(), s.uploader.clone());
            self.attempt.own_write_allowed().await?;
            if self.files.open_uploads >= MAX_OPEN_UPLOADS
                || self.files.uploads_started >= MAX_UPLOADS_PER_ATTEMPT
            {
                return Err(HostError::Invalid("too-many-uploads".into()));
            }
            self.files.uploads_started += 1;
            match files.start_upload(&uploader, &collection).await {
                Ok(upload) => Ok(upload),
                Err(e) => Err(self.files_error(e)),
            }
        });
        let handle = self
            .attempt
            .table
            .push(UploadHandle(started?))
            .map_err(|_| HostError::Invalid("too-many-resources".into()))?;
        self.files.open_uploads += 1;
        Ok(handle)
    }

    async fn attach(
        &mut self,
        upload: Resource<UploadHandle>,
        name: String,
    ) -> Result<ObjectMetadata, HostError> {
        // The guest gives the upload up with the call, whatever the call answers.
        let taken = self.take_upload(upload);
        crate::journaled!(self.attempt, "files.attach", (&name,), async {
            // Refused, the upload is discarded, unattached.
            self.attempt.own_write_allowed().await?;
            let finished = self.finish_upload(taken).await?;
            let s = self.files_for(&finished.collection, Use::Write)?;
            let (files, fence, run_id) =
                (s.files.clone(), s.fence.clone(), s.uploader.run_id.clone());
            match files.attach(&fence, &run_id, &finished, &name).await {
                Ok(Some(file)) => {
                    if let Some(scan) = files.spec(&file.collection).and_then(|c| c.scan.clone()) {
                        files.kick_scan(&scan).await;
                    }
                    Ok(metadata(&file))
                }
                Ok(None) => Err(self.lease_lost()),
                Err(e) => Err(self.files_error(e)),
            }
        })
    }

    async fn attach_in(
        &mut self,
        tx: Resource<crate::sandbox::capability::handles::TxHandle>,
        upload: Resource<UploadHandle>,
        name: String,
    ) -> Result<ObjectMetadata, HostError> {
        let taken = self.take_upload(upload);
        crate::journaled!(self.attempt, "files.attach-in", (&name,), async {
            let finished = self.finish_upload(taken).await?;
            let s = self.files_for(&finished.collection, Use::Write)?;
            let (files, run_id) = (s.files.clone(), s.uploader.run_id.clone());
            let write = files
                .attach_write(&run_id, &finished, &name)
                .map_err(|e| self.files_error(e))?;
            let written = self.in_transaction(&tx, &write).await?;
            if written == FileWritten::OverQuota {
                files.discard(&finished).await;
                return Err(self.files_error(FilesError::QuotaExceeded));
            }
            if let Some(scan) = files
                .spec(&finished.collection)
                .and_then(|c| c.scan.clone())
            {
                self.files.scans_after_commit.insert(scan);
            }
            Ok(metadata(&files.attached(&write, &written)))
        })
    }

    async fn remove(&mut self, collection: String, name: String) -> Result<bool, HostError> {
        crate::journaled!(self.attempt, "files.remove", (&collection, &name), async {
            let s = self.files_for(&collection, Use::Write)?;
            let (files, fence, tenant) =
                (s.files.clone(), s.fence.clone(), s.uploader.tenant.clone());
            self.attempt.own_write_allowed().await?;
            match files.remove(&fence, &tenant, &collection, &name).await {
                Ok(Some(removed)) => Ok(removed),
                Ok(None) => Err(self.lease_lost()),
                Err(e) => Err(self.files_error(e)),
            }
        })
    }

    async fn remove_in(
        &mut self,
        tx: Resource<crate::sandbox::capability::handles::TxHandle>,
        collection: String,
        name: String,
    ) -> Result<bool, HostError> {
        crate::journaled!(
            self.attempt,
            "files.remove-in",
            (&collection, &name),
            async {
                let s = self.files_for(&collection, Use::Write)?;
                let (files, tenant) = (s.files.clone(), s.uploader.tenant.clone());
                let write = files
                    .remove_write(&tenant, &collection, &name)
                    .map_err(|e| self.files_error(e))?;
                Ok(self.in_transaction(&tx, &write).await? == FileWritten::Changed(true))
            }
        )
    }

    async fn scan_pending(
        &mut self,
        collection: String,
        limit: u32,
    ) -> Result<Vec<PendingFile>, HostError> {
        crate::journaled!(
            self.attempt,
            "files.scan-pending",
            (&collection, limit),
            async {
                let files = self.files_for(&collection, Use::Scan)?.files.clone();
                match files.pending(&collection, limit).await {
                    Ok(pending) => Ok(pending
                        .into_iter()
                        .map(|p| PendingFile {
                            id: p.object_key,
                            tenant: p.tenant,
                            name: p.name,
                            size: p.size.max(0) as u64,
                        })
                        .collect()),
                    Err(e) => Err(self.files_error(e)),
                }
            }
        )
    }

    async fn scan_read(
        &mut self,
        collection: String,
        id: String,
        offset: u64,
        len: u64,
    ) -> Result<Vec<u8>, HostError> {
        crate::journaled!(
            self.attempt,
            "files.scan-read",
            (&collection, &id, offset, len),
            async {
                let files = self.files_for(&collection, Use::Scan)?.files.clone();
                let read = files.read_pending(&collection, &id, offset, len).await;
                read.map_err(|e| self.files_error(e))
            }
        )
    }

    async fn scan_mark(
        &mut self,
        collection: String,
        id: String,
        verdict: Verdict,
    ) -> Result<(), HostError> {
        crate::journaled!(
            self.attempt,
            "files.scan-mark",
            (&collection, &id, &verdict),
            async {
                let s = self.files_for(&collection, Use::Scan)?;
                let (files, fence) = (s.files.clone(), s.fence.clone());
                self.attempt.own_write_allowed().await?;
                match files
                    .mark(&fence, &collection, &id, verdict == Verdict::Clean)
                    .await
                {
                    Ok(Some(true)) => Ok(()),
                    Ok(Some(false)) => Err(HostError::Invalid("not-found".into())),
                    Ok(None) => Err(self.lease_lost()),
                    Err(e) => Err(self.files_error(e)),
                }
            }
        )
    }
}

impl GuestState {
    /// Takes an upload out of the guest's table, which counts it open no more.
    fn take_upload(&mut self, upload: Resource<UploadHandle>) -> Option<UploadHandle> {
        let taken = self.attempt.table.delete(upload).ok()?;
        self.files.open_uploads = self.files.open_uploads.saturating_sub(1);
        Some(taken)
    }

    /// Completes an upload taken out of the guest's table (its object stays invisible).
    async fn finish_upload(
        &mut self,
        taken: Option<UploadHandle>,
    ) -> Result<crate::sandbox::files::Finished, HostError> {
        let upload = taken
            .and_then(|UploadHandle(upload)| upload)
            .ok_or_else(|| HostError::Invalid("unknown-upload".into()))?;
        upload.finish().await.map_err(|e| self.files_error(e))
    }

    /// Applies a row change inside the guest's open transaction.
    async fn in_transaction(
        &mut self,
        tx: &Resource<crate::sandbox::capability::handles::TxHandle>,
        write: &crate::store::FileWrite,
    ) -> Result<FileWritten, HostError> {
        let tx = self
            .attempt
            .table
            .get_mut(tx)
            .ok()
            .and_then(|tx| tx.guest_tx())
            .ok_or_else(|| HostError::Invalid("unknown-transaction".into()))?;
        let written = tx
            .apply(TxEffect::File(write))
            .await
            .and_then(Applied::file);
        written.map_err(|e| match e {
            GuestDbError::LeaseLost => self.lease_lost(),
            GuestDbError::Unavailable => {
                self.attempt.signals.unavailable = true;
                HostError::Unavailable
            }
            GuestDbError::Refused(r) => HostError::QueryRefused(r.reason().into()),
            GuestDbError::Invalid(reason) => HostError::Invalid(reason.into()),
        })
    }
}

impl HostUpload for GuestState {
    async fn write(
        &mut self,
        upload: Resource<UploadHandle>,
        chunk: Vec<u8>,
    ) -> Result<(), HostError> {
        crate::journaled!(self.attempt, "files.upload.write", (&chunk,), async {
            let handle = self
                .attempt
                .table
                .get_mut(&upload)
                .ok()
                .and_then(|handle| handle.0.as_mut())
                .ok_or_else(|| HostError::Invalid("unknown-upload".into()))?;
            let written = handle.write(chunk.into()).await;
            written.map_err(|e| self.files_error(e))
        })
    }

    async fn drop(&mut self, upload: Resource<UploadHandle>) -> wasmtime::Result<()> {
        self.take_upload(upload);
        Ok(())
    }
}

impl crate::sandbox::journal::CodeOf for Result<Vec<u8>, ReadError> {
    fn code_of(&self) -> std::borrow::Cow<'static, str> {
        match self {
            Ok(_) => "ok".into(),
            Err(ReadError::Changed) => "changed".into(),
            Err(ReadError::Host(error)) => crate::sandbox::engine::bindings::error_code(error),
        }
    }
}

impl crate::sandbox::journal::Placeholder for Result<Vec<u8>, ReadError> {
    fn placeholder() -> Self {
        Err(ReadError::Host(HostError::Unavailable))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::failure::FailureCode;
    use crate::sandbox::engine::output::AttemptLog;
    use crate::sandbox::engine::state::Capabilities;
    use crate::sandbox::files::CollectionSpec;
    use crate::store::{LeaseRequest, Store};
    use std::collections::BTreeMap;

    /// A guest's state with the `files` capability, as an attempt of job `j` holding its
    /// lease, granted `write` on `docs` — and no wasm at all.
    async fn state(dir: &std::path::Path) -> (GuestState, Store) {
        let store = Store::open(&format!("sqlite://{}/t.db", dir.display()))
            .await
            .unwrap();
        let lease = store
            .acquire_lease(&LeaseRequest {
                job: "j",
                instance: "i",
                holder: "run-1",
                deadline_ms: 60_000,
                expires_ms: 60_000,
            })
            .await
            .unwrap()
            .unwrap();
        let mut collections = BTreeMap::new();
        collections.insert("docs".to_string(), CollectionSpec::in_home());
        collections.insert("other".to_string(), CollectionSpec::in_home());
        let files = Arc::new(Files::open(&collections, dir, store.clone()).unwrap());
        let mut grant = FilesGrant::default();
        grant.write.insert("docs".into());
        let session = FilesSession {
            files,
            grant: Arc::new(grant),
            uploader: Uploader {
                tenant: "acme".into(),
                run_id: "run-1".into(),
                attach_by: lease.deadline_at,
            },
            fence: Fence {
                job: lease.job,
                instance: lease.instance,
                generation: lease.generation,
                holder: lease.holder,
            },
        };
        let capabilities = Capabilities {
            files: FilesCapability::new(Some(session)),
            ..Capabilities::none()
        };
        (
            GuestState::new(64 << 20, AttemptLog::new(1024), capabilities),
            store,
        )
    }

    /// The first two bytes of `version` of `docs/a.txt`.
    async fn pinned(guest: &mut GuestState, version: &str) -> Result<Vec<u8>, ReadError> {
        Host::read_version(guest, "docs".into(), "a.txt".into(), version.into(), 0, 2).await
    }

    #[tokio::test]
    async fn uploads_become_visible_only_when_attached_and_only_if_granted() {
        let dir = tempfile::tempdir().unwrap();
        let (mut guest, store) = state(dir.path()).await;
        let upload = Host::start_upload(&mut guest, "docs".into()).await.unwrap();
        let same = Resource::<UploadHandle>::new_borrow(upload.rep());
        HostUpload::write(&mut guest, same, b"hello".to_vec())
            .await
            .unwrap();
        assert!(
            Host::stat(&mut guest, "docs".into(), "a.txt".into())
                .await
                .unwrap()
                .is_none()
        );
        let meta = Host::attach(&mut guest, upload, "a.txt".into())
            .await
            .unwrap();
        assert_eq!(meta.size, 5);
        let read = Host::read(&mut guest, "docs".into(), "a.txt".into(), 1, 3).await;
        assert_eq!(read.unwrap(), b"ell");
        // A read pinned to a version: answered while the name points at it, `changed`
        // once the name is replaced (and the replacement is another version).
        let first = Host::stat_version(&mut guest, "docs".into(), "a.txt".into())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(first.metadata.digest, meta.digest);
        assert_eq!(pinned(&mut guest, &first.version).await.unwrap(), b"he");
        let upload = Host::start_upload(&mut guest, "docs".into()).await.unwrap();
        let same = Resource::<UploadHandle>::new_borrow(upload.rep());
        HostUpload::write(&mut guest, same, b"world".to_vec())
            .await
            .unwrap();
        Host::attach(&mut guest, upload, "a.txt".into())
            .await
            .unwrap();
        assert!(matches!(
            pinned(&mut guest, &first.version).await,
            Err(ReadError::Changed)
        ));
        let second = Host::stat_version(&mut guest, "docs".into(), "a.txt".into())
            .await
            .unwrap()
            .unwrap();
        assert_ne!(second.version, first.version);
        assert_eq!(pinned(&mut guest, &second.version).await.unwrap(), b"wo");
        // A version the guest made up reads nothing: another tenant's key, a path out of
        // the collection, NUL, escapes and a huge text are each only `changed`.
        let other_tenant = second.version.replacen("acme/", "other/", 1);
        for forged in [
            other_tenant.as_str(),
            "../../etc/passwd",
            "acme/\0",
            "\u{1b}[2J",
            "",
            &"a".repeat(1 << 20),
        ] {
            assert!(
                matches!(pinned(&mut guest, forged).await, Err(ReadError::Changed)),
                "{:?}",
                &forged[..forged.len().min(32)]
            );
        }
        assert!(matches!(
            Host::read_version(
                &mut guest,
                "other".into(),
                "a.txt".into(),
                second.version,
                0,
                2
            )
            .await,
            Err(ReadError::Host(HostError::CapabilityRefused(_)))
        ));
        // Refusals: a collection not granted, a bad name, too large a chunk.
        assert!(matches!(
            Host::stat(&mut guest, "other".into(), "a.txt".into()).await,
            Err(HostError::CapabilityRefused(r)) if r == "not-granted"
        ));
        assert_eq!(
            guest.attempt.signals.refused_code(),
            Some(FailureCode::CapabilityRefused)
        );
        assert!(matches!(
            Host::stat(&mut guest, "docs".into(), "../a".into()).await,
            Err(HostError::Invalid(r)) if r == "invalid-name"
        ));
        assert!(matches!(
            Host::read(&mut guest, "docs".into(), "a.txt".into(), 0, 2 << 20).await,
            Err(HostError::Invalid(r)) if r == "chunk-too-large"
        ));
        for limit in [0, 1001] {
            assert!(matches!(
                Host::list_objects(&mut guest, "docs".into(), String::new(), None, limit).await,
                Err(HostError::Invalid(r)) if r == "page-too-large"
            ));
        }
        // A removal says whether there was such an object.
        let upload = Host::start_upload(&mut guest, "docs".into()).await.unwrap();
        Host::attach(&mut guest, upload, "gone.txt".into())
            .await
            .unwrap();
        assert!(
            Host::remove(&mut guest, "docs".into(), "gone.txt".into())
                .await
                .unwrap()
        );
        assert!(
            !Host::remove(&mut guest, "docs".into(), "gone.txt".into())
                .await
                .unwrap()
        );
        // Once the lease moved on, neither an attach nor a removal commits anything.
        let upload = Host::start_upload(&mut guest, "docs".into()).await.unwrap();
        if let crate::store::Pool::Sqlite(p) = store.pool() {
            sqlx::query("UPDATE jobhost_leases SET generation = generation + 1")
                .execute(p)
                .await
                .unwrap();
        }
        assert!(matches!(
            Host::attach(&mut guest, upload, "b.txt".into()).await,
            Err(HostError::LeaseLost)
        ));
        assert!(guest.attempt.signals.lease_lost);
        assert!(
            Host::stat(&mut guest, "docs".into(), "b.txt".into())
                .await
                .unwrap()
                .is_none()
        );
        assert!(matches!(
            Host::remove(&mut guest, "docs".into(), "a.txt".into()).await,
            Err(HostError::LeaseLost)
        ));
        assert!(
            Host::stat(&mut guest, "docs".into(), "a.txt".into())
                .await
                .unwrap()
                .is_some()
        );
    }
}
