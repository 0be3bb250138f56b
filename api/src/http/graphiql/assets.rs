//! GraphiQL's files, compiled into the binary (`api/assets/graphiql/`, where a README
//! says where each comes from and how to update them). The vendored files carry their
//! versions in their names, so browsers may keep them for a year; ours are revalidated.
use axum::extract::Path;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

/// Where the files are served.
pub const PREFIX: &str = "/graphiql/assets";

/// One served file.
pub struct Asset {
    /// Its name under [`PREFIX`].
    pub name: &'static str,
    /// Its content.
    pub bytes: &'static [u8],
    /// Its `Content-Type`.
    pub content_type: &'static str,
    /// Whether its name changes whenever its content does (a version in the name).
    pub versioned: bool,
}

/// Declares an asset from a file of `api/assets/graphiql/`.
macro_rules! asset {
    ($name:literal, $content_type:expr, $versioned:literal) => {
        Asset {
            name: $name,
            bytes: include_bytes!(concat!(env!("CARGO_MANIFEST_DIR"), "/assets/graphiql/", $name)),
            content_type: $content_type,
            versioned: $versioned,
        }
    };
}

const JS: &str = "text/javascript; charset=utf-8";
const CSS: &str = "text/css; charset=utf-8";

/// React, then ReactDOM, GraphiQL and the explorer plugin (each needs the ones before),
/// then ours: the order the page loads the scripts in.
pub const SCRIPTS: [&Asset; 5] = [&ASSETS[0], &ASSETS[1], &ASSETS[2], &ASSETS[4], &ASSETS[6]];
/// The stylesheets the page links.
pub const STYLESHEETS: [&Asset; 3] = [&ASSETS[3], &ASSETS[5], &ASSETS[7]];

/// Every file.
pub const ASSETS: [Asset; 8] = [
    asset!("react-18.3.1.production.min.js", JS, true),
    asset!("react-dom-18.3.1.production.min.js", JS, true),
    asset!("graphiql-4.1.2.min.js", JS, true),
    asset!("graphiql-4.1.2.min.css", CSS, true),
    asset!("plugin-explorer-4.0.6.umd.js", JS, true),
    asset!("plugin-explorer-4.0.6.css", CSS, true),
    asset!("kfs-graphiql.js", JS, false),
    asset!("kfs-graphiql.css", CSS, false),
];

/// `GET /graphiql/assets/{name}`.
pub async fn serve(Path(name): Path<String>) -> Response {
    let Some(asset) = ASSETS.iter().find(|asset| asset.name == name) else {
        return (StatusCode::NOT_FOUND, "no such asset").into_response();
    };
    let cache = if asset.versioned { "public, max-age=31536000, immutable" } else { "no-cache" };
    let mut response = asset.bytes.into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(asset.content_type));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static(cache));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scripts_and_stylesheets_are_what_their_names_say() {
        assert!(SCRIPTS.iter().all(|asset| asset.name.ends_with(".js") && asset.content_type == JS));
        assert!(STYLESHEETS.iter().all(|asset| asset.name.ends_with(".css") && asset.content_type == CSS));
        assert_eq!(SCRIPTS.len() + STYLESHEETS.len(), ASSETS.len());
        assert_eq!(
            SCRIPTS.last().map(|asset| asset.name),
            Some("kfs-graphiql.js"),
            "ours starts GraphiQL, so it loads last"
        );
    }
}
