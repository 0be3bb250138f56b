//! The typed accessors resolvers use to reach request data: who is calling (and from
//! which request), and the shared state. Nothing else reads `ctx.data`.
use async_graphql::Context;

use crate::error::ApiError;
use crate::state::AppState;
use worker::app::Principal;

/// The authenticated caller. Missing or expired credentials answer `UNAUTHENTICATED`; the
/// expiry is checked here too because a WebSocket outlives the token that opened it.
pub fn principal<'ctx>(ctx: &Context<'ctx>) -> Result<&'ctx Principal, ApiError> {
    let found = ctx
        .data_opt::<Principal>()
        .or_else(|| ctx.data_opt::<Option<Principal>>().and_then(Option::as_ref))
        .ok_or(ApiError::Unauthenticated)?;
    if found.expires_at.is_some_and(|at| at <= entity::now_millis()) {
        return Err(ApiError::Unauthenticated);
    }
    Ok(found)
}

/// The caller and the request, as the audit log records them.
pub fn actor<'ctx>(ctx: &Context<'ctx>) -> Result<worker::app::audit::Actor<'ctx>, ApiError> {
    Ok(worker::app::audit::Actor {
        principal: principal(ctx)?,
        request_id: ctx.data_opt::<crate::request_id::RequestId>().map(|id| id.0.as_str()),
    })
}

/// The shared state the schema was built with.
pub fn state<'ctx>(ctx: &Context<'ctx>) -> Result<&'ctx AppState, ApiError> {
    ctx.data::<AppState>().map_err(|_| ApiError::internal(anyhow::anyhow!("the schema was built without AppState")))
}
