//! The MCP server: what it says about itself at `initialize`, and tool calls dispatched to
//! `tools.rs` as the caller the guard admitted.
use rmcp::ServerHandler;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, Implementation, ListToolsResult, PaginatedRequestParams,
    ServerCapabilities, ServerConfig,
};
use rmcp::service::{RequestContext, RoleServer};

use crate::auth::Principal;
use crate::state::AppState;

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
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
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
        Ok(ListToolsResult::with_all_items(super::tools::all()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, rmcp::ErrorData> {
        // The guard put the caller on the HTTP request; rmcp hands its parts to the handler.
        let caller = context
            .extensions
            .get::<axum::http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<Principal>())
            .cloned()
            .ok_or_else(|| rmcp::ErrorData::internal_error("no authenticated caller", None))?;
        let token = request
            .meta
            .as_ref()
            .and_then(|meta| meta.get_progress_token())
            .or_else(|| context.meta.get_progress_token());
        let progress = token.map(|token| super::waiting::Progress { token, peer: context.peer.clone() });
        let arguments = request.arguments.unwrap_or_default();
        super::tools::call(&self.state, &caller, &request.name, arguments, progress).await.map(CallToolResponse::from)
    }
}
