//! Identity providers (Auth0, Okta, Keycloak, Entra, Cognito, …): tokens signed with the
//! provider's keys, published as a JWKS, and checked for the provider's `iss` and the
//! configured `aud`. Each issuer says which algorithms it may use (asymmetric ones only:
//! never `none`, never HS*, so a public key can never be mistaken for an HMAC secret) and
//! which claims carry the subject, tenant and channel.
use std::collections::HashMap;

use jsonwebtoken::{Algorithm, Validation};
use serde::Deserialize;
use serde_json::{Map, Value};

use super::claims;
use super::jwks::{JwksCache, JwksSettings};
use crate::error::ApiError;
use worker::app::Principal;

/// One identity provider, as configured.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct IssuerSettings {
    /// The `iss` its tokens carry, exactly (`https://tenant.eu.auth0.com/`).
    pub issuer: String,
    /// The audiences accepted in `aud` (one string or a list); at least one must match.
    #[serde(deserialize_with = "one_or_many")]
    pub audience: Vec<String>,
    /// Where its signing keys are published (`https://…/.well-known/jwks.json`).
    pub jwks_url: String,
    /// Algorithms its tokens may use; default RS256, ES256 and EdDSA.
    #[serde(default = "default_algorithms")]
    pub algorithms: Vec<String>,
    /// The claim holding the subject id (default `sub`).
    #[serde(default = "default_subject_claim")]
    pub subject_claim: String,
    /// The claim holding the tenant id (default `tenant`; e.g. `org_id`, or a namespaced
    /// `https://example.com/tenant`).
    #[serde(default = "default_tenant_claim")]
    pub tenant_claim: String,
    /// The claim holding the channel (default `channel`); absent, the caller is interactive.
    #[serde(default = "default_channel_claim")]
    pub channel_claim: String,
}

fn default_algorithms() -> Vec<String> {
    ["RS256", "ES256", "EdDSA"].map(str::to_owned).to_vec()
}
fn default_subject_claim() -> String {
    "sub".to_owned()
}
fn default_tenant_claim() -> String {
    "tenant".to_owned()
}
fn default_channel_claim() -> String {
    "channel".to_owned()
}

fn one_or_many<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Vec<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum OneOrMany {
        One(String),
        Many(Vec<String>),
    }
    Ok(match OneOrMany::deserialize(deserializer)? {
        OneOrMany::One(one) => vec![one],
        OneOrMany::Many(many) => many,
    })
}

/// `KFS_JWT_ISSUERS`: a JSON array of issuer objects (figment hands the environment's
/// value over as a string), or a list when it comes from a file.
pub fn issuers_from_env<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Vec<IssuerSettings>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum ListOrJson {
        List(Vec<IssuerSettings>),
        Json(String),
    }
    match ListOrJson::deserialize(deserializer)? {
        ListOrJson::List(issuers) => Ok(issuers),
        ListOrJson::Json(text) if text.trim().is_empty() => Ok(Vec::new()),
        ListOrJson::Json(text) => serde_json::from_str(&text).map_err(|error| {
            serde::de::Error::custom(format!("KFS_JWT_ISSUERS is not a JSON array of issuers: {error}"))
        }),
    }
}

/// The asymmetric algorithms an issuer may be configured with.
fn asymmetric(name: &str) -> Option<Algorithm> {
    match name {
        "RS256" => Some(Algorithm::RS256),
        "RS384" => Some(Algorithm::RS384),
        "RS512" => Some(Algorithm::RS512),
        "PS256" => Some(Algorithm::PS256),
        "PS384" => Some(Algorithm::PS384),
        "PS512" => Some(Algorithm::PS512),
        "ES256" => Some(Algorithm::ES256),
        "ES384" => Some(Algorithm::ES384),
        "EdDSA" => Some(Algorithm::EdDSA),
        _ => None,
    }
}

