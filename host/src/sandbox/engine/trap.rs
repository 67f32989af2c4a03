//! What a trap tells the job's author: what trapped — for a Rust panic, the panic's message
//! and place — and where in the guest: the frames of wasmtime's backtrace, named from the
//! component's name section and demangled. Names and messages are the guest's own bytes,
//! so frames, names and the panic are bounded here, and the whole message again where it
//! is stored (`engine::attempt`).
//!
//! A panic reaches the host as text the guest wrote: the SDK's hook logs one `error` line
//! `panicked at FILE:LINE:COLUMN: MESSAGE` (noted by the log as it is written, so a full
//! log cannot lose it); a component whose SDK installs no hook leaves the standard
//! library's report on stderr, read back from the log. Either is used only when the
//! attempt then ended at an `unreachable` instruction, as a panic does: it is the guest's
//! own text about its own attempt, kept under the code `trap` like any guest message.

use super::output::AttemptLog;
use wasmtime::{Trap, WasmBacktrace};

/// Lines of frames shown, innermost first (a run of one function, as in a stack overflow,
/// is one line).
const MAX_LINES: usize = 16;
/// Longest function name shown, in characters.
const MAX_NAME: usize = 120;
/// Where a panic's innermost frames come from: the standard library's panic machinery,
/// which says nothing about the job (its message and place say what trapped).
const RUNTIME: [&str; 14] = [
    "std::",
    "core::",
    "alloc::",
    "<std::",
    "<core::",
    "<alloc::",
    "__rustc::",
    "panic_abort::",
    "panic_unwind::",
    "dlmalloc::",
    "wasi::",
    "abort",
    "__rust_",
    "rust_panic",
];

/// Longest panic report kept, in bytes.
const MAX_PANIC: usize = 768;
/// Most lines of a panic's message read back from the standard library's report.
const MAX_PANIC_LINES: usize = 8;
/// How both the SDK's hook and the standard library's start a panic's place.
const PANICKED_AT: &str = "panicked at ";

/// The panic an `error` log line reports, if it is one (the SDK's hook writes it).
pub fn panic_line(message: &str) -> Option<String> {
    message.starts_with(PANICKED_AT).then(|| report(message))
}

/// The last panic the standard library's hook wrote to stderr: `thread '…' panicked at
/// FILE:LINE:COLUMN:`, the message on the lines after it, then its `note:`.
fn panic_in_log(log: &str) -> Option<String> {
    let at = log.rfind(" panicked at ")?;
    let mut lines = log[at + 1..].lines();
    let place = lines.next()?.strip_prefix(PANICKED_AT)?.strip_suffix(':')?;
    let message: Vec<&str> = lines
        .take_while(|line| !line.starts_with("note: "))
        .take(MAX_PANIC_LINES)
        .collect();
    Some(report(&format!(
        "{PANICKED_AT}{place}: {}",
        message.join("\n")
    )))
}

fn report(text: &str) -> String {
    crate::rules::guest_text::for_storage(text.trim_end(), MAX_PANIC)
}

/// What trapped (the panic the guest reported, if it ended as a panic does) and the
/// guest's frames, if `error` is a trap with either.
pub fn describe(error: &wasmtime::Error, log: &AttemptLog) -> Option<String> {
    let trap = error.downcast_ref::<Trap>();
    let backtrace = error.downcast_ref::<WasmBacktrace>();
    if trap.is_none() && backtrace.is_none() {
        return None;
    }
    let panic = (trap == Some(&Trap::UnreachableCodeReached))
        .then(|| log.panic().or_else(|| panic_in_log(&log.contents().0)))
        .flatten();
    let mut text = match (panic, trap) {
        (Some(panic), _) => panic,
        (None, Some(trap)) => format!("{trap}"),
        (None, None) => "the guest trapped".to_string(),
    };
    let names: Vec<String> = backtrace
        .map(|b| b.frames())
        .unwrap_or_default()
        .iter()
        .map(|frame| {
            frame.func_name().map_or_else(
                || format!("<function {}>", frame.func_index()),
                |name| bounded(&format!("{:#}", rustc_demangle::demangle(name))),
            )
        })
        .collect();
    if names.is_empty() {
        return Some(text);
    }
    text.push_str("\nguest backtrace:");
    let runtime = names
        .iter()
        .take_while(|n| RUNTIME.iter().any(|r| n.starts_with(r)))
        .count();
    let first = if runtime < names.len() { runtime } else { 0 };
    if first > 0 {
        text.push_str(&format!("\n  0-{}: the panic runtime", first - 1));
    }
    let mut lines = 0;
    let mut at = first;
    while at < names.len() && lines < MAX_LINES {
        let run = names[at..].iter().take_while(|n| **n == names[at]).count();
        match run {
            1 => text.push_str(&format!("\n  {at}: {}", names[at])),
            _ => text.push_str(&format!("\n  {at}-{}: {}", at + run - 1, names[at])),
        }
        at += run;
        lines += 1;
    }
    if at < names.len() {
        text.push_str(&format!("\n  ... {} more frames", names.len() - at));
    }
    Some(text)
}

