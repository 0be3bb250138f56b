//! GraphQL enums, in GraphQL style, mapped one to one from the entity enums (which carry
//! no GraphQL derives).
use async_graphql::Enum;
use entity::{
    AccessChannel, FileMediaType, IndexingStatus, MediaType, MemberRole, ProgressEventType, ResearchMode, Stage,
};

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

/// What a new turn does when its thread has an unfinished turn (queued, running, paused by
/// its owner or waiting for a person).
#[derive(Enum, Debug, Clone, Copy, PartialEq, Eq)]
#[graphql(name = "MultitaskStrategy")]
pub enum GqlMultitaskStrategy {
    /// Refuse it: CONFLICT, with `extensions.taskId` the turn in flight. Of turns sent at
    /// once, exactly one is created.
    Reject,
    /// The default: it waits, QUEUED (holding no lease), until every earlier turn has
    /// ended however it ends (completed, failed, canceled, deleted, rolled back, removed by
    /// retention or erasure), then runs with them as context; the time it waited does not
    /// count against its `limits.deadline_ms`. Turns sent at once run one after the other,
    /// in the order they were created.
    Enqueue,
    /// Every unfinished turn is canceled (what it wrote stays) and the new one runs at
    /// once, with them as context.
    Interrupt,
    /// Every unfinished turn is canceled and deleted; later turns never see them.
    Rollback,
}

impl From<GqlMultitaskStrategy> for worker::app::threads::MultitaskStrategy {
    fn from(strategy: GqlMultitaskStrategy) -> Self {
        match strategy {
            GqlMultitaskStrategy::Reject => Self::Reject,
            GqlMultitaskStrategy::Enqueue => Self::Enqueue,
            GqlMultitaskStrategy::Interrupt => Self::Interrupt,
            GqlMultitaskStrategy::Rollback => Self::Rollback,
        }
    }
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

/// What a document is: text given as a string (it decides how the document is split into
/// passages), or a file uploaded with `uploadKnowledgeDocument` (detected from its bytes).
#[derive(Enum, Debug, Clone, Copy, PartialEq, Eq, Default)]
#[graphql(name = "DocumentMediaType")]
pub enum GqlMediaType {
    /// `text/plain`: paragraphs separated by blank lines.
    #[default]
    TextPlain,
    /// `text/markdown` (CommonMark): split at headings, paragraphs, list items, code blocks.
    TextMarkdown,
    /// `text/html`: split at block elements; scripts and styles are not text.
    TextHtml,
    /// `application/pdf`, uploaded: its text layer, page by page (`content` holds the pages
    /// separated by a line with a form feed; every passage knows its `pageStart` and
    /// `pageEnd`). Only through `uploadKnowledgeDocument`.
    ApplicationPdf,
    /// A Word file (`.docx`), uploaded: its paragraphs, headings (which become heading
    /// paths) and tables, as Markdown in `content`. Only through `uploadKnowledgeDocument`.
    ApplicationDocx,
}

impl GqlMediaType {
    /// The text format a document given as a string is written in; a file type is
    /// BAD_USER_INPUT pointing to the upload.
    pub fn text_format(self) -> Result<MediaType, crate::error::ApiError> {
        match self {
            Self::TextPlain => Ok(MediaType::TextPlain),
            Self::TextMarkdown => Ok(MediaType::TextMarkdown),
            Self::TextHtml => Ok(MediaType::TextHtml),
            Self::ApplicationPdf | Self::ApplicationDocx => Err(crate::error::ApiError::bad_input(
                "PDF and Word documents are uploaded as files: use uploadKnowledgeDocument (a GraphQL multipart request)",
            )),
        }
    }

    /// The name the schema gives it (`TEXT_PLAIN`…), as filters store it.
    pub fn name(self) -> &'static str {
        match self {
            Self::TextPlain => "TEXT_PLAIN",
            Self::TextMarkdown => "TEXT_MARKDOWN",
            Self::TextHtml => "TEXT_HTML",
            Self::ApplicationPdf => "APPLICATION_PDF",
            Self::ApplicationDocx => "APPLICATION_DOCX",
        }
    }

    /// What a document is shown as: its file's type when it was uploaded, else its text's.
    pub fn of(text: MediaType, file: Option<FileMediaType>) -> Self {
        match (file, text) {
            (Some(FileMediaType::Pdf), _) => Self::ApplicationPdf,
            (Some(FileMediaType::Docx), _) => Self::ApplicationDocx,
            (None, MediaType::TextPlain) => Self::TextPlain,
            (None, MediaType::TextMarkdown) => Self::TextMarkdown,
            (None, MediaType::TextHtml) => Self::TextHtml,
        }
    }
}

/// Whether a document's passages are ready for every ranker.
#[derive(Enum, Debug, Clone, Copy, PartialEq, Eq)]
#[graphql(name = "DocumentIndexingStatus")]
pub enum GqlIndexingStatus {
    /// Waiting for its embeddings; full-text search finds it already.
    Pending,
    /// Every passage has what each configured ranker needs.
    Ready,
    /// Embedding gave up, or an uploaded file could not be read (`indexingError` says
    /// why); full-text search still finds whatever passages it has.
    Failed,
    /// An uploaded file waits for (or is in) text extraction, in a worker.
    Extracting,
    /// An uploaded file's text is extracted and being split into passages.
    Splitting,
}

impl GqlIndexingStatus {
    /// The status shown for a document, its file's extraction first.
    pub fn of(shown: worker::knowledge::uploads::ShownStatus) -> Self {
        use worker::knowledge::uploads::ShownStatus;
        match shown {
            ShownStatus::Extracting => Self::Extracting,
            ShownStatus::Splitting => Self::Splitting,
            ShownStatus::Indexing(IndexingStatus::Pending) => Self::Pending,
            ShownStatus::Indexing(IndexingStatus::Ready) => Self::Ready,
            ShownStatus::Indexing(IndexingStatus::Failed) => Self::Failed,
        }
    }
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
