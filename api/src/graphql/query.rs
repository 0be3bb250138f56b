//! The Query root. Single reads answer null for anything the caller may not see, exactly
//! as for a missing id.
use async_graphql::connection::Connection;
use async_graphql::{Context, Object};
use entity::Stage;
use uuid::Uuid;

use super::context::{principal, state};
use super::enums::GqlStage;
use super::relay;
use super::types::{
    AnswerTrace, AuditEvent, KnowledgeDocument, KnowledgeSpace, ResearchTask, ResearchThread, Viewer, WebhookDelivery,
};
use crate::error::{ApiError, IntoGql};
use worker::app::access;
use worker::app::limits::{DEFAULT_PAGE, MAX_PAGE};
use worker::app::{lists, threads};

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
            let found = worker::app::spaces::find(&state(ctx)?.app, principal(ctx)?, id).await?;
            Ok::<_, ApiError>(found.map(|(space, viewer_role)| KnowledgeSpace { space, viewer_role }))
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
            let found = worker::app::documents::find(&state(ctx)?.app, principal(ctx)?, id).await?;
            Ok::<_, ApiError>(found.map(KnowledgeDocument::new))
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
            let (caller, app) = (principal(ctx)?, &state(ctx)?.app);
            let args = relay::parse(first, after)?;
            let listed = lists::knowledge_spaces(app, caller, args).await?;
            let key = |(space, _): &(_, _)| lists::space_key(space);
            let node = |(space, viewer_role)| KnowledgeSpace { space, viewer_role };
            Ok::<_, ApiError>(relay::listed(&args, listed, key, node))
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
            let (caller, app) = (principal(ctx)?, &state(ctx)?.app);
            let args = relay::parse(first, after)?;
            let stages = stages.map(|stages| stages.into_iter().map(Stage::from).collect());
            let listed = lists::research_tasks(app, caller, knowledge_space_id, stages, args).await?;
            Ok::<_, ApiError>(relay::listed(&args, listed, lists::task_key, ResearchTask))
        };
        run.await.gql()
    }

    /// A research thread, or null when it is not the caller's (or they may no longer read
    /// its space).
    async fn research_thread(&self, ctx: &Context<'_>, id: Uuid) -> async_graphql::Result<Option<ResearchThread>> {
        let run = async {
            let (caller, app) = (principal(ctx)?, &state(ctx)?.app);
            Ok::<_, ApiError>(threads::find(app, caller, id).await?.map(ResearchThread))
        };
        run.await.gql()
    }

    /// The caller's research threads in a space, most recently updated first.
    #[graphql(complexity = "first.unwrap_or(DEFAULT_PAGE).clamp(0, MAX_PAGE) as usize * child_complexity")]
    async fn research_threads(
        &self,
        ctx: &Context<'_>,
        knowledge_space_id: Uuid,
        first: Option<i32>,
        after: Option<String>,
    ) -> async_graphql::Result<Connection<String, ResearchThread>> {
        let run = async {
            let (caller, app) = (principal(ctx)?, &state(ctx)?.app);
            let args = relay::parse(first, after)?;
            let listed = threads::list(app, caller, knowledge_space_id, args).await?;
            Ok::<_, ApiError>(relay::listed(&args, listed, threads::thread_key, ResearchThread))
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
            let (caller, app) = (principal(ctx)?, &state(ctx)?.app);
            let args = relay::parse(first, after)?;
            let listed = lists::webhook_deliveries(app, caller, endpoint_id, args).await?;
            Ok::<_, ApiError>(relay::listed(&args, listed, lists::delivery_key, WebhookDelivery))
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
            let (caller, app) = (principal(ctx)?, &state(ctx)?.app);
            let args = relay::parse(first, after)?;
            let listed = lists::answer_traces(app, caller, knowledge_space_id, args).await?;
            Ok::<_, ApiError>(relay::listed(&args, listed, lists::trace_key, AnswerTrace))
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
            let (caller, app) = (principal(ctx)?, &state(ctx)?.app);
            let args = relay::parse(first, after)?;
            let listed = lists::audit_events(app, caller, knowledge_space_id, tenant_id, args).await?;
            Ok::<_, ApiError>(relay::listed(&args, listed, lists::audit_key, AuditEvent))
        };
        run.await.gql()
    }
}
