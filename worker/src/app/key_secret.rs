//! API key secrets: a presented key is `kfs_<key id as simple hex uuid>_<secret>`; only
//! the secret's hex SHA-256 is stored (`crate::store::api_keys`), so a leaked table grants
//! nothing.
use sha2::{Digest, Sha256};
use uuid::Uuid;

/// The prefix every presented key starts with, so scanners and people can recognise one.
const PREFIX: &str = "kfs_";

/// A fresh secret: 32 bytes from the thread's CSPRNG, as 64 lowercase hex characters.
pub fn new_secret() -> String {
    let mut bytes = [0u8; 32];
    rand::fill(&mut bytes[..]);
    hex::encode(bytes)
}

/// The hex SHA-256 of a secret: what the table stores and what authentication compares.
pub fn hash_secret(secret: &str) -> String {
    hex::encode(Sha256::digest(secret.as_bytes()))
}

/// The key string a client presents: `kfs_<id simple hex>_<secret>`.
pub fn format_key(id: Uuid, secret: &str) -> String {
    format!("{PREFIX}{}_{secret}", id.simple())
}

/// Splits a presented key into its id and secret; `None` for anything malformed.
pub fn parse_key(presented: &str) -> Option<(Uuid, String)> {
    let rest = presented.strip_prefix(PREFIX)?;
    let (id, secret) = rest.split_once('_')?;
    if id.len() != 32 || secret.is_empty() || !secret.bytes().all(|byte| byte.is_ascii_hexdigit()) {
        return None;
    }
    Some((Uuid::try_parse(id).ok()?, secret.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_formatted_key_parses_back_to_its_id_and_secret() {
        let id = Uuid::now_v7();
        let secret = new_secret();
        assert_eq!(parse_key(&format_key(id, &secret)), Some((id, secret)));
    }

    #[test]
    fn malformed_keys_do_not_parse() {
        let id = Uuid::now_v7().simple().to_string();
        for bad in ["", "kfs_", "kfs_abc_def", &format!("xfs_{id}_ab"), &format!("kfs_{id}_"), &format!("kfs_{id}_zz")]
        {
            assert_eq!(parse_key(bad), None, "{bad}");
        }
    }

    #[test]
    fn secrets_are_long_distinct_and_hashed_to_hex() {
        let (one, two) = (new_secret(), new_secret());
        assert_eq!(one.len(), 64);
        assert_ne!(one, two);
        assert_eq!(hash_secret(&one).len(), 64);
        assert_ne!(hash_secret(&one), one);
    }
}
