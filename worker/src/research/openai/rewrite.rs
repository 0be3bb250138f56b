//! A follow-up rewritten into a standalone query by the model: one call at planning,
//! skipped (the built-in rewrite used) when it could pass what is left of the budget, and
//! replaced by the built-in rewrite when the reply holds no usable query (none at all, or
//! one sharing no search term with the follow-up or an earlier question) or the call
//! fails.
use serde_json::{Value, json};

use super::{Call, ChatRequest, OpenAiEngine, prompts};
use crate::knowledge::search::search_terms;
use crate::research::engine::{EngineError, StageContext, estimate_tokens};
use crate::research::thread::{ThreadView, builtin_standalone};

/// Whether `query` shares a search term with the follow-up or an earlier question: a weak
/// model that wanders off (a greeting, an unrelated topic) is not searched for.
fn about_the_conversation(query: &str, question: &str, thread: &ThreadView) -> bool {
    let asked: std::collections::HashSet<String> = std::iter::once(question)
        .chain(thread.turns.iter().map(|turn| turn.question.as_str()))
        .flat_map(search_terms)
        .collect();
    search_terms(query).iter().any(|term| asked.contains(term))
}

/// The most a rewrite may write, in tokens.
const REWRITE_MAX_TOKENS: u32 = 96;

impl OpenAiEngine {
    /// The standalone query of the follow-up `ctx` researches, and what making it did.
    pub(super) async fn model_standalone(
        &self,
        ctx: &StageContext<'_>,
        thread: &ThreadView,
    ) -> Result<(String, Value), EngineError> {
        let question = ctx.job.query.trim();
        let builtin = || builtin_standalone(question, thread.turns.first());
        let model = self.model_for(ctx);
        let messages = prompts::rewrite_messages(question, &thread.lines());
        let prompt_tokens: i64 = messages.iter().map(|message| estimate_tokens(&message.content)).sum();
        if let Some(left) = ctx.budget_left_nanos()
            && self.worst_call(prompt_tokens, Some(REWRITE_MAX_TOKENS)) > left
        {
            return Ok((builtin(), json!({ "rewriter": "builtin", "reason": "budget" })));
        }
        let request = ChatRequest { model: model.clone(), messages, json: false, max_tokens: Some(REWRITE_MAX_TOKENS) };
        match self.call(ctx, Call { stage: "planning", request, composer: None }).await {
            Ok(output) => match prompts::parse_rewrite(&output.content) {
                Some(query) if about_the_conversation(&query, question, thread) => {
                    Ok((query, json!({ "rewriter": "model", "model": model })))
                }
                Some(_) => {
                    let reason = "the reply shares no word with the conversation";
                    Ok((builtin(), json!({ "rewriter": "builtin", "reason": reason })))
                }
                None => Ok((builtin(), json!({ "rewriter": "builtin", "reason": "the reply held no query" }))),
            },
            // A lost lease or a stop is not a reason to guess: the stage ends.
            Err(error) if ctx.cancel.is_cancelled() => Err(error),
            Err(error) => Ok((builtin(), json!({ "rewriter": "builtin", "reason": error.to_string() }))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::research::thread::PriorTurn;

    #[test]
    fn a_rewrite_must_share_a_word_with_the_conversation() {
        let earlier = PriorTurn { question: "How do bees make honey?".into(), answer: Some("From nectar.".into()) };
        let thread = ThreadView::new(vec![earlier], None);
        assert!(about_the_conversation("Where do bees store honey?", "Where do they keep it?", &thread));
        assert!(about_the_conversation("keep it where", "Where do they keep it?", &thread));
        assert!(!about_the_conversation("Hello! How can I help you today?", "Where do they keep it?", &thread));
    }
}
