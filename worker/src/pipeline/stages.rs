//! What each stage runs and what its boundary commits. The next stage comes from the one
//! stage rule (`Stage::next_in_pipeline`), except where analysis ends a round that another
//! follows (back to retrieving). The outputs later stages need are read back from the rows
//! earlier checkpoints committed, keyed by round (`rounds.rs`): each round's plan from its
//! `stage:retrieving…` event, its retrievals and evidence from partial results.
use entity::{Stage, research_task_job as job};
use sea_orm::DatabaseConnection;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::drafts::flush_drafts;
use super::human::Human;
use super::passages::Library;
use super::records::{
    Analyzed, BundleKind, CitedPassage, EvidenceBundle, Planned, Report, RetrievalBundle, Retrieved, stored,
};
use super::rounds::{self, Rounds};
use crate::lifecycle::{Checkpoint, Completion, InputRequest, Lease};
use crate::notify::Notifier;
use crate::research::answer::AnswerSink;
use crate::research::cost::{CallLog, CostDelta, CostReport};
use crate::research::engine::{
    Answer, Decision, EngineError, Passage, ResearchEngine, Retrieval, RoundsSoFar, StageContext, Staged, limits_of,
};
use crate::research::rounds::Outcome;

/// What a stage run writes besides its checkpoint: the answer draft, fenced by the lease.
pub(super) struct Drafts<'a> {
    /// Where the draft's signal goes.
    pub notifier: &'a Notifier,
    /// The lease the draft writes are fenced by.
    pub lease: &'a Lease,
    /// The least time between two draft writes.
    pub every: std::time::Duration,
}

/// What the stages of one run hand on to the next in memory, so that only a run that
/// resumes a task mid-way reads them back from the checkpoints. It holds exactly what the
/// checkpoint committed: a stage's outputs are written once, by the checkpoint that
/// leaves it (its fence on the stage makes that happen once), so no earlier copy can
/// shadow them.
#[derive(Default)]
pub(super) struct Carried {
    /// Where the rounds stand (the plan of the round under way among it).
    rounds: Option<Rounds>,
    /// The round's retrievals, for its analysis.
    retrievals: Option<Vec<Retrieval>>,
    /// Every round's evidence, for generation.
    evidence: Option<Vec<Passage>>,
}

/// What a run read once about its task besides the task: what people said to it and,
/// for a turn of a thread, the thread.
#[derive(Clone, Copy)]
pub(super) struct Said<'a> {
    /// Its waits.
    pub human: &'a Human,
    /// Its thread, when it is a turn.
    pub thread: Option<&'a crate::research::thread::ThreadView>,
}

/// What a finished stage hands to the lifecycle.
pub(super) enum StageEnd {
    /// Move on to the next stage; what it produced is carried to the next one once the
    /// checkpoint commits.
    Next(Checkpoint, Carried),
    /// The task is done.
    Done(Completion),
    /// The task waits for a person; what the stage spent until it asked.
    Await(InputRequest, CostDelta),
}

impl StageEnd {
    /// What the stage spent.
    pub(super) fn cost_delta(&self) -> &CostDelta {
        match self {
            Self::Next(step, _) => &step.cost_delta,
            Self::Done(done) => &done.cost_delta,
            Self::Await(_, spent) => spent,
        }
    }
}

