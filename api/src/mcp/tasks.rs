//! The tasks extension (`io.modelcontextprotocol/tasks`): a `research` call from a client
//! that declares it becomes an MCP task whose id is the research task's, committed before
//! the call returns. Nothing is held in this process: `tasks/get` reads the task as
//! `get_research` does (stages map to `working`, a wait for a person to `input_required`
//! with an elicitation for the plan or the question, the end to `completed`, `failed` or
//! `cancelled`), `tasks/update` answers the wait through the same lifecycle as
//! `approveResearchPlan` and `answerResearchClarification`, and `tasks/cancel` cancels.
use std::collections::BTreeMap;

use entity::research_task_wait::{CLARIFICATION, PLAN_APPROVAL};
use entity::{Stage, research_task_job as job};
use rmcp::model::{
    CallToolResult, CreateTaskResult, DetailedTask, GetTaskResult, InputRequest, InputResponses, JsonObject, Task,
    TaskPayload, TaskStatus,
};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::error::ApiError;
use worker::app::Principal;
use worker::app::tasks::{self, Command};

use crate::state::AppState;

/// How often a client should poll `tasks/get`, in milliseconds.
const POLL_INTERVAL_MS: u64 = 1_000;

/// The task a new research task is, as `tools/call` answers it.
pub fn created(task: &job::Model) -> CreateTaskResult {
    CreateTaskResult::new(header(task, TaskStatus::Working).with_status_message("queued"))
}

/// `tasks/get`.
pub async fn get(state: &AppState, caller: &Principal, task_id: &str) -> Result<GetTaskResult, rmcp::ErrorData> {
    let task = find(state, caller, task_id).await?;
    let research = super::tools::get_research(state, caller, task.id).await.map_err(refusal)?;
    let payload = match task.stage {
        Stage::Completed => TaskPayload::Completed { result: as_object(CallToolResult::structured(research.clone())) },
        Stage::Failed if failed_by_limits(&task) => {
            // A budget or limit the caller set: the call completed, with an error result.
            let mut result = CallToolResult::structured(research.clone());
            result.is_error = Some(true);
            TaskPayload::Completed { result: as_object(result) }
        }
        Stage::Failed => {
            let message = task.error.clone().unwrap_or_else(|| "the research task failed".to_owned());
            TaskPayload::Failed { error: as_object(json!({ "code": -32603, "message": message })) }
        }
        Stage::Canceled => TaskPayload::Cancelled,
        _ => match input_requests(&research) {
            Some(input_requests) => TaskPayload::InputRequired { input_requests },
            None => TaskPayload::Working,
        },
    };
    let mut header = header(&task, payload.status());
    if payload.status() == TaskStatus::Working {
        header = header.with_status_message(status_message(&research));
    }
    Ok(GetTaskResult::new(DetailedTask::new(header, payload)))
}

/// `tasks/update`: the person's answers to the outstanding input requests. `accept`
/// approves the plan (as edited in `sub_queries`, one per line, or as proposed when left
/// empty) or answers the question; `decline` goes on without the input, as
/// `resumeResearchTask` does; `cancel` leaves the task waiting.
pub async fn update(
    state: &AppState,
    caller: &Principal,
    task_id: &str,
    responses: InputResponses,
) -> Result<(), rmcp::ErrorData> {
    let task = find(state, caller, task_id).await?;
    let waiting = tasks::awaiting(&state.app, &task).await.map_err(refusal)?;
    let Some(wait) = waiting else {
        return Err(refusal(ApiError::conflict("the task waits for no input")));
    };
    let Some(response) = responses.get(&wait.reason) else {
        let keys: Vec<&String> = responses.keys().collect();
        return Err(rmcp::ErrorData::invalid_params(
            format!("CONFLICT: the task waits for {}, not for {keys:?}", wait.reason),
            None,
        ));
    };
    let content = response.get("content").cloned().unwrap_or(Value::Null);
    let command = match response.get("action").and_then(Value::as_str) {
        Some("accept") if wait.reason == PLAN_APPROVAL => {
            let edited: Vec<String> = content
                .get("sub_queries")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .lines()
                .map(str::trim)
                .filter(|line| !line.is_empty())
                .map(str::to_owned)
                .collect();
            Command::ApprovePlan((!edited.is_empty()).then_some(edited))
        }
        Some("accept") => Command::Answer(content.get("answer").and_then(Value::as_str).unwrap_or_default().to_owned()),
        Some("decline") => Command::Resume,
        Some("cancel") => return Ok(()),
        _ => {
            return Err(rmcp::ErrorData::invalid_params(
                "BAD_USER_INPUT: action must be accept, decline or cancel",
                None,
            ));
        }
    };
    tasks::run(&state.app, caller, task.id, None, command).await.map_err(refusal)?;
    Ok(())
}

