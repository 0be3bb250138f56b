//! The research tools. Each calls the same operation of `worker::app` as its GraphQL
//! mutation or query (`tasks::create`, `tasks::run`, `tasks::overview`), so a task is an
//! ordinary task whichever door it came through, another subject's or tenant's id answers
//! exactly what a random id answers, and a refusal is a tool result with `isError` whose
//! text starts with the code GraphQL would answer (`BAD_USER_INPUT: …`).
use std::time::Instant;

use entity::{ResearchMode, Stage, research_task_job as job};
use rmcp::model::{CallToolResult, ContentBlock, JsonObject};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use uuid::Uuid;

use crate::error::ApiError;
use worker::app::Principal;
use worker::app::tasks::{self, Command, TaskRequest};
use worker::app::threads::MultitaskStrategy;

use crate::state::AppState;

/// The tools' names, in the order `tools/list` shows them.
pub const NAMES: &[&str] =
    &["list_spaces", "start_research", "get_research", "cancel_research", "research", "search", "fetch"];

/// How long `research` waits for the answer before it returns the task as it stands (its
/// id in hand, `get_research` picks it up).
const RESEARCH_WAIT: std::time::Duration = std::time::Duration::from_secs(600);

/// The most results `search` returns.
const SEARCH_RESULTS: u64 = 10;

/// The most spaces `search` without a `space_id` looks in.
const SEARCH_SPACES: u64 = 20;

/// Registers the tool metrics at zero, so dashboards see every tool and outcome.
pub fn register_metrics() {
    for tool in NAMES {
        for outcome in ["ok", "error", "refused"] {
            metrics::counter!("mcp_tool_calls_total", "tool" => *tool, "outcome" => outcome).absolute(0);
        }
    }
}

/// Runs tool `name` for `caller`. An unknown tool is a protocol error (`-32602`); every
/// refusal of a known tool is a result with `isError`.
pub async fn call(
    state: &AppState,
    caller: &Principal,
    name: &str,
    arguments: JsonObject,
    progress: Option<super::waiting::Progress>,
) -> Result<CallToolResult, rmcp::ErrorData> {
    let Some(&tool) = NAMES.iter().find(|known| **known == name) else {
        return Err(rmcp::ErrorData::invalid_params(format!("unknown tool: {name}"), None));
    };
    let started = Instant::now();
    let arguments = Value::Object(arguments);
    let outcome = match tool {
        "list_spaces" => match parse::<NoArgs>(arguments) {
            Ok(NoArgs {}) => list_spaces(state, caller).await,
            Err(error) => Err(error),
        },
        "start_research" => match parse(arguments) {
            Ok(args) => start_research(state, caller, args).await,
            Err(error) => Err(error),
        },
        "get_research" => match parse::<TaskArgs>(arguments) {
            Ok(args) => get_research(state, caller, args.task_id).await,
            Err(error) => Err(error),
        },
        "cancel_research" => match parse::<TaskArgs>(arguments) {
            Ok(args) => cancel_research(state, caller, args.task_id).await,
            Err(error) => Err(error),
        },
        "research" => match parse::<ResearchArgs>(arguments) {
            Ok(args) => research(state, caller, args, progress).await,
            Err(error) => Err(error),
        },
        "search" => match parse::<SearchArgs>(arguments) {
            Ok(args) => search(state, caller, args).await,
            Err(error) => Err(error),
        },
        _ => match parse::<FetchArgs>(arguments) {
            Ok(args) => fetch(state, caller, args.id).await,
            Err(error) => Err(error),
        },
    };
    let outcome = outcome.and_then(|value| super::response_limit::within(state, value));
    metrics::histogram!("mcp_tool_call_duration_seconds", "tool" => tool).record(started.elapsed().as_secs_f64());
    let (result, label) = match outcome {
        Ok(value) => (CallToolResult::structured(value), "ok"),
        Err(error) => {
            let label =
                if matches!(error, ApiError::Internal(_) | ApiError::Unavailable(_)) { "error" } else { "refused" };
            if label == "error" {
                tracing::error!(tool, error = %error, "an MCP tool call failed");
            }
            // Internal causes are logged, never shown.
            let message = match &error {
                ApiError::Internal(_) => "internal server error".to_owned(),
                ApiError::Unavailable(_) => "the database is unavailable; try again shortly".to_owned(),
                other => other.to_string(),
            };
            let text = format!("{}: {message}", error.code());
            (CallToolResult::error(vec![ContentBlock::text(text)]), label)
        }
    };
    metrics::counter!("mcp_tool_calls_total", "tool" => tool, "outcome" => label).increment(1);
    Ok(result)
}

