//! `KnowledgeSpace` and its members; its documents are in `document.rs`.
use async_graphql::connection::Connection;
use async_graphql::{Context, Object};
use chrono::{DateTime, Utc};
use entity::{MemberRole, knowledge_space as space, member};
use uuid::Uuid;

use super::{ApiKey, KnowledgeDocument, datetime};
use crate::error::{ApiError, IntoGql};
use crate::graphql::context::state;
use crate::graphql::enums::GqlRole;
use crate::graphql::relay;
use worker::app::limits::{DEFAULT_PAGE, MAX_PAGE, page_size};
use worker::app::spaces;

/// A knowledge space as one caller sees it: `viewer_role` is that caller's role (none for
/// an API key), and owner-only fields answer `FORBIDDEN` to everyone else.
pub struct KnowledgeSpace {
    /// The row.
    pub space: space::Model,
    /// The caller's role in it; `None` for an API key.
    pub viewer_role: Option<MemberRole>,
}

impl KnowledgeSpace {
    /// Owner-only fields call this first.
    fn shown(&self) -> spaces::Shown<'_> {
        spaces::Shown { space: &self.space, role: self.viewer_role }
    }
}

/// A knowledge space as the caller sees it: `viewerRole` is the caller's role (null for an
/// API key), and owner-only fields answer `FORBIDDEN` to everyone else.
#[Object]
impl KnowledgeSpace {
    async fn id(&self) -> Uuid {
        self.space.id
    }
    async fn name(&self) -> &str {
        &self.space.name
    }
    async fn created_at(&self) -> DateTime<Utc> {
        datetime(self.space.created_at)
    }
    async fn updated_at(&self) -> DateTime<Utc> {
        datetime(self.space.updated_at)
    }
    /// Your role here; null when you call with an API key.
    async fn viewer_role(&self) -> Option<GqlRole> {
        self.viewer_role.map(Into::into)
    }

    /// The current members. Owners only.
    #[graphql(complexity = "MAX_PAGE as usize * child_complexity")]
    async fn members(&self, ctx: &Context<'_>) -> async_graphql::Result<Vec<KnowledgeSpaceMember>> {
        let run = async {
            let rows = spaces::members(&state(ctx)?.app, self.shown()).await?;
            Ok::<_, ApiError>(rows.into_iter().map(KnowledgeSpaceMember).collect())
        };
        run.await.gql()
    }

    /// The caller's own webhook endpoints in this space (anyone's who may research here;
    /// each sees only its own), oldest first.
    #[graphql(complexity = "MAX_PAGE as usize * child_complexity")]
    async fn webhook_endpoints(&self, ctx: &Context<'_>) -> async_graphql::Result<Vec<super::WebhookEndpoint>> {
        let run = async {
            let caller = crate::graphql::context::principal(ctx)?;
            let rows = spaces::webhook_endpoints(&state(ctx)?.app, caller, self.shown()).await?;
            Ok::<_, ApiError>(rows.into_iter().map(super::WebhookEndpoint).collect())
        };
        run.await.gql()
    }

    /// The space's API keys, revoked ones included. Owners only.
    #[graphql(complexity = "MAX_PAGE as usize * child_complexity")]
    async fn api_keys(&self, ctx: &Context<'_>) -> async_graphql::Result<Vec<ApiKey>> {
        let run = async {
            let rows = spaces::api_keys(&state(ctx)?.app, self.shown()).await?;
            Ok::<_, ApiError>(rows.into_iter().map(ApiKey).collect())
        };
        run.await.gql()
    }

    /// The newest documents, at most `first` (default 20, maximum 100). For more, page
    /// through `documentsConnection`.
    #[graphql(complexity = "first.unwrap_or(DEFAULT_PAGE).clamp(0, MAX_PAGE) as usize * child_complexity")]
    async fn documents(&self, ctx: &Context<'_>, first: Option<i32>) -> async_graphql::Result<Vec<KnowledgeDocument>> {
        let run = async {
            let page = relay::PageArgs { size: page_size(first, DEFAULT_PAGE)?, after: None };
            let mut listed = spaces::documents(&state(ctx)?.app, self.shown(), page).await?;
            // The list fetches one more than the page; this field shows the page alone.
            listed.rows.truncate(usize::try_from(page.size).unwrap_or(usize::MAX));
            Ok::<_, ApiError>(listed.rows.into_iter().map(KnowledgeDocument::new).collect())
        };
        run.await.gql()
    }

    /// Every document, newest first, a page at a time (`first` default 20, maximum 100).
    #[graphql(complexity = "first.unwrap_or(DEFAULT_PAGE).clamp(0, MAX_PAGE) as usize * child_complexity")]
    async fn documents_connection(
        &self,
        ctx: &Context<'_>,
        first: Option<i32>,
        after: Option<String>,
    ) -> async_graphql::Result<Connection<String, KnowledgeDocument>> {
        let run = async {
            let args = relay::parse(first, after)?;
            let listed = spaces::documents(&state(ctx)?.app, self.shown(), args).await?;
            Ok::<_, ApiError>(relay::listed(&args, listed, spaces::document_key, KnowledgeDocument::new))
        };
        run.await.gql()
    }
}

/// A subject's membership of a space.
pub struct KnowledgeSpaceMember(pub member::Model);

/// A subject's membership of a space.
#[Object]
impl KnowledgeSpaceMember {
    async fn id(&self) -> Uuid {
        self.0.id
    }
    async fn knowledge_space_id(&self) -> Uuid {
        self.0.knowledge_space_id
    }
    async fn subject_id(&self) -> &str {
        &self.0.subject_id
    }
    async fn role(&self) -> GqlRole {
        self.0.role.into()
    }
    /// Bumped on every change; grants issued at an older revision no longer hold.
    async fn revision(&self) -> i32 {
        self.0.revision
    }
    async fn created_at(&self) -> DateTime<Utc> {
        datetime(self.0.created_at)
    }
    async fn updated_at(&self) -> DateTime<Utc> {
        datetime(self.0.updated_at)
    }
}
