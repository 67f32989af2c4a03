//! The queue-safety rule for every JSON value a run carries — its payload, its cursor and
//! its steps' results: JSON values only, bounded in size and depth. It is one rule so that
//! every door applies the same one: `host run`, a kick or start through the API, a guest's
//! `continue`, a step's record. What passes is read the same way by any JSON reader the
//! value meets later: UTF-8 with no lone surrogates, finite numbers, no key given twice,
//! nothing after the value.
//!
//! A refusal names the JSON path where the problem starts (`$.items[3].x`). The path ends up
//! in logs and in front of operators while its keys come from guests, so every character
//! outside printable ASCII is shown escaped and the path is cut to 200 bytes.

use std::collections::HashSet;
use std::fmt::{self, Write as _};

/// Bounds on one JSON value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JsonLimits {
    /// Largest text, in bytes; checked before anything is read, so a huge text costs nothing.
    pub max_bytes: usize,
    /// Deepest nesting of arrays and objects (a top-level array is depth 1). Above
    /// 127 it acts as 127, the deepest serde_json reads.
    pub max_depth: usize,
}

/// A run's payload.
pub const PAYLOAD: JsonLimits = JsonLimits {
    max_bytes: 256 * 1024,
    max_depth: 32,
};
/// The cursor a pass hands to the next.
pub const CURSOR: JsonLimits = JsonLimits {
    max_bytes: 64 * 1024,
    max_depth: 32,
};
/// What a step records as its result.
pub const STEP_RESULT: JsonLimits = JsonLimits {
    max_bytes: 64 * 1024,
    max_depth: 32,
};

/// The deepest nesting serde_json reads with its default recursion limit.
const SERDE_MAX_DEPTH: usize = 127;
/// Longest path, in bytes, a refusal shows; a longer one is cut and ends in `…`.
const MAX_PATH_BYTES: usize = 200;

/// Why a text is not taken. Its message is for operators; guests get only [`Self::code`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JsonRefusal {
    /// Refused on its length alone, before it was read (its path would be `$`).
    #[error("{size} bytes; the limit is {limit}")]
    TooLarge { size: usize, limit: usize },
    /// The first problem found reading left to right, and the path of the value holding it.
    #[error("at {path}: {problem}")]
    Invalid { path: String, problem: Problem },
}

/// What is wrong at a refusal's path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Problem {
    Syntax,
    NotUtf8,
    LoneSurrogate,
    NonFinite,
    TooDeep,
    DuplicateKey,
    TrailingData,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Problem::Syntax => "not JSON",
            Problem::NotUtf8 => "not UTF-8",
            Problem::LoneSurrogate => "a lone surrogate in a string escape",
            Problem::NonFinite => "a number that is not finite (NaN, Infinity or out of range)",
            Problem::TooDeep => "nested deeper than the limit",
            Problem::DuplicateKey => "a key given twice",
            Problem::TrailingData => "data after the value",
        })
    }
}

impl JsonRefusal {
    /// A fixed reason code: guests are told `invalid(<code>)`, never the path or the text.
    pub fn code(&self) -> &'static str {
        match self {
            JsonRefusal::TooLarge { .. } => "too-large",
            JsonRefusal::Invalid { problem, .. } => match problem {
                Problem::Syntax => "not-json",
                Problem::NotUtf8 => "not-utf8",
                Problem::LoneSurrogate => "lone-surrogate",
                Problem::NonFinite => "non-finite",
                Problem::TooDeep => "too-deep",
                Problem::DuplicateKey => "duplicate-key",
                Problem::TrailingData => "trailing-data",
            },
        }
    }
}

/// `bytes` as a JSON value if it keeps the rule within `limits`, or why not and where.
pub fn check(bytes: &[u8], limits: JsonLimits) -> Result<serde_json::Value, JsonRefusal> {
    validate(bytes, limits)?;
    // What passes `validate` serde_json reads (the tests hold it to that): a safety net.
    serde_json::from_slice(bytes).map_err(|_| JsonRefusal::Invalid {
        path: "$".to_string(),
        problem: Problem::Syntax,
    })
}

/// [`check`], then the value's canonical text (serde_json's compact form), so that what is
/// stored and handed on does not depend on how the sender spaced or ordered it. The bound
/// holds for that text too: serde_json writes a number as it sees fit (`1e15` becomes
/// `1000000000000000.0`), so what is stored can be longer than what was sent.
pub fn canonical(bytes: &[u8], limits: JsonLimits) -> Result<String, JsonRefusal> {
    let text = check(bytes, limits)?.to_string();
    if text.len() > limits.max_bytes {
        return Err(JsonRefusal::TooLarge {
            size: text.len(),
            limit: limits.max_bytes,
        });
    }
    Ok(text)
}

