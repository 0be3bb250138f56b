//! GraphiQL, served entirely from the binary: the page, its scripts and stylesheets
//! (`assets.rs`), preconfigured with the HTTP and subscription endpoints. The page's
//! Content-Security-Policy lets it load and connect to this origin only. On the embedded
//! default (the public development secret) it also carries a fresh development token for
//! `alice` in tenant `acme`, over HTTP and in the WebSocket `connection_init`, so a
//! newcomer can run the README's first task without minting one; with a real secret the
//! caller puts `{"Authorization": "Bearer …"}` in the Headers tab, and it is used for
//! subscriptions too.
pub mod assets;

use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{Html, IntoResponse, Response};
use serde_json::json;

use crate::auth::{Claims, mint_token};
use crate::state::AppState;

/// How long the token GraphiQL carries stays valid.
const DEVELOPMENT_TOKEN_TTL_SECONDS: i64 = 24 * 60 * 60;

/// What the editor shows on a first visit.
const DEFAULT_QUERY: &str = "# Research tasks. Run this (Ctrl-Enter) to see who you are,\n\
# then follow the README's first task.\n\
{\n  viewer {\n    tenantId\n    subjectId\n    channel\n  }\n}\n";

/// `GET /graphiql`: the page.
pub async fn page(State(state): State<AppState>, headers: HeaderMap) -> Response {
    let mut response = Html(page_html(development_bearer(&state))).into_response();
    let policy = content_security_policy(headers.get(header::HOST).and_then(|host| host.to_str().ok()));
    let headers = response.headers_mut();
    if let Ok(policy) = HeaderValue::from_str(&policy) {
        headers.insert(header::CONTENT_SECURITY_POLICY, policy);
    }
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// The page: stylesheets, the settings as a JSON block (data, not script, so the policy
/// admits it), then the scripts in order.
fn page_html(bearer: Option<String>) -> String {
    let headers = bearer.map_or_else(|| json!({}), |bearer| json!({ "Authorization": bearer }));
    let config = json!({
        "endpoint": "/graphql",
        "subscriptionEndpoint": "/graphql/ws",
        "headers": headers,
        "defaultQuery": DEFAULT_QUERY,
    });
    // Inside <script>, `</` would end the block: JSON allows `<` escaped.
    let config = config.to_string().replace('<', "\\u003c").replace('>', "\\u003e").replace('&', "\\u0026");
    let links: String = assets::STYLESHEETS
        .iter()
        .map(|asset| format!("    <link rel=\"stylesheet\" href=\"{}/{}\">\n", assets::PREFIX, asset.name))
        .collect();
    let scripts: String = assets::SCRIPTS
        .iter()
        .map(|asset| format!("    <script src=\"{}/{}\"></script>\n", assets::PREFIX, asset.name))
        .collect();
    format!(
        "<!doctype html>\n<html lang=\"en\">\n  <head>\n    <meta charset=\"utf-8\">\n    \
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n    \
         <title>Research tasks · GraphiQL</title>\n    \
         <link rel=\"icon\" href=\"data:,\">\n{links}  </head>\n  <body>\n    \
         <div id=\"graphiql\">Loading GraphiQL…</div>\n    \
         <script type=\"application/json\" id=\"kfs-graphiql-config\">{config}</script>\n{scripts}  </body>\n</html>\n"
    )
}

/// Only this origin: scripts, styles and images from here (fonts and images GraphiQL
/// inlines as `data:`), and connections to here over HTTP and WebSocket. `'self'` covers
/// `ws:` of the same host in current browsers; the host is named too for older ones.
pub(crate) fn content_security_policy(host: Option<&str>) -> String {
    let sockets = host
        .filter(|host| host.parse::<axum::http::uri::Authority>().is_ok())
        .map(|host| format!(" ws://{host} wss://{host}"))
        .unwrap_or_default();
    format!(
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; font-src 'self' data:; \
         connect-src 'self'{sockets}; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    )
}

/// `Bearer <token>` for the development subject, only while the public development secret
/// is in use (such a token proves nothing anyway).
fn development_bearer(state: &AppState) -> Option<String> {
    // Outside development mode the development secret verifies nothing (see `auth::Identity`).
    if !state.settings.uses_development_secret() || !state.settings.development_mode() {
        return None;
    }
    let claims = Claims {
        sub: "alice".to_owned(),
        tenant: "acme".to_owned(),
        channel: None,
        exp: chrono::Utc::now().timestamp() + DEVELOPMENT_TOKEN_TTL_SECONDS,
    };
    mint_token(&state.settings.jwt_secret, &claims).ok().map(|token| format!("Bearer {token}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_settings_block_cannot_end_its_script_element() {
        let html = page_html(Some("Bearer </script><script>alert(1)</script>".to_owned()));
        assert_eq!(html.matches("</script>").count(), assets::SCRIPTS.len() + 1, "{html}");
    }

    #[test]
    fn a_host_header_cannot_add_directives_to_the_policy() {
        let policy = content_security_policy(Some("evil.example; script-src *"));
        assert!(!policy.contains("evil.example"), "{policy}");
        assert!(content_security_policy(Some("127.0.0.1:8000")).contains("ws://127.0.0.1:8000"));
    }

    #[test]
    fn every_asset_the_page_names_is_served() {
        let html = page_html(None);
        for asset in assets::ASSETS.iter() {
            assert!(html.contains(&format!("{}/{}", assets::PREFIX, asset.name)), "{}", asset.name);
        }
    }
}
