//! `Viewer`: the caller as the server sees it.
use async_graphql::SimpleObject;
use uuid::Uuid;

use crate::graphql::enums::GqlChannel;
use worker::app::Principal;

/// The authenticated caller.
#[derive(SimpleObject)]
pub struct Viewer {
    /// The caller's tenant.
    pub tenant_id: String,
    /// The caller's subject (`api_key:<id>` for service clients).
    pub subject_id: String,
    /// How the caller reached the service.
    pub channel: GqlChannel,
    /// For service clients: the one space their API key is bound to.
    pub api_key_knowledge_space_id: Option<Uuid>,
}

impl From<&Principal> for Viewer {
    fn from(principal: &Principal) -> Self {
        Self {
            tenant_id: principal.tenant_id.clone(),
            subject_id: principal.subject_id.clone(),
            channel: principal.channel.into(),
            api_key_knowledge_space_id: principal.api_key.as_ref().map(|key| key.knowledge_space_id),
        }
    }
}
