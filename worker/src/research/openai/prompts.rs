//! What the `openai` engine says to the model, and how it reads the plan back: planning
//! asks for `{"sub_queries": [...]}` and tolerates prose or code fences around it;
//! generation numbers the evidence `[1]`…`[n]` and asks for citations in that form.
use serde_json::Value;

use super::client::Message;
use crate::research::engine::Passage;

/// The longest sub-query kept from a plan, in characters; longer ones are not queries.
const MAX_SUB_QUERY_CHARS: usize = 500;

/// The planning conversation for a question and the most sub-queries wanted.
pub fn plan_messages(question: &str, notes: &[String], max: usize) -> Vec<Message> {
    let system = format!(
        "You plan research over a collection of documents. Break the user's question into at most {max} short, \
         self-contained search queries that together cover everything it asks. Reply with a JSON object only, \
         shaped {{\"sub_queries\": [\"...\"]}}."
    );
    vec![
        Message { role: "system", content: system },
        Message { role: "user", content: format!("Question: {question}\n{}", guidance(notes)).trim_end().to_owned() },
    ]
}

/// The generation conversation: the question and the numbered evidence.
pub fn answer_messages(question: &str, evidence: &[Passage], notes: &[String]) -> Vec<Message> {
    let system = "You answer questions using only the numbered evidence given. After each claim, cite the evidence \
                  that supports it by its number in square brackets, like [1] or [2][3]. Cite only numbers that \
                  appear in the evidence. If the evidence does not answer the question, say so briefly. Answer in \
                  plain prose, without a preamble.";
    let mut user = format!("Question: {question}\n{}\nEvidence:\n", guidance(notes));
    for (index, passage) in evidence.iter().enumerate() {
        user.push_str(&format!("[{}] {}\n{}\n\n", index + 1, heading_of(passage), passage.readable_text()));
    }
    vec![Message { role: "system", content: system.to_owned() }, Message { role: "user", content: user }]
}

/// The sub-queries a planning reply proposes, cleaned: trimmed, non-empty, not too long,
/// without repeats (of each other or of the question). `None` when the reply holds no
/// plan at all.
pub fn parse_plan(reply: &str, question: &str) -> Option<Vec<String>> {
    query_list(&first_json(reply)?, question)
}

