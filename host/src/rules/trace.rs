//! W3C Trace Context (`traceparent`): which trace a run belongs to, decided once when the
//! run is queued and carried from there to its attempts, its `links` calls and its
//! reports.
//!
//! A `traceparent` comes from whoever asks for the run (an API client, the CLI); the API
//! header is untrusted, so it is parsed strictly and a value that is not exactly
//! `00-<32 lowercase hex, not all zero>-<16 lowercase hex, not all zero>-<2 lowercase hex>`
//! is dropped, never stored or echoed. Only version `00` is taken: a later version's
//! fields cannot be known to mean the same, and the spec lets a party that does not know a
//! version start a new trace, which is what the host does. Of the flags only `sampled` is
//! kept (the other bits have no meaning at version `00` that the host honours).
//!
//! Without one, the host starts a trace (a random trace id). Fan-out children and an
//! event's runs share the trace of the kick, fire or emit that queued them. A run queued
//! where no trace was decided (the follow-up of kicks that arrived while a run held its
//! lease, rows from before migration 0009) has a trace id derived from its run id, so it
//! is the same on every host and every view.

use rand::RngCore;
use sha2::{Digest, Sha256};
use std::fmt;

/// The `sampled` flag, the only one the host propagates.
const SAMPLED: u8 = 0x01;
/// `00-` + 32 + `-` + 16 + `-` + 2.
const LEN: usize = 55;

/// A validated trace context: the trace, the span that is the parent of whatever the
/// holder does next, and the flags.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct TraceParent {
    trace_id: [u8; 16],
    parent_id: [u8; 8],
    flags: u8,
}

impl TraceParent {
    /// A `traceparent` header's value if it is well formed, or `None` (never an error: a
    /// malformed header is ignored, and the host starts a trace instead).
    pub fn parse(header: &str) -> Option<TraceParent> {
        let bytes = header.as_bytes();
        if bytes.len() != LEN
            || !bytes.starts_with(b"00-")
            || bytes[35] != b'-'
            || bytes[52] != b'-'
        {
            return None;
        }
        // By bytes: a multi-byte character must not be cut.
        let trace_id: [u8; 16] = lower_hex(&bytes[3..35])?;
        let parent_id: [u8; 8] = lower_hex(&bytes[36..52])?;
        let [flags]: [u8; 1] = lower_hex(&bytes[53..55])?;
        if trace_id == [0; 16] || parent_id == [0; 8] {
            return None;
        }
        Some(TraceParent {
            trace_id,
            parent_id,
            flags: flags & SAMPLED,
        })
    }

    /// The first of `headers` (an HTTP request's `traceparent` values) if it is the only
    /// one and well formed: the spec makes two of them invalid.
    pub fn from_headers<'a>(mut headers: impl Iterator<Item = &'a [u8]>) -> Option<TraceParent> {
        let first = headers.next()?;
        if headers.next().is_some() {
            return None;
        }
        TraceParent::parse(std::str::from_utf8(first).ok()?)
    }

    /// The trace of a new run: the caller's, if it gave a valid one, or a new trace. Every
    /// path that queues a run on someone's request (kick, start, emit) decides here.
    pub fn given_or_start(given: Option<TraceParent>) -> TraceParent {
        given.unwrap_or_else(TraceParent::start)
    }

    /// A new trace: a random trace id, sampled.
    pub fn start() -> TraceParent {
        let mut rng = rand::rng();
        let mut trace_id = [0u8; 16];
        while trace_id == [0; 16] {
            rng.fill_bytes(&mut trace_id);
        }
        TraceParent {
            trace_id,
            parent_id: span_id(&mut rng),
            flags: SAMPLED,
        }
    }

    /// The context a call made in this trace carries: the same trace and flags, a new
    /// span id as its parent.
    pub fn child(&self) -> TraceParent {
        TraceParent {
            parent_id: span_id(&mut rand::rng()),
            ..*self
        }
    }

    /// A new span in the trace `trace_id` (32 hex, as a report's body carries it), if it
    /// is one.
    pub fn child_of_trace(trace_id: &str) -> Option<TraceParent> {
        let trace_id: [u8; 16] = lower_hex(trace_id.as_bytes())?;
        (trace_id != [0; 16]).then(|| TraceParent {
            trace_id,
            parent_id: span_id(&mut rand::rng()),
            flags: SAMPLED,
        })
    }

    /// The trace of a run: the one stored with it, or, where none was (a follow-up, an
    /// older row), one derived from its id.
    pub fn of_run(stored: Option<&str>, run_id: &str) -> TraceParent {
        if let Some(trace) = stored.and_then(TraceParent::parse) {
            return trace;
        }
        let digest = Sha256::digest(format!("jobhost-trace\0{run_id}").as_bytes());
        let mut trace_id: [u8; 16] = digest[..16].try_into().expect("16 bytes");
        let mut parent_id: [u8; 8] = digest[16..24].try_into().expect("8 bytes");
        // A digest of all zeros is as good as impossible; never produce an invalid id.
        trace_id[15] |= u8::from(trace_id == [0; 16]);
        parent_id[7] |= u8::from(parent_id == [0; 8]);
        TraceParent {
            trace_id,
            parent_id,
            flags: SAMPLED,
        }
    }

    /// The trace id, 32 lowercase hex.
    pub fn trace_id(&self) -> String {
        hex::encode(self.trace_id)
    }

    /// The context as OpenTelemetry's remote parent.
    fn remote_context(&self) -> opentelemetry::Context {
        use opentelemetry::trace::{
            SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState,
        };
        let parent = SpanContext::new(
            TraceId::from_bytes(self.trace_id),
            SpanId::from_bytes(self.parent_id),
            TraceFlags::new(self.flags),
            true,
            TraceState::default(),
        );
        opentelemetry::Context::new().with_remote_span_context(parent)
    }
}

