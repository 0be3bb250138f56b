//! Knowledge spaces as a caller sees them.
use entity::{MemberRole, knowledge_space as space};

use super::access::space_access;
use super::{App, AppError, Principal};
use crate::store::spaces;

/// The spaces `caller` may research in (at most `limit`), each with the caller's role
/// there (`None` for an API key, which has none).
pub async fn visible(
    app: &App,
    caller: &Principal,
    limit: u64,
) -> Result<Vec<(space::Model, Option<MemberRole>)>, AppError> {
    let db = &app.db;
    if let Some(key) = &caller.api_key {
        let space = spaces::find(db, &caller.tenant_id, key.knowledge_space_id).await?;
        return Ok(space.map(|space| (space, None)).into_iter().collect());
    }
    let mut visible = Vec::new();
    for space in spaces::page_for_member(db, &caller.tenant_id, &caller.subject_id, None, limit).await? {
        let role = space_access(db, caller, space.id).await?.and_then(|access| access.role());
        visible.push((space, role));
    }
    Ok(visible)
}