/// Runs the engine for the task's stage and shapes what the boundary commits.
pub(super) async fn run(
    library: &Library<'_>,
    engine: &dyn ResearchEngine,
    task: &job::Model,
    cancel: CancellationToken,
    drafts: Drafts<'_>,
    carried: Carried,
    said: Said<'_>,
) -> Result<StageEnd, StageFailure> {
    let Said { human, thread } = said;
    let db = library.db;
    let sink = AnswerSink::default();
    let calls = CallLog::default();
    // Steering notes matter to the decision after a round and to the answer: a round at
    // the round limit asks no decision, so it reads none (the hot path of one-round tasks).
    let decides = |rounds: &Rounds| rounds.round < crate::research::rounds::max_rounds(task, rounds.mode);
    let needs_notes = match task.stage {
        Stage::Generating => true,
        Stage::Analyzing => carried.rounds.as_ref().is_none_or(decides),
        _ => false,
    };
    let notes: Vec<String> = if needs_notes {
        match crate::store::notes::of_task(db, task.id).await {
            Ok(rows) => rows.into_iter().map(|row| row.text).collect(),
            Err(error) => return Err(StageFailure { error: error.into(), cost_delta: CostDelta::none() }),
        }
    } else {
        Vec::new()
    };
    let ctx = StageContext {
        passages: library,
        job: task,
        cancel,
        answer: &sink,
        calls: &calls,
        notes: &notes,
        clarification: human.clarification.as_ref(),
        waited_ms: human.waited_ms,
        // A first turn has nothing to see; a follow-up keeps its standalone query even
        // when no earlier turn is readable any more.
        thread: thread.filter(|view| !view.turns.is_empty() || view.standalone.get().is_some()),
    };
    let stage = task.stage;
    run_stage(db, &ctx, engine, &sink, drafts, carried, human).await.map_err(|error| {
        // What the failed stage's calls spent still counts.
        let cost_delta =
            if calls.is_empty() { CostDelta::none() } else { account(stage, calls.total(), calls_report(&calls)).0 };
        StageFailure { error, cost_delta }
    })
}

/// A stage that failed, with what its calls spent.
pub(super) struct StageFailure {
    /// Why.
    pub error: EngineError,
    /// What it spent.
    pub cost_delta: CostDelta,
}

fn calls_report(calls: &CallLog) -> Value {
    Report::default().with("calls", stored(&calls.records())).into_value()
}

