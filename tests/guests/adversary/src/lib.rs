//! A hostile guest, for the adversarial suite (`tests/adversary.rs`). Its payload's `mode`
//! picks one thing a tenant's code might do to harm the host or its records; the suite
//! asserts each ends with its fixed code while the host keeps serving other jobs.
//!
//! Modes: `stack-overflow` (recursion that calls the host at every level, until the stack
//! runs out), `panic-in-transaction` (a panic with a write transaction open), `huge-log`,
//! `huge-sql`, `huge-param`, `many-params` (host-call arguments past every bound),
//! `handles` (host resources taken and never given back), `escapes` (terminal escape
//! sequences in logs and the error), `markup` (HTML and script in a log line and the
//! error, for the console), `nul` (NUL and invalid UTF-8 everywhere text goes
//! back), `nul-flood` (a log of nothing but NUL and invalid bytes, which take three bytes
//! each once made safe to store), `nul-cursor` (a cursor holding an escaped NUL),
//! `huge-cursor`, `sql` (runs the statements in `sql`, for memory bounds), `passes`
//! (continues until pass `passes`: a run with more attempts than any reader shows),
//! `aliased-params` (999 parameters that all name one 128 KiB buffer: 125 MiB for the host
//! to lift from a guest of a few hundred KiB), `params-total` (ten 1 MiB parameters, each
//! within its bound, together past the statement's), `random` (64 MiB of random bytes
//! asked for in one call), `sockets` (a TCP connection to `target`, a UDP socket and a
//! name lookup, each of which must be refused), `networks` (network handles taken and
//! never given back), `defer` (defers every pass by `defer_ms`, zero too: for ever, but
//! for the host's bounds), `burn` (`iterations` turns of a loop that calls nothing, then,
//! as `then` says, `done`, a `trap` at an out-of-bounds load, or `spin`: the same loop
//! for ever — fuel the host must count however the attempt ends).

use jobhost_guest::{Context, HostError, Job, JobError, Outcome, db, describe, log};
use serde::Deserialize;
use std::io::Write;

#[derive(Deserialize)]
struct Payload {
    mode: String,
    #[serde(default)]
    sql: Vec<String>,
    #[serde(default)]
    passes: u32,
    #[serde(default)]
    target: String,
    #[serde(default)]
    defer_ms: u64,
    #[serde(default)]
    iterations: u64,
    #[serde(default)]
    then: String,
}

/// Turns a loop that calls nothing (not the host, not a function) `n` times.
fn burn(n: u64) -> u64 {
    let mut turns: u64 = 0;
    while turns < n {
        turns = std::hint::black_box(turns + 1);
    }
    turns
}

struct Adversary;

/// Recurses, calling the host at every level, until the stack runs out (the bound only
/// keeps the compiler from calling the recursion endless).
fn dive(depth: u64) -> u64 {
    if depth == u64::MAX {
        return 0;
    }
    let frame = [depth as u8; 512];
    log::trace("deeper");
    std::hint::black_box(&frame);
    dive(depth + 1) + u64::from(frame[0])
}

fn refused(e: HostError) -> JobError {
    JobError::Failed(describe(&e))
}

impl Job for Adversary {
    type Payload = Payload;

