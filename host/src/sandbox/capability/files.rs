//! `jobhost:job/files`: the guest's calls on collections, through [`Files`]. This only
//! translates: it checks the call against the job's grant, passes the run's tenant and
//! lease along, and turns failures into fixed `host-error` reasons.

use crate::rules::grants::FilesGrant;
use crate::sandbox::capability::context::AttemptContext;
use crate::sandbox::capability::handles::{TxHandle, UploadHandle};
use crate::sandbox::capability::shared::Attempt;
use crate::sandbox::capability::tx::AfterCommit;
use crate::sandbox::capability::view::View;
use crate::sandbox::engine::bindings::jobhost::job::files::{
    Host, HostUpload, ObjectMetadata, ObjectPage, ObjectVersion, PendingFile, ReadError, Verdict,
};
use crate::sandbox::engine::bindings::jobhost::job::types::HostError;
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
}

impl FilesCapability {
    pub fn new(session: Option<FilesSession>) -> Self {
        FilesCapability {
            session,
            open_uploads: 0,
            uploads_started: 0,
        }
    }
}

/// How a capability may be used on a collection.
#[derive(Clone, Copy)]
enum Use {
    Read,
    Write,
    Scan,
}

/// The session, if the job may use `collection` this way; else the refusal, noted in
/// `attempt`. Borrowed beside the capability's counts and the attempt, not cloned.
fn granted<'s>(
    session: &'s Option<FilesSession>,
    attempt: &mut Attempt,
    collection: &str,
    using: Use,
) -> Result<&'s FilesSession, HostError> {
    let allowed = session.as_ref().filter(|s| match using {
        Use::Read => s.grant.may_read(collection),
        Use::Write => s.grant.may_write(collection),
        Use::Scan => s.grant.may_scan(collection),
    });
    allowed.ok_or_else(|| {
        let using = match using {
            Use::Read => "read",
            Use::Write => "write",
            Use::Scan => "scan",
        };
        let grant = session.as_ref().map(|s| &*s.grant);
        attempt
            .signals
            .refuse(refusal::collection(collection, using, grant));
        HostError::CapabilityRefused("not-granted".into())
    })
}

/// A failure of `Files` as the guest sees it, noted in `attempt`.
fn files_error(attempt: &mut Attempt, error: FilesError) -> HostError {
    match error {
        FilesError::UnknownCollection => {
            attempt.signals.refuse(refusal::undeclared_collection());
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
            attempt.signals.refuse(refusal::path_refused());
            HostError::CapabilityRefused("path-refused".into())
        }
        FilesError::Open { .. } | FilesError::Objects(_) | FilesError::Store(_) => {
            tracing::warn!(code = "driver_failed", error = %error, "a files call failed");
            attempt.signals.unavailable = true;
            HostError::Unavailable
        }
    }
}

fn lease_lost(attempt: &mut Attempt) -> HostError {
    attempt.signals.lease_lost = true;
    HostError::LeaseLost
}

fn metadata(file: &FileRecord) -> ObjectMetadata {
    ObjectMetadata {
        name: file.name.clone(),
        size: file.size.max(0) as u64,
        digest: file.digest.clone(),
        created_at: file.created_at.max(0) as u64,
    }
}

