//! Payload filters of event triggers: a job subscribed with
//! `on = [{ event = "order.paid", where = { "customer.tier" = "gold" } }]` is queued a run
//! only by an `order.paid` event whose payload holds `"gold"` at `customer.tier`. Each
//! condition is an equality of the value at a path of object keys (an array's element by
//! its index: `items.0.sku`) with a string, number or boolean; all must hold. An event
//! without a payload matches no filter. Checked when the manifest is loaded, so a filter
//! that could never be read is a manifest error, not a trigger that never fires.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Most conditions one trigger may have.
pub const MAX_CONDITIONS: usize = 16;
/// Most keys in one path, and the longest key.
pub const MAX_SEGMENTS: usize = 8;
pub const MAX_KEY: usize = 64;
/// Longest string a condition compares with, in bytes.
pub const MAX_VALUE: usize = 256;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FilterError {
    #[error(
        "invalid path {0:?} in `where`: use 1-{MAX_SEGMENTS} keys of letters, digits, _ and - (at most {MAX_KEY} bytes each), joined by dots"
    )]
    Path(String),
    #[error("the value at {0:?} in `where` is not a string, number or boolean")]
    NotScalar(String),
    #[error("the value at {0:?} in `where` is over {MAX_VALUE} bytes")]
    ValueTooLong(String),
    #[error("`where` has no conditions")]
    Empty,
    #[error("`where` has over {MAX_CONDITIONS} conditions")]
    TooMany,
}

/// A trigger's conditions, by path: what a job's registration stores.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Filter(BTreeMap<String, serde_json::Value>);

impl Filter {
    /// The filter of a manifest's `where` table. A nested table stands for deeper keys
    /// (TOML reads `customer.tier = "gold"` unquoted as one), so both spellings mean
    /// `customer.tier`.
    pub fn from_table(table: &toml::Table) -> Result<Filter, FilterError> {
        let mut conditions = BTreeMap::new();
        flatten("", table, &mut conditions)?;
        if conditions.is_empty() {
            return Err(FilterError::Empty);
        }
        if conditions.len() > MAX_CONDITIONS {
            return Err(FilterError::TooMany);
        }
        Ok(Filter(conditions))
    }

    /// Whether every condition holds of `payload`.
    pub fn matches(&self, payload: &serde_json::Value) -> bool {
        self.0
            .iter()
            .all(|(path, expected)| lookup(payload, path).is_some_and(|v| same(v, expected)))
    }
}

fn flatten(
    prefix: &str,
    table: &toml::Table,
    out: &mut BTreeMap<String, serde_json::Value>,
) -> Result<(), FilterError> {
    for (key, value) in table {
        let path = if prefix.is_empty() {
            key.clone()
        } else {
            format!("{prefix}.{key}")
        };
        if !valid_path(&path) {
            return Err(FilterError::Path(path));
        }
        let scalar = match value {
            toml::Value::Table(inner) if !inner.is_empty() => {
                flatten(&path, inner, out)?;
                continue;
            }
            toml::Value::String(s) if s.len() > MAX_VALUE => {
                return Err(FilterError::ValueTooLong(path));
            }
            toml::Value::String(s) => serde_json::Value::from(s.as_str()),
            toml::Value::Integer(i) => serde_json::Value::from(*i),
            toml::Value::Float(f) if f.is_finite() => serde_json::Value::from(*f),
            toml::Value::Boolean(b) => serde_json::Value::from(*b),
            _ => return Err(FilterError::NotScalar(path)),
        };
        out.insert(path, scalar);
    }
    Ok(())
}

fn valid_path(path: &str) -> bool {
    let segments: Vec<&str> = path.split('.').collect();
    segments.len() <= MAX_SEGMENTS
        && segments.iter().all(|s| {
            (1..=MAX_KEY).contains(&s.len())
                && s.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        })
}

fn lookup<'a>(payload: &'a serde_json::Value, path: &str) -> Option<&'a serde_json::Value> {
    path.split('.').try_fold(payload, |value, key| match value {
        serde_json::Value::Object(map) => map.get(key),
        serde_json::Value::Array(items) => key.parse::<usize>().ok().and_then(|i| items.get(i)),
        _ => None,
    })
}

/// JSON equality, numbers by value (`1` is `1.0`).
fn same(found: &serde_json::Value, expected: &serde_json::Value) -> bool {
    match (found, expected) {
        (serde_json::Value::Number(a), serde_json::Value::Number(b)) => {
            match (a.as_i64(), b.as_i64()) {
                (Some(a), Some(b)) => a == b,
                _ => a.as_f64() == b.as_f64(),
            }
        }
        _ => found == expected,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn filter(toml_where: &str) -> Result<Filter, FilterError> {
        let table: toml::Table = toml::from_str(&format!("w = {toml_where}")).unwrap();
        Filter::from_table(table["w"].as_table().unwrap())
    }

    #[test]
    fn only_payloads_with_every_value_match() {
        let f =
            filter(r#"{ "customer.tier" = "gold", total = 10, "items.0.paid" = true }"#).unwrap();
        let gold = json!({"customer": {"tier": "gold"}, "total": 10.0, "items": [{"paid": true}]});
        assert!(f.matches(&gold));
        for other in [
            json!({"customer": {"tier": "silver"}, "total": 10, "items": [{"paid": true}]}),
            json!({"customer": {"tier": "gold"}, "total": "10", "items": [{"paid": true}]}),
            json!({"customer": {"tier": "gold"}, "total": 10, "items": []}),
            json!({"customer": "gold", "total": 10, "items": [{"paid": true}]}),
            json!({"total": 10}),
            json!(null),
        ] {
            assert!(!f.matches(&other), "{other}");
        }
    }

    #[test]
    fn dotted_keys_quoted_or_not_mean_the_same_path() {
        assert_eq!(
            filter(r#"{ customer.tier = "gold" }"#),
            filter(r#"{ "customer.tier" = "gold" }"#)
        );
    }

    #[test]
    fn bad_paths_and_values_are_refused_when_loaded() {
        for (bad, error) in [
            (
                r#"{ "customer..tier" = "x" }"#,
                FilterError::Path("customer..tier".into()),
            ),
            (r#"{ "a b" = "x" }"#, FilterError::Path("a b".into())),
            (r#"{ "$.a" = "x" }"#, FilterError::Path("$.a".into())),
            (
                r#"{ "a.b.c.d.e.f.g.h.i" = 1 }"#,
                FilterError::Path("a.b.c.d.e.f.g.h.i".into()),
            ),
            (r#"{ tags = ["a"] }"#, FilterError::NotScalar("tags".into())),
            (
                r#"{ at = 2026-12-05T10:00:00Z }"#,
                FilterError::NotScalar("at".into()),
            ),
            (r#"{ x = nan }"#, FilterError::NotScalar("x".into())),
            (r#"{ x = {} }"#, FilterError::NotScalar("x".into())),
            ("{}", FilterError::Empty),
        ] {
            assert_eq!(filter(bad), Err(error), "{bad}");
        }
        let long = format!("{{ x = \"{}\" }}", "a".repeat(MAX_VALUE + 1));
        assert_eq!(filter(&long), Err(FilterError::ValueTooLong("x".into())));
        let many: Vec<String> = (0..=MAX_CONDITIONS).map(|i| format!("k{i} = 1")).collect();
        assert_eq!(
            filter(&format!("{{ {} }}", many.join(", "))),
            Err(FilterError::TooMany)
        );
    }
}
