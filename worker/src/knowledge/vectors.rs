//! Vectors as they are stored: little-endian `f32`s in a `bytea`/`BLOB`, portable to both
//! databases and to any language that reads the rows.

/// The vector as stored bytes.
pub fn to_le_bytes(vector: &[f32]) -> Vec<u8> {
    vector.iter().flat_map(|value| value.to_le_bytes()).collect()
}

/// The Euclidean length.
pub fn norm(vector: &[f32]) -> f64 {
    vector.iter().map(|value| f64::from(*value) * f64::from(*value)).sum::<f64>().sqrt()
}

/// The cosine similarity of `query` (whose norm is `query_norm`) and a stored vector, or
/// `None` when the stored bytes are not a vector of the same length or either is zero.
pub fn cosine_le_bytes(query: &[f32], query_norm: f64, stored: &[u8]) -> Option<f64> {
    if stored.len() != query.len() * 4 || query_norm == 0.0 {
        return None;
    }
    let (mut dot, mut stored_square) = (0.0f64, 0.0f64);
    for (value, bytes) in query.iter().zip(stored.chunks_exact(4)) {
        let other = f64::from(f32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]));
        dot += f64::from(*value) * other;
        stored_square += other * other;
    }
    (stored_square > 0.0).then(|| dot / (query_norm * stored_square.sqrt()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_bytes_round_trip_into_the_same_similarity() {
        let a = [1.0f32, 0.0, 1.0];
        let b = [1.0f32, 1.0, 0.0];
        let similarity = cosine_le_bytes(&a, norm(&a), &to_le_bytes(&b)).unwrap_or_default();
        assert!((similarity - 0.5).abs() < 1e-9, "{similarity}");
        assert_eq!(cosine_le_bytes(&a, norm(&a), &to_le_bytes(&a[..2])), None, "another length is not compared");
        assert_eq!(cosine_le_bytes(&a, norm(&a), &to_le_bytes(&[0.0, 0.0, 0.0])), None);
    }
}
