//! The decision after a round, asked of the model as JSON; the built-in coverage rule
//! decides when the reply holds no decision.
use serde_json::{Value, json};

use super::ChatRequest;
use super::{ANSWER_PROMPT_TOKENS, Call, DECISION_MAX_TOKENS, OpenAiEngine, prompts};
use crate::research::engine::{Decision, EngineError, RoundsSoFar, StageContext, coverage_decision, estimate_tokens};

impl OpenAiEngine {
    /// Asks whether the evidence so far answers the question, or what to search next.
    /// Refused with `OverBudget`, before anything is spent, when the call and the answer
    /// after it could pass what is left of the budget (the pipeline then answers).
    pub(super) async fn model_decision(
        &self,
        ctx: &StageContext<'_>,
        so_far: &RoundsSoFar<'_>,
    ) -> Result<(Decision, Value), EngineError> {
        let question = ctx.question();
        let model = self.model_for(ctx);
        let messages =
            prompts::decision_messages(question, &ctx.model_guidance(), so_far.evidence, so_far.searched, so_far.cap);
        let prompt_tokens: i64 = messages.iter().map(|message| estimate_tokens(&message.content)).sum();
        let answer_tokens: i64 =
            so_far.evidence.iter().map(|passage| estimate_tokens(&passage.text)).sum::<i64>() + ANSWER_PROMPT_TOKENS;
        let worst = self
            .worst_call(prompt_tokens, Some(DECISION_MAX_TOKENS))
            .saturating_add(self.worst_call(answer_tokens, None));
        if let Some(left) = ctx.budget_left_nanos()
            && worst > left
        {
            return Err(EngineError::OverBudget(format!(
                "a decision and the answer after it could cost ${:.9}",
                crate::research::cost::nanos_to_usd(worst)
            )));
        }
        let request = ChatRequest { model: model.clone(), messages, json: true, max_tokens: Some(DECISION_MAX_TOKENS) };
        let output = self.call(ctx, Call { stage: "analyzing", request, composer: None }).await?;
        Ok(match prompts::parse_decision(&output.content, question) {
            Some(decision) => (decision, json!({ "decider": "model", "model": model })),
            None => (
                coverage_decision(&ctx.question_with_notes(), so_far),
                json!({ "decider": "builtin", "model": model, "fallback": "the model's reply held no decision" }),
            ),
        })
    }
}