/// The arguments as `T`; arguments of the wrong shape are `BAD_USER_INPUT` in a tool
/// result (a model can read it and correct itself), as a GraphQL variable of the wrong
/// type is a GraphQL error with that code.
fn parse<T: DeserializeOwned>(arguments: Value) -> Result<T, ApiError> {
    serde_json::from_value(arguments).map_err(|error| ApiError::bad_input(format!("invalid arguments: {error}")))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NoArgs {}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TaskArgs {
    task_id: Uuid,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct StartArgs {
    space_id: Uuid,
    question: String,
    mode: Option<String>,
    top_k: Option<i32>,
    budget_usd: Option<f64>,
    limits: Option<Value>,
    filters: Option<Value>,
    idempotency_key: Option<String>,
    thread_id: Option<Uuid>,
    multitask_strategy: Option<String>,
    new_thread: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ResearchArgs {
    space_id: Uuid,
    question: String,
    mode: Option<String>,
    top_k: Option<i32>,
    budget_usd: Option<f64>,
    limits: Option<Value>,
    filters: Option<Value>,
    thread_id: Option<Uuid>,
    multitask_strategy: Option<String>,
    new_thread: Option<bool>,
}

impl ResearchArgs {
    fn into_start(self) -> StartArgs {
        StartArgs {
            space_id: self.space_id,
            question: self.question,
            mode: self.mode,
            top_k: self.top_k,
            budget_usd: self.budget_usd,
            limits: self.limits,
            filters: self.filters,
            idempotency_key: None,
            thread_id: self.thread_id,
            multitask_strategy: self.multitask_strategy,
            new_thread: self.new_thread,
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SearchArgs {
    query: String,
    space_id: Option<Uuid>,
    filters: Option<Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FetchArgs {
    pub id: Uuid,
}

async fn research(
    state: &AppState,
    caller: &Principal,
    args: ResearchArgs,
    progress: Option<super::waiting::Progress>,
) -> Result<Value, ApiError> {
    // The place first: a call refused for it creates nothing.
    let _slot = super::waiting::Slot::take(caller)?;
    let task = tasks::create(&state.app, caller, request_of(args.into_start())?).await?;
    super::waiting::follow(state, caller, task.id, progress.as_ref(), RESEARCH_WAIT).await?;
    get_research(state, caller, task.id).await
}

async fn search(state: &AppState, caller: &Principal, args: SearchArgs) -> Result<Value, ApiError> {
    let filters = worker::app::limits::filters_alone(args.filters)?;
    let searched = super::library::Searched {
        query: &args.query,
        space: args.space_id,
        filters: filters.as_ref(),
        limit: SEARCH_RESULTS,
        max_spaces: SEARCH_SPACES,
    };
    super::library::search(state, caller, searched).await
}

async fn fetch(state: &AppState, caller: &Principal, id: Uuid) -> Result<Value, ApiError> {
    super::library::fetch(state, caller, id).await
}

async fn list_spaces(state: &AppState, caller: &Principal) -> Result<Value, ApiError> {
    let spaces: Vec<Value> = worker::app::spaces::visible(&state.app, caller, LISTED_SPACES)
        .await?
        .into_iter()
        .map(|(space, role)| json!({ "id": space.id, "name": space.name, "role": role }))
        .collect();
    Ok(json!({ "spaces": spaces }))
}

/// The most spaces `list_spaces` shows.
const LISTED_SPACES: u64 = 100;

async fn start_research(state: &AppState, caller: &Principal, args: StartArgs) -> Result<Value, ApiError> {
    let started = tasks::start(&state.app, caller, request_of(args)?).await?;
    let mut state_of = task_state(&started.task);
    state_of["thread_id"] = json!(started.thread_id);
    Ok(state_of)
}

/// A `research` call's task, created and committed (the tasks extension's path).
pub(super) async fn start_task(
    state: &AppState,
    caller: &Principal,
    arguments: JsonObject,
) -> Result<job::Model, ApiError> {
    let args: ResearchArgs = parse(Value::Object(arguments))?;
    tasks::create(&state.app, caller, request_of(args.into_start())?).await
}

/// The task request a tool call's arguments make (checked in the application layer).
fn request_of(args: StartArgs) -> Result<TaskRequest, ApiError> {
    let mode = match args.mode.as_deref() {
        None => None,
        Some(text) => Some(
            serde_json::from_value::<ResearchMode>(json!(text))
                .map_err(|_| ApiError::bad_input("mode must be one of auto, fast, research, deep"))?,
        ),
    };
    let multitask_strategy = match args.multitask_strategy.as_deref() {
        None => None,
        Some("reject") => Some(MultitaskStrategy::Reject),
        Some("enqueue") => Some(MultitaskStrategy::Enqueue),
        Some("interrupt") => Some(MultitaskStrategy::Interrupt),
        Some("rollback") => Some(MultitaskStrategy::Rollback),
        Some(_) => {
            return Err(ApiError::bad_input("multitask_strategy must be one of reject, enqueue, interrupt, rollback"));
        }
    };
    Ok(TaskRequest {
        knowledge_space_id: args.space_id,
        query: args.question,
        mode,
        top_k: args.top_k,
        budget_usd: args.budget_usd,
        limits: args.limits,
        filters: args.filters,
        metadata: None,
        idempotency_key: args.idempotency_key,
        thread_id: args.thread_id,
        multitask_strategy,
        new_thread: args.new_thread.unwrap_or(false),
    })
}

async fn cancel_research(state: &AppState, caller: &Principal, id: Uuid) -> Result<Value, ApiError> {
    let task = tasks::run(&state.app, caller, id, None, Command::Cancel).await?;
    Ok(task_state(&task))
}

pub(super) async fn get_research(state: &AppState, caller: &Principal, id: Uuid) -> Result<Value, ApiError> {
    let tasks::TaskOverview { task, rounds_done, cost_usd, awaiting, trace, thread_id } =
        tasks::overview(&state.app, caller, id).await?;
    let mut result = task_state(&task);
    result["thread_id"] = json!(thread_id);
    result["rounds_done"] = json!(rounds_done);
    result["cost_usd"] = json!(cost_usd);
    if let Some(wait) = awaiting {
        let mut awaiting = json!({ "reason": wait.reason, "until": super::time::rfc3339(wait.until) });
        if let Some(plan) = &wait.proposed_plan {
            awaiting["plan"] = json!(tasks::plan_queries(plan));
        }
        if let Some(question) = &wait.question {
            awaiting["question"] = json!(question);
        }
        result["awaiting"] = awaiting;
    }
    if task.stage == Stage::Failed
        && let Some(error) = &task.error
    {
        result["error"] = json!(error);
    }
    if task.stage == Stage::Completed
        && let Some(trace) = trace
    {
        result["answer"] = json!(trace.answer);
        let records = tasks::citations(&state.app, &trace).await?;
        let citations: Vec<Value> = trace
            .evidence
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
            .map(|(index, item)| {
                let mut citation = json!({
                    "n": item.get("citation").and_then(Value::as_i64).unwrap_or(index as i64 + 1),
                    "title": item.get("title").and_then(Value::as_str).unwrap_or_default(),
                    "passage_id": item.get("passage_id").cloned().unwrap_or(Value::Null),
                    "text": item.get("text").and_then(Value::as_str).filter(|text| !text.is_empty())
                        .or_else(|| item.get("snippet").and_then(Value::as_str)).unwrap_or_default(),
                    "document_id": item.get("document_id").and_then(Value::as_str).unwrap_or_default(),
                    "char_start": item.get("char_start").cloned().unwrap_or(Value::Null),
                    "char_end": item.get("char_end").cloned().unwrap_or(Value::Null),
                });
                // Where it points back to, when the evidence says: a PDF's pages, the source.
                for key in ["page_start", "page_end", "source_uri"] {
                    if let Some(value) = item.get(key) {
                        citation[key] = value.clone();
                    }
                }
                citation["quotes"] = quotes_of(&records, index + 1);
                citation
            })
            .collect();
        result["citations"] = json!(citations);
    }
    Ok(result)
}

/// The quotes of evidence number `n`, one per sentence of the answer that cites it:
/// `{sentence, text, char_start, char_end}` and the pages when there are some (none for
/// answers from before quotes).
fn quotes_of(records: &[worker::research::citations::CitationRecord], n: usize) -> Value {
    let quotes: Vec<Value> = records
        .iter()
        .filter(|record| record.n == n)
        .filter_map(|record| {
            let quote = record.quote.as_ref()?;
            let mut entry = json!({
                "sentence": record.sentence,
                "text": quote.text,
                "char_start": quote.char_start,
                "char_end": quote.char_end,
            });
            if let (Some(first), Some(last)) = (quote.page_start, quote.page_end) {
                entry["page_start"] = json!(first);
                entry["page_end"] = json!(last);
            }
            Some(entry)
        })
        .collect();
    Value::Array(quotes)
}

/// `{task_id, stage}` with the stage in lower case, as GraphQL's enum value.
fn task_state(task: &job::Model) -> Value {
    json!({ "task_id": task.id, "stage": task.stage.as_str() })
}