/// The span attempt number `attempt` (of its pass) of run `run_id` runs in, on a worker
/// of `lane`: it carries the run's trace id, so the host's log lines of the attempt name
/// it, and the attempt, tenant and lane, so a trace tells a retry from a first try and
/// whose work took which workers. The caller passes the run's fields, not its row: a
/// rule knows no store.
/// Exported (`otlp`), it is a child of the run's context, so it joins the caller's trace.
pub fn attempt_span(
    trace: &TraceParent,
    job: &str,
    run_id: &str,
    tenant: &str,
    attempt: i64,
    lane: &str,
) -> tracing::Span {
    use tracing_opentelemetry::OpenTelemetrySpanExt;
    let span = tracing::info_span!(
        "attempt",
        trace_id = %trace.trace_id(),
        job = %job,
        run_id = %run_id,
        attempt,
        tenant = %tenant,
        lane = %lane,
    );
    // Without an exporter there is no context to set: nothing to do.
    let _ = span.set_parent(trace.remote_context());
    span
}

/// The header's text: `00-<trace id>-<parent id>-<flags>`.
impl fmt::Display for TraceParent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "00-{}-{}-{:02x}",
            hex::encode(self.trace_id),
            hex::encode(self.parent_id),
            self.flags
        )
    }
}

impl fmt::Debug for TraceParent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TraceParent({self})")
    }
}

/// `N` bytes from exactly `2N` lowercase hex digits.
fn lower_hex<const N: usize>(text: &[u8]) -> Option<[u8; N]> {
    let lower = text.len() == 2 * N
        && text
            .iter()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b));
    if !lower {
        return None;
    }
    let mut out = [0u8; N];
    hex::decode_to_slice(text, &mut out).ok()?;
    Some(out)
}