fn bounded(name: &str) -> String {
    // Control characters (a newline could forge a frame) become '?'.
    let clean: String = name
        .chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .take(MAX_NAME + 1)
        .collect();
    if clean.chars().count() > MAX_NAME {
        format!("{}…", clean.chars().take(MAX_NAME).collect::<String>())
    } else {
        clean
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_demangled_bounded_and_kept_on_one_line() {
        assert_eq!(
            bounded(&format!(
                "{:#}",
                rustc_demangle::demangle("_ZN4demo3run17h0123456789abcdefE")
            )),
            "demo::run"
        );
        assert_eq!(bounded("a\nb\u{1b}[31m"), "a?b?[31m");
        let long = "x".repeat(500);
        assert_eq!(bounded(&long).chars().count(), MAX_NAME + 1);
    }

    #[test]
    fn a_trap_names_the_functions_it_passed_through() {
        let mut config = wasmtime::Config::new();
        config.wasm_backtrace_details(wasmtime::WasmBacktraceDetails::Disable);
        let engine = wasmtime::Engine::new(&config).unwrap();
        let wasm = wat::parse_str(
            r#"(module
                (func $inner unreachable)
                (func $_ZN4demo5outer17h0123456789abcdefE call $inner)
                (func (export "run") call $_ZN4demo5outer17h0123456789abcdefE))"#,
        )
        .unwrap();
        let module = wasmtime::Module::new(&engine, wasm).unwrap();
        let mut store = wasmtime::Store::new(&engine, ());
        let instance = wasmtime::Instance::new(&mut store, &module, &[]).unwrap();
        let run = instance
            .get_typed_func::<(), ()>(&mut store, "run")
            .unwrap();
        let error = run.call(&mut store, ()).unwrap_err();
        let log = AttemptLog::new(1024);
        let text = describe(&error, &log).unwrap();
        assert!(text.contains("unreachable"), "{text}");
        assert!(
            text.ends_with("guest backtrace:\n  0: inner\n  1: demo::outer\n  2: <function 2>"),
            "{text}"
        );
        assert!(describe(&wasmtime::Error::msg("not a trap"), &log).is_none());

        // A panic the guest reported before it reached `unreachable` says what trapped.
        log.note_panic(panic_line("panicked at src/lib.rs:28:40: index out of bounds").unwrap());
        let text = describe(&error, &log).unwrap();
        assert!(
            text.starts_with(
                "panicked at src/lib.rs:28:40: index out of bounds\nguest backtrace:\n  0: inner"
            ),
            "{text}"
        );
    }

    #[test]
    fn a_panic_is_read_from_either_hook_bounded() {
        assert_eq!(panic_line("done"), None);
        assert_eq!(
            panic_line("panicked at src/lib.rs:3:5: boom").as_deref(),
            Some("panicked at src/lib.rs:3:5: boom")
        );
        assert!(
            panic_line(&format!("panicked at {}", "x".repeat(10_000)))
                .unwrap()
                .len()
                <= MAX_PANIC
        );
        let stderr = "[info] started\n\nthread '<unnamed>' panicked at src/lib.rs:28:40:\n\
            index out of bounds: the len is 3 but the index is 5\n\
            note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace\n";
        assert_eq!(
            panic_in_log(stderr).as_deref(),
            Some(
                "panicked at src/lib.rs:28:40: index out of bounds: the len is 3 but the index is 5"
            )
        );
        assert_eq!(panic_in_log("[info] nothing panicked at all"), None);
    }
}
