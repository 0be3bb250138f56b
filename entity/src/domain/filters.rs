//! Which documents a task may draw evidence from (`limits.filters`, also given as
//! `createResearchTask(input: {filters})`): every condition given must hold. Parsed and
//! bounded where it enters, like every limit; the worker resolves it to the matching
//! documents of the space once per round ([`DocumentFilters::matches`]).
use std::collections::BTreeSet;

use sea_orm::prelude::Uuid;
use serde::Serialize;
use serde_json::{Map, Value};

use super::limit_value::LimitValue;

/// The most metadata keys one filter may name.
pub const MAX_METADATA_KEYS: usize = 32;
/// The most values one key (or one list) may name.
pub const MAX_VALUES: usize = 100;
/// The most document ids one filter may name.
pub const MAX_DOCUMENT_IDS: usize = 1000;
/// The longest metadata key and string value, in characters.
pub const MAX_TEXT_CHARS: usize = 1000;

/// The media types a filter names, as the GraphQL enum spells them.
pub const MEDIA_TYPES: &[&str] = &["TEXT_PLAIN", "TEXT_MARKDOWN", "TEXT_HTML", "APPLICATION_PDF", "APPLICATION_DOCX"];

/// Conditions on documents; `None` means no condition.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DocumentFilters {
    /// Each key must match the document's value for it: JSON equality with types kept; an
    /// array here means any of its values; a document value that is an array matches when
    /// any element does.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
    /// What the document is (`TEXT_PLAIN`…`APPLICATION_DOCX`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub media_types: Option<BTreeSet<String>>,
    /// Only these documents.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub document_ids: Option<BTreeSet<Uuid>>,
    /// Created at or after this instant (RFC 3339 as given; inclusive).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub created_after: Option<String>,
    /// Created before this instant (exclusive).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub created_before: Option<String>,
}

/// A document as a filter sees it.
#[derive(Debug, Clone, Copy)]
pub struct FilteredDocument<'a> {
    /// Its id.
    pub id: Uuid,
    /// Its metadata object.
    pub metadata: &'a Value,
    /// What it is, as the GraphQL enum spells it.
    pub media_type: &'a str,
    /// When it was created, epoch milliseconds.
    pub created_at: i64,
}

impl DocumentFilters {
    /// Whether `document` meets every condition. To check many documents, build the
    /// [`Matcher`] once.
    pub fn matches(&self, document: FilteredDocument<'_>) -> bool {
        self.matcher().matches(document)
    }

    /// The conditions prepared for checking many documents: instants parsed once, each
    /// key's wanted values hashed, so a document costs one look-up per value it holds.
    pub fn matcher(&self) -> Matcher<'_> {
        let wanted = self.metadata.iter().flatten().map(|(key, want)| {
            let mut values = WantedValues::default();
            let listed: &[Value] = match want {
                Value::Array(values) => values,
                single => std::slice::from_ref(single),
            };
            for value in listed {
                match value {
                    Value::String(text) => _ = values.strings.insert(text.as_str()),
                    Value::Bool(flag) => values.flags[usize::from(*flag)] = true,
                    Value::Null => values.null = true,
                    Value::Number(number) => values.numbers.push(number),
                    // Parsing refuses lists and objects as wanted values.
                    Value::Array(_) | Value::Object(_) => {}
                }
            }
            (key.as_str(), values)
        });
        Matcher {
            filters: self,
            created_after: self.created_after.as_deref().and_then(millis),
            created_before: self.created_before.as_deref().and_then(millis),
            metadata: wanted.collect(),
        }
    }
}

/// [`DocumentFilters`] prepared for checking many documents.
#[derive(Debug)]
pub struct Matcher<'a> {
    filters: &'a DocumentFilters,
    created_after: Option<i64>,
    created_before: Option<i64>,
    metadata: Vec<(&'a str, WantedValues<'a>)>,
}

/// One key's wanted values, by type.
#[derive(Debug, Default)]
struct WantedValues<'a> {
    strings: std::collections::HashSet<&'a str>,
    /// `false` at 0, `true` at 1.
    flags: [bool; 2],
    null: bool,
    /// Numbers compare by value (`1` and `1.0` are one number), so they are few and
    /// compared one by one.
    numbers: Vec<&'a serde_json::Number>,
}