fn span_id(rng: &mut impl RngCore) -> [u8; 8] {
    let mut id = [0u8; 8];
    while id == [0; 8] {
        rng.fill_bytes(&mut id);
    }
    id
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const GOOD: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn a_well_formed_header_round_trips() {
        let t = TraceParent::parse(GOOD).expect("valid");
        assert_eq!(t.to_string(), GOOD);
        assert_eq!(t.trace_id(), "4bf92f3577b34da6a3ce929d0e0e4736");
        let unsampled = TraceParent::parse(&GOOD.replace("-01", "-00")).unwrap();
        assert!(unsampled.to_string().ends_with("-00"));
        // Flags other than `sampled` are not propagated.
        let other = TraceParent::parse(&GOOD.replace("-01", "-ff")).unwrap();
        assert!(other.to_string().ends_with("-01"));
    }

    #[test]
    fn anything_else_is_refused() {
        let junk = "x".repeat(10 << 10);
        let bad = [
            "",
            "zz",
            junk.as_str(),
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01 ",
            " 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00_4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7_01",
            "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0g",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b\0-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba90\u{1b}[2J",
            "00-+bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            // 55 bytes with a character across a field's edge.
            "00-4bf92f3577b34da6a3ce929d0e0e473\u{e9}00f067aa0ba902b7-01",
        ];
        for header in bad {
            assert_eq!(TraceParent::parse(header), None, "{header:?}");
        }
    }

    #[test]
    fn two_headers_are_none() {
        let one = [GOOD.as_bytes()];
        assert!(TraceParent::from_headers(one.into_iter()).is_some());
        let two = [GOOD.as_bytes(), GOOD.as_bytes()];
        assert!(TraceParent::from_headers(two.into_iter()).is_none());
        let not_utf8: [&[u8]; 1] = [b"\xff\xfe"];
        assert!(TraceParent::from_headers(not_utf8.into_iter()).is_none());
        assert!(TraceParent::from_headers(std::iter::empty()).is_none());
    }

    #[test]
    fn a_child_keeps_the_trace_with_a_new_parent() {
        let t = TraceParent::parse(GOOD).unwrap();
        let c = t.child();
        assert_eq!(c.trace_id(), t.trace_id());
        assert_ne!(c.parent_id, t.parent_id);
        assert_eq!(c.flags, t.flags);
        let r = TraceParent::child_of_trace(&t.trace_id()).unwrap();
        assert_eq!(r.trace_id(), t.trace_id());
        assert_eq!(TraceParent::child_of_trace("zz"), None);
        assert_eq!(TraceParent::child_of_trace(&"0".repeat(32)), None);
    }

    #[test]
    fn a_run_without_a_stored_trace_has_one_derived_from_its_id() {
        let a = TraceParent::of_run(None, "run-a");
        assert_eq!(a, TraceParent::of_run(None, "run-a"));
        assert_ne!(a.trace_id(), TraceParent::of_run(None, "run-b").trace_id());
        assert_eq!(TraceParent::parse(&a.to_string()), Some(a));
        assert_eq!(TraceParent::of_run(Some("zz"), "run-a"), a);
        assert_eq!(TraceParent::of_run(Some(GOOD), "run-a").to_string(), GOOD);
    }

    proptest! {
        #[test]
        fn started_traces_and_children_are_valid(_seed in any::<u8>()) {
            let t = TraceParent::start();
            prop_assert_eq!(TraceParent::parse(&t.to_string()), Some(t));
            let c = t.child();
            prop_assert_eq!(TraceParent::parse(&c.to_string()), Some(c));
        }

        #[test]
        fn any_valid_header_round_trips(
            trace in any::<[u8; 16]>().prop_filter("not zero", |t| *t != [0; 16]),
            parent in any::<[u8; 8]>().prop_filter("not zero", |p| *p != [0; 8]),
            sampled in any::<bool>(),
        ) {
            let text = format!("00-{}-{}-0{}", hex::encode(trace), hex::encode(parent), u8::from(sampled));
            let t = TraceParent::parse(&text).expect("valid");
            prop_assert_eq!(t.to_string(), text);
        }

        #[test]
        fn what_parses_prints_back_as_a_valid_header(text in "\\PC{0,80}") {
            // Whatever a client sends: either refused, or stored in the canonical form.
            if let Some(t) = TraceParent::parse(&text) {
                let shown = t.to_string();
                prop_assert_eq!(shown.len(), LEN);
                prop_assert_eq!(TraceParent::parse(&shown), Some(t));
            }
        }

        #[test]
        fn near_misses_of_a_good_header_are_refused(index in 0usize..LEN, byte in any::<u8>()) {
            let mut bytes = GOOD.as_bytes().to_vec();
            let original = bytes[index];
            bytes[index] = byte;
            let Ok(text) = String::from_utf8(bytes) else { return Ok(()) };
            let valid_digit = byte.is_ascii_digit() || (b'a'..=b'f').contains(&byte);
            let still_fine = byte == original
                || (index >= 3 && index != 35 && index != 52 && valid_digit);
            if !still_fine {
                prop_assert_eq!(TraceParent::parse(&text), None, "{:?}", text);
            }
        }
    }
}