impl Host for View<'_, FilesCapability> {
    async fn stat(
        &mut self,
        collection: String,
        name: String,
    ) -> Result<Option<ObjectMetadata>, HostError> {
        crate::journaled!(self.attempt, "files.stat", (&collection, &name), async {
            let s = granted(&self.own.session, self.attempt, &collection, Use::Read)?;
            match s.files.stat(&s.uploader.tenant, &collection, &name).await {
                Ok(file) => Ok(file.as_ref().map(metadata)),
                Err(e) => Err(files_error(self.attempt, e)),
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
                let s = granted(&self.own.session, self.attempt, &collection, Use::Read)?;
                let read = s
                    .files
                    .read(&s.uploader.tenant, &collection, &name, offset, len)
                    .await;
                read.map_err(|e| files_error(self.attempt, e))
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
                let s = granted(&self.own.session, self.attempt, &collection, Use::Read)?;
                match s.files.stat(&s.uploader.tenant, &collection, &name).await {
                    Ok(file) => Ok(file.map(|f| ObjectVersion {
                        metadata: metadata(&f),
                        version: f.object_key,
                    })),
                    Err(e) => Err(files_error(self.attempt, e)),
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
            let s = granted(&self.own.session, self.attempt, &collection, Use::Read)
                .map_err(ReadError::Host)?;
            let read = s
                .files
                .read_version(
                    &s.uploader.tenant,
                    &collection,
                    &name,
                    &version,
                    offset,
                    len,
                )
                .await;
            match read {
                Ok(Some(bytes)) => Ok(bytes),
                Ok(None) => Err(ReadError::Changed),
                Err(e) => Err(ReadError::Host(files_error(self.attempt, e))),
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
            let s = granted(&self.own.session, self.attempt, &collection, Use::Read)?;
            let listed = s
                .files
                .list(
                    &s.uploader.tenant,
                    &collection,
                    &prefix,
                    cursor.as_deref(),
                    limit,
                )
                .await;
            match listed {
                Ok((page, next)) => Ok(ObjectPage {
                    objects: page.iter().map(metadata).collect(),
                    next,
                }),
                Err(e) => Err(files_error(self.attempt, e)),
            }
        })
    }

    async fn start_upload(
        &mut self,
        collection: String,
    ) -> Result<Resource<UploadHandle>, HostError> {
        let started: Result<Option<Upload>, HostError> = crate::journaled!(self.attempt, "files.start-upload", (&collection,), resource async {
            let s = granted(&self.own.session, self.attempt, &collection, Use::Write)?;
            self.attempt.own_write_allowed().await?;
            if self.own.open_uploads >= MAX_OPEN_UPLOADS
                || self.own.uploads_started >= MAX_UPLOADS_PER_ATTEMPT
            {
                return Err(HostError::Invalid("too-many-uploads".into()));
            }
            self.own.uploads_started += 1;
            match s.files.start_upload(&s.uploader, &collection).await {
                Ok(upload) => Ok(upload),
                Err(e) => Err(files_error(self.attempt, e)),
            }
        });
        let handle = self
            .attempt
            .table
            .push(UploadHandle(started?))
            .map_err(|_| HostError::Invalid("too-many-resources".into()))?;
        self.own.open_uploads += 1;
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
            let finished = finish_upload(self.attempt, taken).await?;
            let s = granted(
                &self.own.session,
                self.attempt,
                &finished.collection,
                Use::Write,
            )?;
            match s
                .files
                .attach(&s.fence, &s.uploader.run_id, &finished, &name)
                .await
            {
                Ok(Some(file)) => {
                    if let Some(scan) = s.files.spec(&file.collection).and_then(|c| c.scan.as_ref())
                    {
                        s.files.kick_scan(scan).await;
                    }
                    Ok(metadata(&file))
                }
                Ok(None) => Err(lease_lost(self.attempt)),
                Err(e) => Err(files_error(self.attempt, e)),
            }
        })
    }

    async fn attach_in(
        &mut self,
        tx: Resource<TxHandle>,
        upload: Resource<UploadHandle>,
        name: String,
    ) -> Result<ObjectMetadata, HostError> {
        let taken = self.take_upload(upload);
        crate::journaled!(self.attempt, "files.attach-in", (&name,), async {
            let finished = finish_upload(self.attempt, taken).await?;
            let s = granted(
                &self.own.session,
                self.attempt,
                &finished.collection,
                Use::Write,
            )?;
            let write = s
                .files
                .attach_write(&s.uploader.run_id, &finished, &name)
                .map_err(|e| files_error(self.attempt, e))?;
            let written = in_transaction(self.attempt, &tx, &write).await?;
            if written == FileWritten::OverQuota {
                s.files.discard(&finished).await;
                return Err(files_error(self.attempt, FilesError::QuotaExceeded));
            }
            if let Some(scan) = s
                .files
                .spec(&finished.collection)
                .and_then(|c| c.scan.clone())
            {
                let files = s.files.clone();
                self.attempt
                    .after_commit(AfterCommit::KickScan { files, job: scan });
            }
            Ok(metadata(&s.files.attached(&write, &written)))
        })
    }

    async fn remove(&mut self, collection: String, name: String) -> Result<bool, HostError> {
        crate::journaled!(self.attempt, "files.remove", (&collection, &name), async {
            let s = granted(&self.own.session, self.attempt, &collection, Use::Write)?;
            self.attempt.own_write_allowed().await?;
            match s
                .files
                .remove(&s.fence, &s.uploader.tenant, &collection, &name)
                .await
            {
                Ok(Some(removed)) => Ok(removed),
                Ok(None) => Err(lease_lost(self.attempt)),
                Err(e) => Err(files_error(self.attempt, e)),
            }
        })
    }

    async fn remove_in(
        &mut self,
        tx: Resource<TxHandle>,
        collection: String,
        name: String,
    ) -> Result<bool, HostError> {
        crate::journaled!(
            self.attempt,
            "files.remove-in",
            (&collection, &name),
            async {
                let s = granted(&self.own.session, self.attempt, &collection, Use::Write)?;
                let write = s
                    .files
                    .remove_write(&s.uploader.tenant, &collection, &name)
                    .map_err(|e| files_error(self.attempt, e))?;
                Ok(in_transaction(self.attempt, &tx, &write).await? == FileWritten::Changed(true))
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
                let s = granted(&self.own.session, self.attempt, &collection, Use::Scan)?;
                match s.files.pending(&collection, limit).await {
                    Ok(pending) => Ok(pending
                        .into_iter()
                        .map(|p| PendingFile {
                            id: p.object_key,
                            tenant: p.tenant,
                            name: p.name,
                            size: p.size.max(0) as u64,
                        })
                        .collect()),
                    Err(e) => Err(files_error(self.attempt, e)),
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
                let s = granted(&self.own.session, self.attempt, &collection, Use::Scan)?;
                let read = s.files.read_pending(&collection, &id, offset, len).await;
                read.map_err(|e| files_error(self.attempt, e))
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
                let s = granted(&self.own.session, self.attempt, &collection, Use::Scan)?;
                self.attempt.own_write_allowed().await?;
                let clean = verdict == Verdict::Clean;
                match s.files.mark(&s.fence, &collection, &id, clean).await {
                    Ok(Some(true)) => Ok(()),
                    Ok(Some(false)) => Err(HostError::Invalid("not-found".into())),
                    Ok(None) => Err(lease_lost(self.attempt)),
                    Err(e) => Err(files_error(self.attempt, e)),
                }
            }
        )
    }
}

impl View<'_, FilesCapability> {
    /// Takes an upload out of the guest's table, which counts it open no more.
    fn take_upload(&mut self, upload: Resource<UploadHandle>) -> Option<UploadHandle> {
        let taken = self.attempt.table.delete(upload).ok()?;
        self.own.open_uploads = self.own.open_uploads.saturating_sub(1);
        Some(taken)
    }
}

