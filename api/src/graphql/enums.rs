//! GraphQL enums, in GraphQL style, mapped one to one from the entity enums (which carry
//! no GraphQL derives).
use async_graphql::Enum;
use entity::{AccessChannel, IndexingStatus, MediaType, MemberRole, ProgressEventType, ResearchMode, Stage};

/// Where a research task stands.
#[derive(Enum, Debug, Clone, Copy, PartialEq, Eq)]
#[graphql(name = "ResearchStage")]
pub enum GqlStage {
    /// Created, waiting for a worker.
    Queued,
    /// Splitting the query into sub-queries.
    Planning,
    /// Ranking the space's documents.
    Retrieving,
    /// Selecting and deduplicating evidence.
    Analyzing,
    /// Writing the answer.
    Generating,
    /// Stopped by its owner, or waiting for a person's input (see `ResearchTask.awaiting`).
    Paused,
    /// Finished with an answer. Terminal.
    Completed,
    /// Gave up. Terminal.
    Failed,
    /// Canceled by its owner. Terminal.
    Canceled,
}

/// How hard a research task works.
#[derive(Enum, Debug, Clone, Copy, PartialEq, Eq)]
#[graphql(name = "ResearchMode")]
pub enum GqlMode {
    /// The engine picks by the question's length (up to 6 words FAST, up to 16 RESEARCH,
    /// longer DEEP) and runs as the mode it picked.
    Auto,
    /// One sub-query (the question), one round (`limits.max_rounds` default 1).
    Fast,
    /// Up to 3 sub-queries, up to 2 rounds (`limits.max_rounds` default 2).
    Research,
    /// Up to 6 sub-queries, up to 4 rounds (`limits.max_rounds` default 4), and the
    /// `openai` engine verifies each cited claim with the model (`limits.verify` default
    /// true).
    Deep,
}

/// How a caller reached the service.
#[derive(Enum, Debug, Clone, Copy, PartialEq, Eq)]
#[graphql(name = "AccessChannel")]
pub enum GqlChannel {
    /// A person in a frontend app.
    Interactive,
    /// A service client with an API key.
    ServiceApi,
    /// A Model Context Protocol client.
    Mcp,
    /// An autonomous agent.
    Agent,
}

/// What a progress event reports. Completion is `STAGE_CHANGED` with stage `COMPLETED`.
#[derive(Enum, Debug, Clone, Copy, PartialEq, Eq)]
#[graphql(name = "ResearchTaskEventType")]
pub enum GqlEventType {
    /// A worker picked the task up for the first time.
    Started,
    /// The task moved to its next stage.
    StageChanged,
    /// The task was paused.
    Paused,
    /// The task was resumed.
    Resumed,
    /// The task was canceled.
    Canceled,
    /// The task failed.
    Failed,
}

/// A member's role in a knowledge space.
#[derive(Enum, Debug, Clone, Copy, PartialEq, Eq)]
#[graphql(name = "KnowledgeSpaceRole")]
pub enum GqlRole {
    /// Manages members and API keys, adds documents, researches.
    Owner,
    /// Adds documents, researches.
    Editor,
    /// Researches.
    Viewer,
}

/// What a document's content is written in; it decides how the document is split into
/// passages.
#[derive(Enum, Debug, Clone, Copy, PartialEq, Eq, Default)]
#[graphql(name = "DocumentMediaType")]
#[expect(clippy::enum_variant_names, reason = "the contract's names: TEXT_PLAIN, TEXT_MARKDOWN, TEXT_HTML")]
pub enum GqlMediaType {
    /// `text/plain`: paragraphs separated by blank lines.
    #[default]
    TextPlain,
    /// `text/markdown` (CommonMark): split at headings, paragraphs, list items, code blocks.
    TextMarkdown,
    /// `text/html`: split at block elements; scripts and styles are not text.
    TextHtml,
}

/// Whether a document's passages are ready for every ranker.
#[derive(Enum, Debug, Clone, Copy, PartialEq, Eq)]
#[graphql(name = "DocumentIndexingStatus")]
pub enum GqlIndexingStatus {
    /// Waiting for its embeddings; full-text search finds it already.
    Pending,
    /// Every passage has what each configured ranker needs.
    Ready,
    /// Embedding gave up (`indexingError` says why); full-text search still finds it.
    Failed,
}

/// Declares the two conversions between a GraphQL enum and its entity enum.
macro_rules! mirror {
    ($gql:ident, $domain:ident, [$($variant:ident),+ $(,)?]) => {
        impl From<$domain> for $gql {
            fn from(value: $domain) -> Self {
                match value { $($domain::$variant => Self::$variant),+ }
            }
        }
        impl From<$gql> for $domain {
            fn from(value: $gql) -> Self {
                match value { $($gql::$variant => Self::$variant),+ }
            }
        }
    };
}

mirror!(GqlStage, Stage, [Queued, Planning, Retrieving, Analyzing, Generating, Paused, Completed, Failed, Canceled]);
mirror!(GqlMode, ResearchMode, [Auto, Fast, Research, Deep]);
mirror!(GqlChannel, AccessChannel, [Interactive, ServiceApi, Mcp, Agent]);
mirror!(GqlEventType, ProgressEventType, [Started, StageChanged, Paused, Resumed, Canceled, Failed]);
mirror!(GqlRole, MemberRole, [Owner, Editor, Viewer]);
mirror!(GqlMediaType, MediaType, [TextPlain, TextMarkdown, TextHtml]);
mirror!(GqlIndexingStatus, IndexingStatus, [Pending, Ready, Failed]);

/// Where a webhook delivery stands.
#[derive(Enum, Debug, Clone, Copy, PartialEq, Eq)]
#[graphql(name = "WebhookDeliveryStatus")]
pub enum GqlDeliveryStatus {
    /// Waiting for its next attempt.
    Pending,
    /// The endpoint answered 2xx.
    Delivered,
    /// Every attempt failed (or the endpoint was disabled); `redeliverWebhook` tries again.
    Dead,
}
