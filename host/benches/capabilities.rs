//! What `files` and `links` cost over doing the same thing directly, measured side by
//! side in one run:
//!
//! - `files/attach_1MiB_<storage>`: an upload of 1 MiB (one chunk copied out, as from a
//!   guest's memory), its record, the object, its digest, and the attach in a transaction
//!   of its own fenced by the lease — against `files/plain_put_1MiB_<storage>`, one
//!   `object_store` put of a copy of the same bytes to the same place (each object is
//!   deleted, untimed, after it is timed, on both sides). Storage:
//!   `local` (a directory), and `s3` (SeaweedFS at `JOBHOST_TEST_S3`, as for the tests)
//!   when it answers. The database is SQLite.
//! - `links/call`: one call through a mount to a local HTTP server, with the lease check
//!   before it goes out, the idempotency key and the bounded read of the answer — against
//!   `links/reqwest`, the same request through `reqwest` directly.
//!
//! - `files/sha256_1MiB`: SHA-256 of the same megabyte, the digest the contract promises
//!   for every object: the floor under `attach` on storage faster than hashing.
//!
//! Run with `cargo bench -p jobhost --bench capabilities`; the medians and ratios are
//! printed at the end.

use criterion::Criterion;
use jobhost::sandbox::files::{CollectionSpec, Files, Location, Uploader};
use jobhost::sandbox::links::token::{ROTATE_AFTER, Signer};
use jobhost::sandbox::links::{Caller, DEFAULT_MAX_BODY, Links, MountSpec, Request};
use jobhost::store::guest::Fence;
use jobhost::store::{Lease, LeaseRequest, Store};
use object_store::aws::AmazonS3Builder;
use object_store::local::LocalFileSystem;
use object_store::path::Path as ObjectPath;
use object_store::prefix::PrefixStore;
use object_store::{ObjectStore, ObjectStoreExt};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::runtime::Runtime;

const MIB: usize = 1 << 20;

fn fence(lease: &Lease) -> Fence {
    Fence {
        job: lease.job.clone(),
        instance: lease.instance.clone(),
        generation: lease.generation,
        holder: lease.holder.clone(),
    }
}

async fn held_lease(store: &Store) -> Lease {
    store
        .acquire_lease(&LeaseRequest {
            job: "bench",
            instance: "i",
            holder: "run",
            deadline_ms: 3_600_000,
            expires_ms: 3_600_000,
        })
        .await
        .expect("acquire")
        .expect("a free lease")
}

fn s3_available(rt: &Runtime) -> bool {
    let endpoint =
        std::env::var("JOBHOST_TEST_S3").unwrap_or_else(|_| "http://127.0.0.1:8333".into());
    rt.block_on(async { reqwest::get(&endpoint).await.is_ok() })
}

