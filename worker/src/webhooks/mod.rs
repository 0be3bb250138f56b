//! Webhooks (Standard Webhooks): each progress event of a task becomes one durable
//! delivery per matching endpoint of the task's creator, written in the event's own
//! transaction ([`enqueue`]); a worker loop leases due deliveries, POSTs them signed
//! (`webhook-id`, `webhook-timestamp`, `webhook-signature`), records every attempt, and
//! retries with exponential backoff and jitter until a 2xx or the last attempt (`dead`).
//! Bodies carry ids, never task content: receivers fetch with their own credential.
pub mod address;
mod enqueue;
mod send;
mod settings;
mod signing;

pub use enqueue::{enqueue, event_name};
pub use send::{DeliveryPolicy, deliver_due};
pub use settings::WebhookSettings;
pub use signing::{message_id, new_secret};