/// `tasks/cancel`: cancels the research task (canceling twice is canceling once).
pub async fn cancel(state: &AppState, caller: &Principal, task_id: &str) -> Result<(), rmcp::ErrorData> {
    let task = find(state, caller, task_id).await?;
    tasks::run(&state.app, caller, task.id, None, Command::Cancel).await.map_err(refusal)?;
    Ok(())
}

/// The caller's task by MCP task id; anything else is the same `NOT_FOUND`.
async fn find(state: &AppState, caller: &Principal, task_id: &str) -> Result<job::Model, rmcp::ErrorData> {
    let id = Uuid::parse_str(task_id).map_err(|_| refusal(ApiError::NotFound))?;
    tasks::find(&state.app, caller, id).await.map_err(refusal)
}

fn header(task: &job::Model, status: TaskStatus) -> Task {
    let at = super::time::rfc3339;
    Task::new(task.id.to_string(), status, at(task.created_at), at(task.updated_at))
        .with_poll_interval_ms(POLL_INTERVAL_MS)
}

/// Whether the task failed on a budget or limit its caller set (not on the service).
fn failed_by_limits(task: &job::Model) -> bool {
    task.error
        .as_deref()
        .is_some_and(|error| error.starts_with("budget exceeded") || error.starts_with("limit exceeded"))
}

/// "retrieving, round 2 (1 done)": where a working task stands.
fn status_message(research: &Value) -> String {
    let stage = research["stage"].as_str().unwrap_or_default();
    let done = research["rounds_done"].as_i64().unwrap_or(0);
    match stage {
        "retrieving" | "analyzing" => format!("{stage}, round {}", done + 1),
        "generating" => format!("generating the answer after {done} round(s)"),
        other => other.to_owned(),
    }
}

/// The elicitation a waiting task asks for, keyed by what it waits for.
fn input_requests(research: &Value) -> Option<BTreeMap<String, InputRequest>> {
    let awaiting = research.get("awaiting")?;
    let reason = awaiting["reason"].as_str()?;
    let (message, schema) = if reason == PLAN_APPROVAL {
        let plan: Vec<&str> = awaiting["plan"].as_array()?.iter().filter_map(Value::as_str).collect();
        let message =
            format!("Approve the research plan; edit its sub-queries (one per line) if needed:\n{}", plan.join("\n"));
        let schema = json!({
            "type": "object",
            "properties": {
                "sub_queries": {
                    "type": "string",
                    "title": "Sub-queries",
                    "description": "One per line; leave as is (or empty) to approve the plan as proposed.",
                    "default": plan.join("\n"),
                },
            },
        });
        (message, schema)
    } else if reason == CLARIFICATION {
        let question = awaiting["question"].as_str()?.to_owned();
        let schema = json!({
            "type": "object",
            "properties": { "answer": { "type": "string", "title": "Answer", "maxLength": 4000 } },
            "required": ["answer"],
        });
        (question, schema)
    } else {
        return None;
    };
    let request = json!({
        "method": "elicitation/create",
        "params": { "mode": "form", "message": message, "requestedSchema": schema },
    });
    let request: InputRequest = serde_json::from_value(request).ok()?;
    Some(BTreeMap::from([(reason.to_owned(), request)]))
}

fn as_object(value: impl serde::Serialize) -> JsonObject {
    match serde_json::to_value(value) {
        Ok(Value::Object(map)) => map,
        _ => JsonObject::new(),
    }
}

/// A refusal as a protocol error whose message starts with GraphQL's code.
fn refusal(error: ApiError) -> rmcp::ErrorData {
    let message = match &error {
        ApiError::Internal(_) => "internal server error".to_owned(),
        ApiError::Unavailable(_) => "the database is unavailable; try again shortly".to_owned(),
        other => other.to_string(),
    };
    let text = format!("{}: {message}", error.code());
    match error {
        ApiError::Internal(_) | ApiError::Unavailable(_) => rmcp::ErrorData::internal_error(text, None),
        _ => rmcp::ErrorData::invalid_params(text, None),
    }
}