    fn run(ctx: Context<Payload>) -> Result<Outcome, JobError> {
        match ctx.payload.mode.as_str() {
            "stack-overflow" => {
                dive(0);
                Ok(Outcome::Done)
            }
            "panic-in-transaction" => {
                let tx = db::begin()?;
                tx.execute(
                    "INSERT INTO ledger (run_id, attempt, n) VALUES ($1, 1, 1)",
                    &[ctx.run_id.as_str().into()],
                )?;
                panic!("a panic with the transaction open");
            }
            "huge-log" => {
                log::info(&"x".repeat(32 << 20));
                Ok(Outcome::Done)
            }
            "huge-sql" => {
                let sql = format!("SELECT 1 {}", " ".repeat(16 << 20));
                db::query(&sql, &[]).map_err(refused)?;
                Ok(Outcome::Done)
            }
            "huge-param" => {
                db::query("SELECT length($1)", &[vec![7u8; 8 << 20].into()]).map_err(refused)?;
                Ok(Outcome::Done)
            }
            "many-params" => {
                let params: Vec<db::Value> = (0..100_000).map(db::Value::Integer).collect();
                db::query("SELECT 1", &params).map_err(refused)?;
                Ok(Outcome::Done)
            }
            "aliased-params" => {
                let buffer = vec![b'a'; 128 << 10];
                // Each `String` borrows the one buffer; none is ever dropped (forgotten
                // below), so none frees it.
                let params: Vec<db::Value> = (0..999)
                    .map(|_| {
                        // SAFETY: the bytes are valid UTF-8 and outlive `params`, which
                        // is forgotten instead of dropped.
                        let alias = unsafe {
                            String::from_raw_parts(
                                buffer.as_ptr().cast_mut(),
                                buffer.len(),
                                buffer.len(),
                            )
                        };
                        db::Value::Text(alias)
                    })
                    .collect();
                let answer = db::query("SELECT 1", &params);
                std::mem::forget(params);
                answer.map_err(refused)?;
                Ok(Outcome::Done)
            }
            "params-total" => {
                let params: Vec<db::Value> = (0..10).map(|_| vec![7u8; 1 << 20].into()).collect();
                db::query("SELECT 1", &params).map_err(refused)?;
                Ok(Outcome::Done)
            }
            "random" => {
                let bytes = wasi::random::random::get_random_bytes(64 << 20);
                log::info(&format!("{} random bytes", bytes.len()));
                Ok(Outcome::Done)
            }
            "sockets" => {
                use std::net::{TcpStream, ToSocketAddrs, UdpSocket};
                let tcp = TcpStream::connect(ctx.payload.target.as_str()).map(drop);
                let udp = UdpSocket::bind("0.0.0.0:0").map(drop);
                let lookup = "localhost:80".to_socket_addrs().map(drop);
                match (tcp, udp, lookup) {
                    (Err(tcp), Err(udp), Err(lookup)) => Err(JobError::Failed(format!(
                        "sockets refused: tcp {:?}, udp {:?}, lookup {:?}",
                        tcp.kind(),
                        udp.kind(),
                        lookup.kind()
                    ))),
                    _ => Ok(Outcome::Done),
                }
            }
            "networks" => loop {
                std::mem::forget(wasi::sockets::instance_network::instance_network());
            },
            "handles" => loop {
                std::mem::forget(wasi::cli::stdout::get_stdout());
            },
            "escapes" => {
                log::warn("\u{1b}[2J\u{1b}[H\u{1b}[31mscreen cleared\r\u{202e}desrever");
                print!("\u{1b}]0;a new title\u{7}");
                Err(JobError::Failed(
                    "\u{1b}[1A\u{1b}[2Kerased the line above".into(),
                ))
            }
            "markup" => {
                log::warn(
                    "<img src=x onerror=\"document.title='pwned'\"><script>document.title='pwned'</script>",
                );
                Err(JobError::Failed(
                    "<b>bold</b><img src=x onerror=\"document.title='pwned'\">".into(),
                ))
            }
            "nul" => {
                log::info("a NUL \0 in a log line");
                let mut out = std::io::stdout();
                let _ = out.write_all(b"stdout \0 and invalid UTF-8 \xff\xfe\n");
                let _ = out.flush();
                Err(JobError::Failed("a NUL \0 in the error".into()))
            }
            "nul-flood" => {
                let mut out = std::io::stdout();
                let _ = out.write_all(&[0u8; 40 << 10]);
                let _ = out.write_all(&[0xffu8; 40 << 10]);
                let _ = out.flush();
                Ok(Outcome::Done)
            }
            "passes" if ctx.pass < ctx.payload.passes => {
                log::info(&format!("pass {}", ctx.pass));
                Ok(Outcome::Continue(serde_json::json!(ctx.pass)))
            }
            "passes" => Ok(Outcome::Done),
            "nul-cursor" if ctx.pass == 1 => Ok(Outcome::Continue(serde_json::json!("a\u{0}b"))),
            "nul-cursor" => Ok(Outcome::Done),
            "huge-cursor" => Ok(Outcome::Continue(serde_json::json!("x".repeat(1 << 20)))),
            "defer" => Ok(Outcome::Defer(std::time::Duration::from_millis(
                ctx.payload.defer_ms,
            ))),
            "burn" => {
                burn(ctx.payload.iterations);
                match ctx.payload.then.as_str() {
                    // A trap no call precedes: past the end of any 32-bit memory.
                    "trap" => {
                        let beyond = std::hint::black_box(u32::MAX as usize - 7) as *const u64;
                        // SAFETY: none; the load is meant to trap.
                        let word = unsafe { beyond.read_volatile() };
                        Err(JobError::Failed(format!("read {word}")))
                    }
                    "spin" => {
                        burn(u64::MAX);
                        Ok(Outcome::Done)
                    }
                    _ => Ok(Outcome::Done),
                }
            }
            "sql" => {
                for sql in &ctx.payload.sql {
                    db::query(sql, &[]).map_err(refused)?;
                }
                Ok(Outcome::Done)
            }
            other => Err(JobError::Unrecoverable(format!("unknown mode {other}"))),
        }
    }
}

jobhost_guest::export_job!(Adversary);