fn bench_files(c: &mut Criterion, rt: &Runtime, medians: &Mutex<Vec<(String, f64)>>) {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = rt
        .block_on(Store::open(&format!(
            "sqlite://{}/bench.db",
            dir.path().display()
        )))
        .expect("store");
    let lease = rt.block_on(held_lease(&store));
    let mut storages = vec![("local", Location::Local(dir.path().join("objects")))];
    if s3_available(rt) {
        let endpoint =
            std::env::var("JOBHOST_TEST_S3").unwrap_or_else(|_| "http://127.0.0.1:8333".into());
        // SAFETY: set before any thread of ours reads the environment.
        unsafe {
            std::env::set_var("AWS_ENDPOINT", endpoint);
            std::env::set_var("AWS_ACCESS_KEY_ID", "jobhost");
            std::env::set_var("AWS_SECRET_ACCESS_KEY", "jobhost-secret");
            std::env::set_var("AWS_REGION", "us-east-1");
            std::env::set_var("AWS_ALLOW_HTTP", "true");
        }
        storages.push((
            "s3",
            Location::Url(format!(
                "s3://jobhost/bench-{}",
                uuid::Uuid::now_v7().simple()
            )),
        ));
    }
    let bytes = vec![7u8; MIB];
    let mut group = c.benchmark_group("files");
    group.sample_size(30);
    // The floor of any attach under the contract, which promises each object's SHA-256:
    // hashing the megabyte alone, on one core (one stream's hash cannot be split).
    group.bench_function("sha256_1MiB", |b| {
        b.iter(|| {
            use sha2::Digest as _;
            sha2::Sha256::digest(std::hint::black_box(&bytes))
        })
    });
    record(medians, "files", "sha256_1MiB");
    for (storage, location) in storages {
        let plain_store = plain_store(&location);
        let mut specs = BTreeMap::new();
        let spec = CollectionSpec {
            location,
            ..CollectionSpec::in_home()
        };
        specs.insert("docs".to_string(), spec);
        let files = Files::open(&specs, dir.path(), store.clone()).expect("files");
        let uploader = Uploader {
            tenant: "acme".into(),
            run_id: "run".into(),
            attach_by: lease.deadline_at,
        };
        let fence = fence(&lease);
        // Each object is deleted again after it is timed (untimed), on both sides: the
        // page cache and the bucket stay the same size, so neither side pays for the
        // writeback of what the other wrote before it.
        let attach = format!("attach_1MiB_{storage}");
        let mut n = 0u64;
        group.bench_function(&attach, |b| {
            b.to_async(rt).iter_custom(|iters| {
                let (files, uploader, fence, bytes, plain) =
                    (&files, &uploader, &fence, &bytes, &plain_store);
                let first = n;
                n += iters;
                async move {
                    let mut spent = Duration::ZERO;
                    for i in 0..iters {
                        let name = format!("f{}", first + i);
                        let started = std::time::Instant::now();
                        let mut upload = files.start_upload(uploader, "docs").await.unwrap();
                        upload.write(bytes.to_vec().into()).await.unwrap();
                        let finished = upload.finish().await.unwrap();
                        files
                            .attach(fence, "run", &finished, &name)
                            .await
                            .unwrap()
                            .expect("the lease is held");
                        spent += started.elapsed();
                        plain.delete(&ObjectPath::from(finished.key)).await.unwrap();
                    }
                    spent
                }
            })
        });
        let plain = format!("plain_put_1MiB_{storage}");
        let mut m = 0u64;
        group.bench_function(&plain, |b| {
            b.to_async(rt).iter_custom(|iters| {
                let (objects, bytes) = (&plain_store, &bytes);
                let first = m;
                m += iters;
                async move {
                    let mut spent = Duration::ZERO;
                    for i in 0..iters {
                        let key = ObjectPath::from(format!("plain/{}", first + i));
                        let started = std::time::Instant::now();
                        objects.put(&key, bytes.to_vec().into()).await.unwrap();
                        spent += started.elapsed();
                        objects.delete(&key).await.unwrap();
                    }
                    spent
                }
            })
        });
        record(medians, "files", &attach);
        record(medians, "files", &plain);
    }
    group.finish();
}

