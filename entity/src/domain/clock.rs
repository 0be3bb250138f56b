/// Milliseconds since the Unix epoch: the seed stores every time as a BIGINT of these.
pub fn now_millis() -> i64 {
    chrono::Utc::now().timestamp_millis()
}
