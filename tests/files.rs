//! `files` end to end: the real binary, the `filer`, `scanner` and `report` guests, on
//! SQLite and Postgres, with collections in a local directory and on a real
//! S3-compatible server (SeaweedFS, started by `scripts/test`).

use crate::common;

use common::{Backend, Home, migrations};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::time::{Duration, Instant};

/// The run's error after a link or special file refused a `files` call: the host's
/// reason (never the path), then the guest's words.
const PATH_REFUSED: &str = "path_refused: path-refused: a symbolic link or special file stands in an \
    object's path under a local collection (see the path_refused report); the guest's error: \
    capability refused: path-refused";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Storage {
    Local,
    S3,
}

impl Storage {
    /// A `[collections.NAME]` section, on this storage, with `extra` settings.
    fn collection(self, name: &str, extra: &str) -> String {
        match self {
            Storage::Local => format!("[collections.{name}]\n{extra}\n"),
            Storage::S3 => format!(
                "[collections.{name}]\nurl = \"s3://{}/{}/{name}\"\n{extra}\n",
                common::S3_BUCKET,
                uuid::Uuid::now_v7().simple()
            ),
        }
    }
}

/// How many objects of tenant `acme` in `collection` the storage itself holds (a local
/// directory read, or an S3 listing), whatever the database says.
async fn stored_objects(home: &Home, manifest: &str, storage: Storage, collection: &str) -> usize {
    match storage {
        Storage::Local => std::fs::read_dir(home.path().join(format!("files/{collection}/acme")))
            .map(|d| d.count())
            .unwrap_or(0),
        Storage::S3 => {
            use futures_util::TryStreamExt;
            use object_store::ObjectStore;
            let text = std::fs::read_to_string(manifest).unwrap();
            let suffix = format!("/{collection}\"");
            let prefix = text
                .lines()
                .filter_map(|l| {
                    l.trim()
                        .strip_prefix(&format!("url = \"s3://{}/", common::S3_BUCKET))
                })
                .find(|rest| rest.ends_with(&suffix))
                .map(|rest| rest.trim_end_matches('"').to_string())
                .expect("the collection's S3 URL");
            let mut s3 =
                object_store::aws::AmazonS3Builder::new().with_bucket_name(common::S3_BUCKET);
            // The host reads these from its environment; the same keys, read as
            // object_store reads them.
            for (key, value) in common::s3_environment() {
                s3 = s3.with_config(key.to_ascii_lowercase().parse().unwrap(), value);
            }
            let s3 = s3.build().unwrap();
            let listed: Vec<_> = s3
                .list(Some(&object_store::path::Path::from(format!(
                    "{prefix}/acme"
                ))))
                .try_collect()
                .await
                .unwrap();
            listed.len()
        }
    }
}