/// The rule without building the value: the size first, then one pass over the text.
fn validate(bytes: &[u8], limits: JsonLimits) -> Result<(), JsonRefusal> {
    if bytes.len() > limits.max_bytes {
        return Err(JsonRefusal::TooLarge {
            size: bytes.len(),
            limit: limits.max_bytes,
        });
    }
    Validator {
        bytes,
        pos: 0,
        path: Vec::new(),
        max_depth: limits.max_depth.min(SERDE_MAX_DEPTH),
    }
    .run()
}

/// One step of a path: into an array's element or an object's member.
enum Step {
    Element(usize),
    /// `seen` holds the object's keys so far, to refuse one given twice.
    Member {
        key: String,
        seen: HashSet<String>,
    },
}

/// Reads a whole text once, left to right, holding one step per open array or object
/// rather than recursing, so no input can exhaust the native stack.
struct Validator<'a> {
    bytes: &'a [u8],
    pos: usize,
    /// Where the value being read sits.
    path: Vec<Step>,
    max_depth: usize,
}

impl Validator<'_> {
    fn run(&mut self) -> Result<(), JsonRefusal> {
        loop {
            // A value is expected at `self.path`.
            self.skip_whitespace();
            match self.peek() {
                Some(b'[') => {
                    self.open()?;
                    if !self.eat(b']') {
                        self.path.push(Step::Element(0));
                        continue;
                    }
                }
                Some(b'{') => {
                    self.open()?;
                    if !self.eat(b'}') {
                        self.enter_member(HashSet::new())?;
                        continue;
                    }
                }
                Some(b'"') => self.string(None)?,
                Some(b'-' | b'0'..=b'9') => self.number()?,
                Some(b't') => self.literal(b"true")?,
                Some(b'f') => self.literal(b"false")?,
                Some(b'n') => self.literal(b"null")?,
                Some(b'N' | b'I') => return Err(self.refuse(Problem::NonFinite)),
                _ => return Err(self.unexpected()),
            }
            // The value is complete: close the arrays and objects it completes.
            loop {
                self.skip_whitespace();
                match (self.path.pop(), self.peek()) {
                    (None, None) => return Ok(()),
                    (None, Some(_)) => return Err(self.refuse(Problem::TrailingData)),
                    (Some(Step::Element(index)), Some(b',')) => {
                        self.pos += 1;
                        self.path.push(Step::Element(index + 1));
                        break;
                    }
                    (Some(Step::Member { seen, .. }), Some(b',')) => {
                        self.pos += 1;
                        self.enter_member(seen)?;
                        break;
                    }
                    (Some(Step::Element(_)), Some(b']'))
                    | (Some(Step::Member { .. }), Some(b'}')) => {
                        self.pos += 1;
                    }
                    // A bad separator is the array's or object's, so the path is theirs.
                    (Some(_), _) => return Err(self.unexpected()),
                }
            }
        }
    }

    /// Steps past `[` or `{` and the whitespace after it, refusing first if this would
    /// nest too deep.
    fn open(&mut self) -> Result<(), JsonRefusal> {
        if self.path.len() >= self.max_depth {
            return Err(self.refuse(Problem::TooDeep));
        }
        self.pos += 1;
        self.skip_whitespace();
        Ok(())
    }

    /// Reads an object member's `"key":` and steps into its value; the key must not be
    /// one of `seen`.
    fn enter_member(&mut self, mut seen: HashSet<String>) -> Result<(), JsonRefusal> {
        self.skip_whitespace();
        if self.peek() != Some(b'"') {
            return Err(self.unexpected());
        }
        let mut key = String::new();
        self.string(Some(&mut key))?;
        let given_twice = !seen.insert(key.clone());
        self.path.push(Step::Member { key, seen });
        if given_twice {
            return Err(self.refuse(Problem::DuplicateKey));
        }
        self.skip_whitespace();
        if !self.eat(b':') {
            return Err(self.unexpected());
        }
        Ok(())
    }

    /// Reads a string from its opening quote, appending its decoded text to `out`.
    fn string(&mut self, mut out: Option<&mut String>) -> Result<(), JsonRefusal> {
        let bytes = self.bytes;
        self.pos += 1;
        loop {
            let rest = &bytes[self.pos..];
            let run = rest
                .iter()
                .position(|&b| b == b'"' || b == b'\\' || b < 0x20)
                .unwrap_or(rest.len());
            let text =
                std::str::from_utf8(&rest[..run]).map_err(|_| self.refuse(Problem::NotUtf8))?;
            if let Some(out) = out.as_deref_mut() {
                out.push_str(text);
            }
            self.pos += run;
            match self.peek() {
                Some(b'"') => {
                    self.pos += 1;
                    return Ok(());
                }
                Some(b'\\') => {
                    self.pos += 1;
                    let c = self.escape()?;
                    if let Some(out) = out.as_deref_mut() {
                        out.push(c);
                    }
                }
                // A raw control character, or the end of the text.
                _ => return Err(self.refuse(Problem::Syntax)),
            }
        }
    }

    /// Reads an escape after its backslash.
    fn escape(&mut self) -> Result<char, JsonRefusal> {
        let c = match self.peek() {
            Some(b'"') => '"',
            Some(b'\\') => '\\',
            Some(b'/') => '/',
            Some(b'b') => '\u{8}',
            Some(b'f') => '\u{c}',
            Some(b'n') => '\n',
            Some(b'r') => '\r',
            Some(b't') => '\t',
            Some(b'u') => {
                self.pos += 1;
                return self.unicode_escape();
            }
            _ => return Err(self.refuse(Problem::Syntax)),
        };
        self.pos += 1;
        Ok(c)
    }

    /// Reads `XXXX` after `\u`, and the low half after it when it is a surrogate pair's
    /// high half.
    fn unicode_escape(&mut self) -> Result<char, JsonRefusal> {
        let unit = self.hex4()?;
        let code = match unit {
            0xD800..=0xDBFF => {
                if !self.bytes[self.pos..].starts_with(b"\\u") {
                    return Err(self.refuse(Problem::LoneSurrogate));
                }
                self.pos += 2;
                let low = self.hex4()?;
                if !(0xDC00..=0xDFFF).contains(&low) {
                    return Err(self.refuse(Problem::LoneSurrogate));
                }
                0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00)
            }
            _ => unit,
        };
        // Only a low half standing alone is not a char here.
        char::from_u32(code).ok_or_else(|| self.refuse(Problem::LoneSurrogate))
    }

    fn hex4(&mut self) -> Result<u32, JsonRefusal> {
        let digits = self.bytes.get(self.pos..self.pos + 4);
        let unit = digits.and_then(|digits| {
            digits.iter().try_fold(0, |unit, &b| {
                char::from(b).to_digit(16).map(|digit| (unit << 4) | digit)
            })
        });
        let Some(unit) = unit else {
            return Err(self.refuse(Problem::Syntax));
        };
        self.pos += 4;
        Ok(unit)
    }

    /// Reads a number, which must be one serde_json reads as a finite f64 or an integer.
    fn number(&mut self) -> Result<(), JsonRefusal> {
        let start = self.pos;
        self.eat(b'-');
        if self.peek() == Some(b'I') {
            return Err(self.refuse(Problem::NonFinite));
        }
        if !self.eat(b'0') && !self.digits() {
            return Err(self.refuse(Problem::Syntax));
        }
        if self.eat(b'.') && !self.digits() {
            return Err(self.refuse(Problem::Syntax));
        }
        if self.eat(b'e') || self.eat(b'E') {
            if !self.eat(b'+') {
                self.eat(b'-');
            }
            if !self.digits() {
                return Err(self.refuse(Problem::Syntax));
            }
        }
        // serde_json itself judges the range: it refuses some texts that round to f64::MAX.
        let text = &self.bytes[start..self.pos];
        if serde_json::from_slice::<serde_json::Number>(text).is_err() {
            return Err(self.refuse(Problem::NonFinite));
        }
        Ok(())
    }

    /// Steps past one or more ASCII digits, saying whether there were any.
    fn digits(&mut self) -> bool {
        let start = self.pos;
        while self.peek().is_some_and(|b| b.is_ascii_digit()) {
            self.pos += 1;
        }
        self.pos > start
    }

    fn literal(&mut self, word: &[u8]) -> Result<(), JsonRefusal> {
        if !self.bytes[self.pos..].starts_with(word) {
            return Err(self.refuse(Problem::Syntax));
        }
        self.pos += word.len();
        Ok(())
    }

    fn skip_whitespace(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.pos += 1;
        }
    }

    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.pos).copied()
    }

    fn eat(&mut self, b: u8) -> bool {
        let found = self.peek() == Some(b);
        if found {
            self.pos += 1;
        }
        found
    }

    /// The refusal for a byte that cannot stand where it is: not UTF-8 if it starts no
    /// character, otherwise not JSON.
    fn unexpected(&self) -> JsonRefusal {
        let window = &self.bytes[self.pos..self.bytes.len().min(self.pos + 4)];
        if std::str::from_utf8(window).is_err_and(|e| e.valid_up_to() == 0) {
            return self.refuse(Problem::NotUtf8);
        }
        self.refuse(Problem::Syntax)
    }

    fn refuse(&self, problem: Problem) -> JsonRefusal {
        JsonRefusal::Invalid {
            path: render(&self.path),
            problem,
        }
    }
}