/// A configured issuer, ready to verify its tokens.
pub struct Issuer {
    settings: IssuerSettings,
    algorithms: Vec<Algorithm>,
    keys: JwksCache,
}

impl Issuer {
    /// Checks the settings (a URL that is HTTP(S), an audience, asymmetric algorithms
    /// only) and prepares the key cache; nothing is fetched yet.
    pub fn new(settings: IssuerSettings, jwks: JwksSettings) -> anyhow::Result<Self> {
        let name = &settings.issuer;
        anyhow::ensure!(!name.is_empty(), "a JWT issuer needs its `issuer` (the tokens' `iss`)");
        anyhow::ensure!(
            settings.audience.iter().any(|audience| !audience.is_empty()),
            "JWT issuer {name}: `audience` must name at least one audience"
        );
        anyhow::ensure!(
            settings.jwks_url.starts_with("https://") || settings.jwks_url.starts_with("http://"),
            "JWT issuer {name}: `jwks_url` must be an http(s) URL"
        );
        anyhow::ensure!(!settings.algorithms.is_empty(), "JWT issuer {name}: `algorithms` is empty");
        let mut algorithms = Vec::new();
        for algorithm in &settings.algorithms {
            let Some(parsed) = asymmetric(algorithm) else {
                anyhow::bail!(
                    "JWT issuer {name}: algorithm {algorithm:?} is not allowed (RS256, RS384, RS512, PS256, PS384, \
                     PS512, ES256, ES384 or EdDSA; never none or HS*, whose keys are shared secrets)"
                );
            };
            algorithms.push(parsed);
        }
        for claim in [&settings.subject_claim, &settings.tenant_claim, &settings.channel_claim] {
            anyhow::ensure!(!claim.is_empty(), "JWT issuer {name}: claim names cannot be empty");
        }
        let keys = JwksCache::new(&settings.issuer, &settings.jwks_url, jwks)?;
        Ok(Self { settings, algorithms, keys })
    }

    /// The `iss` this issuer's tokens carry.
    pub fn name(&self) -> &str {
        &self.settings.issuer
    }

    /// Verifies `token` (whose unverified `iss` named this issuer): its algorithm is one of
    /// the issuer's, its key is in the issuer's JWKS, and `iss`, `aud`, `exp` and `nbf`
    /// hold (within `leeway` seconds).
    /// `resource`, when given, is one more audience the token may name (the MCP resource's
    /// URL, RFC 8707).
    pub async fn verify(&self, token: &str, leeway: u64, resource: Option<&str>) -> Result<Principal, ApiError> {
        let header = jsonwebtoken::decode_header(token).map_err(|_| ApiError::Unauthenticated)?;
        if !self.algorithms.contains(&header.alg) {
            tracing::debug!(issuer = %self.name(), algorithm = ?header.alg, "token refused: algorithm not allowed");
            return Err(ApiError::Unauthenticated);
        }
        let mut validation = Validation::new(header.alg);
        validation.set_issuer(&[&self.settings.issuer]);
        let mut audience: Vec<&str> = self.settings.audience.iter().map(String::as_str).collect();
        audience.extend(resource);
        validation.set_audience(&audience);
        validation.set_required_spec_claims(&["exp", "iss", "aud"]);
        validation.validate_nbf = true;
        validation.leeway = leeway;
        let candidates = self.keys.keys_for(header.kid.as_deref(), header.alg).await?;
        let claims = candidates
            .iter()
            .find_map(|key| jsonwebtoken::decode::<Map<String, Value>>(token, key, &validation).ok())
            .ok_or_else(|| {
                tracing::debug!(issuer = %self.name(), kid = ?header.kid, "token refused: signature or claims");
                ApiError::Unauthenticated
            })?
            .claims;
        self.principal(&claims, leeway)
    }