/// Waits until the collector of a serving host deleted every replaced or removed object.
async fn garbage_collected(home: &Home) {
    let started = Instant::now();
    while home
        .scalar("SELECT COUNT(*) FROM jobhost_file_garbage")
        .await
        > 0
    {
        assert!(
            started.elapsed() < Duration::from_secs(40),
            "garbage was never collected"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

macro_rules! on_every_backend_and_storage {
    ($(async fn $name:ident($home:ident, $storage:ident) $body:block)*) => {
        on_every_backend_and_storage!(@ sqlite_local, Backend::Sqlite, Storage::Local; $(async fn $name($home, $storage) $body)*);
        on_every_backend_and_storage!(@ sqlite_s3, Backend::Sqlite, Storage::S3; $(async fn $name($home, $storage) $body)*);
        on_every_backend_and_storage!(@ postgres_local, Backend::Postgres, Storage::Local; $(async fn $name($home, $storage) $body)*);
        on_every_backend_and_storage!(@ postgres_s3, Backend::Postgres, Storage::S3; $(async fn $name($home, $storage) $body)*);
    };
    (@ $module:ident, $backend:expr, $kind:expr; $(async fn $name:ident($home:ident, $storage:ident) $body:block)*) => {
        mod $module {
            #[allow(unused_imports)]
            use super::*;
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let $home = Home::new($backend).await;
                    let $storage = $kind;
                    $body
                }
            )*
        }
    };
}

/// A manifest of the `filer` guest as `files` (tenant `acme`, granted `docs`) and as
/// `other` (tenant `globex`), with `collections` and more jobs appended.
fn manifest(home: &Home, collections: &str, jobs: &str) -> String {
    let m = home.manifest(
        "",
        &format!(
            "{collections}
            [jobs.files]
            component = \"{{guest:filer}}\"
            tenant = \"acme\"
            timeout = \"20s\"
            grants.db = {{ write = [\"ledger\"] }}
            grants.files = {{ write = [\"docs\"] }}

            [jobs.other]
            component = \"{{guest:filer}}\"
            tenant = \"globex\"
            timeout = \"20s\"
            grants.db = {{ read = [\"ledger\"] }}
            grants.files = {{ write = [\"docs\"] }}
            {jobs}"
        ),
    );
    m.to_str().unwrap().to_string()
}

/// `host run JOB --manifest M` with a payload; returns the exit code and the run.
fn run(home: &Home, manifest: &str, job: &str, payload: Value) -> (i32, Value) {
    home.run_json(&[
        job,
        "--manifest",
        manifest,
        "--payload",
        &payload.to_string(),
    ])
}

/// The log of a run's last attempt.
fn log(home: &Home, run: &Value) -> String {
    let shown: Value = serde_json::from_slice(
        &home
            .run(&["runs", "show", run["run_id"].as_str().unwrap(), "--json"])
            .stdout,
    )
    .unwrap();
    let attempts = shown["attempt_records"].as_array().unwrap();
    attempts.last().unwrap()["log"]
        .as_str()
        .unwrap()
        .to_string()
}

fn read(home: &Home, m: &str, job: &str, name: &str) -> Option<String> {
    let (code, run) = run(home, m, job, json!({"mode": "read", "name": name}));
    (code == 0).then(|| log(home, &run))
}

on_every_backend_and_storage! {
    async fn host_files_puts_gets_and_lists_through_the_fenced_write_jobs_see(home, storage) {
        home.run(&["migrate", "--migrations", migrations().to_str().unwrap()]);
        let m = manifest(&home, &storage.collection("docs", "max_object = \"3MiB\""), "");
        let files = |args: &[&str]| {
            let mut all = vec!["files"];
            all.extend_from_slice(args);
            all.extend_from_slice(&["--manifest", &m]);
            home.run(&all)
        };
        // Larger than one chunk and than one part of a multipart upload's first part.
        let content: Vec<u8> = (0..2_500_000u32).map(|i| (i % 251) as u8).collect();
        let source = home.path().join("upload.bin");
        std::fs::write(&source, &content).unwrap();
        let src = source.to_str().unwrap();
        let out = files(&["put", "docs", "in/big.bin", src, "--tenant", "acme", "--json"]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let put: Value = serde_json::from_slice(&out.stdout).unwrap();
        let digest = hex::encode(Sha256::digest(&content));
        assert_eq!((put["size"].as_u64(), put["digest"].as_str()), (Some(2_500_000), Some(digest.as_str())), "{put}");
        // The job of tenant acme reads what was put, whole; the other tenant's job does not see it.
        let seen = read(&home, &m, "files", "in/big.bin").expect("visible to acme's job");
        assert!(seen.contains(&format!("read 2500000 bytes, first Some('\\0'), digest {digest}")), "{seen}");
        assert!(read(&home, &m, "other", "in/big.bin").is_none());
        // What a job puts, `get` gives back byte for byte; `ls` lists both, by name.
        assert_eq!(run(&home, &m, "files", json!({"mode": "put", "name": "in/small", "size": 5, "fill": "x"})).0, 0);
        let got = files(&["get", "docs", "in/big.bin", "--tenant", "acme"]);
        assert!(got.status.success(), "{}", String::from_utf8_lossy(&got.stderr));
        assert!(got.stdout == content, "get gave {} bytes", got.stdout.len());
        let out = home.path().join("small.out");
        assert!(files(&["get", "docs", "in/small", "--tenant", "acme", "--out", out.to_str().unwrap()]).status.success());
        assert_eq!(std::fs::read(&out).unwrap(), b"xxxxx");
        let listed = files(&["ls", "docs", "--tenant", "acme", "--prefix", "in/", "--json"]);
        let listed: Value = serde_json::from_slice(&listed.stdout).unwrap();
        let names: Vec<&str> = listed.as_array().unwrap().iter().map(|f| f["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["in/big.bin", "in/small"]);
        let text = String::from_utf8_lossy(&files(&["ls", "docs", "--tenant", "acme"]).stdout).to_string();
        assert!(text.contains("2.4 MiB") && text.contains("in/big.bin"), "{text}");
        assert_eq!(files(&["ls", "docs", "--tenant", "globex", "--json"]).stdout, b"[]\n");
        // Refused with a fixed error, and nothing changes: too large for the collection,
        // an invalid name, an unknown object, an unknown tenant's view.
        std::fs::write(&source, vec![7u8; 4 * 1024 * 1024]).unwrap();
        for (args, said) in [
            (vec!["put", "docs", "in/big.bin", src, "--tenant", "acme"], "docs/in/big.bin: the object is larger than its collection allows"),
            (vec!["put", "docs", "../escape", src], "docs/../escape: invalid object name"),
            (vec!["get", "docs", "in/none", "--tenant", "acme"], "docs/in/none: no such object"),
            (vec!["get", "docs", "in/big.bin"], "docs/in/big.bin: no such object"),
        ] {
            let out = files(&args);
            assert_eq!(out.status.code(), Some(2), "{args:?}");
            assert!(String::from_utf8_lossy(&out.stderr).contains(said), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        }
        let still = files(&["get", "docs", "in/big.bin", "--tenant", "acme"]);
        assert!(still.stdout == content, "the refused put changed the object");
        // A put takes a lease of its own for its write, and leaves none behind.
        assert_eq!(home.scalar("SELECT COUNT(*) FROM jobhost_leases WHERE job = 'host-files'").await, 0);
        assert_eq!(home.scalar("SELECT COUNT(*) FROM jobhost_files WHERE run_id = 'host-files'").await, 1);
    }

    async fn an_attached_upload_is_visible_and_whole(home, storage) {
        home.run(&["migrate", "--migrations", migrations().to_str().unwrap()]);
        let m = manifest(&home, &storage.collection("docs", ""), r#"
            [jobs.earlier]
            component = "{guest:earlier}"
            tenant = "acme"
            grants.files = { read = ["docs"] }
        "#);
        // Larger than a host call and than one part of a multipart upload.
        let size = 6 * 1024 * 1024 + 123;
        let (code, r) = run(&home, &m, "files", json!({"mode": "put", "name": "big.bin", "size": size, "fill": "ab"}));
        assert_eq!(code, 0, "{r}");
        let content: Vec<u8> = "ab".bytes().cycle().take(size).collect();
        let digest = hex::encode(Sha256::digest(&content));
        let seen = read(&home, &m, "files", "big.bin").expect("visible");
        assert!(seen.contains(&format!("read {size} bytes, first Some('a'), digest {digest}")), "{seen}");
        // A guest built against 0.1.2 reads it with that version's calls.
        let (code, r) = run(&home, &m, "earlier", json!({"collection": "docs", "name": "big.bin"}));
        assert_eq!(code, 0, "{r}");
        assert!(log(&home, &r).contains(&format!("read {size} bytes, first Some('a'), digest {digest}")), "{}", log(&home, &r));
        // Listed, paged, and removed.
        for name in ["a/1", "a/2", "a/3", "b/1"] {
            assert_eq!(run(&home, &m, "files", json!({"mode": "put", "name": name, "size": 3})).0, 0);
        }
        let (_, listed) = run(&home, &m, "files", json!({"mode": "list", "prefix": "a/"}));
        assert!(log(&home, &listed).contains("names a/1,a/2,a/3\n"), "{}", log(&home, &listed));
        assert_eq!(home.scalar("SELECT COUNT(*) FROM jobhost_file_garbage").await, 0);
        let (_, removed) = run(&home, &m, "files", json!({"mode": "remove", "name": "a/2"}));
        assert!(log(&home, &removed).contains("removed true"));
        assert!(read(&home, &m, "files", "a/2").is_none());
        // Its object is garbage, for the collector; no upload is left over.
        assert_eq!(home.scalar("SELECT COUNT(*) FROM jobhost_file_garbage").await, 1);
        assert_eq!(home.scalar("SELECT COUNT(*) FROM jobhost_uploads").await, 0);
        let (_, again) = run(&home, &m, "files", json!({"mode": "remove", "name": "a/2"}));
        assert!(log(&home, &again).contains("removed false"), "{}", log(&home, &again));
    }

    async fn an_upload_that_loses_its_lease_never_becomes_visible_and_is_collected(home, storage) {
        home.run(&["migrate", "--migrations", migrations().to_str().unwrap()]);
        let m = manifest(&home, &storage.collection("docs", ""), "");
        // Past its deadline: the attach's fence fails.
        let (code, r) = home.run_json(&[
            "files", "--manifest", &m, "--timeout", "1s", "--payload",
            &json!({"mode": "put", "name": "late.bin", "size": 1000, "wait_ms": 1500}).to_string(),
        ]);
        assert_eq!((code, r["code"].as_str()), (1, Some("timeout")), "{r}");
        assert!(read(&home, &m, "files", "late.bin").is_none());
        // Superseded before it attaches: nothing visible either.
        let child = home.spawn(&[
            "run", "files", "--manifest", &m, "--json", "--payload",
            &json!({"mode": "put", "name": "superseded.bin", "size": 1000, "wait_ms": 2000}).to_string(),
        ]);
        home.wait_for(
            "SELECT COUNT(*) FROM jobhost_uploads WHERE run_id IN (SELECT id FROM jobhost_runs WHERE status = 'running')",
            Duration::from_secs(20),
        ).await;
        assert_eq!(home.exec("UPDATE jobhost_leases SET generation = generation + 1 WHERE job = 'files'").await, 1);
        let out = tokio::task::spawn_blocking(move || child.wait_with_output()).await.unwrap().unwrap();
        let r: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(r["code"], "lease_lost", "{r}");
        assert!(read(&home, &m, "files", "superseded.bin").is_none());
        assert_eq!(home.scalar("SELECT COUNT(*) FROM jobhost_uploads").await, 2);
        // The collector deletes both objects once no attempt can attach them.
        let server = home.serve(&["--manifest", &m, "--collect-interval", "500ms"]).await;
        let started = Instant::now();
        while home.scalar("SELECT COUNT(*) FROM jobhost_uploads").await > 0 {
            assert!(started.elapsed() < Duration::from_secs(40), "uploads were never collected");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        drop(server);
        if storage == Storage::Local {
            let dir = home.path().join("files/docs/acme");
            let left: Vec<_> = std::fs::read_dir(&dir).map(|d| d.collect()).unwrap_or_default();
            assert!(left.is_empty(), "objects left: {left:?}");
        }
    }

    async fn a_reader_during_a_long_upload_sees_the_old_file(home, storage) {
        home.run(&["migrate", "--migrations", migrations().to_str().unwrap()]);
        let m = manifest(&home, &storage.collection("docs", ""), "");
        assert_eq!(run(&home, &m, "files", json!({"mode": "put", "name": "doc", "size": 100000, "fill": "o"})).0, 0);
        let writer = home.spawn(&[
            "run", "files", "--manifest", &m, "--instance", "writer", "--json", "--payload",
            &json!({"mode": "put", "name": "doc", "size": 200000, "fill": "n", "wait_ms": 2000}).to_string(),
        ]);
        home.wait_for(
            "SELECT COUNT(*) FROM jobhost_uploads",
            Duration::from_secs(20),
        ).await;
        let during = read(&home, &m, "files", "doc").expect("the old file");
        assert!(during.contains("read 100000 bytes, first Some('o')"), "{during}");
        let out = tokio::task::spawn_blocking(move || writer.wait_with_output()).await.unwrap().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
        let after = read(&home, &m, "files", "doc").expect("the new file");
        assert!(after.contains("read 200000 bytes, first Some('n')"), "{after}");
        // The replaced object is garbage, for the collector: once its grace is over, it is
        // deleted from the storage itself, and the visible file's object is kept.
        assert_eq!(home.scalar("SELECT COUNT(*) FROM jobhost_file_garbage").await, 1);
        assert_eq!(stored_objects(&home, &m, storage, "docs").await, 2);
        let server = home
            .serve(&["--manifest", &m, "--collect-interval", "300ms", "--file-grace", "1s"])
            .await;
        let started = Instant::now();
        while home.scalar("SELECT COUNT(*) FROM jobhost_file_garbage").await > 0 {
            assert!(started.elapsed() < Duration::from_secs(40), "garbage was never collected");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        drop(server);
        assert_eq!(stored_objects(&home, &m, storage, "docs").await, 1);
        let kept = read(&home, &m, "files", "doc").expect("the new file");
        assert!(kept.contains("read 200000 bytes, first Some('n')"), "{kept}");
    }

    async fn an_attach_inside_a_transaction_commits_with_its_rows_or_not_at_all(home, storage) {
        home.run(&["migrate", "--migrations", migrations().to_str().unwrap()]);
        let m = manifest(&home, &storage.collection("docs", ""), "");
        let (code, r) = run(&home, &m, "files", json!({"mode": "put", "name": "with-rows", "size": 10, "how": "in-tx", "rows": 3}));
        assert_eq!(code, 0, "{r}");
        assert!(read(&home, &m, "files", "with-rows").is_some());
        assert_eq!(home.scalar(&format!("SELECT COUNT(*) FROM ledger WHERE run_id = '{}'", r["run_id"].as_str().unwrap())).await, 3);
        let (code, r) = run(&home, &m, "files", json!({"mode": "put", "name": "rolled-back", "size": 10, "how": "in-tx", "rows": 3, "rollback": true}));
        assert_eq!(code, 0, "{r}");
        assert!(read(&home, &m, "files", "rolled-back").is_none());
        assert_eq!(home.scalar(&format!("SELECT COUNT(*) FROM ledger WHERE run_id = '{}'", r["run_id"].as_str().unwrap())).await, 0);
        // An upload started after the transaction wrote: on Postgres it goes beside the
        // transaction; on SQLite its record would wait for the write lock the guest holds
        // (until the transaction's bound rolled it back), so it is refused at once.
        let started = Instant::now();
        let (code, r) = run(&home, &m, "files", json!({"mode": "put", "name": "tx-first", "size": 10, "how": "tx-first", "rows": 2}));
        assert!(started.elapsed() < Duration::from_secs(4), "took {:?}", started.elapsed());
        match home.backend {
            Backend::Sqlite => {
                assert_eq!((code, r["error"].as_str()), (1, Some("invalid call: transaction-open")), "{r}");
                assert!(read(&home, &m, "files", "tx-first").is_none());
            }
            Backend::Postgres => {
                assert_eq!(code, 0, "{r}");
                assert!(read(&home, &m, "files", "tx-first").is_some());
            }
        }
        assert_eq!(home.scalar(&format!("SELECT COUNT(*) FROM ledger WHERE run_id = '{}'", r["run_id"].as_str().unwrap())).await,
            if home.backend == Backend::Postgres { 2 } else { 0 });
    }

    async fn bad_names_and_every_cap_are_refused_and_the_host_stays_healthy(home, storage) {
        home.run(&["migrate", "--migrations", migrations().to_str().unwrap()]);
        let small = storage.collection("small", "max_object = \"1MiB\"");
        let m = manifest(&home, &format!("{}{small}", storage.collection("docs", "")), r#"
            [jobs.small]
            component = "{guest:filer}"
            grants.db = { read = ["ledger"] }
            grants.files = { write = ["small"] }
            [jobs.reader]
            component = "{guest:filer}"
            grants.db = { read = ["ledger"] }
            grants.files = { read = ["docs"] }
        "#);
        let refused = |job: &str, payload: Value, error: &str| {
            let (code, r) = run(&home, &m, job, payload.clone());
            assert_eq!(code, 1, "{payload}: {r}");
            assert_eq!(r["error"], error, "{payload}: {r}");
        };
        for name in ["../etc/passwd", "/abs", "a/../b", "a//b", "", "a\u{0}b", "\u{1b}[2J", "invoice\u{202e}fdp.exe", "a\u{200b}b", &"x".repeat(513)] {
            refused("files", json!({"mode": "put", "name": name, "size": 1}), "invalid call: invalid-name");
        }
        refused("files", json!({"mode": "chunk", "size": 2 * 1024 * 1024}), "invalid call: chunk-too-large");
        refused("small", json!({"mode": "put", "collection": "small", "name": "big", "size": 2 * 1024 * 1024}), "invalid call: object-too-large");
        refused("files", json!({"mode": "uploads", "count": 3}), "invalid call: too-many-uploads");
        // Started and dropped one after another: a thousand per attempt, then refused.
        let uploads_before = home.scalar("SELECT COUNT(*) FROM jobhost_uploads").await;
        refused("files", json!({"mode": "uploads", "count": 1001, "drop": true}), "invalid call: too-many-uploads");
        assert_eq!(home.scalar("SELECT COUNT(*) FROM jobhost_uploads").await - uploads_before, 1000);
        // A cursor is held to a name's rule before the database sees it (Postgres refuses
        // a NUL as its own failure, which was reported as the host's).
        for cursor in ["a\u{0}b", "\u{1b}[2J"] {
            refused("reader", json!({"mode": "list", "cursor": cursor}), "invalid call: invalid-name");
        }
        refused("reader", json!({"mode": "list", "cursor": "x".repeat(513)}), "invalid call: invalid-name");
        // Not granted: a collection the job does not have, or writing with a read grant.
        let (code, r) = run(&home, &m, "files", json!({"mode": "put", "collection": "small", "name": "x", "size": 1}));
        assert_eq!((code, r["code"].as_str()), (1, Some("capability_refused")), "{r}");
        let (code, r) = run(&home, &m, "reader", json!({"mode": "put", "name": "x", "size": 1}));
        assert_eq!((code, r["code"].as_str()), (1, Some("capability_refused")), "{r}");
        // Each says why in the host's words, the collection named as the grant names it.
        let error = r["error"].as_str().unwrap();
        assert!(error.starts_with(r#"capability_refused: not-granted: write of collection "docs" not granted (the job may read "docs"; write none; scan none); the guest's error: "#), "{r}");
        // Nothing of that became visible, and the host still works.
        assert_eq!(home.scalar("SELECT COUNT(*) FROM jobhost_files").await, 0);
        assert_eq!(run(&home, &m, "files", json!({"mode": "put", "name": "fine", "size": 1})).0, 0);
    }

    async fn names_with_invisible_or_formatting_characters_are_refused(home, storage) {
        home.run(&["migrate", "--migrations", migrations().to_str().unwrap()]);
        let m = manifest(&home, &storage.collection("docs", ""), "");
        let refused = |payload: Value| {
            let (code, r) = run(&home, &m, "files", payload.clone());
            assert_eq!(code, 1, "{payload}: {r}");
            assert_eq!(r["error"], "invalid call: invalid-name", "{payload}: {r}");
        };
        // An Arabic letter mark, a word joiner and a soft hyphen (Cf, shown as nothing),
        // a line separator (Zl), a private-use and an unassigned code point.
        for c in ['\u{61c}', '\u{2060}', '\u{ad}', '\u{2028}', '\u{e000}', '\u{50000}'] {
            let name = format!("invoice{c}.pdf");
            refused(json!({"mode": "put", "name": name, "size": 1}));
            refused(json!({"mode": "read", "name": name}));
            refused(json!({"mode": "remove", "name": name}));
            refused(json!({"mode": "list", "prefix": format!("invoice{c}")}));
            refused(json!({"mode": "list", "cursor": name}));
        }
        assert_eq!(home.scalar("SELECT COUNT(*) FROM jobhost_files").await, 0);
        // Letters, marks, numbers, punctuation, symbols and spaces of any script are names.
        let name = "Rechnung 2026 — ü\u{301}ber 日本\u{3000}€.pdf";
        let (code, r) = run(&home, &m, "files", json!({"mode": "put", "name": name, "size": 3}));
        assert_eq!(code, 0, "{r}");
        assert!(read(&home, &m, "files", name).is_some_and(|l| l.contains("read 3 bytes")));
    }

    async fn a_tenants_quota_bounds_what_it_keeps_and_refusals_change_nothing(home, storage) {
        home.run(&["migrate", "--migrations", migrations().to_str().unwrap()]);
        let capped = storage.collection("capped", "max_tenant_bytes = \"10KiB\"\nmax_tenant_objects = 3");
        let m = manifest(&home, &format!("{}{capped}", storage.collection("docs", "")), r#"
            [jobs.capped]
            component = "{guest:filer}"
            tenant = "acme"
            grants.db = { write = ["ledger"] }
            grants.files = { write = ["capped"] }
            [jobs.capped-other]
            component = "{guest:filer}"
            tenant = "globex"
            grants.db = { read = ["ledger"] }
            grants.files = { write = ["capped"] }
        "#);
        let put = |job: &str, name: &str, size: usize, how: &str| {
            run(&home, &m, job, json!({"mode": "put", "collection": "capped", "name": name, "size": size, "how": how, "rows": 2}))
        };
        let refused = |(code, r): (i32, Value)| {
            assert_eq!((code, r["error"].as_str()), (1, Some("invalid call: quota-exceeded")), "{r}");
            r
        };
        assert_eq!(put("capped", "a", 4000, "own").0, 0);
        assert_eq!(put("capped", "b", 4000, "own").0, 0);
        // 12 000 bytes would pass 10 KiB: refused, nothing visible, and the refused
        // upload's object deleted at once.
        refused(put("capped", "c", 4000, "own"));
        assert_eq!(stored_objects(&home, &m, storage, "capped").await, 2);
        // An upload larger than the whole quota is refused as it is written.
        refused(put("capped", "huge", 11 * 1024, "own"));
        // Three objects: a fourth is refused, inside a transaction too, whose rows then
        // commit with nothing.
        assert_eq!(put("capped", "c", 1000, "in-tx").0, 0);
        refused(put("capped", "d", 1, "own"));
        let r = refused(put("capped", "d", 1, "in-tx"));
        assert_eq!(home.scalar(&format!("SELECT COUNT(*) FROM ledger WHERE run_id = '{}'", r["run_id"].as_str().unwrap())).await, 0);
        assert_eq!(stored_objects(&home, &m, storage, "capped").await, 3);
        // Another tenant has a quota of its own.
        assert_eq!(put("capped-other", "d", 4000, "own").0, 0);
        // A replaced or removed object takes its bytes until the collector deletes it, so
        // it still counts: neither makes room before then.
        refused(put("capped", "a", 1000, "own"));
        assert!(log(&home, &run(&home, &m, "capped", json!({"mode": "remove", "collection": "capped", "name": "b"})).1).contains("removed true"));
        refused(put("capped", "d", 1, "own"));
        // The usage the quota reads is what the names point at and what awaits collection.
        let usage_is_kept = async || {
            for tenant in ["acme", "globex"] {
                let kept = format!("FROM jobhost_files WHERE tenant = '{tenant}' AND collection = 'capped'");
                let garbage = format!("FROM jobhost_file_garbage WHERE tenant = '{tenant}' AND collection = 'capped'");
                let usage = format!("FROM jobhost_file_usage WHERE tenant = '{tenant}' AND collection = 'capped'");
                assert_eq!(
                    home.scalar(&format!("SELECT bytes {usage}")).await,
                    home.scalar(&format!("SELECT CAST(COALESCE(SUM(size), 0) AS BIGINT) {kept}")).await
                        + home.scalar(&format!("SELECT CAST(COALESCE(SUM(size), 0) AS BIGINT) {garbage}")).await
                );
                assert_eq!(
                    home.scalar(&format!("SELECT objects {usage}")).await,
                    home.scalar(&format!("SELECT COUNT(*) {kept}")).await + home.scalar(&format!("SELECT COUNT(*) {garbage}")).await
                );
            }
        };
        usage_is_kept().await;
        assert_eq!(home.scalar("SELECT bytes FROM jobhost_file_usage WHERE tenant = 'acme' AND collection = 'capped'").await, 4000 + 4000 + 1000);
        // Once the collector deleted b's object, there is room again: two attempts race for
        // it, both upload, then attach at once; one is refused, whichever comes second.
        let server = home.serve(&["--manifest", &m, "--collect-interval", "300ms", "--file-grace", "1s"]).await;
        garbage_collected(&home).await;
        drop(server);
        usage_is_kept().await;
        let racers: Vec<_> = ["x", "y"]
            .iter()
            .map(|name| home.spawn(&[
                "run", "capped", "--manifest", &m, "--instance", name, "--json", "--payload",
                &json!({"mode": "put", "collection": "capped", "name": name, "size": 3000, "wait_ms": 1500}).to_string(),
            ]))
            .collect();
        let mut codes = Vec::new();
        for racer in racers {
            let out = tokio::task::spawn_blocking(move || racer.wait_with_output()).await.unwrap().unwrap();
            let r: Value = serde_json::from_slice(&out.stdout).unwrap();
            codes.push((out.status.code(), r["error"].as_str().map(str::to_string)));
        }
        codes.sort();
        assert_eq!(codes, vec![(Some(0), None), (Some(1), Some("invalid call: quota-exceeded".to_string()))]);
        assert!(home.scalar("SELECT CAST(SUM(size) AS BIGINT) FROM jobhost_files WHERE tenant = 'acme' AND collection = 'capped'").await <= 10 * 1024);
        usage_is_kept().await;
    }

    async fn replaced_objects_count_against_the_quota_until_collected(home, storage) {
        home.run(&["migrate", "--migrations", migrations().to_str().unwrap()]);
        let capped = storage.collection("capped", "max_tenant_bytes = \"10MiB\"");
        let m = manifest(&home, &format!("{}{capped}", storage.collection("docs", "")), r#"
            [jobs.capped]
            component = "{guest:filer}"
            tenant = "acme"
            grants.db = { write = ["ledger"] }
            grants.files = { write = ["capped"] }
        "#);
        let size = 5 * 1024 * 1024;
        let put = || run(&home, &m, "capped", json!({"mode": "put", "collection": "capped", "name": "big", "size": size}));
        let usage = "SELECT bytes FROM jobhost_file_usage WHERE tenant = 'acme' AND collection = 'capped'";
        // The object and one replacement fill the 10 MiB: the replaced one still counts.
        assert_eq!(put().0, 0);
        assert_eq!(put().0, 0);
        assert_eq!(home.scalar(usage).await, 2 * size as i64);
        // Every further replacement is refused, and leaves nothing on the storage.
        for _ in 0..3 {
            let (code, r) = put();
            assert_eq!((code, r["error"].as_str()), (1, Some("invalid call: quota-exceeded")), "{r}");
        }
        assert_eq!(home.scalar(usage).await, 2 * size as i64);
        assert_eq!(stored_objects(&home, &m, storage, "capped").await, 2);
        // The collector deletes the replaced object, and its bytes with it.
        let server = home.serve(&["--manifest", &m, "--collect-interval", "300ms", "--file-grace", "1s"]).await;
        garbage_collected(&home).await;
        drop(server);
        assert_eq!(home.scalar(usage).await, size as i64);
        assert_eq!(stored_objects(&home, &m, storage, "capped").await, 1);
        // Room again, for one replacement.
        assert_eq!(put().0, 0);
        let (code, r) = put();
        assert_eq!((code, r["error"].as_str()), (1, Some("invalid call: quota-exceeded")), "{r}");
    }

    async fn a_read_never_mixes_two_objects_while_the_name_is_replaced(home, storage) {
        home.run(&["migrate", "--migrations", migrations().to_str().unwrap()]);
        let m = manifest(&home, &storage.collection("docs", ""), "");
        // Three chunks to a read; two writers point the name at A and at B, again and
        // again, while a reader reads it whole 150 times. The collector deletes
        // replaced objects a second later, so the churn keeps little on the storage.
        let size = 2 * 1024 * 1024 + 1;
        assert_eq!(run(&home, &m, "files", json!({"mode": "put", "name": "doc", "size": size, "fill": "A"})).0, 0);
        let server = home.serve(&["--manifest", &m, "--collect-interval", "200ms", "--file-grace", "1s"]).await;
        // A writer stops at 900 puts, within the 1 000 uploads an attempt may start, if the
        // reader is not done by then.
        let writers: Vec<_> = ["A", "B"]
            .iter()
            .map(|fill| home.spawn(&[
                "run", "files", "--manifest", &m, "--instance", &format!("writer-{fill}"), "--timeout", "300s",
                "--json", "--payload",
                &json!({"mode": "churn-put", "name": "doc", "size": size, "fill": fill, "count": 900}).to_string(),
            ]))
            .collect();
        let (code, r) = home.run_json(&[
            "files", "--manifest", &m, "--instance", "reader", "--timeout", "300s", "--payload",
            &json!({"mode": "churn-read", "name": "doc", "size": size, "fill": "A", "other": "B", "count": 150}).to_string(),
        ]);
        for writer in writers {
            let out = tokio::task::spawn_blocking(move || writer.wait_with_output()).await.unwrap().unwrap();
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
        }
        drop(server);
        assert_eq!(code, 0, "{r}");
        let seen = log(&home, &r);
        let counts: Vec<u32> = seen
            .lines()
            .find_map(|l| l.split_once("churn "))
            .expect("the reader's counts")
            .1
            .split(' ')
            .filter_map(|n| n.parse().ok())
            .collect();
        let [a, b, mixed, gave_up] = counts[..] else { panic!("{seen}") };
        // Every read was exactly A or exactly B, and the name did change under the reader.
        assert_eq!(mixed, 0, "{seen}");
        assert!(a > 0 && b > 0, "{seen}");
        // A read that found the name replaced at each of its attempts says so (`changed`);
        // under this churn some do, never most.
        assert_eq!(a + b + gave_up, 150, "{seen}");
        assert!(a + b >= 40, "{seen}");
    }

    async fn one_tenant_never_sees_anothers_objects(home, storage) {
        home.run(&["migrate", "--migrations", migrations().to_str().unwrap()]);
        let m = manifest(&home, &storage.collection("docs", ""), "");
        assert_eq!(run(&home, &m, "files", json!({"mode": "put", "name": "secret.txt", "size": 5})).0, 0);
        assert!(read(&home, &m, "files", "secret.txt").is_some());
        assert!(read(&home, &m, "other", "secret.txt").is_none());
        let (_, listed) = run(&home, &m, "other", json!({"mode": "list", "prefix": ""}));
        assert!(log(&home, &listed).contains("names \n"), "{}", log(&home, &listed));
        // The same name in each tenant is two objects.
        assert_eq!(run(&home, &m, "other", json!({"mode": "put", "name": "secret.txt", "size": 9, "fill": "g"})).0, 0);
        assert!(read(&home, &m, "files", "secret.txt").unwrap().contains("read 5 bytes"));
        assert!(read(&home, &m, "other", "secret.txt").unwrap().contains("read 9 bytes, first Some('g')"));
    }

    async fn a_scanned_collection_serves_only_clean_files(home, storage) {
        home.run(&["migrate", "--migrations", migrations().to_str().unwrap()]);
        let m = manifest(&home, &storage.collection("docs", "scan = \"scanner\""), r#"
            [jobs.scanner]
            component = "{guest:scanner}"
            timeout = "20s"
            payload = { collection = "docs", reject = "EICAR" }
            grants.files = { scan = ["docs"] }
        "#);
        // A serving host knows the scan job; attaching a file kicks it.
        let server = home.serve(&["--manifest", &m]).await;
        let _ = server.get("/jobs").await;
        assert_eq!(run(&home, &m, "files", json!({"mode": "put", "name": "bad.txt", "size": 10, "fill": "EICAR"})).0, 0);
        assert!(read(&home, &m, "files", "bad.txt").is_none(), "visible before its scan");
        assert_eq!(run(&home, &m, "files", json!({"mode": "put", "name": "ok.txt", "size": 10, "fill": "fine"})).0, 0);
        server
            .wait_runs("scanner", Duration::from_secs(30), |runs| {
                runs.iter().any(|r| r["status"] == "succeeded")
            })
            .await;
        let started = Instant::now();
        while home.scalar("SELECT COUNT(*) FROM jobhost_files WHERE status = 'pending'").await > 0 {
            assert!(started.elapsed() < Duration::from_secs(20));
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        drop(server);
        assert!(read(&home, &m, "files", "ok.txt").is_some());
        assert!(read(&home, &m, "files", "bad.txt").is_none());
        assert_eq!(home.scalar("SELECT COUNT(*) FROM jobhost_files WHERE status = 'rejected'").await, 1);
    }

    async fn the_report_example_writes_its_csv(home, storage) {
        home.run(&["migrate", "--migrations", migrations().to_str().unwrap()]);
        let collections = format!("{}{}", storage.collection("docs", ""), storage.collection("reports", ""));
        let m = manifest(&home, &collections, r#"
            [links.hooks]
            url = "http://127.0.0.1:9/"
            [jobs.report]
            component = "{guest:report}"
            tenant = "acme"
            grants.db = { read = ["ledger"] }
            grants.files = { write = ["reports"] }
            grants.links = ["hooks"]
            [jobs.csv]
            component = "{guest:filer}"
            tenant = "acme"
            grants.db = { read = ["ledger"] }
            grants.files = { read = ["reports"] }
        "#);
        home.exec("INSERT INTO ledger (run_id, attempt, n) VALUES ('r1', 1, 1), ('r1', 1, 2)").await;
        let (code, r) = run(&home, &m, "report", json!({}));
        assert_eq!(code, 0, "{r}");
        let csv = "run_id,attempt,n\nr1,1,1\nr1,1,2\n";
        let (code, r) = run(&home, &m, "csv", json!({"mode": "read", "collection": "reports", "name": "ledger.csv"}));
        assert_eq!(code, 0, "{r}");
        assert!(log(&home, &r).contains(&format!("read {} bytes, first Some('r'), digest {}", csv.len(), hex::encode(Sha256::digest(csv)))));
    }
}

/// Two serving hosts on one Postgres share one S3 collection: what one attaches, the
/// other reads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hosts_on_postgres_share_one_s3_collection() {
    let home = Home::new(Backend::Postgres).await;
    home.run(&["migrate", "--migrations", migrations().to_str().unwrap()]);
    let m = manifest(
        &home,
        &Storage::S3.collection("docs", ""),
        r#"
        [jobs.writer]
        component = "{guest:filer}"
        tenant = "acme"
        payload = { mode = "put", name = "shared.bin", size = 300000, fill = "s" }
        grants.db = { read = ["ledger"] }
        grants.files = { write = ["docs"] }
        [jobs.reader]
        component = "{guest:filer}"
        tenant = "acme"
        payload = { mode = "read", name = "shared.bin" }
        grants.db = { read = ["ledger"] }
        grants.files = { read = ["docs"] }
    "#,
    );
    let one = home.serve(&["--manifest", &m]).await;
    let two = home.serve(&["--manifest", &m]).await;
    assert_eq!(one.post("/jobs/writer/kick").await.0, 202);
    one.wait_runs("writer", Duration::from_secs(30), |runs| {
        runs.iter().any(|r| r["status"] == "succeeded")
    })
    .await;
    // Only the second host is left to read it.
    one.signal("TERM");
    one.wait_exit(Duration::from_secs(30)).await;
    assert_eq!(two.post("/jobs/reader/kick").await.0, 202);
    let runs = two
        .wait_runs("reader", Duration::from_secs(30), |runs| {
            runs.iter().any(|r| {
                !["queued", "claimed", "running"]
                    .contains(&r["status"].as_str().unwrap_or_default())
            })
        })
        .await;
    assert_eq!(runs[0]["status"], "succeeded", "{runs:#?}");
    assert!(
        runs[0]["host"]
            .as_str()
            .unwrap()
            .ends_with(&format!("-{}", two.child.id()))
    );
}

/// Every path under `dir` with its size: what a test compares to show nothing was made,
/// changed or deleted there.
fn tree(dir: &std::path::Path) -> std::collections::BTreeMap<String, u64> {
    let mut found = std::collections::BTreeMap::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(at) = todo.pop() {
        for entry in std::fs::read_dir(&at).unwrap() {
            let entry = entry.unwrap();
            let meta = std::fs::symlink_metadata(entry.path()).unwrap();
            if meta.is_dir() {
                todo.push(entry.path());
            }
            let path = entry
                .path()
                .strip_prefix(dir)
                .unwrap()
                .display()
                .to_string();
            found.insert(path, meta.len());
        }
    }
    found
}

/// Links planted in a local collection — at an object's file (to a file outside the
/// root), at a tenant's directory (to a directory outside), at the home's `files`
/// directory — under `host run`, and under `host serve` (planted before it starts and
/// while it serves) while guests read and write: each
/// read and write through one is refused with a fixed code, nothing outside the root is
/// read, made or deleted (by the collector neither), each path is reported once, and the
/// host goes on serving the rest.
async fn planted_links_are_refused_at_every_level(home: Home) {
    home.run(&["migrate", "--migrations", migrations().to_str().unwrap()]);
    let m = manifest(
        &home,
        &Storage::Local.collection("docs", ""),
        r#"
        [jobs.acme-io]
        component = "{guest:filer}"
        tenant = "acme"
        retries = 0
        grants.db = { read = ["ledger"] }
        grants.files = { write = ["docs"] }
        [jobs.globex-io]
        component = "{guest:filer}"
        tenant = "globex"
        retries = 0
        grants.db = { read = ["ledger"] }
        grants.files = { write = ["docs"] }
    "#,
    );
    let root = home.path().join("files/docs");
    let outside = home.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    let secret = "TOP-SECRET host file, not an object";
    std::fs::write(outside.join("secret"), secret).unwrap();
    let refused = |(code, r): (i32, Value)| {
        assert_eq!(
            (code, r["code"].as_str(), r["error"].as_str()),
            (1, Some("path_refused"), Some(PATH_REFUSED)),
            "{r}"
        );
        assert!(!r.to_string().contains("TOP-SECRET"), "{r}");
    };
    let reports =
        || home.scalar("SELECT COUNT(*) FROM jobhost_reports WHERE kind = 'path_refused'");

    // The object's file, replaced by a link to a file outside the root.
    assert_eq!(
        run(
            &home,
            &m,
            "files",
            json!({"mode": "put", "name": "doc", "size": 20, "fill": "m"})
        )
        .0,
        0
    );
    let key_of = |tenant: &'static str, name: &'static str| {
        let home = &home;
        async move {
            let store = home.store().await;
            let file = store
                .get_file(tenant, "docs", name)
                .await
                .unwrap()
                .expect("the file's row");
            store.close().await;
            file.object_key
        }
    };
    let doc_key = key_of("acme", "doc").await;
    std::fs::remove_file(root.join(&doc_key)).unwrap();
    std::os::unix::fs::symlink(outside.join("secret"), root.join(&doc_key)).unwrap();
    refused(run(
        &home,
        &m,
        "files",
        json!({"mode": "read", "name": "doc"}),
    ));
    refused(run(
        &home,
        &m,
        "files",
        json!({"mode": "read", "name": "doc"}),
    ));

    // A tenant's directory, moved outside the root and replaced by a link to it.
    assert_eq!(
        run(
            &home,
            &m,
            "other",
            json!({"mode": "put", "name": "g", "size": 7, "fill": "g"})
        )
        .0,
        0
    );
    let moved = outside.join("globex");
    std::fs::rename(root.join("globex"), &moved).unwrap();
    std::os::unix::fs::symlink(&moved, root.join("globex")).unwrap();
    let before = tree(&outside);
    refused(run(
        &home,
        &m,
        "other",
        json!({"mode": "read", "name": "g"}),
    ));
    refused(run(
        &home,
        &m,
        "other",
        json!({"mode": "put", "name": "new", "size": 5}),
    ));
    assert_eq!(
        tree(&outside),
        before,
        "something was made outside the root"
    );
    // Reported once per path, however many calls and processes met it.
    assert_eq!(reports().await, 2);
    let store = home.store().await;
    let listed = store
        .list_reports(Some("jobhost:files"), None, 10)
        .await
        .unwrap();
    store.close().await;
    let paths: Vec<Value> = listed
        .iter()
        .map(|r| serde_json::from_str::<Value>(&r.body).unwrap()["path"].clone())
        .collect();
    assert_eq!(paths, [json!("globex"), json!(doc_key)]);

    // A directory on the way to the collection's root (the home's `files`): the host
    // refuses to open the collection at all, and makes nothing where the link points.
    let files_moved = outside.join("files-moved");
    std::fs::rename(home.path().join("files"), &files_moved).unwrap();
    std::os::unix::fs::symlink(&files_moved, home.path().join("files")).unwrap();
    let before = tree(&outside);
    let out = home.run(&[
        "run",
        "files",
        "--manifest",
        &m,
        "--payload",
        &json!({"mode": "put", "name": "via-link", "size": 5}).to_string(),
    ]);
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{said}");
    assert!(said.contains("symbolic link"), "{said}");
    assert_eq!(
        tree(&outside),
        before,
        "something was made outside the root"
    );
    std::fs::remove_file(home.path().join("files")).unwrap();
    std::fs::rename(&files_moved, home.path().join("files")).unwrap();

    // Under `host serve`, while the collector runs: the links are refused to every
    // guest, and the host serves the rest.
    let server = home
        .serve(&[
            "--manifest",
            &m,
            "--collect-interval",
            "200ms",
            "--file-grace",
            "1s",
        ])
        .await;
    let finished = |job: &'static str, payload: Value| {
        let server = &server;
        async move {
            let body =
                json!({"instance": uuid::Uuid::now_v7().simple().to_string(), "payload": payload});
            let (status, started) = server
                .post_as(
                    Some(&server.token),
                    &format!("/jobs/{job}/runs"),
                    Some(&body.to_string()),
                )
                .await;
            assert_eq!(status, 201, "{started}");
            let id = started["run_id"].as_str().unwrap().to_string();
            let started_at = Instant::now();
            loop {
                let (_, run) = server.get(&format!("/runs/{id}")).await;
                if !["queued", "claimed", "running"].contains(&run["status"].as_str().unwrap()) {
                    return run;
                }
                assert!(started_at.elapsed() < Duration::from_secs(30), "{run}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    let served_refusal = |run: Value| {
        assert_eq!(
            (run["status"].as_str(), run["code"].as_str()),
            (Some("failed"), Some("path_refused")),
            "{run}"
        );
        assert_eq!(run["error"], PATH_REFUSED, "{run}");
    };
    served_refusal(finished("acme-io", json!({"mode": "read", "name": "doc"})).await);
    served_refusal(finished("globex-io", json!({"mode": "read", "name": "g"})).await);
    served_refusal(
        finished(
            "globex-io",
            json!({"mode": "put", "name": "new", "size": 5}),
        )
        .await,
    );
    let ok = finished(
        "acme-io",
        json!({"mode": "put", "name": "fine", "size": 5, "fill": "f"}),
    )
    .await;
    assert_eq!(ok["status"], "succeeded", "{ok}");
    let ok = finished("acme-io", json!({"mode": "read", "name": "fine"})).await;
    assert_eq!(ok["status"], "succeeded", "{ok}");
    // A link planted while the host serves, at an object it wrote a moment ago.
    let late = finished("acme-io", json!({"mode": "put", "name": "late", "size": 5})).await;
    assert_eq!(late["status"], "succeeded", "{late}");
    let late_key = key_of("acme", "late").await;
    std::fs::remove_file(root.join(&late_key)).unwrap();
    std::os::unix::fs::symlink(outside.join("secret"), root.join(&late_key)).unwrap();
    served_refusal(finished("acme-io", json!({"mode": "read", "name": "late"})).await);
    served_refusal(finished("acme-io", json!({"mode": "read", "name": "late"})).await);
    assert_eq!(reports().await, 3);
    // Garbage behind links, and garbage that is not: the collector deletes the one and
    // leaves the others (and what they point at) alone, reporting nothing new.
    let g_key = key_of("globex", "g").await;
    let fine_key = key_of("acme", "fine").await;
    for (job, name) in [("acme-io", "doc"), ("globex-io", "g"), ("acme-io", "fine")] {
        let removed = finished(job, json!({"mode": "remove", "name": name})).await;
        assert_eq!(removed["status"], "succeeded", "{removed}");
    }
    let none_left = |from: String| {
        format!("SELECT CAST(CASE WHEN COUNT(*) = 0 THEN 1 ELSE 0 END AS BIGINT) FROM {from}")
    };
    home.wait_for(
        &none_left(format!(
            "jobhost_file_garbage WHERE object_key = '{fine_key}'"
        )),
        Duration::from_secs(30),
    )
    .await;
    assert!(!root.join(&fine_key).exists());
    // Refused ones go to the back of the line: seen again (and kept) period after period.
    let since = |key: String| {
        let home = &home;
        async move {
            home.scalar(&format!(
                "SELECT since FROM jobhost_file_garbage WHERE object_key = '{key}'"
            ))
            .await
        }
    };
    let (doc_since, g_since) = (since(doc_key.clone()).await, since(g_key.clone()).await);
    home.wait_for(&format!("SELECT COUNT(*) FROM jobhost_file_garbage WHERE object_key = '{doc_key}' AND since > {doc_since}"), Duration::from_secs(30)).await;
    home.wait_for(&format!("SELECT COUNT(*) FROM jobhost_file_garbage WHERE object_key = '{g_key}' AND since > {g_since}"), Duration::from_secs(30)).await;
    assert_eq!(
        std::fs::read_to_string(outside.join("secret")).unwrap(),
        secret
    );
    assert!(moved.join(g_key.strip_prefix("globex/").unwrap()).exists());
    assert!(
        std::fs::symlink_metadata(root.join(&doc_key))
            .unwrap()
            .is_symlink()
    );
    assert_eq!(reports().await, 3);
    // Once the operator removed the links, both are collected.
    std::fs::remove_file(root.join(&doc_key)).unwrap();
    std::fs::remove_file(root.join("globex")).unwrap();
    home.wait_for(
        &none_left("jobhost_file_garbage".into()),
        Duration::from_secs(30),
    )
    .await;
    assert_eq!(
        std::fs::read_to_string(outside.join("secret")).unwrap(),
        secret
    );
    drop(server);
}

mod hostile_filesystem {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sqlite() {
        planted_links_are_refused_at_every_level(Home::new(Backend::Sqlite).await).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn postgres() {
        planted_links_are_refused_at_every_level(Home::new(Backend::Postgres).await).await;
    }
}
