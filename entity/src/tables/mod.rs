//! One SeaORM entity per table. Times are epoch milliseconds (`i64`) as in the seed,
//! except `api_key_expires_at`, which the seed makes TIMESTAMPTZ.

pub mod answer_trace;
pub mod answer_trace_citation_check;
pub mod api_key;
pub mod audit_event;
pub mod knowledge_document;
pub mod knowledge_document_file;
pub mod knowledge_document_file_part;
pub mod knowledge_passage;
pub mod knowledge_passage_embedding;
pub mod knowledge_space;
pub mod knowledge_space_deletion;
pub mod member;
pub mod permission_snapshot;
pub mod research_task_answer_draft;
pub mod research_task_job;
pub mod research_task_note;
pub mod research_task_outbox;
pub mod research_task_partial_result;
pub mod research_task_progress_event;
pub mod research_task_trace_context;
pub mod research_task_wait;
pub mod research_thread;
pub mod research_thread_turn;
pub mod tenant_erasure;
pub mod webhook_delivery;
pub mod webhook_delivery_attempt;
pub mod webhook_endpoint;
