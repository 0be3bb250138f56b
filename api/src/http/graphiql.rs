//! GraphiQL, preconfigured with the HTTP and subscription endpoints and an
//! `Authorization` header to fill in.
use async_graphql::http::GraphiQLSource;
use axum::response::Html;

/// Serves the GraphiQL page.
pub async fn graphiql() -> Html<String> {
    Html(
        GraphiQLSource::build()
            .endpoint("/graphql")
            .subscription_endpoint("/graphql/ws")
            .header("Authorization", "Bearer <paste a token: cargo run -p api -- token>")
            .title("Research tasks · GraphiQL")
            .finish(),
    )
}