    fn principal(&self, claims: &Map<String, Value>, leeway: u64) -> Result<Principal, ApiError> {
        if !claims::audience_well_formed(claims.get("aud")) {
            return Err(ApiError::Unauthenticated);
        }
        let text = |name: &str| claims.get(name).and_then(Value::as_str);
        let subject = text(&self.settings.subject_claim).ok_or(ApiError::Unauthenticated)?;
        let tenant = text(&self.settings.tenant_claim).ok_or(ApiError::Unauthenticated)?;
        let channel = match claims.get(&self.settings.channel_claim) {
            None | Some(Value::Null) => None,
            Some(Value::String(channel)) => Some(channel.as_str()),
            Some(_) => return Err(ApiError::Unauthenticated),
        };
        let exp = claims.get("exp").and_then(Value::as_i64).ok_or(ApiError::Unauthenticated)?;
        let mut principal = claims::principal(subject, tenant, channel, exp, leeway)?;
        principal.issuer = Some(self.settings.issuer.clone());
        Ok(principal)
    }
}

/// The configured issuers by `iss`.
#[derive(Default)]
pub struct Issuers {
    by_name: HashMap<String, Issuer>,
}

impl Issuers {
    /// From the settings; two issuers with one `iss` are a configuration error.
    pub fn new<'a>(settings: impl IntoIterator<Item = &'a IssuerSettings>, jwks: JwksSettings) -> anyhow::Result<Self> {
        let mut by_name = HashMap::new();
        for issuer in settings {
            let issuer = Issuer::new(issuer.clone(), jwks.clone())?;
            let name = issuer.name().to_owned();
            anyhow::ensure!(by_name.insert(name.clone(), issuer).is_none(), "JWT issuer {name} is configured twice");
        }
        Ok(Self { by_name })
    }

    /// The issuer whose tokens carry `iss`.
    pub fn get(&self, iss: &str) -> Option<&Issuer> {
        self.by_name.get(iss)
    }

    /// Whether any issuer is configured.
    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(algorithms: &[&str]) -> IssuerSettings {
        IssuerSettings {
            issuer: "https://idp.example/".to_owned(),
            audience: vec!["kfs".to_owned()],
            jwks_url: "https://idp.example/jwks.json".to_owned(),
            algorithms: algorithms.iter().map(|name| (*name).to_owned()).collect(),
            subject_claim: default_subject_claim(),
            tenant_claim: default_tenant_claim(),
            channel_claim: default_channel_claim(),
        }
    }

    #[test]
    fn an_issuer_may_not_use_shared_secrets_or_no_signature() {
        for refused in ["HS256", "HS512", "none", "rs256"] {
            let error = Issuer::new(settings(&[refused]), JwksSettings::default()).err();
            assert!(error.is_some_and(|error| error.to_string().contains("not allowed")), "{refused} was accepted");
        }
        assert!(Issuer::new(settings(&["RS256", "ES256", "EdDSA"]), JwksSettings::default()).is_ok());
    }

    #[test]
    fn the_environment_form_is_a_json_array() {
        #[derive(Deserialize)]
        struct Holder {
            #[serde(deserialize_with = "issuers_from_env")]
            issuers: Vec<IssuerSettings>,
        }
        let text = r#"[{"issuer":"https://idp.example/","audience":["kfs","other"],"jwks_url":"https://idp.example/jwks.json","tenant_claim":"org_id"}]"#;
        let holder: Holder = serde_json::from_value(serde_json::json!({ "issuers": text })).expect("parses");
        assert_eq!(holder.issuers[0].audience, ["kfs", "other"]);
        assert_eq!(holder.issuers[0].tenant_claim, "org_id");
        assert_eq!(holder.issuers[0].algorithms, ["RS256", "ES256", "EdDSA"]);
        let typo = serde_json::json!({ "issuers": r#"[{"issuer":"x","audience":"a","jwks_url":"https://x","algorithm":["RS256"]}]"# });
        assert!(serde_json::from_value::<Holder>(typo).is_err(), "an unknown field is refused, not ignored");
    }
}