async fn run_stage(
    db: &DatabaseConnection,
    ctx: &StageContext<'_>,
    engine: &dyn ResearchEngine,
    sink: &AnswerSink,
    drafts: Drafts<'_>,
    carried: Carried,
    human: &Human,
) -> Result<StageEnd, EngineError> {
    let task = ctx.job;
    let stage = task.stage;
    let Some(next_stage) = stage.next_in_pipeline().filter(|_| stage.is_running()) else {
        return Err(EngineError::Transient(format!("no engine stage for {}", stage.as_str()).into()));
    };
    let next = |next_stage, round, partial_results, cost: CostReport, report: Value, mut payload: Value, carry| {
        let (cost_delta, report) = account(stage, cost, report);
        if !report.is_null() {
            payload["engine"] = report;
        }
        StageEnd::Next(Checkpoint { next_stage, partial_results, cost_delta, payload, round }, carry)
    };
    match stage {
        Stage::Planning => {
            let limits = limits_of(task);
            // One clarifying question at most, before the plan, when the task allows it.
            let mut asked = Staged::new(None, CostReport::default());
            if limits.clarify == Some(true) && human.clarification.is_none() {
                asked = engine.clarify(ctx).await?;
                if let Some(question) = asked.output.take() {
                    let spent = waiting_cost(ctx, asked.cost, asked.report);
                    return Ok(StageEnd::Await(InputRequest::Clarification { question }, spent));
                }
            }
            // A follow-up is researched as a standalone query, made once, before its plan.
            let mut rewritten: Staged<()> = Staged::new((), CostReport::default());
            if let Some(thread) = ctx.thread
                && thread.standalone.get().is_none()
            {
                let made = engine.standalone(ctx, thread).await?;
                let _ = thread.standalone.set(made.output);
                rewritten = Staged { output: (), cost: made.cost, report: made.report };
            }
            let standalone_query = ctx.thread.and_then(|thread| thread.standalone.get()).map(String::as_str);
            let mut plan = engine.plan(ctx).await?;
            plan.cost = plus(plus(asked.cost, rewritten.cost), plan.cost);
            if !asked.report.is_null() {
                plan.report = with_part(plan.report, "clarification", asked.report);
            }
            if !rewritten.report.is_null() {
                plan.report = with_part(plan.report, "rewrite", rewritten.report);
            }
            if limits.approve_plan == Some(true) && !human.plan_reviewed {
                let standalone_query = standalone_query.map(str::to_owned);
                let request = InputRequest::PlanApproval { plan: stored(&plan.output), standalone_query };
                return Ok(StageEnd::Await(request, account(stage, plan.cost, plan.report).0));
            }
            let payload = stored(&Planned { plan: &plan.output, standalone_query });
            let carry = Carried { rounds: Some(Rounds::first(&plan.output)), ..Carried::default() };
            Ok(next(next_stage, 1, Vec::new(), plan.cost, plan.report, payload, carry))
        }
        Stage::Retrieving => {
            let rounds = match carried.rounds {
                Some(rounds) => rounds,
                None => match rounds::load(db, task.id).await? {
                    (rounds, Some(_)) => rounds,
                    // Only reachable for rows written before plans were recorded; the
                    // built-in planner is deterministic, so recomputing gives the same plan.
                    (_, None) => Rounds::first(&engine.plan(ctx).await?.output),
                },
            };
            let plan = rounds.plan();
            let found = engine.retrieve(ctx, &plan).await?;
            let partial_results = found
                .output
                .iter()
                .enumerate()
                .map(|(index, retrieval)| {
                    let bundle = RetrievalBundle { kind: BundleKind::Retrieval, retrieval: retrieval.clone() };
                    (rounds::retrieval_key(rounds.round, index + 1), stored(&bundle))
                })
                .collect();
            let payload = stored(&Retrieved { round: rounds.round, sub_queries: plan.sub_queries.len() });
            let round = rounds.round;
            let carry = Carried { retrievals: Some(found.output), rounds: Some(rounds), ..Carried::default() };
            Ok(next(next_stage, round, partial_results, found.cost, found.report, payload, carry))
        }
        Stage::Analyzing => {
            let rounds = match carried.rounds {
                Some(rounds) => rounds,
                None => rounds::load(db, task.id).await?.0,
            };
            let found = match carried.retrievals {
                Some(found) => found,
                None => rounds::load_retrievals(db, task.id, rounds.round).await?,
            };
            let kept = engine.analyze(ctx, &rounds.without_kept(found)).await?;
            let ended = end_round(ctx, engine, &rounds, &kept.output).await?;
            let bundle = EvidenceBundle { kind: BundleKind::Evidence, evidence: kept.output.clone() };
            let partial_results = vec![(rounds::evidence_key(rounds.round), stored(&bundle))];
            let mut analyzed = Analyzed {
                evidence: kept.output.len(),
                round: rounds.round,
                queries: &rounds.queries,
                new_evidence: kept.output.len(),
                decision: ended.outcome,
                notes_applied: ctx.notes.len(),
                plan: None,
            };
            let cost = plus(kept.cost, ended.cost);
            let report = with_decision(kept.report, ended.report);
            if ended.outcome.goes_on() {
                analyzed.plan =
                    Some(crate::research::engine::Plan { mode: rounds.mode, sub_queries: ended.queries.clone() });
                let payload = stored(&analyzed);
                let rounds = rounds.next(ended.queries, kept.output);
                let round = rounds.round;
                let carry = Carried { rounds: Some(rounds), ..Carried::default() };
                Ok(next(Stage::Retrieving, round, partial_results, cost, report, payload, carry))
            } else {
                let payload = stored(&analyzed);
                let mut evidence = rounds.evidence;
                evidence.extend(kept.output);
                let carry = Carried { evidence: Some(evidence), ..Carried::default() };
                Ok(next(next_stage, 1, partial_results, cost, report, payload, carry))
            }
        }
        Stage::Generating => {
            let evidence = match carried.evidence {
                Some(evidence) => evidence,
                None => rounds::load_evidence(db, task.id).await?.into_iter().flatten().collect(),
            };
            // The answer reaches the draft while it is written; the draft writer stops
            // when generation ends (its last word is the completion's).
            let answer = tokio::select! {
                biased;
                answer = engine.generate(ctx, &evidence) => answer?,
                () = flush_drafts(db, drafts.notifier, drafts.lease, sink, drafts.every) => {
                    return Err(EngineError::Transient("the answer draft writer stopped".into()));
                }
            };
            // The verdicts go to the trace's own table, not the event.
            let mut report = answer.report;
            let checks = report.as_object_mut().and_then(|fields| fields.remove("citation_checks"));
            let (cost_delta, report) = account(stage, answer.cost, report);
            let citations = super::quotes::citation_records(db, &task.tenant_id, &answer.output).await?;
            Ok(StageEnd::Done(Completion {
                evidence: cited(&answer.output),
                answer: answer.output.text,
                citation_checks: checks.unwrap_or_else(|| Value::Array(Vec::new())),
                citations,
                cost_delta,
                payload: report,
            }))
        }
        other => Err(EngineError::Transient(format!("no engine stage for {}", other.as_str()).into())),
    }
}

