//! The `openai` engine: research with any OpenAI-compatible chat-completions endpoint.
//! Planning asks the model for sub-queries as JSON (the built-in plan is the fallback when
//! the reply is unusable), retrieval and analysis are the built-in engine's over the
//! space's passages, and generation streams a cited answer through the citation checks
//! to the answer draft. Every call is checked against the budget before it is made
//! (prompt tokens counted, plus the most it may write, at the configured prices), retried
//! on transient failures with backoff and jitter within the task's deadline, and recorded
//! with what its usage says it cost.
mod answer;
mod clarify;
mod client;
mod decide;
mod prompts;
mod rewrite;
mod tokens;

use std::time::Duration;

use entity::ResearchMode;
use serde_json::{Value, json};

pub use client::{CallError, ChatClient, ChatOutput, ChatRequest, Usage};
pub use tokens::Counter;

use crate::model_settings::ChatEndpoint;
use crate::research::cost::CostReport;
use crate::research::engine::{
    Answer, BuiltinEngine, Clarification, Composer, Decision, EngineError, NO_EVIDENCE_ANSWER, Passage, Plan,
    ResearchEngine, Retrieval, RoundBounds, RoundsSoFar, StageContext, Staged, async_trait, limits_of, resolve_mode,
    split_query, sub_query_count,
};

/// What a decision prompt may hold at most, in tokens: eight excerpts of 300 characters,
/// the searches and the instructions.
const DECISION_PROMPT_TOKENS: i64 = 1_200;
/// What a decision may write: a short JSON object, with room for prose around it.
const DECISION_MAX_TOKENS: u32 = 256;
/// The answer prompt's instructions and question, in tokens, besides the evidence.
const ANSWER_PROMPT_TOKENS: i64 = 400;

/// The shortest and longest pause between two tries of one call (before jitter);
/// `Retry-After` wins over both.
const BACKOFF_MIN: Duration = Duration::from_millis(250);
const BACKOFF_MAX: Duration = Duration::from_secs(20);

/// The engine. Cheap to share: one HTTP client for every task.
pub struct OpenAiEngine {
    client: ChatClient,
    builtin: BuiltinEngine,
}

/// A call as the engine makes it: which stage, which model, what it says.
struct Call<'c, 's> {
    stage: &'static str,
    request: ChatRequest,
    composer: Option<&'c mut Composer<'s>>,
}

impl OpenAiEngine {
    /// An engine over `endpoint`, retrieving and analysing as `builtin` does.
    pub fn new(endpoint: ChatEndpoint, builtin: BuiltinEngine) -> Result<Self, reqwest::Error> {
        Ok(Self { client: ChatClient::new(endpoint)?, builtin })
    }

    fn endpoint(&self) -> &ChatEndpoint {
        self.client.endpoint()
    }

    /// The model of a task: its asked mode's (`AUTO` has one of its own), else its
    /// resolved mode's, else the default.
    fn model_for(&self, ctx: &StageContext<'_>) -> String {
        let [auto, fast, research, deep] = &self.endpoint().mode_models;
        let of = |mode: ResearchMode| match mode {
            ResearchMode::Auto => auto,
            ResearchMode::Fast => fast,
            ResearchMode::Research => research,
            ResearchMode::Deep => deep,
        };
        let asked = ctx.job.mode.unwrap_or(ResearchMode::Auto);
        of(asked).clone().or_else(|| of(Self::mode(ctx)).clone()).unwrap_or_else(|| self.endpoint().model.clone())
    }

    fn mode(ctx: &StageContext<'_>) -> ResearchMode {
        resolve_mode(ctx.job.mode.unwrap_or(ResearchMode::Auto), ctx.question())
    }