/// `$`, `$.name`, `$.items[3]`, `$["a b"]`: shown escaped so that only printable ASCII
/// (and a closing `…` when cut) reaches a log or a terminal.
fn render(path: &[Step]) -> String {
    let mut text = String::from("$");
    for step in path {
        if text.len() > MAX_PATH_BYTES {
            break;
        }
        match step {
            Step::Element(index) => {
                let _ = write!(text, "[{index}]");
            }
            Step::Member { key, .. } if is_identifier(key) => {
                text.push('.');
                text.push_str(key);
            }
            Step::Member { key, .. } => {
                text.push_str("[\"");
                // Past the bound the rest is cut anyway; a guest's key may be huge.
                for c in key.chars() {
                    if text.len() > MAX_PATH_BYTES {
                        break;
                    }
                    match c {
                        '"' => text.push_str("\\\""),
                        '\\' => text.push_str("\\\\"),
                        '\n' => text.push_str("\\n"),
                        '\r' => text.push_str("\\r"),
                        '\t' => text.push_str("\\t"),
                        ' '..='~' => text.push(c),
                        _ => {
                            for unit in c.encode_utf16(&mut [0; 2]) {
                                let _ = write!(text, "\\u{unit:04x}");
                            }
                        }
                    }
                }
                text.push_str("\"]");
            }
        }
    }
    if text.len() > MAX_PATH_BYTES {
        let mut end = MAX_PATH_BYTES;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push('…');
    }
    text
}

