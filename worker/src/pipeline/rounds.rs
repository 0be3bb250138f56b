//! Where a task's rounds stand, and how a run that resumes mid-way reads it back from the
//! journal. Each round's boundaries are keyed by round (round 1 keeps the keys tasks had
//! before rounds: `stage:retrieving`, `retrieval:<n>`, `evidence`; round `r` from 2 on
//! writes `stage:retrieving:r<r>`, `retrieval:r<r>:<n>`, `stage:analyzing:r<r>` and
//! `evidence:r<r>`), so the number of evidence bundles committed is the number of rounds
//! analysed, and each round's plan is the one its `stage:retrieving…` event carries.
use std::collections::HashSet;

use entity::{
    BundleKey, ResearchMode, Stage, StageKey, research_task_partial_result as partial,
    research_task_progress_event as progress,
};
use sea_orm::DatabaseConnection;
use uuid::Uuid;

use super::records::{EvidenceBundle, RetrievalBundle};
use crate::research::engine::{EngineError, Passage, Plan, Retrieval};
use crate::store::journal;

/// The rounds of one task: the one under way and what earlier ones kept.
#[derive(Debug, Clone)]
pub(super) struct Rounds {
    /// The round under way (1 for the first).
    pub round: u32,
    /// The mode the plan resolved.
    pub mode: ResearchMode,
    /// The sub-queries this round searches.
    pub queries: Vec<String>,
    /// Every sub-query searched up to and including this round.
    pub searched: Vec<String>,
    /// The evidence earlier rounds kept, in the order they kept it, each passage once.
    pub evidence: Vec<Passage>,
}

impl Rounds {
    /// The first round, searching `plan`.
    pub fn first(plan: &Plan) -> Self {
        Self {
            round: 1,
            mode: plan.mode,
            queries: plan.sub_queries.clone(),
            searched: plan.sub_queries.clone(),
            evidence: Vec::new(),
        }
    }

    /// The round after this one, searching `queries`, with `kept` added to the evidence.
    pub fn next(self, queries: Vec<String>, kept: Vec<Passage>) -> Self {
        let mut searched = self.searched;
        searched.extend(queries.iter().cloned());
        let mut evidence = self.evidence;
        evidence.extend(kept);
        Self { round: self.round + 1, mode: self.mode, queries, searched, evidence }
    }

    /// The round's plan, as its retrieval runs it.
    pub fn plan(&self) -> Plan {
        Plan { mode: self.mode, sub_queries: self.queries.clone() }
    }

    /// Drops the passages of `found` that earlier rounds kept (the same passage, or a
    /// window mostly covering one), so a round keeps only what is new.
    pub fn without_kept(&self, found: Vec<Retrieval>) -> Vec<Retrieval> {
        if self.evidence.is_empty() {
            return found;
        }
        let kept: HashSet<Uuid> = self.evidence.iter().map(Passage::identity).collect();
        found
            .into_iter()
            .map(|mut retrieval| {
                retrieval.passages.retain(|passage| {
                    !kept.contains(&passage.identity()) && !self.evidence.iter().any(|old| old.overlaps(passage))
                });
                retrieval
            })
            .collect()
    }
}

/// The key of round `round`'s `n`-th retrieval bundle.
pub(super) fn retrieval_key(round: u32, n: usize) -> String {
    BundleKey::Retrieval { round: round.max(1), n }.encode()
}

/// The key of round `round`'s evidence bundle.
pub(super) fn evidence_key(round: u32) -> String {
    BundleKey::Evidence { round: round.max(1) }.encode()
}

/// Where the rounds stand, read back from the journal: the round under way is the one
/// after the last analysed. `None` for the plan when the row predates recorded plans.
pub(super) async fn load(db: &DatabaseConnection, task_id: Uuid) -> Result<(Rounds, Option<Plan>), EngineError> {
    let evidence = load_evidence(db, task_id).await?;
    let analysed = evidence.len();
    let round = u32::try_from(analysed).unwrap_or(u32::MAX).saturating_add(1);
    let prefix = StageKey::prefix(Stage::Retrieving);
    let events = journal::by_key_prefix::<progress::Entity, _>(db, task_id, &prefix).await?;
    let mut plans: Vec<(u32, Plan)> = Vec::new();
    for event in events {
        let Some(StageKey { round: at, .. }) = StageKey::decode(Stage::Retrieving, &event.idempotency_key) else {
            continue;
        };
        if let Some(plan) = event.payload.get("plan").cloned() {
            plans.push((at, serde_json::from_value(plan).map_err(EngineError::Stored)?));
        }
    }
    if !plans.iter().any(|(at, _)| *at == 1)
        && let Some(approved) = approved_plan(db, task_id).await?
    {
        plans.push((1, approved));
    }
    let current = plans.iter().find(|(at, _)| *at == round).map(|(_, plan)| plan.clone());
    let mode = plans.iter().find(|(at, _)| *at == 1).map_or(ResearchMode::Fast, |(_, plan)| plan.mode);
    let searched = plans.iter().filter(|(at, _)| *at <= round).flat_map(|(_, plan)| plan.sub_queries.clone()).collect();
    let queries = current.as_ref().map(|plan| plan.sub_queries.clone()).unwrap_or_default();
    let rounds = Rounds { round, mode, queries, searched, evidence: evidence.into_iter().flatten().collect() };
    Ok((rounds, current))
}

/// Round 1's plan of a task whose plan was put to a person: planning ended in the wait,
/// not in a `stage:retrieving` event, and the wait's end recorded what round 1 searches.
async fn approved_plan(db: &DatabaseConnection, task_id: Uuid) -> Result<Option<Plan>, EngineError> {
    let waits = crate::store::waits::of_task(db, task_id).await?;
    let approved = waits
        .into_iter()
        .filter(|wait| wait.reason == entity::research_task_wait::PLAN_APPROVAL)
        .find_map(|wait| wait.approved_plan);
    approved.map(|plan| serde_json::from_value(plan).map_err(EngineError::Stored)).transpose()
}

/// Every round's evidence bundle, in round order.
pub(super) async fn load_evidence(db: &DatabaseConnection, task_id: Uuid) -> Result<Vec<Vec<Passage>>, EngineError> {
    let rows = journal::by_key_prefix::<partial::Entity, _>(db, task_id, BundleKey::EVIDENCE_PREFIX).await?;
    rows.into_iter()
        .filter(|row| BundleKey::is_evidence(&row.idempotency_key))
        .map(|row| {
            let bundle: EvidenceBundle = serde_json::from_value(row.evidence_bundle).map_err(EngineError::Stored)?;
            Ok(bundle.evidence)
        })
        .collect()
}

/// Round `round`'s retrievals, in sub-query order.
pub(super) async fn load_retrievals(
    db: &DatabaseConnection,
    task_id: Uuid,
    round: u32,
) -> Result<Vec<Retrieval>, EngineError> {
    let round = round.max(1);
    let prefix = BundleKey::retrieval_prefix(round);
    let rows = journal::by_key_prefix::<partial::Entity, _>(db, task_id, &prefix).await?;
    rows.into_iter()
        // Round 1's prefix also starts later rounds' keys: keep this round's.
        .filter(|row| {
            matches!(BundleKey::decode(&row.idempotency_key), Some(BundleKey::Retrieval { round: at, .. }) if at == round)
        })
        .map(|row| {
            let bundle: RetrievalBundle = serde_json::from_value(row.evidence_bundle).map_err(EngineError::Stored)?;
            Ok(bundle.retrieval)
        })
        .collect()
}