    /// Makes one call, retrying transient failures; every try is checked against the
    /// budget first and recorded in `ctx.calls` with its cost.
    async fn call(&self, ctx: &StageContext<'_>, mut call: Call<'_, '_>) -> Result<ChatOutput, EngineError> {
        let endpoint = self.endpoint().clone();
        let (counter, prompt_tokens) = count_prompt(&call.request).await?;
        let output_limit = call.request.output_limit(endpoint.max_output_tokens);
        let worst = CostReport::at_prices(
            prompt_tokens,
            i64::from(output_limit),
            endpoint.input_usd_per_1m,
            endpoint.output_usd_per_1m,
        );
        let deadline = limits_of(ctx.job).deadline_ms.map(|ms| ctx.job.created_at.saturating_add(ms.get()));
        let mut delays = crate::remote::backoff(BACKOFF_MIN, BACKOFF_MAX, endpoint.max_retries);
        let mut tries = 0u32;
        loop {
            tries += 1;
            if let Some(left) = ctx.budget_left_nanos()
                && worst.usd_nanos > left
            {
                return Err(EngineError::OverBudget(format!(
                    "the next {} call ({}) could cost up to ${:.9} ({} prompt tokens, up to {} output tokens) but \
                     ${:.9} of the ${:.9} budget is left",
                    call.stage,
                    call.request.model,
                    crate::research::cost::nanos_to_usd(worst.usd_nanos),
                    prompt_tokens,
                    output_limit,
                    crate::research::cost::nanos_to_usd(left.max(0)),
                    ctx.job.budget_usd.unwrap_or_default(),
                )));
            }
            if tries > 1
                && let Some(composer) = call.composer.as_deref_mut()
            {
                composer.restart();
            }
            let composer = &mut call.composer;
            let mut on_delta = |delta: &str| {
                if let Some(composer) = composer.as_deref_mut() {
                    composer.push(delta);
                }
            };
            let result = self.client.stream(&call.request, &mut on_delta).await;
            match result {
                Ok(output) => {
                    self.record(ctx, &call, counter, prompt_tokens, &output.content, output.usage, "ok");
                    return Ok(output);
                }
                Err(CallError::Refused { description, .. }) => {
                    return Err(EngineError::Refused(format!("the {} call: {description}", call.stage)));
                }
                Err(CallError::Transient { message, retry_after, partial }) => {
                    if !partial.is_empty() {
                        // A cut stream was generated, and is likely billed: count it.
                        self.record(ctx, &call, counter, prompt_tokens, &partial, None, "cut");
                    }
                    let Some(backoff) = delays.next() else {
                        let message = format!("the {} call: {message} (after {tries} tries)", call.stage);
                        return Err(EngineError::Transient(message.into()));
                    };
                    let wait = retry_after.unwrap_or(backoff);
                    if let Some(deadline) = deadline
                        && entity::now_millis().saturating_add(i64::try_from(wait.as_millis()).unwrap_or(i64::MAX))
                            > deadline
                    {
                        return Err(EngineError::Transient(
                            format!(
                                "the {} call: {message} (no time for another try before limits.deadline_ms)",
                                call.stage
                            )
                            .into(),
                        ));
                    }
                    tracing::warn!(error = %message, wait_ms = wait.as_millis() as u64, tries, stage = call.stage, "model call failed; trying again");
                    tokio::select! {
                        () = tokio::time::sleep(wait) => {}
                        () = ctx.cancel.cancelled() => return Err(EngineError::Transient("the stage was stopped".into())),
                    }
                }
            }
        }
    }

    /// Records what a call cost: its usage at the configured prices, or (when the server
    /// reported none) its tokens counted here, marked as estimated.
    #[expect(clippy::too_many_arguments, reason = "one record's fields, all used once")]
    fn record(
        &self,
        ctx: &StageContext<'_>,
        call: &Call<'_, '_>,
        counter: Counter,
        prompt_tokens: i64,
        content: &str,
        usage: Option<Usage>,
        status: &str,
    ) {
        let endpoint = self.endpoint();
        let (input, output, estimated) = match usage {
            Some(usage) => (usage.prompt_tokens, usage.completion_tokens, false),
            None => (prompt_tokens, counter.count(content).max(tokens::estimate(content)), true),
        };
        let cost = CostReport::at_prices(input, output, endpoint.input_usd_per_1m, endpoint.output_usd_per_1m);
        let mut detail = json!({ "stage": call.stage, "model": call.request.model, "status": status });
        if estimated {
            detail["estimated"] = json!(true);
        }
        ctx.calls.record(cost, detail);
    }