/// Whether a key is shown bare, after a dot; any other is quoted and escaped.
fn is_identifier(key: &str) -> bool {
    let mut bytes = key.bytes();
    bytes
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::{Value, json};
    use std::time::{Duration, Instant};

    /// Test limits tight enough for small generated texts to reach them.
    const TIGHT: JsonLimits = JsonLimits {
        max_bytes: 160,
        max_depth: 2,
    };

    fn refused(text: impl AsRef<[u8]>, limits: JsonLimits) -> (String, Problem) {
        match check(text.as_ref(), limits) {
            Err(JsonRefusal::Invalid { path, problem }) => (path, problem),
            other => panic!("expected a refusal with a path, got {other:?}"),
        }
    }

    fn nested_arrays(depth: usize) -> String {
        format!("{}{}", "[".repeat(depth), "]".repeat(depth))
    }

    #[test]
    fn the_bound_holds_for_the_canonical_text_too() {
        // 5 bytes a number as sent, 19 as serde_json writes it.
        let sent = format!("[{}1e15]", "1e15,".repeat(12_000));
        assert!(sent.len() <= CURSOR.max_bytes);
        assert!(check(sent.as_bytes(), CURSOR).is_ok());
        assert!(matches!(
            canonical(sent.as_bytes(), CURSOR),
            Err(JsonRefusal::TooLarge { size, limit }) if size > limit && limit == CURSOR.max_bytes
        ));
        assert_eq!(
            canonical(b"[1e15]", CURSOR).unwrap(),
            "[1000000000000000.0]"
        );
    }

    #[test]
    fn accepts_json_and_returns_serde_json_value() {
        let text = br#" {"a": [1, -0.5e3, "x\u00e9\n", true, null], "b": {}, "c": []} "#;
        assert_eq!(
            check(text, PAYLOAD),
            Ok(json!({"a": [1, -500.0, "x\u{e9}\n", true, null], "b": {}, "c": []}))
        );
        assert_eq!(
            canonical(br#"{ "b" : 1, "a" : [ ] }"#, CURSOR).unwrap(),
            r#"{"a":[],"b":1}"#
        );
        assert_eq!(check(b"1e-400", STEP_RESULT), Ok(json!(0.0)));
        assert_eq!(
            check(b"\"\\ud83d\\ude00\"", PAYLOAD),
            Ok(json!("\u{1f600}"))
        );
    }

    #[test]
    fn syntax_errors_name_where_the_bad_token_starts() {
        for (text, path) in [
            ("", "$"),
            ("   ", "$"),
            ("{", "$"),
            ("[1,]", "$[1]"),
            ("[1 2]", "$"),
            (r#"{"a" 1}"#, "$.a"),
            (r#"{"a":1,}"#, "$"),
            (r#"{"a":{"b":tru}}"#, "$.a.b"),
            (r#"{"a":[01]}"#, "$.a"),
            ("[1.]", "$[0]"),
            ("[\"a\u{1}\"]", "$[0]"),
            (r#"["\x"]"#, "$[0]"),
            (r#"["\u12g4"]"#, "$[0]"),
            ("\u{feff}1", "$"),
            ("'a'", "$"),
            ("[\u{c}1]", "$[0]"),
            ("\"\u{1f}\"", "$"),
        ] {
            assert_eq!(
                refused(text, PAYLOAD),
                (path.to_string(), Problem::Syntax),
                "{text:?}"
            );
        }
    }

    #[test]
    fn non_finite_numbers_are_refused_at_their_path() {
        for (text, path) in [
            (r#"{"a":[1,{"b":NaN}]}"#, "$.a[1].b"),
            ("Infinity", "$"),
            ("[-Infinity]", "$[0]"),
            (r#"{"x":1e400}"#, "$.x"),
            ("[0,-1e400]", "$[1]"),
            // f64::MAX rounded from a text serde_json takes as out of range.
            ("1.7976931348623158e308", "$"),
        ] {
            assert_eq!(
                refused(text, PAYLOAD),
                (path.to_string(), Problem::NonFinite),
                "{text:?}"
            );
        }
    }

    #[test]
    fn text_must_be_utf8_without_lone_surrogates() {
        assert_eq!(
            refused(b"\"\xff\"", PAYLOAD),
            ("$".to_string(), Problem::NotUtf8)
        );
        assert_eq!(
            refused(b"{\"k\":[\"\xc3\"]}", PAYLOAD),
            ("$.k[0]".to_string(), Problem::NotUtf8)
        );
        assert_eq!(
            refused(b"[1,\xff]", PAYLOAD),
            ("$[1]".to_string(), Problem::NotUtf8)
        );
        assert_eq!(
            refused(b"{\"\xe9\":1}", PAYLOAD),
            ("$".to_string(), Problem::NotUtf8)
        );
        for (text, path) in [
            (r#""\ud800""#, "$"),
            (r#"["\udc00"]"#, "$[0]"),
            (r#"{"a":"x\ud83dy"}"#, "$.a"),
            (r#"{"a":"\ud83d\u0041"}"#, "$.a"),
            (r#"{"\ud800":1}"#, "$"),
        ] {
            assert_eq!(
                refused(text, PAYLOAD),
                (path.to_string(), Problem::LoneSurrogate),
                "{text:?}"
            );
        }
    }

    #[test]
    fn nesting_past_the_limit_is_refused_at_the_first_value_past_it() {
        assert!(check(nested_arrays(32).as_bytes(), PAYLOAD).is_ok());
        let path = format!("${}", "[0]".repeat(32));
        assert_eq!(
            refused(nested_arrays(33), PAYLOAD),
            (path, Problem::TooDeep)
        );
        assert_eq!(
            refused(r#"{"a":[{"b":{}}]}"#, TIGHT),
            ("$.a[0]".to_string(), Problem::TooDeep)
        );
        // Empty containers count, and scalars do not.
        assert!(check(b"[[1]]", TIGHT).is_ok());
        assert_eq!(refused("[[[]]]", TIGHT).1, Problem::TooDeep);
        // A limit above serde_json's own acts as serde_json's.
        let unbounded = JsonLimits {
            max_bytes: 1 << 20,
            max_depth: usize::MAX,
        };
        assert!(check(nested_arrays(127).as_bytes(), unbounded).is_ok());
        assert_eq!(refused(nested_arrays(128), unbounded).1, Problem::TooDeep);
    }

    #[test]
    fn a_million_brackets_stop_at_the_limit() {
        let limits = JsonLimits {
            max_bytes: 2_000_000,
            max_depth: 32,
        };
        let text = vec![b'['; 1_000_000];
        let started = Instant::now();
        assert_eq!(refused(&text, limits).1, Problem::TooDeep);
        assert_eq!(
            refused(
                &text,
                JsonLimits {
                    max_depth: usize::MAX,
                    ..limits
                }
            )
            .1,
            Problem::TooDeep
        );
        assert!(started.elapsed() < Duration::from_secs(2));
        // Nothing after the limit is read: what follows would be a different refusal.
        let mut text = vec![b'['; 33];
        text.extend_from_slice(b"\xff NaN");
        assert_eq!(refused(&text, PAYLOAD).1, Problem::TooDeep);
    }

    #[test]
    fn size_is_checked_before_anything_is_read() {
        let text = vec![0xff; 300 * 1024];
        assert_eq!(
            check(&text, PAYLOAD),
            Err(JsonRefusal::TooLarge {
                size: 300 * 1024,
                limit: 256 * 1024
            })
        );
        let err = check(&text, CURSOR).unwrap_err();
        assert_eq!(err.code(), "too-large");
        assert_eq!(err.to_string(), "307200 bytes; the limit is 65536");
        let exact = format!("\"{}\"", "x".repeat(CURSOR.max_bytes - 2));
        assert!(check(exact.as_bytes(), CURSOR).is_ok());
    }

    #[test]
    fn duplicate_keys_and_trailing_data_are_refused() {
        assert_eq!(
            refused(r#"{"a":1,"a":2}"#, PAYLOAD),
            ("$.a".to_string(), Problem::DuplicateKey)
        );
        // Equal after unescaping is equal.
        assert_eq!(
            refused(r#"{"x":[{"a":1,"b":2,"\u0061":3}]}"#, PAYLOAD),
            ("$.x[0].a".to_string(), Problem::DuplicateKey)
        );
        // The same key in different objects is fine.
        assert!(check(br#"{"a":{"a":1},"b":{"a":2}}"#, PAYLOAD).is_ok());
        for text in ["1 2", "[1]]", r#""a"x"#, "{} {}", "truex", "null\u{0}"] {
            assert_eq!(
                refused(text, PAYLOAD),
                ("$".to_string(), Problem::TrailingData),
                "{text:?}"
            );
        }
    }

    #[test]
    fn paths_are_escaped_and_bounded() {
        let cases = [
            (r#"{"a b":{"c":1,"c":2}}"#, r#"$["a b"].c"#),
            (r#"{"_x9":[{"9":1,"9":1}]}"#, r#"$._x9[0]["9"]"#),
            (r#"{"":1,"":2}"#, r#"$[""]"#),
            (r#"{"q\"\\":1,"q\"\\":2}"#, r#"$["q\"\\"]"#),
            (r#"{"\u001b[31m":1,"\u001b[31m":2}"#, r#"$["\u001b[31m"]"#),
            (r#"{"a\nb":1,"a\nb":2}"#, r#"$["a\nb"]"#),
            (
                r#"{"\u007f\u202e\u0000":1,"\u007f\u202e\u0000":2}"#,
                r#"$["\u007f\u202e\u0000"]"#,
            ),
            ("{\"é😀\":1,\"é😀\":2}", r#"$["\u00e9\ud83d\ude00"]"#),
        ];
        for (text, path) in cases {
            let err = check(text.as_bytes(), PAYLOAD).unwrap_err();
            let message = err.to_string();
            assert_eq!(message, format!("at {path}: a key given twice"), "{text:?}");
            assert!(
                message.chars().all(|c| matches!(c, ' '..='~')),
                "{message:?}"
            );
        }

        let long = "k".repeat(300);
        let (path, _) = refused(format!(r#"{{"{long}":1,"{long}":2}}"#), PAYLOAD);
        assert_eq!(path, format!("$.{}…", "k".repeat(198)));
        let fits = "k".repeat(198);
        let (path, _) = refused(format!(r#"{{"{fits}":1,"{fits}":2}}"#), PAYLOAD);
        assert_eq!(path, format!("$.{fits}"));
        let escaped = "\\u001b".repeat(100);
        let message = check(
            format!(r#"{{"{escaped}":1,"{escaped}":2}}"#).as_bytes(),
            PAYLOAD,
        )
        .unwrap_err()
        .to_string();
        assert!(!message.contains('\u{1b}'));
        assert!(message.ends_with("…: a key given twice"));
    }

    #[test]
    fn codes_and_messages_are_fixed() {
        for (text, code, message) in [
            (&b"{"[..], "not-json", "at $: not JSON"),
            (b"\"\xff\"", "not-utf8", "at $: not UTF-8"),
            (
                br#""\udc00""#,
                "lone-surrogate",
                "at $: a lone surrogate in a string escape",
            ),
            (
                b"NaN",
                "non-finite",
                "at $: a number that is not finite (NaN, Infinity or out of range)",
            ),
            (
                b"[[[[]]]]",
                "too-deep",
                "at $[0][0]: nested deeper than the limit",
            ),
            (
                br#"{"a":1,"a":1}"#,
                "duplicate-key",
                "at $.a: a key given twice",
            ),
            (b"1 1", "trailing-data", "at $: data after the value"),
        ] {
            let err = check(text, TIGHT).unwrap_err();
            assert_eq!((err.code(), err.to_string().as_str()), (code, message));
        }
    }

    fn value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            // serde_json by default reads a few floats back one ulp off its own text.
            any::<f64>()
                .prop_filter("finite, read back as written", |&x| x.is_finite()
                    && serde_json::from_str::<f64>(&Value::from(x).to_string()).ok()
                        == Some(x))
                .prop_map(Value::from),
            any::<String>().prop_map(Value::from),
        ];
        leaf.prop_recursive(9, 64, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                prop::collection::btree_map(any::<String>(), inner, 0..6)
                    .prop_map(|members| Value::Object(members.into_iter().collect())),
            ]
        })
    }

    fn depth(value: &Value) -> usize {
        match value {
            Value::Array(items) => 1 + items.iter().map(depth).max().unwrap_or(0),
            Value::Object(members) => 1 + members.values().map(depth).max().unwrap_or(0),
            _ => 0,
        }
    }

    /// Keys and scalars, mostly JSON (some equal after unescaping), some not.
    const KEYS: &[&[u8]] = &[
        br#""a""#,
        br#""b""#,
        br#""\u0061""#,
        br#""a b""#,
        br#""\u001b[31m""#,
    ];
    const BAD_KEYS: &[&[u8]] = &[br#""\ud800""#, b"\"\xff\"", b"a", b"1"];
    const SCALARS: &[&[u8]] = &[
        b"0",
        b"-1.5e3",
        b"1E+2",
        b"1e-400",
        b"true",
        b"null",
        br#""x""#,
        b"\"\xc3\xa9\"",
        br#""\ud83d\ude00""#,
        br#""\n\/""#,
    ];
    const BAD_SCALARS: &[&[u8]] = &[
        b"1e400",
        b"1.7976931348623158e308",
        b"01",
        b"1.",
        b"NaN",
        b"-Infinity",
        b"nul",
        br#""\udc00""#,
        b"\"\x01\"",
        b"\"\xe2\x82\"",
    ];

    /// Texts shaped like JSON, with duplicate keys, bad tokens and any nesting in them.
    fn json_like() -> impl Strategy<Value = Vec<u8>> {
        let scalar = prop_oneof![
            8 => prop::sample::select(SCALARS),
            1 => prop::sample::select(BAD_SCALARS),
        ]
        .prop_map(<[u8]>::to_vec);
        scalar.prop_recursive(6, 48, 4, |inner| {
            let key = prop_oneof![
                8 => prop::sample::select(KEYS),
                1 => prop::sample::select(BAD_KEYS),
            ];
            let member =
                (key, inner.clone()).prop_map(|(key, value)| [key, b" : ", &value].concat());
            prop_oneof![
                prop::collection::vec(inner, 0..4).prop_map(|items| [
                    &b"["[..],
                    &items.join(&b","[..]),
                    b"]"
                ]
                .concat()),
                prop::collection::vec(member, 0..4).prop_map(|members| [
                    &b"{"[..],
                    &members.join(&b",\n"[..]),
                    b"}"
                ]
                .concat()),
            ]
        })
    }

    /// Any byte, often one near a line JSON draws.
    fn byte() -> impl Strategy<Value = u8> {
        prop_oneof![
            any::<u8>(),
            prop::sample::select(&b"\0\x0b\x0c\x1f\x7f\x80\xa0\xef \t\r\"\\/,:.-+eE0u"[..]),
        ]
    }

    /// Any bytes, JSON-like texts, and those with one byte changed, added or removed.
    fn texts() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            prop::collection::vec(any::<u8>(), 0..48),
            json_like(),
            (json_like(), any::<prop::sample::Index>(), byte(), 0..3).prop_map(
                |(mut text, at, byte, how)| {
                    let at = at.index(text.len() + 1);
                    match how {
                        0 if at < text.len() => text[at] = byte,
                        1 if at < text.len() => {
                            text.remove(at);
                        }
                        _ => text.insert(at, byte),
                    }
                    text
                }
            ),
        ]
    }

    /// What serde_json sees in a text, found apart from the validator: its depth, or a
    /// "duplicate key" error for an object that gives a key twice.
    struct Shape {
        depth: usize,
    }

    impl<'de> serde::Deserialize<'de> for Shape {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            d.deserialize_any(ShapeVisitor)
        }
    }

    struct ShapeVisitor;

    impl<'de> serde::de::Visitor<'de> for ShapeVisitor {
        type Value = Shape;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("JSON")
        }
        fn visit_bool<E>(self, _: bool) -> Result<Shape, E> {
            Ok(Shape { depth: 0 })
        }
        fn visit_i64<E>(self, _: i64) -> Result<Shape, E> {
            Ok(Shape { depth: 0 })
        }
        fn visit_u64<E>(self, _: u64) -> Result<Shape, E> {
            Ok(Shape { depth: 0 })
        }
        fn visit_f64<E>(self, _: f64) -> Result<Shape, E> {
            Ok(Shape { depth: 0 })
        }
        fn visit_str<E>(self, _: &str) -> Result<Shape, E> {
            Ok(Shape { depth: 0 })
        }
        fn visit_unit<E>(self) -> Result<Shape, E> {
            Ok(Shape { depth: 0 })
        }
        fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Shape, A::Error> {
            let mut depth = 0;
            while let Some(item) = seq.next_element::<Shape>()? {
                depth = depth.max(item.depth);
            }
            Ok(Shape { depth: depth + 1 })
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Shape, A::Error> {
            let mut seen = HashSet::new();
            let mut depth = 0;
            while let Some(key) = map.next_key::<String>()? {
                if !seen.insert(key) {
                    return Err(serde::de::Error::custom("duplicate key"));
                }
                depth = depth.max(map.next_value::<Shape>()?.depth);
            }
            Ok(Shape { depth: depth + 1 })
        }
    }

    /// `check` takes what serde_json takes, as the same value, unless one of the rule's own
    /// bounds refuses it; and it never takes what serde_json refuses.
    fn agrees_with_serde_json(text: &[u8], limits: JsonLimits) -> Result<(), TestCaseError> {
        let ours = check(text, limits);
        match (&ours, serde_json::from_slice::<Value>(text)) {
            (Ok(ours), Ok(theirs)) => prop_assert_eq!(ours, &theirs),
            (Ok(_), Err(e)) => prop_assert!(false, "took what serde_json refuses: {e}"),
            (Err(_), Err(_)) => {}
            (Err(refusal), Ok(_)) => {
                let shape = serde_json::from_slice::<Shape>(text).map_err(|e| e.to_string());
                let twice = matches!(&shape, Err(e) if e.starts_with("duplicate key"));
                match refusal.code() {
                    "too-large" => prop_assert!(text.len() > limits.max_bytes),
                    "duplicate-key" => prop_assert!(twice),
                    "too-deep" => prop_assert!(twice || shape.unwrap().depth > limits.max_depth),
                    _ => prop_assert!(false, "refused what serde_json takes: {refusal}"),
                }
            }
        }
        if validate(text, limits).is_ok() {
            prop_assert!(
                serde_json::from_slice::<Value>(text).is_ok(),
                "the safety net caught it"
            );
        }
        if let Err(refusal) = ours {
            prop_assert!(
                refusal
                    .to_string()
                    .chars()
                    .all(|c| matches!(c, ' '..='~' | '…'))
            );
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(crate::rules::fuzzing::config(2000))]

        /// Whatever serde_json writes (within the limits) is taken back as the same value.
        #[test]
        fn serde_json_output_is_taken_as_written(value in value()) {
            prop_assert!(depth(&value) <= 10);
            let text = serde_json::to_vec(&value).unwrap();
            prop_assert_eq!(check(&text, PAYLOAD), Ok(value.clone()));
            let pretty = serde_json::to_vec_pretty(&value).unwrap();
            prop_assert_eq!(canonical(&pretty, PAYLOAD), Ok(value.to_string()));
        }

        /// Any float serde_json writes is taken as serde_json reads it back.
        #[test]
        fn floats_are_taken_as_serde_json_reads_them(x in any::<f64>()) {
            let text = Value::from(x).to_string();
            prop_assert_eq!(
                check(text.as_bytes(), PAYLOAD),
                Ok(serde_json::from_str::<Value>(&text).unwrap())
            );
        }

        /// Any bytes get a verdict without a panic, and it is serde_json's but for the
        /// rule's own bounds.
        #[test]
        fn any_bytes_get_serde_json_verdict_or_a_bound(text in texts()) {
            agrees_with_serde_json(&text, PAYLOAD)?;
            agrees_with_serde_json(&text, TIGHT)?;
        }
    }
}
