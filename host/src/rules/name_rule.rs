//! The one rule for the names guests and tenants give — file names and prefixes, step and
//! counter names, a `links` call's step, a run's instance, an event's key: what a name may
//! hold, said as what is allowed, so a character nobody thought of is refused rather than
//! let through.
//!
//! A name is shown to operators and tenants as it is written (pages, terminals, logs,
//! listings), so it may hold only characters that show as themselves: letters, marks,
//! numbers, punctuation, symbols and spaces (Unicode general categories `L*`, `M*`,
//! `N*`, `P*`, `S*` and `Zs`). Everything else is refused: controls (`Cc`), formatting
//! characters (`Cf`: bidirectional marks and overrides such as U+061C and U+202E,
//! zero-width and invisible ones such as U+200B, U+2060 and the soft hyphen U+00AD),
//! line and paragraph separators (`Zl`, `Zp`), surrogates (`Cs`), private-use characters
//! (`Co`) and code points unassigned in the Unicode version of the host's tables (`Cn`).
//!
//! Names the operator writes (jobs, tenants, collections, mounts) follow narrower ASCII
//! rules of their own, within this one.

use unicode_properties::{GeneralCategory, GeneralCategoryGroup, UnicodeGeneralCategory};

/// Whether `c` may appear in a name (see the module's rule).
pub fn allowed(c: char) -> bool {
    match c.general_category_group() {
        GeneralCategoryGroup::Letter
        | GeneralCategoryGroup::Mark
        | GeneralCategoryGroup::Number
        | GeneralCategoryGroup::Punctuation
        | GeneralCategoryGroup::Symbol => true,
        GeneralCategoryGroup::Separator => c.general_category() == GeneralCategory::SpaceSeparator,
        GeneralCategoryGroup::Other => false,
    }
}

/// Whether `text` is a name of at most `max` bytes: not empty, every character allowed.
pub fn is_name(text: &str, max: usize) -> bool {
    !text.is_empty() && text.len() <= max && text.chars().all(allowed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn names_that_show_as_written_pass() {
        for name in [
            "report.csv",
            "é/ü",
            "a b",
            "日本",
            "ñandú-2024_v1",
            "x\u{301}",
            "€ & ☃",
        ] {
            assert!(is_name(name, 64), "{name}");
        }
    }

    #[test]
    fn controls_formatting_separators_and_unassigned_are_refused() {
        for c in [
            '\0',
            '\n',
            '\t',
            '\u{1b}',
            '\u{7f}',
            '\u{85}', // Cc
            '\u{ad}',
            '\u{61c}',
            '\u{200b}',
            '\u{200d}',
            '\u{200e}',
            '\u{202e}',
            '\u{2060}',
            '\u{2066}',
            '\u{feff}',
            '\u{e0001}', // Cf
            '\u{2028}',  // Zl
            '\u{2029}',  // Zp
            '\u{e000}',
            '\u{f8ff}',
            '\u{10fffd}', // Co
            '\u{fdd0}',
            '\u{fffe}',
            '\u{10ffff}', // Cn
        ] {
            assert!(!allowed(c), "{c:?}");
            assert!(!is_name(&format!("a{c}b"), 64), "{c:?}");
        }
    }

    #[test]
    fn names_are_bounded_and_not_empty() {
        assert!(!is_name("", 64));
        assert!(is_name(&"a".repeat(64), 64));
        assert!(!is_name(&"a".repeat(65), 64));
        // Bytes, not characters: four three-byte characters are 12 bytes.
        assert!(!is_name("日本日本", 11));
    }

    proptest! {
        /// Whatever text is tried, a name holds no character of a refused category, and
        /// a text of only allowed characters is a name.
        #[test]
        fn the_rule_is_the_categories(text in "[\\s\\S]{0,16}") {
            let refused = text.chars().any(|c| matches!(
                c.general_category(),
                GeneralCategory::Control
                    | GeneralCategory::Format
                    | GeneralCategory::LineSeparator
                    | GeneralCategory::ParagraphSeparator
                    | GeneralCategory::Surrogate
                    | GeneralCategory::PrivateUse
                    | GeneralCategory::Unassigned
            ));
            prop_assert_eq!(is_name(&text, 64), !text.is_empty() && !refused);
        }
    }
}