impl WantedValues<'_> {
    fn holds(&self, have: &Value) -> bool {
        match have {
            Value::String(text) => self.strings.contains(text.as_str()),
            Value::Bool(flag) => self.flags[usize::from(*flag)],
            Value::Null => self.null,
            Value::Number(number) => self.numbers.iter().any(|want| same_number(want, number)),
            Value::Array(_) | Value::Object(_) => false,
        }
    }
}

impl Matcher<'_> {
    /// Whether `document` meets every condition.
    pub fn matches(&self, document: FilteredDocument<'_>) -> bool {
        if let Some(ids) = &self.filters.document_ids
            && !ids.contains(&document.id)
        {
            return false;
        }
        if let Some(types) = &self.filters.media_types
            && !types.contains(document.media_type)
        {
            return false;
        }
        if self.created_after.is_some_and(|after| document.created_at < after) {
            return false;
        }
        if self.created_before.is_some_and(|before| document.created_at >= before) {
            return false;
        }
        self.metadata.iter().all(|(key, wanted)| {
            let Some(have) = document.metadata.get(*key) else { return false };
            match have {
                Value::Array(values) => values.iter().any(|have| wanted.holds(have)),
                single => wanted.holds(single),
            }
        })
    }
}

/// Numbers are equal by value: `1` and `1.0` are one number.
fn same_number(left: &serde_json::Number, right: &serde_json::Number) -> bool {
    match (left.as_i64(), right.as_i64()) {
        (Some(left), Some(right)) => left == right,
        _ => left.as_f64() == right.as_f64(),
    }
}

/// An RFC 3339 instant in epoch milliseconds.
fn millis(text: &str) -> Option<i64> {
    chrono::DateTime::parse_from_rfc3339(text).ok().map(|instant| instant.timestamp_millis())
}

impl LimitValue for DocumentFilters {
    fn from_json(value: &Value) -> Result<Self, String> {
        const SHAPE: &str = "an object with metadata, mediaTypes, documentIds, createdAfter or createdBefore";
        let Value::Object(object) = value else { return Err(SHAPE.to_owned()) };
        let mut filters = Self::default();
        for (key, value) in object {
            if value.is_null() {
                continue;
            }
            match key.as_str() {
                "metadata" => filters.metadata = Some(metadata(value)?),
                "mediaTypes" => filters.media_types = Some(media_types(value)?),
                "documentIds" => filters.document_ids = Some(document_ids(value)?),
                "createdAfter" => filters.created_after = Some(instant(value, "createdAfter")?),
                "createdBefore" => filters.created_before = Some(instant(value, "createdBefore")?),
                unknown => return Err(format!("{SHAPE} (not {unknown:?})")),
            }
        }
        Ok(filters)
    }
}

fn metadata(value: &Value) -> Result<Map<String, Value>, String> {
    let Value::Object(object) = value else { return Err("an object whose metadata is a JSON object".to_owned()) };
    if object.len() > MAX_METADATA_KEYS {
        return Err(format!("an object whose metadata names at most {MAX_METADATA_KEYS} keys"));
    }
    for (key, wanted) in object {
        if key.is_empty() || key.chars().count() > MAX_TEXT_CHARS {
            return Err(format!("an object whose metadata keys have 1 to {MAX_TEXT_CHARS} characters"));
        }
        let values: &[Value] = match wanted {
            Value::Array(values) if values.is_empty() || values.len() > MAX_VALUES => {
                return Err(format!("an object whose metadata lists hold 1 to {MAX_VALUES} values (at {key:?})"));
            }
            Value::Array(values) => values,
            single => std::slice::from_ref(single),
        };
        for value in values {
            match value {
                Value::Object(_) | Value::Array(_) => {
                    return Err(format!(
                        "an object whose metadata values are strings, numbers, booleans or null, or lists of them (at {key:?})"
                    ));
                }
                Value::String(text) if text.chars().count() > MAX_TEXT_CHARS => {
                    return Err(format!("an object whose metadata strings have at most {MAX_TEXT_CHARS} characters"));
                }
                _ => {}
            }
        }
    }
    Ok(object.clone())
}

fn media_types(value: &Value) -> Result<BTreeSet<String>, String> {
    let wrong = || format!("an object whose mediaTypes is a non-empty list of {}", MEDIA_TYPES.join(", "));
    let Value::Array(values) = value else { return Err(wrong()) };
    if values.is_empty() {
        return Err(wrong());
    }
    values
        .iter()
        .map(|value| value.as_str().filter(|name| MEDIA_TYPES.contains(name)).map(str::to_owned).ok_or_else(wrong))
        .collect()
}

