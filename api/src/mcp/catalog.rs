//! The tools as `tools/list` shows them: names, descriptions, input and output schemas
//! (hand-written JSON Schema, so what clients validate against is exactly what is sent)
//! and hints.
use std::sync::Arc;

use rmcp::model::{JsonObject, Tool, ToolAnnotations};
use serde_json::{Value, json};

/// Every tool, with its input and output schema.
pub fn all() -> Vec<Tool> {
    let task_id = json!({ "type": "string", "format": "uuid", "description": "The research task's id." });
    let filters = json!({
        "type": "object",
        "description": "Which documents count; every condition given must hold (GraphQL's ResearchFiltersInput).",
        "properties": {
            "metadata": {
                "type": "object",
                "description": "Each key must equal the document's metadata value (types kept); a list means any of its values.",
            },
            "mediaTypes": {
                "type": "array",
                "items": { "type": "string", "enum": entity::domain::filters::MEDIA_TYPES },
                "minItems": 1,
            },
            "documentIds": { "type": "array", "items": { "type": "string", "format": "uuid" }, "minItems": 1, "maxItems": 1000 },
            "createdAfter": { "type": "string", "format": "date-time", "description": "Inclusive." },
            "createdBefore": { "type": "string", "format": "date-time", "description": "Exclusive." },
        },
        "additionalProperties": false,
    });
    // Every stage the domain has, so a new one reaches the tools' schema with no edit here.
    let stages: Vec<&str> = <entity::Stage as sea_orm::Iterable>::iter().map(entity::Stage::as_str).collect();
    let stage = json!({ "type": "string", "enum": stages });
    let thread_id = json!({
        "type": ["string", "null"],
        "format": "uuid",
        "description": "The research thread the task is a turn of; null outside a thread.",
    });
    let task_state = json!({
        "type": "object",
        "properties": { "task_id": task_id, "stage": stage, "thread_id": thread_id },
        "required": ["task_id", "stage"],
    });
    let thread_inputs = json!({
        "thread_id": {
            "type": "string",
            "format": "uuid",
            "description": "Ask in this research thread (yours, in space_id): the question is a follow-up that \
                            sees the thread's earlier turns.",
        },
        "new_thread": {
            "type": "boolean",
            "description": "Start a new research thread with this question (its id is answered as thread_id).",
        },
        "multitask_strategy": {
            "type": "string",
            "enum": ["reject", "enqueue", "interrupt", "rollback"],
            "description": "When the thread has an unfinished turn: refuse (CONFLICT), wait behind it (the \
                            default), cancel it, or cancel and delete it.",
        },
    });
    let citation = json!({
        "type": "object",
        "properties": {
            "n": { "type": "integer", "description": "The number the answer cites it by, [n]." },
            "title": { "type": "string" },
            "passage_id": { "type": ["string", "null"] },
            "text": { "type": "string" },
            "document_id": { "type": "string" },
            "char_start": { "type": ["integer", "null"] },
            "char_end": { "type": ["integer", "null"] },
            "page_start": { "type": "integer", "description": "The first page of the PDF it comes from (1-based)." },
            "page_end": { "type": "integer", "description": "The last page of the PDF it comes from." },
            "source_uri": { "type": "string", "description": "Where its document came from." },
            "quotes": {
                "type": "array",
                "description": "One per sentence of the answer citing it: the passage's words that support \
                                the sentence and where they are in the document's content (code points, \
                                half-open).",
                "items": {
                    "type": "object",
                    "properties": {
                        "sentence": { "type": "string", "description": "The sentence as it stands in the answer." },
                        "text": { "type": "string" },
                        "char_start": { "type": "integer" },
                        "char_end": { "type": "integer" },
                        "page_start": { "type": "integer" },
                        "page_end": { "type": "integer" },
                    },
                    "required": ["sentence", "text", "char_start", "char_end"],
                },
            },
        },
        "required": ["n", "title", "text", "document_id", "quotes"],
    });
    let awaiting = json!({
        "type": "object",
        "description": "What a paused task waits for from a person (approve_plan or clarify limits).",
        "properties": {
            "reason": { "type": "string", "enum": ["plan_approval", "clarification"] },
            "plan": { "type": "array", "items": { "type": "string" } },
            "question": { "type": "string" },
            "until": { "type": "string", "format": "date-time" },
        },
        "required": ["reason", "until"],
    });
    let research = json!({
        "type": "object",
        "properties": {
            "task_id": task_id,
            "stage": stage,
            "thread_id": thread_id,
            "thread_id": thread_id,
            "rounds_done": { "type": "integer", "description": "Rounds of retrieval and analysis finished." },
            "answer": { "type": "string", "description": "The answer, once completed, citing [n]." },
            "citations": { "type": "array", "items": citation },
            "cost_usd": { "type": "number" },
            "error": { "type": "string", "description": "Why the task failed." },
            "awaiting": awaiting,
        },
        "required": ["task_id", "stage"],
    });
    let research_output = research.clone();
    vec![
        tool(
            "list_spaces",
            "List the knowledge spaces you may research, with your role in each.",
            json!({ "type": "object", "properties": {}, "additionalProperties": false }),
            json!({
                "type": "object",
                "properties": {
                    "spaces": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "properties": {
                                "id": { "type": "string" },
                                "name": { "type": "string" },
                                "role": { "type": ["string", "null"], "enum": ["owner", "editor", "viewer", null] },
                            },
                            "required": ["id", "name", "role"],
                        },
                    },
                },
                "required": ["spaces"],
            }),
            ToolAnnotations::new().read_only(true),
        ),
        tool(
            "start_research",
            "Start a research task over a knowledge space; returns at once with the task's id. Poll \
             get_research until its stage is completed, failed or canceled.",
            with_properties(
                &thread_inputs,
                json!({
                    "type": "object",
                    "properties": {
                        "space_id": { "type": "string", "format": "uuid" },
                        "question": { "type": "string", "minLength": 1, "maxLength": 4000 },
                        "mode": { "type": "string", "enum": ["auto", "fast", "research", "deep"] },
                        "top_k": { "type": "integer", "minimum": 1, "maximum": 50 },
                        "budget_usd": { "type": "number", "minimum": 0 },
                        "limits": {
                            "type": "object",
                            "description": concat!("The same limits as GraphQL's createResearchTask:\n", entity::task_limits_doc!()),
                        },
                        "filters": filters,
                        "idempotency_key": { "type": "string", "maxLength": 255 },
                    },
                    "required": ["space_id", "question"],
                    "additionalProperties": false,
                }),
            ),
            task_state.clone(),
            ToolAnnotations::new().read_only(false).destructive(false).idempotent(false),
        ),
        tool(
            "get_research",
            "Where a research task stands; once completed, its answer with numbered citations.",
            json!({
                "type": "object",
                "properties": { "task_id": task_id },
                "required": ["task_id"],
                "additionalProperties": false,
            }),
            research,
            ToolAnnotations::new().read_only(true),
        ),
        tool(
            "cancel_research",
            "Cancel a research task for good; canceling twice is the same as once.",
            json!({
                "type": "object",
                "properties": { "task_id": task_id },
                "required": ["task_id"],
                "additionalProperties": false,
            }),
            task_state,
            ToolAnnotations::new().read_only(false).destructive(true).idempotent(true),
        ),
        tool(
            "research",
            "Research a question over a knowledge space and wait for the cited answer (progress is reported \
             at each stage and round when the call carries a progress token; the task's id is in the first \
             progress message, so get_research can pick it up if the call is abandoned). At most 8 calls of \
             one caller wait at once; more are RATE_LIMITED (use start_research and get_research).",
            with_properties(
                &thread_inputs,
                json!({
                    "type": "object",
                    "properties": {
                        "space_id": { "type": "string", "format": "uuid" },
                        "question": { "type": "string", "minLength": 1, "maxLength": 4000 },
                        "mode": { "type": "string", "enum": ["auto", "fast", "research", "deep"] },
                        "top_k": { "type": "integer", "minimum": 1, "maximum": 50 },
                        "budget_usd": { "type": "number", "minimum": 0 },
                        "limits": { "type": "object", "description": "As start_research's limits." },
                        "filters": filters,
                    },
                    "required": ["space_id", "question"],
                    "additionalProperties": false,
                }),
            ),
            research_output,
            ToolAnnotations::new().read_only(false).destructive(false).idempotent(false),
        ),
        tool(
            "search",
            "Search the passages of your knowledge spaces (one, or all you may read); returns ids to fetch.",
            json!({
                "type": "object",
                "properties": {
                    "query": { "type": "string", "minLength": 1, "maxLength": 4000 },
                    "space_id": { "type": "string", "format": "uuid" },
                    "filters": filters,
                },
                "required": ["query"],
                "additionalProperties": false,
            }),
            json!({
                "type": "object",
                "properties": {
                    "results": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "properties": {
                                "id": { "type": "string" },
                                "title": { "type": "string" },
                                "text": { "type": "string" },
                                "url": { "type": "string" },
                            },
                            "required": ["id", "title", "text", "url"],
                        },
                    },
                },
                "required": ["results"],
            }),
            ToolAnnotations::new().read_only(true),
        ),
        tool(
            "fetch",
            "Fetch one passage (an id search returned) or one document, whole.",
            json!({
                "type": "object",
                "properties": { "id": { "type": "string", "format": "uuid" } },
                "required": ["id"],
                "additionalProperties": false,
            }),
            json!({
                "type": "object",
                "properties": {
                    "id": { "type": "string" },
                    "title": { "type": "string" },
                    "text": { "type": "string" },
                    "url": { "type": "string" },
                    "metadata": { "type": "object" },
                },
                "required": ["id", "title", "text", "url", "metadata"],
            }),
            ToolAnnotations::new().read_only(true),
        ),
    ]
}

fn tool(name: &'static str, description: &'static str, input: Value, output: Value, hints: ToolAnnotations) -> Tool {
    Tool::new(name, description, Arc::new(object(input)))
        .with_raw_output_schema(Arc::new(object(output)))
        .with_annotations(hints)
}

/// `schema` with `extra`'s properties added to its own.
fn with_properties(extra: &Value, mut schema: Value) -> Value {
    if let (Some(properties), Some(extra)) = (schema["properties"].as_object_mut(), extra.as_object()) {
        properties.extend(extra.clone());
    }
    schema
}

fn object(value: Value) -> JsonObject {
    match value {
        Value::Object(map) => map,
        _ => JsonObject::new(),
    }
}
