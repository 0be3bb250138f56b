//! Who is calling, as resolved from the request's credential.
use entity::AccessChannel;
use uuid::Uuid;

/// The API key behind a service principal, as it was when the request authenticated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiKeyCredential {
    /// The key's id.
    pub key_id: Uuid,
    /// The one space the key may act in.
    pub knowledge_space_id: Uuid,
    /// The key's current revision.
    pub revision: i32,
    /// The key's expiry, epoch milliseconds.
    pub expires_at: Option<i64>,
}

/// An authenticated caller. Requests without a valid credential carry no principal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// The caller's tenant.
    pub tenant_id: String,
    /// The caller's subject (a JWT `sub`, or `api_key:<id>` for keys).
    pub subject_id: String,
    /// How the caller reached the service.
    pub channel: AccessChannel,
    /// Set for service clients: the key they presented.
    pub api_key: Option<ApiKeyCredential>,
    /// When the credential stops being valid, epoch milliseconds (JWT `exp`, key expiry).
    pub expires_at: Option<i64>,
}