/// How a round ended: why the loop goes on or stops, what the next round searches, and
/// what deciding cost.
struct RoundEnd {
    outcome: Outcome,
    queries: Vec<String>,
    cost: CostReport,
    report: Value,
}

/// Decides what follows round `rounds.round`, which kept `kept`: the round limit first
/// (no decision asked), then a later round that found nothing new, then the engine's
/// decision, then whether another round and the answer after it fit in what is left of the
/// budget and the deadline.
async fn end_round(
    ctx: &StageContext<'_>,
    engine: &dyn ResearchEngine,
    rounds: &Rounds,
    kept: &[Passage],
) -> Result<RoundEnd, EngineError> {
    let stop = |outcome| RoundEnd { outcome, queries: Vec::new(), cost: CostReport::default(), report: Value::Null };
    if rounds.round >= crate::research::rounds::max_rounds(ctx.job, rounds.mode) {
        return Ok(stop(Outcome::MaxRounds));
    }
    if rounds.round > 1 && kept.is_empty() {
        return Ok(stop(Outcome::NoNewEvidence));
    }
    let mut evidence = rounds.evidence.clone();
    evidence.extend(kept.iter().cloned());
    let cap = sub_query_cap(ctx.job, rounds.mode);
    let so_far =
        RoundsSoFar { round: rounds.round, mode: rounds.mode, evidence: &evidence, searched: &rounds.searched, cap };
    let decided = match engine.decide(ctx, &so_far).await {
        Ok(decided) => decided,
        // Deciding would eat into what the answer needs: answer from what there is.
        Err(EngineError::OverBudget(_)) => return Ok(stop(Outcome::Budget)),
        Err(error) => return Err(error),
    };
    let (outcome, queries) = match decided.output {
        Decision::Answered => (Outcome::Answered, Vec::new()),
        Decision::Search(proposed) => {
            let queries = crate::research::rounds::next_queries(proposed, &rounds.searched, cap);
            if queries.is_empty() {
                (Outcome::NoNewQueries, queries)
            } else if !fits_budget(ctx, engine, &queries, &evidence, decided.cost) {
                (Outcome::Budget, Vec::new())
            } else if !fits_deadline(ctx.job, ctx.waited_ms, rounds.round) {
                (Outcome::Deadline, Vec::new())
            } else {
                (Outcome::Continue, queries)
            }
        }
    };
    Ok(RoundEnd { outcome, queries, cost: decided.cost, report: decided.report })
}

/// The most sub-queries a round may search: the mode's plan size within
/// `limits.max_sub_queries`.
fn sub_query_cap(task: &job::Model, mode: entity::ResearchMode) -> usize {
    let cap = crate::research::engine::sub_query_count(mode).max(1);
    match limits_of(task).max_sub_queries {
        Some(max) => cap.min(usize::try_from(max.get()).unwrap_or(cap)),
        None => cap,
    }
}