    /// The most one call with a prompt of `prompt_tokens` could cost: the prompt plus the
    /// most it may write (`max_tokens`, within the endpoint's limit), at the configured
    /// prices.
    fn worst_call(&self, prompt_tokens: i64, max_tokens: Option<u32>) -> i64 {
        let endpoint = self.endpoint();
        let limit = max_tokens.map_or(endpoint.max_output_tokens, |max| max.min(endpoint.max_output_tokens));
        CostReport::at_prices(prompt_tokens, i64::from(limit), endpoint.input_usd_per_1m, endpoint.output_usd_per_1m)
            .usd_nanos
    }

    /// The stage's output, costing what its calls cost, with their records in the report.
    fn staged<T>(ctx: &StageContext<'_>, output: T, mut report: Value) -> Staged<T> {
        let cost = ctx.calls.total();
        if !ctx.calls.is_empty() {
            report["calls"] = Value::Array(ctx.calls.records());
        }
        Staged { output, cost, report }
    }

    /// Asks for a plan; falls back to the built-in one when the reply holds none.
    async fn model_plan(
        &self,
        ctx: &StageContext<'_>,
        mode: ResearchMode,
        cap: usize,
    ) -> Result<(Plan, Value), EngineError> {
        let question = ctx.question();
        let model = self.model_for(ctx);
        let messages = prompts::plan_messages(question, &ctx.model_guidance(), cap.saturating_sub(1).max(1));
        // JSON mode where the server has it; one without is asked in words alone.
        let request = ChatRequest { model: model.clone(), messages, json: true, max_tokens: None };
        let output = self.call(ctx, Call { stage: "planning", request, composer: None }).await?;
        let mut sub_queries = vec![question.to_owned()];
        let report = match prompts::parse_plan(&output.content, question) {
            Some(proposed) if !proposed.is_empty() => {
                let offered = proposed.len();
                sub_queries.extend(proposed);
                sub_queries.truncate(cap);
                json!({ "planner": "model", "model": model, "proposed": offered })
            }
            _ => {
                sub_queries = split_query(question, cap);
                json!({ "planner": "builtin", "model": model, "fallback": "the model's reply held no usable sub-queries" })
            }
        };
        Ok((Plan { mode, sub_queries }, report))
    }
}

/// The prompt's tokens and the counter used, off the async threads: loading a vocabulary
/// the first time and encoding a long prompt both take a while.
async fn count_prompt(request: &ChatRequest) -> Result<(Counter, i64), EngineError> {
    let model = request.model.clone();
    let contents: Vec<String> = request.messages.iter().map(|message| message.content.clone()).collect();
    tokio::task::spawn_blocking(move || {
        let counter = Counter::for_model(&model);
        let tokens = counter.count_messages(contents.iter().map(String::as_str));
        (counter, tokens)
    })
    .await
    .map_err(|error| EngineError::Transient(Box::new(error)))
}

