//! Leases on SQLite, row by row (one writer in process: a statement per row costs no
//! round trip): the row's lease, its `started` event, its outbox entries marked `leased`,
//! its grant verdict and whether its creator has a webhook endpoint.
use entity::{research_task_job as job, research_task_progress_event as progress};
use sea_orm::sea_query::{Expr, ExprTrait as _, Func};
use sea_orm::{ColumnTrait, ConnectionTrait, DbErr, EntityTrait, QueryFilter};

use crate::store::claims::rows::{LeaseWrite, Leased};
use crate::store::webhooks::{Owner, has_endpoint};
use crate::store::{grants, journal, outbox};

pub(crate) async fn lease<C: ConnectionTrait>(txn: &C, leases: &[LeaseWrite]) -> Result<Vec<Leased>, DbErr> {
    let mut leased = Vec::with_capacity(leases.len());
    for lease in leases {
        leased.push(lease_one(txn, lease).await?);
    }
    Ok(leased)
}

async fn lease_one<C: ConnectionTrait>(txn: &C, lease: &LeaseWrite) -> Result<Leased, DbErr> {
    let row = job::Entity::update_many()
        .col_expr(job::Column::Stage, Expr::value(lease.stage))
        .col_expr(job::Column::WorkerId, Expr::value(lease.worker_id.as_str()))
        .col_expr(job::Column::LeaseToken, Expr::value(lease.token))
        .col_expr(job::Column::LeaseExpiresAt, Expr::value(lease.lease_expires_at))
        .col_expr(job::Column::HeartbeatAt, Expr::value(lease.now))
        .col_expr(job::Column::RetryAt, Expr::value(Option::<i64>::None))
        .col_expr(job::Column::ExecutionAttempts, Expr::col(job::Column::ExecutionAttempts).add(1))
        .col_expr(job::Column::RowVersion, Expr::col(job::Column::RowVersion).add(1))
        .col_expr(
            job::Column::UpdatedAt,
            Func::greatest([Expr::col(job::Column::UpdatedAt), Expr::val(lease.now)]).into(),
        )
        .filter(job::Column::Id.eq(lease.job_id))
        .exec_with_returning(txn)
        .await?
        .pop()
        .ok_or_else(|| DbErr::Custom(format!("the claim of {} found no row", lease.job_id)))?;
    let started = match &lease.started {
        Some(event) => Some(
            journal::append_event(
                txn,
                &progress::Model {
                    id: event.id,
                    tenant_id: row.tenant_id.clone(),
                    knowledge_space_id: row.knowledge_space_id,
                    research_task_job_id: row.id,
                    sequence: 0,
                    idempotency_key: event.key.clone(),
                    event_type: event.event_type,
                    stage: row.stage,
                    payload: event.payload.clone(),
                    created_at: lease.now,
                },
            )
            .await?,
        ),
        None => None,
    };
    outbox::mark_leased(txn, row.id, lease.now).await?;
    let grant = grants::verdict(txn, row.permission_snapshot_id, lease.now).await?;
    let owner =
        Owner { tenant_id: &row.tenant_id, knowledge_space_id: row.knowledge_space_id, subject_id: &row.subject_id };
    let any_endpoint = started.is_some_and(|started| started.new) && has_endpoint(txn, owner).await?;
    Ok(Leased { job: row, started, any_endpoint, grant })
}
