//! The Query root. Single reads answer null for anything the caller may not see, exactly
//! as for a missing id.
use async_graphql::connection::Connection;
use async_graphql::{Context, Object};
use entity::Stage;
use uuid::Uuid;

use super::context::{principal, state};
use super::enums::GqlStage;
use super::lists;
use super::relay::{self, PageArgs};
use super::types::{AnswerTrace, AuditEvent, KnowledgeDocument, KnowledgeSpace, ResearchTask, Viewer, WebhookDelivery};
use crate::error::{ApiError, IntoGql};
use worker::app::access::{self, space_access};
use worker::app::limits::{DEFAULT_PAGE, MAX_PAGE};
use worker::store::pages::PageKey;
use worker::store::{documents, spaces};

/// Reads.
#[derive(Default)]
pub struct QueryRoot;

#[Object(name = "Query")]
impl QueryRoot {
    /// The caller.
    async fn viewer(&self, ctx: &Context<'_>) -> async_graphql::Result<Viewer> {
        principal(ctx).map(Viewer::from).gql()
    }

    /// A space the caller belongs to (or, for an API key, the key's space).
    async fn knowledge_space(&self, ctx: &Context<'_>, id: Uuid) -> async_graphql::Result<Option<KnowledgeSpace>> {
        let run = async {
            let (caller, db) = (principal(ctx)?, &state(ctx)?.db);
            let Some(access) = space_access(db, caller, id).await? else {
                return Ok(None);
            };
            let found = spaces::find(db, &caller.tenant_id, id).await?;
            Ok::<_, ApiError>(found.map(|space| KnowledgeSpace { space, viewer_role: access.role() }))
        };
        run.await.gql()
    }

    /// A document in a space the caller can read, or null (as for a missing id).
    async fn knowledge_document(
        &self,
        ctx: &Context<'_>,
        id: Uuid,
    ) -> async_graphql::Result<Option<KnowledgeDocument>> {
        let run = async {
            let (caller, db) = (principal(ctx)?, &state(ctx)?.db);
            let Some(document) = documents::find(db, &caller.tenant_id, id).await? else {
                return Ok(None);
            };
            let readable = space_access(db, caller, document.knowledge_space_id).await?.is_some();
            Ok::<_, ApiError>(readable.then_some(KnowledgeDocument::new(document)))
        };
        run.await.gql()
    }

    /// The spaces the caller belongs to, newest first.
    #[graphql(complexity = "first.unwrap_or(DEFAULT_PAGE).clamp(0, MAX_PAGE) as usize * child_complexity")]
    async fn knowledge_spaces(
        &self,
        ctx: &Context<'_>,
        first: Option<i32>,
        after: Option<String>,
    ) -> async_graphql::Result<Connection<String, KnowledgeSpace>> {
        let run = async {
            let (caller, db) = (principal(ctx)?, &state(ctx)?.db);
            let args = PageArgs::parse(first, after)?;
            let key = |node: &KnowledgeSpace| PageKey { at: node.space.created_at, id: node.space.id };
            let mut nodes = Vec::new();
            if let Some(api_key) = &caller.api_key {
                // A key sees exactly one space: a list of at most one, still paged by cursor.
                let found = spaces::find(db, &caller.tenant_id, api_key.knowledge_space_id).await?;
                nodes.extend(found.map(|space| KnowledgeSpace { space, viewer_role: None }));
                nodes.retain(|node| args.after.is_none_or(|after| (key(node).at, key(node).id) < (after.at, after.id)));
            } else {
                let rows = spaces::page_for_member(db, &caller.tenant_id, &caller.subject_id, args.after, args.fetch())
                    .await?;
                for space in rows {
                    let access = space_access(db, caller, space.id).await?;
                    nodes.push(KnowledgeSpace { viewer_role: access.and_then(|access| access.role()), space });
                }
            }
            Ok::<_, ApiError>(relay::build(&args, nodes, false, key, |node| node))
        };
        run.await.gql()
    }

    /// A research task, or null when it is not the caller's or its grant no longer holds.
    async fn research_task(&self, ctx: &Context<'_>, id: Uuid) -> async_graphql::Result<Option<ResearchTask>> {
        let run = async {
            let (caller, db) = (principal(ctx)?, &state(ctx)?.db);
            Ok::<_, ApiError>(access::visible_task(db, caller, id).await?.map(ResearchTask))
        };
        run.await.gql()
    }

