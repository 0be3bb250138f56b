//! A batch of stage boundaries on SQLite, row by row in id order: the fence (the row's
//! token, stage and grant, read in the IMMEDIATE transaction that holds the one write
//! lock), then the row, its partial results and event, and for a completion the answer
//! trace, the draft and the closed outbox entries. One writer in process: a statement per
//! write costs no round trip.
use entity::research_task_progress_event as progress;
use entity::{OutboxStatus, answer_trace, research_task_job as job, research_task_partial_result as partial};
use sea_orm::sea_query::{Expr, ExprTrait as _, Func};
use sea_orm::{ColumnTrait, ConnectionTrait, DbErr, EntityTrait, QueryFilter};
use uuid::Uuid;

use crate::store::boundaries::rows::{BoundaryOutcome, BoundaryWrite, Landed};
use crate::store::tasks::fence;
use crate::store::webhooks::{Owner, has_endpoint};
use crate::store::{answer_traces as traces, drafts, journal, outbox};

pub(crate) async fn write<C: ConnectionTrait>(
    txn: &C,
    boundaries: &[BoundaryWrite],
) -> Result<Vec<BoundaryOutcome>, DbErr> {
    let mut order: Vec<usize> = (0..boundaries.len()).collect();
    order.sort_by_key(|&index| boundaries[index].lease.job_id);
    let mut outcomes: Vec<Option<BoundaryOutcome>> = boundaries.iter().map(|_| None).collect();
    for index in order {
        outcomes[index] = Some(write_one(txn, &boundaries[index]).await?);
    }
    Ok(outcomes.into_iter().flatten().collect())
}

async fn write_one<C: ConnectionTrait>(txn: &C, write: &BoundaryWrite) -> Result<BoundaryOutcome, DbErr> {
    if let Some(fenced) = fence(txn, write.lease, write.from_stage, write.now).await? {
        return Ok(BoundaryOutcome::Fenced(fenced));
    }
    let completing = write.trace.is_some();
    let mut update = job::Entity::update_many()
        .col_expr(job::Column::Stage, Expr::value(write.stage))
        .col_expr(job::Column::Cost, Expr::value(write.cost.clone()))
        .col_expr(job::Column::LeaseExpiresAt, Expr::value(write.lease_expires_at))
        .col_expr(job::Column::RowVersion, Expr::col(job::Column::RowVersion).add(1))
        .col_expr(
            job::Column::UpdatedAt,
            Func::greatest([Expr::col(job::Column::UpdatedAt), Expr::val(write.now)]).into(),
        );
    update = if completing {
        update
            .col_expr(job::Column::CompletedAt, Expr::value(write.now))
            .col_expr(job::Column::RetryAt, Expr::value(Option::<i64>::None))
            .col_expr(job::Column::Error, Expr::value(Option::<String>::None))
            // The lease goes (all three columns together, as `research_task_jobs_lease_ck` demands).
            .col_expr(job::Column::WorkerId, Expr::value(Option::<String>::None))
            .col_expr(job::Column::LeaseToken, Expr::value(Option::<Uuid>::None))
    } else {
        update.col_expr(job::Column::HeartbeatAt, Expr::value(write.now))
    };
    let written = update
        .filter(job::Column::Id.eq(write.lease.job_id))
        .filter(job::Column::LeaseToken.eq(write.lease.token))
        .exec_with_returning(txn)
        .await?
        .pop()
        .ok_or_else(|| DbErr::Custom(format!("the fenced row of task {} vanished", write.lease.job_id)))?;
    for item in &write.partials {
        let row = partial::Model {
            id: item.id,
            tenant_id: written.tenant_id.clone(),
            knowledge_space_id: written.knowledge_space_id,
            research_task_job_id: written.id,
            sequence: 0,
            idempotency_key: item.key.clone(),
            evidence_bundle: item.bundle.clone(),
            created_at: write.now,
        };
        journal::append_partial(txn, &row).await?;
    }
    let event = progress::Model {
        id: write.event.id,
        tenant_id: written.tenant_id.clone(),
        knowledge_space_id: written.knowledge_space_id,
        research_task_job_id: written.id,
        sequence: 0,
        idempotency_key: write.event.key.clone(),
        event_type: write.event.event_type,
        stage: write.stage,
        payload: write.event.payload.clone(),
        created_at: write.now,
    };
    let appended = journal::append_event(txn, &event).await?;
    if let Some(trace) = &write.trace {
        traces::insert(
            txn,
            answer_trace::Model {
                id: trace.id,
                tenant_id: written.tenant_id.clone(),
                knowledge_space_id: written.knowledge_space_id,
                research_task_id: Some(written.id),
                query: written.query.clone(),
                answer: trace.answer.clone(),
                evidence: trace.evidence.clone(),
                created_at: write.now,
                subject_id: Some(written.subject_id.clone()),
                permission_snapshot_id: Some(written.permission_snapshot_id),
                permission_snapshot_revision: Some(written.permission_snapshot_revision),
                access_channel: Some(written.access_channel),
            },
        )
        .await?;
        traces::insert_checks(txn, trace.id, &trace.checks, &trace.citations, write.now).await?;
        drafts::finish(txn, &written.tenant_id, written.id, &trace.answer, write.now).await?;
        outbox::close(txn, written.id, OutboxStatus::Completed, write.now).await?;
    }
    let owner = Owner {
        tenant_id: &written.tenant_id,
        knowledge_space_id: written.knowledge_space_id,
        subject_id: &written.subject_id,
    };
    let any_endpoint = appended.new && has_endpoint(txn, owner).await?;
    Ok(BoundaryOutcome::Landed(Box::new(Landed {
        job: written,
        event_sequence: appended.sequence,
        event_new: appended.new,
        any_endpoint,
    })))
}