/// Whether another round searching `queries` and the answer after it fit in what the
/// budget leaves once this stage's spend (`stage_cost`, what analysing and deciding cost)
/// is counted. Without a budget everything fits.
fn fits_budget(
    ctx: &StageContext<'_>,
    engine: &dyn ResearchEngine,
    queries: &[String],
    evidence: &[Passage],
    stage_cost: CostReport,
) -> bool {
    let Some(budget) = ctx.job.budget_usd.map(crate::research::cost::usd_to_nanos) else {
        return true;
    };
    let left = budget - crate::research::cost::spent_nanos(&ctx.job.cost) - stage_cost.usd_nanos;
    engine.next_round_cost(ctx, queries.len(), evidence) <= left
}

/// Whether another round and the answer after it fit before `limits.deadline_ms`, each
/// expected to take as long as a round has so far (the time since the task was created,
/// planning included, over the rounds done).
fn fits_deadline(task: &job::Model, waited_ms: i64, rounds_done: u32) -> bool {
    let Some(deadline_ms) = limits_of(task).deadline_ms.map(|ms| ms.get()) else {
        return true;
    };
    // Time spent waiting for people counts as if the task had been created that much later.
    let start = task.created_at.saturating_add(waited_ms);
    let now = entity::now_millis();
    let per_round = (now - start).max(0) / i64::from(rounds_done.max(1));
    now.saturating_add(per_round.saturating_mul(2)) <= start.saturating_add(deadline_ms)
}

fn plus(a: CostReport, b: CostReport) -> CostReport {
    CostReport {
        input_tokens: a.input_tokens + b.input_tokens,
        output_tokens: a.output_tokens + b.output_tokens,
        usd_nanos: a.usd_nanos + b.usd_nanos,
    }
}

/// What a stage that stops to wait for a person spent: its calls as the log recorded them
/// (an engine that calls a model leaves its cost there), else what the engine reported.
fn waiting_cost(ctx: &StageContext<'_>, cost: CostReport, report: Value) -> CostDelta {
    if ctx.calls.is_empty() {
        account(ctx.job.stage, cost, report).0
    } else {
        account(ctx.job.stage, ctx.calls.total(), calls_report(ctx.calls)).0
    }
}

/// `report` with `part` under `key` (an object made when `report` is not one).
fn with_part(report: Value, key: &str, part: Value) -> Value {
    Report::of(report).with(key, part).into_value()
}

/// The analysis stage's report with the decision's under `decision` (its call records
/// joined to the stage's, where [`account`] finds them).
fn with_decision(analysis: Value, decision: Value) -> Value {
    if decision.is_null() {
        return analysis;
    }
    let mut report = Report::of(analysis);
    let mut decision = Report::of(decision);
    if let Some(calls) = decision.take("calls") {
        let mut all = report.get("calls").and_then(Value::as_array).cloned().unwrap_or_default();
        all.extend(calls.as_array().cloned().unwrap_or_default());
        report = report.with("calls", Value::Array(all));
    }
    if !decision.is_empty() {
        report = report.with("decision", decision.into_value());
    }
    report.into_value()
}

/// The stage's cost delta, with the engine's per-call detail (`report.calls`) moved into
/// it under the stage; returns the delta and what is left of the report.
fn account(stage: Stage, cost: CostReport, mut report: Value) -> (CostDelta, Value) {
    let calls = report.as_object_mut().and_then(|fields| fields.remove("calls"));
    let delta = cost.to_delta_with_calls(stage.as_str(), calls);
    if report.as_object().is_some_and(serde_json::Map::is_empty) {
        report = Value::Null;
    }
    (delta, report)
}

/// The evidence as the answer trace stores it: each passage (every key of the evidence
/// bundle's items) with its citation number.
fn cited(answer: &Answer) -> Value {
    let rows: Vec<CitedPassage<'_>> = answer
        .evidence
        .iter()
        .enumerate()
        .map(|(index, passage)| CitedPassage { passage, citation: index + 1 })
        .collect();
    stored(&rows)
}
