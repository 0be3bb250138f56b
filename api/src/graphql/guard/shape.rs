//! The shape of a parsed document once its fragment spreads are followed, computed
//! without recursion: how deep every definition reaches and how many selections it
//! expands to. async-graphql's validator follows spreads recursively (cycle detection,
//! overlapping fields, depth and complexity), over *every* fragment definition, used or
//! not; bounding both figures for every definition here bounds all of that work.
use std::collections::HashMap;

use async_graphql::Positioned;
use async_graphql::parser::types::{ExecutableDocument, Selection, SelectionSet};

/// Why a document's shape is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ShapeError {
    /// A fragment spreads itself, directly or through others.
    Cycle(String),
    /// Selections nest deeper than allowed once spreads are followed.
    TooDeep { depth: usize, max: usize },
    /// The definitions expand to more selections than allowed.
    TooLarge { max: usize },
}

/// One definition (an operation or a fragment) as seen before following spreads.
#[derive(Debug, Default)]
struct Local<'a> {
    /// Selections written in it (fields, spreads, inline fragments), at every level.
    selections: usize,
    /// Its own nesting depth, in async-graphql's counting (each field with a selection
    /// set, spread and inline fragment is one level).
    depth: usize,
    /// The fragments it spreads, each with the depth at which the fragment's selection
    /// set starts.
    spreads: Vec<(&'a str, usize)>,
}

/// Checks that no definition nests deeper than `max_depth` and that all of them together
/// expand to at most `max_selections` selections.
pub fn check(document: &ExecutableDocument, max_depth: usize, max_selections: usize) -> Result<(), ShapeError> {
    let mut locals: HashMap<&str, Local<'_>> = HashMap::new();
    for (name, fragment) in &document.fragments {
        locals.insert(name.as_str(), local(&fragment.node.selection_set));
    }
    // Operations are never spread, so they need no name a fragment could collide with.
    let operations: Vec<Local<'_>> = document.operations.iter().map(|(_, op)| local(&op.node.selection_set)).collect();

    let order = spread_order(&locals)?;
    // (depth, expanded selections) of each fragment, targets before those that spread them.
    let mut expanded: HashMap<&str, (usize, usize)> = HashMap::with_capacity(order.len());
    for name in order {
        let figures = follow(&locals[name], &expanded);
        expanded.insert(name, figures);
    }
    let mut total = 0usize;
    for figures in expanded.values().copied().chain(operations.iter().map(|op| follow(op, &expanded))) {
        let (depth, selections) = figures;
        if depth > max_depth {
            return Err(ShapeError::TooDeep { depth, max: max_depth });
        }
        total = total.saturating_add(selections);
        if total > max_selections {
            return Err(ShapeError::TooLarge { max: max_selections });
        }
    }
    Ok(())
}

/// A definition's depth and expanded size, given those of every fragment it spreads.
/// Unknown fragments count as empty: validation reports them.
fn follow(local: &Local<'_>, expanded: &HashMap<&str, (usize, usize)>) -> (usize, usize) {
    let mut depth = local.depth;
    let mut selections = local.selections;
    for (target, at) in &local.spreads {
        if let Some((target_depth, target_selections)) = expanded.get(target) {
            depth = depth.max(at.saturating_add(*target_depth));
            selections = selections.saturating_add(*target_selections);
        }
    }
    (depth, selections)
}

