//! What the `openai` engine says to the model, and how it reads the plan back: planning
//! asks for `{"sub_queries": [...]}` and tolerates prose or code fences around it;
//! generation numbers the evidence `[1]`…`[n]` and asks for citations in that form.
use serde_json::Value;

use super::client::Message;
use crate::engine::Passage;

/// The longest sub-query kept from a plan, in characters; longer ones are not queries.
const MAX_SUB_QUERY_CHARS: usize = 500;

/// The planning conversation for a question and the most sub-queries wanted.
pub fn plan_messages(question: &str, max: usize) -> Vec<Message> {
    let system = format!(
        "You plan research over a collection of documents. Break the user's question into at most {max} short, \
         self-contained search queries that together cover everything it asks. Reply with a JSON object only, \
         shaped {{\"sub_queries\": [\"...\"]}}."
    );
    vec![
        Message { role: "system", content: system },
        Message { role: "user", content: format!("Question: {question}") },
    ]
}

/// The generation conversation: the question and the numbered evidence.
pub fn answer_messages(question: &str, evidence: &[Passage]) -> Vec<Message> {
    let system = "You answer questions using only the numbered evidence given. After each claim, cite the evidence \
                  that supports it by its number in square brackets, like [1] or [2][3]. Cite only numbers that \
                  appear in the evidence. If the evidence does not answer the question, say so briefly. Answer in \
                  plain prose, without a preamble.";
    let mut user = format!("Question: {question}\n\nEvidence:\n");
    for (index, passage) in evidence.iter().enumerate() {
        let mut heading = passage.title.clone();
        if !passage.heading_path.is_empty() {
            heading.push_str(" — ");
            heading.push_str(&passage.heading_path.join(" › "));
        }
        let text = if passage.text.is_empty() { &passage.snippet } else { &passage.text };
        user.push_str(&format!("[{}] {heading}\n{text}\n\n", index + 1));
    }
    vec![Message { role: "system", content: system.to_owned() }, Message { role: "user", content: user }]
}

/// The sub-queries a planning reply proposes, cleaned: trimmed, non-empty, not too long,
/// without repeats (of each other or of the question). `None` when the reply holds no
/// plan at all.
pub fn parse_plan(reply: &str, question: &str) -> Option<Vec<String>> {
    let value = first_json(reply)?;
    let items = match &value {
        Value::Array(items) => items.clone(),
        Value::Object(fields) => {
            let list = ["sub_queries", "subQueries", "queries"].iter().find_map(|key| fields.get(*key))?;
            list.as_array()?.clone()
        }
        _ => return None,
    };
    let mut seen = std::collections::HashSet::from([question.trim().to_lowercase()]);
    let mut queries = Vec::new();
    for item in items {
        let text = match &item {
            Value::String(text) => text.clone(),
            Value::Object(fields) => fields.get("query").and_then(Value::as_str).unwrap_or_default().to_owned(),
            _ => continue,
        };
        let text = text.trim();
        if text.is_empty() || text.chars().count() > MAX_SUB_QUERY_CHARS || !seen.insert(text.to_lowercase()) {
            continue;
        }
        queries.push(text.to_owned());
    }
    Some(queries)
}

/// The first JSON object or array in `text`: all of it, or the first that parses from an
/// opening bracket on (prose and code fences around it are ignored).
fn first_json(text: &str) -> Option<Value> {
    if let Ok(value) = serde_json::from_str::<Value>(text.trim()) {
        return Some(value);
    }
    text.char_indices().filter(|(_, ch)| *ch == '{' || *ch == '[').find_map(|(start, _)| {
        let mut values = serde_json::Deserializer::from_str(&text[start..]).into_iter::<Value>();
        match values.next() {
            Some(Ok(value @ (Value::Object(_) | Value::Array(_)))) => Some(value),
            _ => None,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_are_read_from_json_with_or_without_prose_around_it() {
        let question = "How do bees make honey?";
        let plain = r#"{"sub_queries": ["nectar collection", "honey ripening"]}"#;
        assert_eq!(parse_plan(plain, question), Some(vec!["nectar collection".into(), "honey ripening".into()]));
        let fenced =
            "Here is the plan:\n```json\n{\"sub_queries\": [\"nectar\", {\"query\": \"enzymes\"}]}\n```\nDone.";
        assert_eq!(parse_plan(fenced, question), Some(vec!["nectar".into(), "enzymes".into()]));
        let bare = r#"Sure: ["a", "A", " ", "how do bees make honey?", "b"]"#;
        assert_eq!(parse_plan(bare, question), Some(vec!["a".into(), "b".into()]));
    }

    #[test]
    fn replies_without_a_plan_are_unusable() {
        assert_eq!(parse_plan("I cannot help with that.", "q"), None);
        assert_eq!(parse_plan(r#"{"answer": 42}"#, "q"), None);
        assert_eq!(parse_plan("{not json", "q"), None);
    }
}
