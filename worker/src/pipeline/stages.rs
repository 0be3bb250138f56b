//! What each stage runs and what its boundary commits. The next stage always comes from
//! the one stage rule (`Stage::next_in_pipeline`); the outputs later stages need are read
//! back from the rows earlier checkpoints committed: the plan from the `stage:retrieving`
//! event, retrievals (`retrieval:<n>`) and evidence (`evidence`) from partial results.
use entity::{
    Stage, research_task_job as job, research_task_partial_result as partial, research_task_progress_event as progress,
};
use sea_orm::{ColumnTrait, DatabaseConnection, EntityTrait, QueryFilter, QueryOrder};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::engine::{Answer, EngineError, Passage, Plan, ResearchEngine, Retrieval, StageContext};
use crate::lifecycle::{Checkpoint, Completion};

/// What a finished stage hands to the lifecycle.
pub(super) enum StageEnd {
    /// Move on to the next stage.
    Next(Checkpoint),
    /// The task is done.
    Done(Completion),
}

impl StageEnd {
    /// What the stage spent.
    pub(super) fn cost_delta(&self) -> &Value {
        match self {
            Self::Next(step) => &step.cost_delta,
            Self::Done(done) => &done.cost_delta,
        }
    }
}

/// Runs the engine for the task's stage and shapes what the boundary commits.
pub(super) async fn run(
    db: &DatabaseConnection,
    engine: &dyn ResearchEngine,
    task: &job::Model,
    cancel: CancellationToken,
) -> Result<StageEnd, EngineError> {
    let ctx = StageContext { db, job: task, cancel };
    let stage = task.stage;
    let Some(next_stage) = stage.next_in_pipeline().filter(|_| stage.is_running()) else {
        return Err(EngineError::Transient(format!("no engine stage for {}", stage.as_str()).into()));
    };
    let next = |partial_results, cost: crate::cost::CostReport, payload| {
        StageEnd::Next(Checkpoint { next_stage, partial_results, cost_delta: cost.to_delta(stage.as_str()), payload })
    };
    match stage {
        Stage::Planning => {
            let plan = engine.plan(&ctx).await?;
            Ok(next(Vec::new(), plan.cost, json!({ "plan": plan.output })))
        }
        Stage::Retrieving => {
            let plan = match load_plan(db, task.id).await? {
                Some(plan) => plan,
                // Only reachable for rows written before plans were recorded; the built-in
                // planner is deterministic, so recomputing gives the same plan.
                None => engine.plan(&ctx).await?.output,
            };
            let found = engine.retrieve(&ctx, &plan).await?;
            let partial_results = found
                .output
                .iter()
                .enumerate()
                .map(|(index, retrieval)| {
                    let bundle =
                        json!({ "kind": "retrieval", "sub_query": retrieval.sub_query, "passages": retrieval.passages });
                    (format!("retrieval:{}", index + 1), bundle)
                })
                .collect();
            Ok(next(partial_results, found.cost, json!({ "sub_queries": plan.sub_queries.len() })))
        }
        Stage::Analyzing => {
            let found = load_retrievals(db, task.id).await?;
            let evidence = engine.analyze(&ctx, &found).await?;
            let bundle = json!({ "kind": "evidence", "evidence": evidence.output });
            let payload = json!({ "evidence": evidence.output.len() });
            Ok(next(vec![("evidence".to_owned(), bundle)], evidence.cost, payload))
        }
        Stage::Generating => {
            let evidence = load_evidence(db, task.id).await?;
            let answer = engine.generate(&ctx, &evidence).await?;
            Ok(StageEnd::Done(Completion {
                evidence: cited(&answer.output),
                answer: answer.output.text,
                cost_delta: answer.cost.to_delta(stage.as_str()),
            }))
        }
        other => Err(EngineError::Transient(format!("no engine stage for {}", other.as_str()).into())),
    }
}

/// The evidence as the answer trace stores it: each passage (every key of the evidence
/// bundle's items) with its citation number.
fn cited(answer: &Answer) -> Value {
    let rows: Vec<Value> = answer
        .evidence
        .iter()
        .enumerate()
        .map(|(index, passage)| {
            let mut item = serde_json::to_value(passage).unwrap_or_else(|_| json!({}));
            if let Value::Object(fields) = &mut item {
                fields.insert("citation".to_owned(), json!(index + 1));
            }
            item
        })
        .collect();
    Value::Array(rows)
}

/// The plan planning committed with the move to retrieving.
async fn load_plan(db: &DatabaseConnection, task_id: Uuid) -> Result<Option<Plan>, EngineError> {
    let event = progress::Entity::find()
        .filter(progress::Column::ResearchTaskJobId.eq(task_id))
        .filter(progress::Column::IdempotencyKey.eq("stage:retrieving"))
        .one(db)
        .await?;
    match event.and_then(|event| event.payload.get("plan").cloned()) {
        Some(plan) => serde_json::from_value(plan).map(Some).map_err(EngineError::Stored),
        None => Ok(None),
    }
}

/// The retrievals committed with the move to analyzing, in sub-query order.
async fn load_retrievals(db: &DatabaseConnection, task_id: Uuid) -> Result<Vec<Retrieval>, EngineError> {
    let rows = partial::Entity::find()
        .filter(partial::Column::ResearchTaskJobId.eq(task_id))
        .filter(partial::Column::IdempotencyKey.starts_with("retrieval:"))
        .order_by_asc(partial::Column::Sequence)
        .all(db)
        .await?;
    rows.into_iter().map(|row| serde_json::from_value(row.evidence_bundle).map_err(EngineError::Stored)).collect()
}

/// The evidence committed with the move to generating.
async fn load_evidence(db: &DatabaseConnection, task_id: Uuid) -> Result<Vec<Passage>, EngineError> {
    let row = partial::Entity::find()
        .filter(partial::Column::ResearchTaskJobId.eq(task_id))
        .filter(partial::Column::IdempotencyKey.eq("evidence"))
        .one(db)
        .await?;
    match row.and_then(|row| row.evidence_bundle.get("evidence").cloned()) {
        Some(evidence) => serde_json::from_value(evidence).map_err(EngineError::Stored),
        None => Ok(Vec::new()),
    }
}
