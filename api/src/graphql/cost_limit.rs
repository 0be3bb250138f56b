//! The GraphQL cost rate limit: once validation has computed a document's complexity (the
//! same figure `limit_complexity` bounds), the caller's cost buckets are charged with it
//! before anything runs, over HTTP and WebSocket alike. A refused charge is a request error
//! with RATE_LIMITED and `retryAfterSeconds`; the buckets' state goes back to the HTTP
//! layer through the request's [`CostCheck`] for the `RateLimit` headers.
use std::sync::{Arc, Mutex};

use async_graphql::extensions::{Extension, ExtensionContext, ExtensionFactory, NextValidation};
use async_graphql::{ServerError, ValidationResult};

use crate::error::{ApiError, ToGql as _};
use crate::rate::Checked;
use crate::state::AppState;
use worker::app::Principal;

/// Where the cost check of one HTTP request leaves its buckets' state.
#[derive(Clone, Default)]
pub struct CostCheck(Arc<Mutex<Checked>>);

impl CostCheck {
    /// What the check recorded (empty when it did not run).
    pub fn take(&self) -> Checked {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner))
    }
}

/// The extension factory to register on the schema.
pub struct CostLimit;

impl ExtensionFactory for CostLimit {
    fn create(&self) -> Arc<dyn Extension> {
        Arc::new(CostLimitExtension)
    }
}

struct CostLimitExtension;

#[async_trait::async_trait]
impl Extension for CostLimitExtension {
    async fn validation(
        &self,
        ctx: &ExtensionContext<'_>,
        next: NextValidation<'_>,
    ) -> Result<ValidationResult, Vec<ServerError>> {
        let result = next.run(ctx).await?;
        let (Some(principal), Some(app)) = (ctx.data_opt::<Principal>(), ctx.data_opt::<AppState>()) else {
            return Ok(result);
        };
        let points = u32::try_from(result.complexity).unwrap_or(u32::MAX);
        let checked = app.rates.cost(principal, points);
        let refused = checked.refused_for();
        if let Some(cell) = ctx.data_opt::<CostCheck>() {
            *cell.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = checked;
        }
        match refused {
            Some(wait) => {
                Err(vec![ApiError::rate_limited(wait).to_gql().into_server_error(async_graphql::Pos::default())])
            }
            None => Ok(result),
        }
    }
}