/// The fragments in an order where every fragment comes after all fragments it spreads
/// (Kahn's algorithm); a fragment left over is on a cycle.
fn spread_order<'a>(locals: &HashMap<&'a str, Local<'a>>) -> Result<Vec<&'a str>, ShapeError> {
    let mut waiting_on: HashMap<&str, usize> = HashMap::with_capacity(locals.len());
    let mut spread_by: HashMap<&str, Vec<&str>> = HashMap::new();
    for (&name, local) in locals {
        let known = local.spreads.iter().filter(|(target, _)| locals.contains_key(target)).count();
        waiting_on.insert(name, known);
        for (target, _) in local.spreads.iter().filter(|(target, _)| locals.contains_key(target)) {
            spread_by.entry(target).or_default().push(name);
        }
    }
    let mut ready: Vec<&str> = waiting_on.iter().filter(|(_, count)| **count == 0).map(|(name, _)| *name).collect();
    let mut order = Vec::with_capacity(locals.len());
    while let Some(name) = ready.pop() {
        order.push(name);
        for &spreader in spread_by.get(name).into_iter().flatten() {
            if let Some(count) = waiting_on.get_mut(spreader) {
                *count -= 1;
                if *count == 0 {
                    ready.push(spreader);
                }
            }
        }
    }
    if order.len() < locals.len() {
        let mut stuck: Vec<&str> = waiting_on.iter().filter(|(_, count)| **count > 0).map(|(name, _)| *name).collect();
        stuck.sort_unstable();
        return Err(ShapeError::Cycle(stuck.first().copied().unwrap_or_default().to_owned()));
    }
    Ok(order)
}

/// One definition's own figures, walked with an explicit stack.
fn local(root: &Positioned<SelectionSet>) -> Local<'_> {
    let mut local = Local::default();
    // (selection set, the depth its items are at). async-graphql counts the root set as
    // depth 0 and each nested set one deeper.
    let mut stack: Vec<(&SelectionSet, usize)> = vec![(&root.node, 0)];
    while let Some((set, depth)) = stack.pop() {
        local.depth = local.depth.max(depth);
        for item in &set.items {
            local.selections += 1;
            match &item.node {
                Selection::Field(field) => {
                    if !field.node.selection_set.node.items.is_empty() {
                        stack.push((&field.node.selection_set.node, depth + 1));
                    }
                }
                Selection::FragmentSpread(spread) => {
                    local.spreads.push((spread.node.fragment_name.node.as_str(), depth + 1));
                }
                Selection::InlineFragment(inline) => stack.push((&inline.node.selection_set.node, depth + 1)),
            }
        }
    }
    local
}

#[cfg(test)]
mod tests {
    use async_graphql::parser::parse_query;

    use super::*;

    fn shape(text: &str) -> Result<(), ShapeError> {
        check(&parse_query(text).expect("the test document parses"), 32, 1_000)
    }

    #[test]
    fn a_long_chain_of_unused_fragments_is_too_deep() {
        let mut text = String::from("query { __typename }");
        for index in 0..100 {
            text.push_str(&format!(" fragment F{index} on Query {{ ...F{} }}", index + 1));
        }
        text.push_str(" fragment F100 on Query { __typename }");
        assert!(matches!(shape(&text), Err(ShapeError::TooDeep { .. })), "{:?}", shape(&text));
    }

    #[test]
    fn fan_out_is_too_large_long_before_it_is_too_deep() {
        let mut text = String::from("query { ...F0 }");
        for index in 0..20 {
            text.push_str(&format!(" fragment F{index} on Query {{ ...F{next} ...F{next} }}", next = index + 1));
        }
        text.push_str(" fragment F20 on Query { __typename }");
        assert_eq!(shape(&text), Err(ShapeError::TooLarge { max: 1_000 }));
    }

    #[test]
    fn cycles_are_named() {
        let text = "query { ...A } fragment A on Query { ...B } fragment B on Query { ...A }";
        assert!(matches!(shape(text), Err(ShapeError::Cycle(name)) if name == "A"));
    }

    #[test]
    fn ordinary_documents_pass() {
        let text = "query { viewer { subjectId } ...V } fragment V on Query { viewer { ...S } } fragment S on Viewer { tenantId }";
        assert_eq!(shape(text), Ok(()));
    }

    #[test]
    fn depth_counts_fields_spreads_and_inline_fragments() {
        // { a { ...F } } F: { b { c } }: a's set at 1, F's set at 2, b's set at 3.
        let text = "query { a { ...F } } fragment F on A { b { c } }";
        assert_eq!(check(&parse_query(text).expect("parses"), 3, 100), Ok(()));
        assert!(matches!(
            check(&parse_query(text).expect("parses"), 2, 100),
            Err(ShapeError::TooDeep { depth: 3, .. })
        ));
    }
}
