//! Strings a request may not carry, checked in every string it carries (literals and
//! default values in the document, variables, object keys at any depth), with explicit
//! stacks: NUL, which no backend can store alike (PostgreSQL refuses it in TEXT and JSONB
//! with a server error, SQLite would store it); and async-graphql's marker for an uploaded
//! file (`#__graphql_file__:N`) anywhere but in a variable a multipart request's file
//! filled, because its `Upload` scalar panics on a marker that names no file.
use async_graphql::Variables;
use async_graphql::parser::types::{ExecutableDocument, Selection, SelectionSet};
use async_graphql_value::{ConstValue, Value};

/// Whether a string may be stored.
fn storable(text: &str) -> bool {
    !text.contains('\0')
}

/// The prefix async-graphql gives the value of a variable a multipart request's file
/// filled, followed by the file's index.
const UPLOAD_MARKER: &str = "#__graphql_file__:";

/// Whether a string is either no upload marker or one naming a file of the `uploads`
/// the request carries.
fn names_a_carried_upload(text: &str, uploads: usize) -> bool {
    match text.strip_prefix(UPLOAD_MARKER) {
        None => true,
        Some(index) => index.parse::<usize>().is_ok_and(|index| index < uploads),
    }
}

/// Whether every string among the variables may be stored.
pub fn variables_are_storable(variables: &Variables) -> bool {
    variables.keys().all(|name| storable(name)) && consts_all(variables.values().collect(), &storable)
}

/// Whether every upload marker among the variables names one of the `uploads` files the
/// request carries (a JSON request carries none).
pub fn variables_name_carried_uploads(variables: &Variables, uploads: usize) -> bool {
    consts_all(variables.values().collect(), &|text| names_a_carried_upload(text, uploads))
}

/// Whether every string in these values (lists and objects walked, keys included) is `ok`.
fn consts_all(mut stack: Vec<&ConstValue>, ok: &dyn Fn(&str) -> bool) -> bool {
    while let Some(value) = stack.pop() {
        match value {
            ConstValue::String(text) if !ok(text) => return false,
            ConstValue::Enum(name) if !ok(name) => return false,
            ConstValue::List(items) => stack.extend(items),
            ConstValue::Object(fields) => {
                if fields.keys().any(|key| !ok(key)) {
                    return false;
                }
                stack.extend(fields.values());
            }
            _ => {}
        }
    }
    true
}

/// Literals as constants, their variables read as null (a variable's value is checked with
/// the variables): one walk then serves both. The document is bounded by the guard, so
/// the copy is too.
fn literals_all(values: Vec<&Value>, ok: &dyn Fn(&str) -> bool) -> bool {
    let constants: Vec<ConstValue> = values
        .into_iter()
        .filter_map(|value| value.clone().into_const_with(|_| Ok::<_, std::convert::Infallible>(ConstValue::Null)).ok())
        .collect();
    consts_all(constants.iter().collect(), ok)
}

/// Whether every string literal and default value in the document may be stored.
pub fn document_is_storable(document: &ExecutableDocument) -> bool {
    document_strings_all(document, &storable)
}

/// Whether no literal or default value of the document is an upload marker (only a
/// multipart request's variables may carry one).
pub fn document_names_no_upload(document: &ExecutableDocument) -> bool {
    document_strings_all(document, &|text| names_a_carried_upload(text, 0))
}

/// Whether every string literal and default value in the document is `ok`.
fn document_strings_all(document: &ExecutableDocument, ok: &dyn Fn(&str) -> bool) -> bool {
    let mut sets: Vec<&SelectionSet> = Vec::new();
    let mut values: Vec<&Value> = Vec::new();
    let mut defaults: Vec<&ConstValue> = Vec::new();
    for (_, operation) in document.operations.iter() {
        sets.push(&operation.node.selection_set.node);
        for definition in &operation.node.variable_definitions {
            defaults.extend(definition.node.default_value.as_ref().map(|value| &value.node));
            values
                .extend(definition.node.directives.iter().flat_map(|d| d.node.arguments.iter().map(|(_, v)| &v.node)));
        }
        values.extend(operation.node.directives.iter().flat_map(|d| d.node.arguments.iter().map(|(_, v)| &v.node)));
    }
    for fragment in document.fragments.values() {
        sets.push(&fragment.node.selection_set.node);
        values.extend(fragment.node.directives.iter().flat_map(|d| d.node.arguments.iter().map(|(_, v)| &v.node)));
    }
    while let Some(set) = sets.pop() {
        for item in &set.items {
            let directives = match &item.node {
                Selection::Field(field) => {
                    values.extend(field.node.arguments.iter().map(|(_, value)| &value.node));
                    sets.push(&field.node.selection_set.node);
                    &field.node.directives
                }
                Selection::FragmentSpread(spread) => &spread.node.directives,
                Selection::InlineFragment(inline) => {
                    sets.push(&inline.node.selection_set.node);
                    &inline.node.directives
                }
            };
            values.extend(directives.iter().flat_map(|d| d.node.arguments.iter().map(|(_, v)| &v.node)));
        }
    }
    literals_all(values, ok) && consts_all(defaults, ok)
}

#[cfg(test)]
mod tests {
    use async_graphql::parser::parse_query;

    use super::*;

    #[test]
    fn a_nul_escape_in_a_nested_literal_is_found() {
        let document = parse_query(r#"mutation { m(input: { a: [{ b: "x\u0000y" }] }) { id } }"#).expect("parses");
        assert!(!document_is_storable(&document));
        let clean = parse_query(r#"mutation { m(input: { a: [{ b: "xy" }] }) { id } }"#).expect("parses");
        assert!(document_is_storable(&clean));
    }

    #[test]
    fn a_nul_in_a_default_value_is_found() {
        let document = parse_query(r#"query($q: String = "\u0000") { a(q: $q) }"#).expect("parses");
        assert!(!document_is_storable(&document));
    }

    #[test]
    fn an_upload_marker_must_name_a_carried_file() {
        let value = |json: serde_json::Value| Variables::from_json(json);
        let marked = value(serde_json::json!({ "input": { "file": "#__graphql_file__:0" } }));
        assert!(variables_name_carried_uploads(&marked, 1));
        assert!(!variables_name_carried_uploads(&marked, 0));
        assert!(!variables_name_carried_uploads(&value(serde_json::json!({ "f": ["#__graphql_file__:x"] })), 3));
        let literal = parse_query(r##"mutation { m(file: "#__graphql_file__:0") }"##).expect("parses");
        assert!(!document_names_no_upload(&literal));
        assert!(document_names_no_upload(&parse_query("{ a }").expect("parses")));
    }

    #[test]
    fn a_nul_in_a_variable_key_or_value_is_found() {
        let value = |json: serde_json::Value| Variables::from_json(json);
        assert!(!variables_are_storable(&value(serde_json::json!({ "a": { "b\u{0}": 1 } }))));
        assert!(!variables_are_storable(&value(serde_json::json!({ "a": [[["\u{0}"]]] }))));
        assert!(variables_are_storable(&value(serde_json::json!({ "a": { "b": ["c"] } }))));
    }
}
