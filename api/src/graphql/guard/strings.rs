//! Strings no backend can store: PostgreSQL refuses NUL in TEXT and JSONB (and would
//! answer with a server error), SQLite would store it. Every string a request carries
//! (literals and default values in the document, variables, object keys at any depth) is
//! checked here, with explicit stacks, so both backends refuse the same input alike.
use async_graphql::Variables;
use async_graphql::parser::types::{ExecutableDocument, Selection, SelectionSet};
use async_graphql_value::{ConstValue, Value};

/// Whether a string may be stored.
fn storable(text: &str) -> bool {
    !text.contains('\0')
}

/// Whether every string among the variables may be stored.
pub fn variables_are_storable(variables: &Variables) -> bool {
    variables.keys().all(|name| storable(name)) && consts_are_storable(variables.values().collect())
}

/// Whether every string in these values (lists and objects walked, keys included) may be
/// stored.
fn consts_are_storable(mut stack: Vec<&ConstValue>) -> bool {
    while let Some(value) = stack.pop() {
        match value {
            ConstValue::String(text) if !storable(text) => return false,
            ConstValue::Enum(name) if !storable(name) => return false,
            ConstValue::List(items) => stack.extend(items),
            ConstValue::Object(fields) => {
                if fields.keys().any(|key| !storable(key)) {
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
fn literals_are_storable(values: Vec<&Value>) -> bool {
    let constants: Vec<ConstValue> = values
        .into_iter()
        .filter_map(|value| value.clone().into_const_with(|_| Ok::<_, std::convert::Infallible>(ConstValue::Null)).ok())
        .collect();
    consts_are_storable(constants.iter().collect())
}

/// Whether every string literal and default value in the document may be stored.
pub fn document_is_storable(document: &ExecutableDocument) -> bool {
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
    literals_are_storable(values) && consts_are_storable(defaults)
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
    fn a_nul_in_a_variable_key_or_value_is_found() {
        let value = |json: serde_json::Value| Variables::from_json(json);
        assert!(!variables_are_storable(&value(serde_json::json!({ "a": { "b\u{0}": 1 } }))));
        assert!(!variables_are_storable(&value(serde_json::json!({ "a": [[["\u{0}"]]] }))));
        assert!(variables_are_storable(&value(serde_json::json!({ "a": { "b": ["c"] } }))));
    }
}