/// Completes an upload taken out of the guest's table (its object stays invisible).
async fn finish_upload(
    attempt: &mut Attempt,
    taken: Option<UploadHandle>,
) -> Result<crate::sandbox::files::Finished, HostError> {
    let upload = taken
        .and_then(|UploadHandle(upload)| upload)
        .ok_or_else(|| HostError::Invalid("unknown-upload".into()))?;
    upload.finish().await.map_err(|e| files_error(attempt, e))
}

/// Applies a row change inside the guest's open transaction.
async fn in_transaction(
    attempt: &mut Attempt,
    tx: &Resource<TxHandle>,
    write: &crate::store::FileWrite,
) -> Result<FileWritten, HostError> {
    let written = attempt
        .guest_tx(tx)?
        .apply(TxEffect::File(write))
        .await
        .and_then(Applied::file);
    written.map_err(|e| match e {
        GuestDbError::LeaseLost => lease_lost(attempt),
        GuestDbError::Unavailable => {
            attempt.signals.unavailable = true;
            HostError::Unavailable
        }
        GuestDbError::Refused(r) => HostError::QueryRefused(r.reason().into()),
        GuestDbError::Invalid(reason) => HostError::Invalid(reason.into()),
    })
}

impl HostUpload for View<'_, FilesCapability> {
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
            written.map_err(|e| files_error(self.attempt, e))
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
    use crate::sandbox::capability::fixture::{self, Leased};
    use crate::sandbox::files::CollectionSpec;
    use std::collections::BTreeMap;

    /// The `files` capability of an attempt of job `j` holding its lease, granted `write`
    /// on `docs` — and no wasm at all.
    async fn state(dir: &std::path::Path) -> (FilesCapability, Leased) {
        let leased = Leased::open(dir).await;
        let mut collections = BTreeMap::new();
        collections.insert("docs".to_string(), CollectionSpec::in_home());
        collections.insert("other".to_string(), CollectionSpec::in_home());
        let files = Arc::new(Files::open(&collections, dir, leased.store.clone()).unwrap());
        let mut grant = FilesGrant::default();
        grant.write.insert("docs".into());
        let session = FilesSession {
            files,
            grant: Arc::new(grant),
            uploader: Uploader {
                tenant: "acme".into(),
                run_id: "run-1".into(),
                attach_by: leased.lease.deadline_at,
            },
            fence: leased.lease.fence(),
        };
        (FilesCapability::new(Some(session)), leased)
    }

    /// The first two bytes of `version` of `docs/a.txt`.
    async fn pinned(
        guest: &mut View<'_, FilesCapability>,
        version: &str,
    ) -> Result<Vec<u8>, ReadError> {
        Host::read_version(guest, "docs".into(), "a.txt".into(), version.into(), 0, 2).await
    }

    #[tokio::test]
    async fn uploads_become_visible_only_when_attached_and_only_if_granted() {
        let dir = tempfile::tempdir().unwrap();
        let (mut files, leased) = state(dir.path()).await;
        let mut shared = fixture::attempt();
        let mut guest = View::new(&mut files, &mut shared);
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
        leased.lose_lease().await;
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