/// The queries a JSON value lists (an array, or an object's `sub_queries`, `subQueries` or
/// `queries`), cleaned as [`parse_plan`] says.
fn query_list(value: &Value, question: &str) -> Option<Vec<String>> {
    let items = match value {
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

/// The most evidence a decision prompt shows, and the characters shown of each.
const DECISION_EVIDENCE: usize = 8;
const DECISION_EXCERPT_CHARS: usize = 300;

/// The conversation that decides after a round: the question, what was searched, and a
/// bounded view of the evidence (titles, heading paths and the start of the best passages).
pub fn decision_messages(
    question: &str,
    notes: &[String],
    evidence: &[Passage],
    searched: &[String],
    max: usize,
) -> Vec<Message> {
    let system = format!(
        "You check whether research has found enough to answer a question. Reply with a JSON object only: \
         {{\"answered\": true}} when the evidence answers the question, otherwise {{\"answered\": false, \
         \"queries\": [\"...\"]}} with at most {max} new short search queries for what is still missing."
    );
    let mut user = format!("Question: {question}\n{}\nSearched so far:\n", guidance(notes));
    for query in searched {
        user.push_str(&format!("- {query}\n"));
    }
    user.push_str("\nEvidence found:\n");
    let mut best: Vec<&Passage> = evidence.iter().collect();
    best.sort_by(|a, b| b.score.total_cmp(&a.score));
    for (index, passage) in best.into_iter().take(DECISION_EVIDENCE).enumerate() {
        let excerpt: String = passage.readable_text().chars().take(DECISION_EXCERPT_CHARS).collect();
        user.push_str(&format!("[{}] {}\n{excerpt}\n\n", index + 1, heading_of(passage)));
    }
    if evidence.is_empty() {
        user.push_str("(none)\n");
    }
    vec![Message { role: "system", content: system }, Message { role: "user", content: user }]
}

/// What a decision reply says: answered, or the queries to search next (possibly none).
/// `None` when the reply says neither.
pub fn parse_decision(reply: &str, question: &str) -> Option<crate::research::engine::Decision> {
    let value = first_json(reply)?;
    if value.get("answered").and_then(Value::as_bool) == Some(true) {
        return Some(crate::research::engine::Decision::Answered);
    }
    query_list(&value, question).map(crate::research::engine::Decision::Search)
}

/// The repair conversation: the answer conversation, the answer that was wrong, and what
/// was wrong with it.
pub fn repair_messages(
    question: &str,
    evidence: &[Passage],
    notes: &[String],
    previous: &str,
    problem: &str,
) -> Vec<Message> {
    let mut messages = answer_messages(question, evidence, notes);
    messages.push(Message { role: "assistant", content: previous.to_owned() });
    messages.push(Message {
        role: "user",
        content: format!(
            "That answer {problem}. Write the answer again: short sentences that state what the evidence says, each \
             ending with the number of the evidence that supports it in square brackets, like [1]."
        ),
    });
    messages
}

/// The verification conversation for one claim and the passage it cites.
pub fn verify_messages(claim: &str, passage: &str) -> Vec<Message> {
    let system = "You check facts. Reply with one word: yes or no.";
    let user = format!("Passage:\n{passage}\n\nClaim: {claim}\n\nDoes the passage support the claim?");
    vec![Message { role: "system", content: system.to_owned() }, Message { role: "user", content: user }]
}

/// What a verification reply says: `Some(true)` for yes, `Some(false)` for no, `None` when
/// it says neither first (a weak model's ramble).
pub fn parse_verdict(reply: &str) -> Option<bool> {
    let first = reply.split(|c: char| !c.is_alphanumeric()).find(|word| !word.is_empty())?.to_lowercase();
    match first.as_str() {
        "yes" | "true" | "supported" => Some(true),
        "no" | "false" | "unsupported" => Some(false),
        _ => None,
    }
}

/// The longest clarifying question kept, in characters.
const MAX_CLARIFYING_CHARS: usize = 500;

/// The conversation that asks for a follow-up's standalone query.
pub fn rewrite_messages(question: &str, conversation: &[String]) -> Vec<Message> {
    let system = "You rewrite a follow-up question of a conversation into one standalone search query that can be \
                  understood without the conversation: resolve what it refers to (pronouns, \"and on Windows?\") \
                  from the earlier questions and answers. Reply with the query only, on one line.";
    let user = format!("{}\n\nFollow-up: {question}", conversation.join("\n"));
    vec![Message { role: "system", content: system.to_owned() }, Message { role: "user", content: user }]
}

/// The standalone query a rewrite reply holds: its first line that says something and is
/// not a preamble (`Sure! Here is the query:`), without a label (`Standalone query:`),
/// list mark or quotes around it; none when there is no such line or it is longer than a
/// question may be (4,000 characters, as `createResearchTask` allows).
pub fn parse_rewrite(reply: &str) -> Option<String> {
    const LABELS: [&str; 4] = ["standalone query:", "rewritten query:", "search query:", "query:"];
    let line = reply
        .lines()
        .map(|line| line.trim().trim_start_matches(['-', '*', '>', '#']).trim())
        .find(|line| !line.is_empty() && !line.ends_with(':'))?;
    let lower = line.to_lowercase();
    let line = LABELS
        .iter()
        .find(|label| lower.starts_with(*label))
        .map_or(line, |label| line.get(label.len()..).unwrap_or_default())
        .trim();
    let line = line.trim_matches(|ch: char| ch.is_whitespace() || matches!(ch, '"' | '\'' | '`' | '“' | '”' | '*'));
    let fits = !line.is_empty() && line.chars().count() <= 4_000;
    fits.then(|| line.to_owned())
}

/// The conversation that asks whether a question is too ambiguous to research.
pub fn clarify_messages(question: &str) -> Vec<Message> {
    let system = "You decide whether a research question can be researched as asked. Only when it is so ambiguous \
                  that researching it would likely answer the wrong question (an unexplained abbreviation, a name \
                  that means several different things, a missing subject), ask the person one short clarifying \
                  question. Reply with a JSON object only: {\"ambiguous\": false} or {\"ambiguous\": true, \
                  \"question\": \"...\"}.";
    vec![
        Message { role: "system", content: system.to_owned() },
        Message { role: "user", content: format!("Question: {question}") },
    ]
}

/// The clarifying question a reply asks, if it asks one: `{"ambiguous": true, "question":
/// "…"}` (prose or code fences around it tolerated). A reply that says nothing usable asks
/// nothing: a person is interrupted only when the model clearly asks.
pub fn parse_clarification(reply: &str) -> Option<String> {
    let value = first_json(reply)?;
    if value.get("ambiguous").and_then(Value::as_bool) != Some(true) {
        return None;
    }
    let question = value.get("question")?.as_str()?.trim();
    if question.is_empty() || question.chars().count() > MAX_CLARIFYING_CHARS {
        return None;
    }
    Some(question.to_owned())
}

/// The steering notes as a prompt shows them, one per line after a heading; nothing
/// without notes.
fn guidance(notes: &[String]) -> String {
    if notes.is_empty() {
        return String::new();
    }
    let mut text = "Guidance from the person who asked (follow it):\n".to_owned();
    for note in notes {
        text.push_str(&format!("- {}\n", note.trim()));
    }
    text
}

/// Where a passage comes from, as a prompt labels it (its document's title and the
/// headings above it), so a model reads it as a source and not as text to repeat.
fn heading_of(passage: &Passage) -> String {
    let mut heading = format!("(source: {}", passage.title);
    if !passage.heading_path.is_empty() {
        heading.push_str(", section ");
        heading.push_str(&passage.heading_path.join(" › "));
    }
    heading.push(')');
    heading
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
    fn a_rewrite_is_its_query_without_preamble_label_or_quotes() {
        assert_eq!(parse_rewrite("Where do bees store honey?").as_deref(), Some("Where do bees store honey?"));
        let chatty = "Sure! Here is the standalone query:\n\n**Standalone query:** \"Where do bees store honey?\"";
        assert_eq!(parse_rewrite(chatty).as_deref(), Some("Where do bees store honey?"));
        assert_eq!(parse_rewrite("- Query: bees honey storage").as_deref(), Some("bees honey storage"));
        assert_eq!(parse_rewrite("  \n\n"), None);
        assert_eq!(parse_rewrite("Here it is:"), None);
        assert_eq!(parse_rewrite(&"q".repeat(4_001)), None);
    }

    #[test]
    fn a_clarifying_question_is_asked_only_when_the_reply_clearly_asks_one() {
        let asked = "Sure:\n```json\n{\"ambiguous\": true, \"question\": \" Which Python? \"}\n```";
        assert_eq!(parse_clarification(asked).as_deref(), Some("Which Python?"));
        for reply in [
            "{\"ambiguous\": false, \"question\": \"Which one?\"}",
            "{\"ambiguous\": true}",
            "{\"ambiguous\": true, \"question\": \"  \"}",
            "{\"ambiguous\": \"yes\", \"question\": \"Which one?\"}",
            "Which Python do you mean?",
            "",
        ] {
            assert_eq!(parse_clarification(reply), None, "{reply}");
        }
        let long = format!("{{\"ambiguous\": true, \"question\": \"{}?\"}}", "a".repeat(600));
        assert_eq!(parse_clarification(&long), None, "a question is short");
    }

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
    fn decisions_and_verdicts_are_read_from_what_weak_models_write() {
        use crate::research::engine::Decision;
        let q = "How do bees make honey?";
        assert_eq!(parse_decision(r#"Sure! {"answered": true}"#, q), Some(Decision::Answered));
        let more = r#"```json\n{"answered": false, "queries": ["wax glands", "wax glands"]}\n```"#;
        assert_eq!(parse_decision(more, q), Some(Decision::Search(vec!["wax glands".into()])));
        assert_eq!(parse_decision(r#"{"answered": false, "queries": []}"#, q), Some(Decision::Search(vec![])));
        assert_eq!(parse_decision("The evidence looks good to me.", q), None);
        assert_eq!(parse_verdict(" Yes, it does."), Some(true));
        assert_eq!(parse_verdict("No."), Some(false));
        assert_eq!(parse_verdict("The passage talks about bees."), None);
        assert_eq!(parse_verdict(""), None);
    }

    #[test]
    fn replies_without_a_plan_are_unusable() {
        assert_eq!(parse_plan("I cannot help with that.", "q"), None);
        assert_eq!(parse_plan(r#"{"answer": 42}"#, "q"), None);
        assert_eq!(parse_plan("{not json", "q"), None);
    }
}
