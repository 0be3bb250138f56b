//! The MCP server: what it says about itself at `initialize`, and tool calls dispatched to
//! `tools.rs` as the caller the guard admitted.
use rmcp::ServerHandler;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CancelTaskParams, GetTaskParams, GetTaskResult, Implementation,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, UpdateTaskParams,
};
use rmcp::service::{RequestContext, RoleServer};
use tracing::Instrument as _;

use crate::state::AppState;
use worker::app::Principal;

/// One request's server (stateless: a new one per request, sharing the app's state).
#[derive(Clone)]
pub struct McpHandler {
    state: AppState,
}

impl McpHandler {
    pub fn new(state: AppState) -> Self {
        Self { state }
    }
}

impl ServerHandler for McpHandler {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().enable_tasks().build())
            .with_server_info(Implementation::new("kfs-research", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "Research questions over the knowledge spaces you may read: list_spaces, then start_research \
                 and get_research until its stage is completed (or research, which waits for the answer). \
                 Answers cite passages of the space's documents.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, rmcp::ErrorData> {
        Ok(ListToolsResult::with_all_items(super::catalog::all()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, rmcp::ErrorData> {
        let caller = caller(&context)?;
        // One span per tool call, as GraphQL has per operation; a `traceparent` in `_meta`
        // (or on the HTTP request, which the request span already joined) makes it part
        // of the caller's trace.
        let span = tracing::debug_span!("mcp tool", tool = %request.name);
        let meta = request.meta.as_deref().or(Some(&*context.meta));
        if let Some(traceparent) = meta.and_then(|meta| meta.get_traceparent())
            && let Ok(value) = axum::http::HeaderValue::from_str(traceparent)
        {
            let mut headers = axum::http::HeaderMap::new();
            headers.insert("traceparent", value);
            if let Some(state) = meta.and_then(|meta| meta.get_tracestate())
                && let Ok(value) = axum::http::HeaderValue::from_str(state)
            {
                headers.insert("tracestate", value);
            }
            worker::telemetry::context::adopt_remote_parent(&span, &headers);
        }
        self.call(request, context, caller).instrument(span).await
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, rmcp::ErrorData> {
        super::tasks::get(&self.state, &caller(&context)?, &request.task_id).await
    }

    async fn update_task(
        &self,
        request: UpdateTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), rmcp::ErrorData> {
        super::tasks::update(&self.state, &caller(&context)?, &request.task_id, request.input_responses).await
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), rmcp::ErrorData> {
        super::tasks::cancel(&self.state, &caller(&context)?, &request.task_id).await
    }
}

impl McpHandler {
    async fn call(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
        caller: Principal,
    ) -> Result<CallToolResponse, rmcp::ErrorData> {
        let token = request
            .meta
            .as_ref()
            .and_then(|meta| meta.get_progress_token())
            .or_else(|| context.meta.get_progress_token());
        let progress = token.map(|token| super::waiting::Progress { token, peer: context.peer.clone() });
        let arguments = request.arguments.unwrap_or_default();
        // A client that declares the tasks extension gets `research` as a task at once.
        if request.name == "research" && context.client_capabilities().is_some_and(|caps| caps.supports_tasks()) {
            return match super::tools::start_task(&self.state, &caller, arguments.clone()).await {
                Ok(task) => Ok(CallToolResponse::Task(super::tasks::created(&task))),
                // Refusals read as the tool's own (isError with the code).
                Err(_) => super::tools::call(&self.state, &caller, &request.name, arguments, None)
                    .await
                    .map(CallToolResponse::from),
            };
        }
        // A client that goes away (or cancels the request) ends the call here: a `research`
        // wait stops and gives its place back; the research task itself goes on.
        let ct = context.ct.clone();
        tokio::select! {
            result = super::tools::call(&self.state, &caller, &request.name, arguments, progress) => {
                result.map(CallToolResponse::from)
            }
            () = ct.cancelled() => Err(rmcp::ErrorData::internal_error("the client went away", None)),
        }
    }
}

/// The caller the guard admitted, from the HTTP request rmcp hands the handler.
fn caller(context: &RequestContext<RoleServer>) -> Result<Principal, rmcp::ErrorData> {
    context
        .extensions
        .get::<axum::http::request::Parts>()
        .and_then(|parts| parts.extensions.get::<Principal>())
        .cloned()
        .ok_or_else(|| rmcp::ErrorData::internal_error("no authenticated caller", None))
}