fn bench_links(c: &mut Criterion, rt: &Runtime, medians: &Mutex<Vec<(String, f64)>>) {
    let dir = tempfile::tempdir().expect("temp dir");
    let (store, url) = rt.block_on(async {
        let store = Store::open(&format!("sqlite://{}/bench.db", dir.path().display()))
            .await
            .expect("store");
        let app = axum::Router::new().fallback(|| async { "pong" });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        (store, url)
    });
    let lease = rt.block_on(held_lease(&store));
    let mut mounts = BTreeMap::new();
    mounts.insert(
        "api".to_string(),
        MountSpec {
            url: url.clone(),
            methods: ["GET".to_string()].into(),
            timeout: Duration::from_secs(5),
            max_request: DEFAULT_MAX_BODY,
            max_response: DEFAULT_MAX_BODY,
            credential: None,
            headers: jobhost::sandbox::links::headers::default_headers(),
            limits: jobhost::sandbox::links::limits::MountLimits::default(),
        },
    );
    let signer = Arc::new(
        rt.block_on(Signer::open(store.clone(), ROTATE_AFTER))
            .unwrap(),
    );
    let links = Links::open(&mounts, signer, store.clone()).expect("links");
    let caller = Caller {
        job: "bench".into(),
        tenant: "acme".into(),
        run_id: "run".into(),
        run_root: "run".into(),
        pass: 1,
        fence: fence(&lease),
        deadline: tokio::time::Instant::now() + Duration::from_secs(3600),
        lease_deadline_ms: lease.deadline_at,
        actions: Arc::new(BTreeSet::new()),
        trace: jobhost::rules::trace::TraceParent::start(),
    };
    let direct = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .build()
        .unwrap();
    let mut group = c.benchmark_group("links");
    group.bench_function("call", |b| {
        b.to_async(rt).iter(|| async {
            let request = Request {
                method: "GET".into(),
                path: "ping".into(),
                step: "s".into(),
                ..Request::default()
            };
            let answer = links.call(&caller, "api", request).await.unwrap();
            assert_eq!(answer.status, 200);
        })
    });
    group.bench_function("reqwest", |b| {
        b.to_async(rt).iter(|| async {
            let answer = direct
                .get(format!("{url}ping"))
                .header("idempotency-key", "k")
                .send()
                .await
                .unwrap();
            assert_eq!(answer.status(), 200);
            answer.bytes().await.unwrap();
        })
    });
    group.finish();
    record(medians, "links", "call");
    record(medians, "links", "reqwest");
}

/// The same place as a collection at `location`, opened directly with `object_store`.
fn plain_store(location: &Location) -> Arc<dyn ObjectStore> {
    match location {
        Location::Local(dir) => {
            std::fs::create_dir_all(dir).expect("object directory");
            Arc::new(LocalFileSystem::new_with_prefix(dir).expect("local store"))
        }
        Location::Url(url) => {
            let url = url::Url::parse(url).expect("URL");
            let s3 = AmazonS3Builder::from_env()
                .with_bucket_name(url.host_str().expect("bucket"))
                .build()
                .expect("S3 store");
            Arc::new(PrefixStore::new(s3, url.path().trim_matches('/')))
        }
        Location::Home => unreachable!("the benchmark names its places"),
    }
}

/// Reads a benchmark's median (ns) from criterion's output (under `CARGO_TARGET_DIR`,
/// as criterion writes it, or the workspace's `target/`).
fn record(medians: &Mutex<Vec<(String, f64)>>, group: &str, name: &str) {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"));
    let path = target
        .join("criterion")
        .join(group)
        .join(name)
        .join("new/estimates.json");
    if let Some(median) = std::fs::read_to_string(path)
        .ok()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        .and_then(|v| v["median"]["point_estimate"].as_f64())
    {
        medians
            .lock()
            .unwrap()
            .push((format!("{group}/{name}"), median));
    }
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let medians = Mutex::new(Vec::new());
    let mut c = Criterion::default().configure_from_args();
    bench_files(&mut c, &rt, &medians);
    bench_links(&mut c, &rt, &medians);
    c.final_summary();
    let medians = medians.into_inner().unwrap();
    let of = |name: &str| medians.iter().find(|(n, _)| n == name).map(|(_, m)| *m);
    println!("\n{:<32} {:>12}", "benchmark", "median");
    for (name, median) in &medians {
        println!("{name:<32} {:>9.1} µs", median / 1000.0);
    }
    for (ours, theirs) in [
        ("files/attach_1MiB_local", "files/plain_put_1MiB_local"),
        ("files/sha256_1MiB", "files/plain_put_1MiB_local"),
        ("files/attach_1MiB_s3", "files/plain_put_1MiB_s3"),
        ("links/call", "links/reqwest"),
    ] {
        if let (Some(a), Some(b)) = (of(ours), of(theirs)) {
            println!("{ours} / {theirs}: {:.2}x", a / b);
        }
    }
}
