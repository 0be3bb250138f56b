//! What identifies and signs a delivery: its `webhook-id` and an endpoint's secret.
/// The `webhook-id` of a delivery: stable across every attempt and redelivery.
pub fn message_id(delivery: uuid::Uuid) -> String {
    format!("msg_{}", delivery.simple())
}

/// A new endpoint's signing secret: `whsec_` and 32 random bytes in base64.
pub fn new_secret() -> String {
    let bytes: [u8; 32] = rand::random();
    format!("whsec_{}", base64::Engine::encode(&base64::engine::general_purpose::STANDARD, bytes))
}