#[async_trait]
impl ResearchEngine for OpenAiEngine {
    async fn plan(&self, ctx: &StageContext<'_>) -> Result<Staged<Plan>, EngineError> {
        let mode = Self::mode(ctx);
        let mut cap = sub_query_count(mode);
        if let Some(max) = limits_of(ctx.job).max_sub_queries.map(|max| max.get() as usize) {
            if max == 0 {
                return Err(EngineError::LimitExceeded("limits.max_sub_queries is 0; a plan needs one".to_owned()));
            }
            cap = cap.min(max);
        }
        if cap <= 1 {
            // One query is the question itself: nothing for a model to plan.
            let mut query = ctx.question().to_owned();
            // A clarification's answer narrows what the one query searches.
            if let Some(Clarification { answer: Some(answer), .. }) = ctx.clarification {
                query = format!("{query} {}", answer.trim());
            }
            let plan = Plan { mode, sub_queries: vec![query] };
            return Ok(Self::staged(ctx, plan, json!({ "planner": "question" })));
        }
        let (plan, report) = self.model_plan(ctx, mode, cap).await?;
        Ok(Self::staged(ctx, plan, report))
    }

    async fn standalone(
        &self,
        ctx: &StageContext<'_>,
        thread: &crate::research::thread::ThreadView,
    ) -> Result<Staged<String>, EngineError> {
        let (query, report) = self.model_standalone(ctx, thread).await?;
        Ok(Staged { output: query, cost: CostReport::default(), report })
    }

    async fn retrieve(&self, ctx: &StageContext<'_>, plan: &Plan) -> Result<Staged<Vec<Retrieval>>, EngineError> {
        // Retrieval calls no model: it costs only what reranking (when configured) spent.
        let (found, cost, report) = self.builtin.search_plan(ctx, plan).await?;
        Ok(Staged { output: found, cost, report })
    }

    async fn analyze(&self, ctx: &StageContext<'_>, found: &[Retrieval]) -> Result<Staged<Vec<Passage>>, EngineError> {
        let evidence = self.builtin.analyze(ctx, found).await?;
        Ok(Staged::new(evidence.output, CostReport::default()))
    }

    async fn generate(&self, ctx: &StageContext<'_>, evidence: &[Passage]) -> Result<Staged<Answer>, EngineError> {
        if evidence.is_empty() {
            // Nothing to cite: no call, and nothing spent.
            let mut composer = Composer::new(ctx.answer, evidence.len());
            composer.push(NO_EVIDENCE_ANSWER);
            let composed = composer.finish();
            return Ok(Staged::new(
                Answer { text: composed.text, evidence: Vec::new(), citations: Vec::new() },
                CostReport::default(),
            ));
        }
        let evidence = self.builtin.answer_evidence(ctx, evidence);
        let (answer, report, besides) = self.grounded_answer(ctx, &evidence).await?;
        let mut staged = Self::staged(ctx, answer, report);
        staged.cost.usd_nanos = staged.cost.usd_nanos.saturating_add(besides.usd_nanos);
        Ok(staged)
    }

    async fn clarify(&self, ctx: &StageContext<'_>) -> Result<Staged<Option<String>>, EngineError> {
        // Its call stays in the stage's log: the plan after it, or the wait, accounts it.
        let (asked, report) = self.model_clarification(ctx).await?;
        Ok(Staged { output: asked, cost: CostReport::default(), report })
    }

    async fn decide(&self, ctx: &StageContext<'_>, so_far: &RoundsSoFar<'_>) -> Result<Staged<Decision>, EngineError> {
        let (decision, report) = self.model_decision(ctx, so_far).await?;
        Ok(Self::staged(ctx, decision, report))
    }

    fn next_round_cost(&self, ctx: &StageContext<'_>, queries: usize, evidence: &[Passage]) -> i64 {
        let bounds = RoundBounds::of(&self.builtin, ctx, queries, evidence);
        // The round's decision reads a bounded view of the evidence; the answer reads all of it.
        let decision_prompt = DECISION_PROMPT_TOKENS;
        let answer_prompt = bounds.evidence_after.saturating_mul(bounds.passage_tokens) + ANSWER_PROMPT_TOKENS;
        bounds.rerank_nanos
            + self.worst_call(decision_prompt, Some(DECISION_MAX_TOKENS))
            + self.worst_call(answer_prompt, None)
    }
}
