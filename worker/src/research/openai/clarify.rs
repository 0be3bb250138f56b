//! The clarifying question before planning (`limits.clarify`), asked of the model as JSON.
use serde_json::{Value, json};

use super::{Call, ChatRequest, OpenAiEngine, prompts};
use crate::research::engine::{EngineError, StageContext, estimate_tokens};

/// The most a clarification reply may write, in tokens.
const CLARIFY_MAX_TOKENS: u32 = 128;

impl OpenAiEngine {
    /// Asks whether the question is too ambiguous to research and, if so, what to ask the
    /// person. Skipped (nothing asked, nothing spent) when the call could pass what is
    /// left of the budget. The call's cost stays in the stage's call log, which the plan
    /// after it (or the wait) accounts.
    pub(super) async fn model_clarification(
        &self,
        ctx: &StageContext<'_>,
    ) -> Result<(Option<String>, Value), EngineError> {
        let question = ctx.job.query.trim();
        let model = self.model_for(ctx);
        let messages = prompts::clarify_messages(question);
        let prompt_tokens: i64 = messages.iter().map(|message| estimate_tokens(&message.content)).sum();
        if let Some(left) = ctx.budget_left_nanos()
            && self.worst_call(prompt_tokens, Some(CLARIFY_MAX_TOKENS)) > left
        {
            return Ok((None, json!({ "clarifier": "skipped", "reason": "budget" })));
        }
        let request = ChatRequest { model: model.clone(), messages, json: true, max_tokens: Some(CLARIFY_MAX_TOKENS) };
        let output = self.call(ctx, Call { stage: "planning", request, composer: None }).await?;
        let asked = prompts::parse_clarification(&output.content);
        Ok((asked.clone(), json!({ "clarifier": "model", "model": model, "asked": asked.is_some() })))
    }
}