    /// The caller's research tasks in a space, most recently updated first, optionally
    /// only those in `stages`.
    #[graphql(complexity = "first.unwrap_or(DEFAULT_PAGE).clamp(0, MAX_PAGE) as usize * child_complexity")]
    async fn research_tasks(
        &self,
        ctx: &Context<'_>,
        knowledge_space_id: Uuid,
        stages: Option<Vec<GqlStage>>,
        first: Option<i32>,
        after: Option<String>,
    ) -> async_graphql::Result<Connection<String, ResearchTask>> {
        let run = async {
            let (caller, db) = (principal(ctx)?, &state(ctx)?.db);
            let args = PageArgs::parse(first, after)?;
            let stages = stages.map(|stages| stages.into_iter().map(Stage::from).collect());
            lists::research_tasks(db, caller, knowledge_space_id, stages, args).await
        };
        run.await.gql()
    }

    /// An answer trace, or null when it is not the caller's.
    async fn answer_trace(&self, ctx: &Context<'_>, id: Uuid) -> async_graphql::Result<Option<AnswerTrace>> {
        let run = async {
            let (caller, db) = (principal(ctx)?, &state(ctx)?.db);
            Ok::<_, ApiError>(access::visible_trace(db, caller, id).await?.map(AnswerTrace))
        };
        run.await.gql()
    }

    /// An endpoint's deliveries, newest first. Only the endpoint's owner sees them; any
    /// other id answers NOT_FOUND.
    #[graphql(complexity = "first.unwrap_or(DEFAULT_PAGE).clamp(0, MAX_PAGE) as usize * child_complexity")]
    async fn webhook_deliveries(
        &self,
        ctx: &Context<'_>,
        endpoint_id: Uuid,
        first: Option<i32>,
        after: Option<String>,
    ) -> async_graphql::Result<Connection<String, WebhookDelivery>> {
        let run = async {
            let (caller, db) = (principal(ctx)?, &state(ctx)?.db);
            let args = PageArgs::parse(first, after)?;
            access::owned_endpoint(db, caller, endpoint_id).await?;
            let rows = worker::store::webhooks::deliveries(db, endpoint_id, args.after, args.fetch()).await?;
            let key = |row: &entity::webhook_delivery::Model| PageKey { at: row.created_at, id: row.id };
            Ok::<_, ApiError>(relay::build(&args, rows, false, key, WebhookDelivery))
        };
        run.await.gql()
    }

    /// The caller's answer traces in a space, newest first.
    #[graphql(complexity = "first.unwrap_or(DEFAULT_PAGE).clamp(0, MAX_PAGE) as usize * child_complexity")]
    async fn answer_traces(
        &self,
        ctx: &Context<'_>,
        knowledge_space_id: Uuid,
        first: Option<i32>,
        after: Option<String>,
    ) -> async_graphql::Result<Connection<String, AnswerTrace>> {
        let run = async {
            let (caller, db) = (principal(ctx)?, &state(ctx)?.db);
            let args = PageArgs::parse(first, after)?;
            lists::answer_traces(db, caller, knowledge_space_id, args).await
        };
        run.await.gql()
    }

    /// The audit log, newest first. Owners read their space's (`knowledgeSpaceId`);
    /// operators (`KFS_OPERATOR_SUBJECTS`) read everyone's, optionally of one tenant or
    /// space. A space the caller does not own answers NOT_FOUND (FORBIDDEN for its other
    /// members), as for its API keys.
    #[graphql(complexity = "first.unwrap_or(DEFAULT_PAGE).clamp(0, MAX_PAGE) as usize * child_complexity")]
    async fn audit_events(
        &self,
        ctx: &Context<'_>,
        knowledge_space_id: Option<Uuid>,
        tenant_id: Option<String>,
        first: Option<i32>,
        after: Option<String>,
    ) -> async_graphql::Result<Connection<String, AuditEvent>> {
        let run = async {
            let (caller, app) = (principal(ctx)?, state(ctx)?);
            let args = PageArgs::parse(first, after)?;
            if let Some(tenant) = &tenant_id {
                worker::app::limits::text("tenantId", tenant, worker::app::limits::MAX_NAME_CHARS)?;
            }
            let (tenant, space) = if app.is_operator(caller) {
                (tenant_id, knowledge_space_id)
            } else {
                if tenant_id.is_some() {
                    return Err(ApiError::bad_input("tenantId is for operators; owners name their knowledgeSpaceId"));
                }
                let space = knowledge_space_id
                    .ok_or_else(|| ApiError::bad_input("knowledgeSpaceId is required (the space whose log to read)"))?;
                access::require_role(&app.db, caller, space, entity::MemberRole::can_manage).await?;
                (Some(caller.tenant_id.clone()), Some(space))
            };
            let rows = worker::store::audit::page(&app.db, tenant.as_deref(), space, args.after, args.fetch()).await?;
            let key = |row: &entity::audit_event::Model| PageKey { at: row.created_at, id: row.id };
            Ok::<_, ApiError>(relay::build(&args, rows, false, key, AuditEvent))
        };
        run.await.gql()
    }
}
