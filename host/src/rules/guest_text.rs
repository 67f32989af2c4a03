//! Text a guest hands back (log lines, error messages, names): how it is stored and how it
//! is shown. Guest text may hold anything a string can — NUL, control characters, escape
//! sequences, bidirectional overrides — and arrives as large as the guest likes.
//!
//! - [`for_storage`] is applied once, before the text reaches any database: it is cut to
//!   its bound (on a character boundary) and its NULs replaced, so both backends store it
//!   (Postgres' `text` cannot hold NUL) and a run is never left half-recorded by it.
//! - [`for_terminal`] is applied when the CLI prints guest text: every character a name
//!   may not hold ([`crate::rules::name_rule`]: controls, formatting characters, separators other
//!   than spaces, private-use and unassigned code points) except newline and tab is shown
//!   escaped, so a guest cannot move the cursor, clear or recolour the operator's screen,
//!   or reorder or hide what is shown.

use std::borrow::Cow;

/// `text` with NUL shown as U+2400, cut to at most `max` bytes (after the replacement,
/// which takes three bytes for one) on a character boundary.
pub fn for_storage(text: &str, max: usize) -> String {
    for_storage_cut(text, max).0
}

/// [`for_storage`], and whether it cut anything.
pub fn for_storage_cut(text: &str, max: usize) -> (String, bool) {
    let kept = cut(text, max);
    let mut shown = kept.replace('\0', "\u{2400}");
    let end = cut(&shown, max).len();
    let was_cut = kept.len() < text.len() || end < shown.len();
    shown.truncate(end);
    (shown, was_cut)
}

/// The longest prefix of `text` of at most `max` bytes that ends on a character boundary.
fn cut(text: &str, max: usize) -> &str {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// Whether the terminal could act on `c` (or hide it) rather than print it.
fn acts_on_terminal(c: char) -> bool {
    c != '\n' && c != '\t' && !crate::rules::name_rule::allowed(c)
}

/// `text` with everything a terminal would act on shown as an escape (`\u{1b}`).
pub fn for_terminal(text: &str) -> Cow<'_, str> {
    if !text.chars().any(acts_on_terminal) {
        return Cow::Borrowed(text);
    }
    Cow::Owned(
        text.chars()
            .map(|c| {
                if acts_on_terminal(c) {
                    c.escape_unicode().to_string()
                } else {
                    c.to_string()
                }
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn storage_cuts_on_character_boundaries_and_replaces_nul() {
        assert_eq!(for_storage("héllo", 2), "h");
        assert_eq!(for_storage("héllo", 3), "hé");
        assert_eq!(for_storage("a\0b", 10), "a\u{2400}b");
        assert_eq!(for_storage("abc", 10), "abc");
        // NUL takes three bytes once shown: the bound holds after the replacement.
        assert_eq!(
            for_storage_cut("\0\0\0\0", 7),
            ("\u{2400}\u{2400}".into(), true)
        );
        assert_eq!(for_storage_cut("a\0", 4), ("a\u{2400}".into(), false));
        assert_eq!(for_storage_cut("abc", 2), ("ab".into(), true));
    }

    #[test]
    fn terminal_output_escapes_what_a_terminal_would_act_on() {
        assert_eq!(for_terminal("plain\ttext\n"), "plain\ttext\n");
        assert_eq!(for_terminal("\u{1b}[2Jgone\r"), "\\u{1b}[2Jgone\\u{d}");
        assert_eq!(for_terminal("abc\u{202e}def"), "abc\\u{202e}def");
        assert_eq!(
            for_terminal("a\u{61c}b\u{2060}c\u{ad}d"),
            "a\\u{61c}b\\u{2060}c\\u{ad}d"
        );
        assert!(matches!(for_terminal("ok"), Cow::Borrowed(_)));
    }

    proptest::proptest! {
        /// A name shows on a terminal as it is written: nothing in it is escaped.
        #[test]
        fn names_show_on_a_terminal_as_written(text in "[\\s\\S]{1,16}") {
            if crate::rules::name_rule::is_name(&text, 64) {
                proptest::prop_assert!(matches!(for_terminal(&text), Cow::Borrowed(_)));
            }
        }
    }
}
