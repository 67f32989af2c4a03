//! Payload search: what "a payload contains this JSON" means, as Postgres' `jsonb @>`
//! decides it, so the SQLite store (which has no such operator) finds the same runs.
//! The search term is a JSON object, bounded before anything is read.

use crate::rules::json_rule::{self, JsonLimits};
use serde_json::Value;

/// A search term's bounds: a few keys, not a second payload.
pub const NEEDLE: JsonLimits = JsonLimits {
    max_bytes: 4 * 1024,
    max_depth: 8,
};

/// Why a search term is refused; its message is shown to the person who typed it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NeedleError {
    #[error("payload: {0}")]
    Json(#[from] json_rule::JsonRefusal),
    #[error("payload: a JSON object of what the payload contains, e.g. {{\"customer\": 42}}")]
    NotObject,
}

/// What a search that ran past its bound tells the person who asked.
pub fn timed_out(bound: std::time::Duration) -> String {
    format!(
        "the search ran past {} s: narrow it by job or tenant, or search for more of the payload",
        bound.as_secs()
    )
}

/// The search term `text`, checked: a JSON object within [`NEEDLE`].
pub fn needle(text: &str) -> Result<Value, NeedleError> {
    let value = json_rule::check(text.as_bytes(), NEEDLE)?;
    if !value.is_object() {
        return Err(NeedleError::NotObject);
    }
    Ok(value)
}

/// Whether `payload` contains `needle`: every key of an object with a value containing
/// the needle's, every element of an array contained by some element, equal scalars
/// (numbers by value: 1 and 1.0 are equal).
pub fn contains(payload: &Value, needle: &Value) -> bool {
    match (payload, needle) {
        (Value::Object(have), Value::Object(want)) => want
            .iter()
            .all(|(k, w)| have.get(k).is_some_and(|h| contains(h, w))),
        (Value::Array(have), Value::Array(want)) => {
            want.iter().all(|w| have.iter().any(|h| contains(h, w)))
        }
        (Value::Number(h), Value::Number(w)) => match (h.as_i64(), w.as_i64()) {
            (Some(h), Some(w)) => h == w,
            _ => h.as_f64() == w.as_f64(),
        },
        (h, w) => !h.is_array() && !h.is_object() && h == w,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn containment_is_postgres_jsonb_containment() {
        let payload = json!({
            "customer": 42, "tags": ["a", "b", {"x": 1}], "nested": {"k": "v", "n": null},
            "price": 1.5,
        });
        let yes = [
            json!({}),
            json!({"customer": 42}),
            json!({"customer": 42.0}),
            json!({"tags": ["b"]}),
            json!({"tags": [{"x": 1}, "a"]}),
            json!({"tags": []}),
            json!({"nested": {"n": null}}),
            json!({"price": 1.5, "nested": {}}),
        ];
        for needle in yes {
            assert!(contains(&payload, &needle), "{needle}");
        }
        let no = [
            json!({"customer": "42"}),
            json!({"customer": 43}),
            json!({"tags": "a"}),
            json!({"tags": ["c"]}),
            json!({"nested": {"k": "w"}}),
            json!({"missing": null}),
            json!({"nested": "v"}),
        ];
        for needle in no {
            assert!(!contains(&payload, &needle), "{needle}");
        }
    }

    #[test]
    fn a_search_term_is_a_bounded_json_object() {
        assert_eq!(needle(r#"{"a": 1}"#), Ok(json!({"a": 1})));
        for bad in ["[1]", "42", "\"x\""] {
            assert_eq!(needle(bad), Err(NeedleError::NotObject), "{bad}");
        }
        assert!(matches!(needle("{nope"), Err(NeedleError::Json(_))));
        assert!(matches!(
            needle(r#"{"a": 1, "a": 2}"#),
            Err(NeedleError::Json(_))
        ));
        let deep = format!(
            "{}{}",
            "{\"a\":".repeat(9),
            "1".to_string() + &"}".repeat(9)
        );
        assert!(matches!(needle(&deep), Err(NeedleError::Json(_))));
        let large = format!("{{\"a\": \"{}\"}}", "x".repeat(5000));
        assert!(matches!(needle(&large), Err(NeedleError::Json(_))));
    }
}