fn document_ids(value: &Value) -> Result<BTreeSet<Uuid>, String> {
    let wrong = || format!("an object whose documentIds is a list of 1 to {MAX_DOCUMENT_IDS} UUIDs");
    let Value::Array(values) = value else { return Err(wrong()) };
    if values.is_empty() || values.len() > MAX_DOCUMENT_IDS {
        return Err(wrong());
    }
    values.iter().map(|value| value.as_str().and_then(|id| Uuid::parse_str(id).ok()).ok_or_else(wrong)).collect()
}

fn instant(value: &Value, key: &str) -> Result<String, String> {
    value
        .as_str()
        .filter(|text| millis(text).is_some())
        .map(str::to_owned)
        .ok_or_else(|| format!("an object whose {key} is an RFC 3339 date and time (2026-01-31T00:00:00Z)"))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn document(metadata: &Value) -> FilteredDocument<'_> {
        FilteredDocument { id: Uuid::nil(), metadata, media_type: "APPLICATION_PDF", created_at: 1_000 }
    }

    fn filters(value: Value) -> DocumentFilters {
        DocumentFilters::from_json(&value).expect("valid filters")
    }

    #[test]
    fn metadata_matches_by_json_equality_with_types_kept() {
        let scalar = filters(json!({ "metadata": { "year": 2024 } }));
        assert!(scalar.matches(document(&json!({ "year": 2024 }))));
        assert!(scalar.matches(document(&json!({ "year": 2024.0 }))));
        assert!(!scalar.matches(document(&json!({ "year": "2024" }))));
        assert!(!scalar.matches(document(&json!({}))));
        let any = filters(json!({ "metadata": { "team": ["ops", "sre"] } }));
        assert!(any.matches(document(&json!({ "team": "sre" }))));
        assert!(any.matches(document(&json!({ "team": ["dev", "ops"] }))));
        assert!(!any.matches(document(&json!({ "team": ["dev"] }))));
        let boolean = filters(json!({ "metadata": { "public": true } }));
        assert!(!boolean.matches(document(&json!({ "public": 1 }))));
        let both = filters(json!({ "metadata": { "public": true, "team": "ops" } }));
        assert!(both.matches(document(&json!({ "public": true, "team": "ops" }))));
        assert!(!both.matches(document(&json!({ "public": true, "team": "dev" }))));
    }

    #[test]
    fn types_ids_and_dates_bound_what_matches() {
        let dated = filters(json!({ "createdAfter": "1970-01-01T00:00:01Z", "createdBefore": "1970-01-01T00:00:02Z" }));
        assert!(dated.matches(document(&json!({}))), "createdAfter is inclusive");
        let empty = json!({});
        let mut late = document(&empty);
        late.created_at = 2_000;
        assert!(!dated.matches(late), "createdBefore is exclusive");
        assert!(!filters(json!({ "mediaTypes": ["TEXT_PLAIN"] })).matches(document(&json!({}))));
        assert!(filters(json!({ "documentIds": [Uuid::nil()] })).matches(document(&json!({}))));
        assert!(!filters(json!({ "documentIds": [Uuid::max()] })).matches(document(&json!({}))));
    }

    #[test]
    fn malformed_filters_are_refused() {
        for wrong in [
            json!([]),
            json!({ "meta": {} }),
            json!({ "metadata": [] }),
            json!({ "metadata": { "a": { "b": 1 } } }),
            json!({ "metadata": { "a": [] } }),
            json!({ "metadata": { "a": [[1]] } }),
            json!({ "mediaTypes": ["IMAGE_PNG"] }),
            json!({ "mediaTypes": [] }),
            json!({ "documentIds": ["not-a-uuid"] }),
            json!({ "createdAfter": "yesterday" }),
        ] {
            assert!(DocumentFilters::from_json(&wrong).is_err(), "{wrong}");
        }
    }

    #[test]
    fn what_is_stored_reads_back_the_same() {
        let given = json!({ "metadata": { "team": ["ops"] }, "mediaTypes": ["APPLICATION_PDF"], "createdAfter": "2026-01-01T00:00:00Z" });
        let parsed = filters(given.clone());
        assert_eq!(serde_json::to_value(&parsed).expect("serializes"), given);
    }
}
