//! A follow-up rewritten into a standalone query by the model: one call at planning,
//! skipped (the built-in rewrite used) when it could pass what is left of the budget, and
//! replaced by the built-in rewrite when the reply holds no usable query (none at all, or
//! one that drops a search term of the follow-up) or the call fails.
use serde_json::{Value, json};

use super::{Call, ChatRequest, OpenAiEngine, prompts};
use crate::knowledge::search::search_terms;
use crate::research::engine::{EngineError, StageContext, estimate_tokens};
use crate::research::thread::{ThreadView, builtin_standalone};

/// Whether `query` keeps the follow-up: it holds every search term of the follow-up, or,
/// for a follow-up with none of its own (`Why?`), one of an earlier question. A weak
/// model that repeats an earlier answer (the 135M model does: "And on Windows?" came back
/// as the cluster answer, without "Windows") or wanders off is not searched for.
fn keeps_the_follow_up(query: &str, question: &str, thread: &ThreadView) -> bool {
    let written: std::collections::HashSet<String> = search_terms(query).into_iter().collect();
    let own = search_terms(question);
    if !own.is_empty() {
        return own.iter().all(|term| written.contains(term));
    }
    thread.turns.iter().flat_map(|turn| search_terms(&turn.question)).any(|term| written.contains(&term))
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
                Some(query) if keeps_the_follow_up(&query, question, thread) => {
                    Ok((query, json!({ "rewriter": "model", "model": model })))
                }
                Some(_) => {
                    let reason = "the reply dropped the follow-up's words";
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
    fn a_rewrite_must_keep_the_follow_ups_words() {
        let earlier =
            PriorTurn { question: "How does the cluster module distribute connections?".into(), answer: None };
        let thread = ThreadView::new(vec![earlier], None);
        let asked = "And on Windows?";
        assert!(keeps_the_follow_up("How does the cluster module distribute connections on Windows?", asked, &thread));
        // What the 135M model answered: the earlier answer, without the follow-up.
        let repeated = "The primary process listens and distributes connections round-robin to workers.";
        assert!(!keeps_the_follow_up(repeated, asked, &thread));
        assert!(!keeps_the_follow_up("Hello! How can I help you today?", asked, &thread));
        // A follow-up with no word of its own (only stop words) needs one of an earlier question.
        assert!(keeps_the_follow_up("Why does the cluster module distribute connections?", "Why?", &thread));
        assert!(!keeps_the_follow_up("Hello there", "Why?", &thread));
    }
}
