//! What a trap tells the job's author: what trapped, and where in the guest — the frames of
//! wasmtime's backtrace, named from the component's name section and demangled. Names are
//! the guest's own bytes, so frames and names are bounded here, and the whole message again
//! where it is stored (`engine::attempt`).

use wasmtime::{Trap, WasmBacktrace};

/// Lines of frames shown, innermost first (a run of one function, as in a stack overflow,
/// is one line).
const MAX_LINES: usize = 16;
/// Longest function name shown, in characters.
const MAX_NAME: usize = 120;
/// Where a panic's innermost frames come from: the standard library's panic machinery,
/// which says nothing about the job (its message is in the attempt's log).
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

/// The trap and the guest's frames, if `error` is a trap with either.
pub fn describe(error: &wasmtime::Error) -> Option<String> {
    let trap = error.downcast_ref::<Trap>();
    let backtrace = error.downcast_ref::<WasmBacktrace>();
    if trap.is_none() && backtrace.is_none() {
        return None;
    }
    let mut text = match trap {
        Some(trap) => format!("{trap}"),
        None => "the guest trapped".to_string(),
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
        let text = describe(&error).unwrap();
        assert!(text.contains("unreachable"), "{text}");
        assert!(
            text.ends_with("guest backtrace:\n  0: inner\n  1: demo::outer\n  2: <function 2>"),
            "{text}"
        );
        assert!(describe(&wasmtime::Error::msg("not a trap")).is_none());
    }
}
