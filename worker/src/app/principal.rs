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
    /// The identity provider that vouched for the caller (a JWKS issuer's `iss`); `None`
    /// for tokens signed with this service's own secret, and for API keys.
    pub issuer: Option<String>,
}

impl Principal {
    /// Whether `entry` of `KFS_OPERATOR_SUBJECTS` names this caller: a bare subject names
    /// a caller with a token signed by this service's secret; `<issuer>#<subject>` one
    /// vouched for by that identity provider (so one provider cannot mint another's
    /// operator). API keys are never operators.
    pub fn is_named_by(&self, entry: &str) -> bool {
        if self.api_key.is_some() {
            return false;
        }
        match (&self.issuer, entry.rsplit_once('#')) {
            (None, _) => entry == self.subject_id,
            (Some(issuer), Some((named_issuer, subject))) => named_issuer == issuer && subject == self.subject_id,
            (Some(_), None) => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caller(issuer: Option<&str>, api_key: bool) -> Principal {
        Principal {
            tenant_id: "t".to_owned(),
            subject_id: "admin".to_owned(),
            channel: AccessChannel::Interactive,
            api_key: api_key.then(|| ApiKeyCredential {
                key_id: Uuid::nil(),
                knowledge_space_id: Uuid::nil(),
                revision: 1,
                expires_at: None,
            }),
            expires_at: None,
            issuer: issuer.map(str::to_owned),
        }
    }

    #[test]
    fn an_operator_entry_names_one_issuer_s_subject() {
        let own = caller(None, false);
        let provider = caller(Some("https://idp.example/"), false);
        let other = caller(Some("https://other.example/"), false);
        assert!(own.is_named_by("admin"));
        assert!(!provider.is_named_by("admin"), "a provider's subject is not the service's own");
        assert!(provider.is_named_by("https://idp.example/#admin"));
        assert!(!other.is_named_by("https://idp.example/#admin"), "one provider cannot mint another's operator");
        assert!(!caller(None, true).is_named_by("admin"), "API keys are never operators");
    }
}
