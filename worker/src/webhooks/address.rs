//! Where a webhook may be sent: by default only to public addresses over HTTPS, checked
//! when an endpoint is registered and again at every connect (a resolver that drops
//! private answers, so a name re-pointed at an internal address after registration reaches
//! nothing), with redirects never followed. `KFS_WEBHOOK_ALLOW_PRIVATE=true` lifts both
//! rules, for development and tests.
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use reqwest::dns::{Addrs, Name, Resolve, Resolving};

/// Whether `ip` is a public unicast address: not loopback, private, link-local (which
/// holds the cloud metadata address 169.254.169.254), shared, documentation, multicast,
/// unspecified or broadcast, nor any of those written as an IPv4-mapped IPv6 address.
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            let [a, b, ..] = v4.octets();
            !(v4.is_loopback()
                || v4.is_private()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_broadcast()
                || v4.is_multicast()
                || v4.is_documentation()
                || a == 0
                || (a == 100 && (64..128).contains(&b))
                || (a == 198 && (b == 18 || b == 19))
                || a >= 240)
        }
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return is_public(IpAddr::V4(v4));
            }
            let first = v6.segments()[0];
            !(v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || (first & 0xfe00) == 0xfc00
                || (first & 0xffc0) == 0xfe80
                || first == 0x2001 && v6.segments()[1] == 0x0db8)
        }
    }
}

/// Checks an endpoint URL: http(s), a host, and (unless `allow_private`) HTTPS with every
/// address the host resolves to public. The message says what is wrong.
pub async fn check_url(url: &str, allow_private: bool) -> Result<reqwest::Url, String> {
    check(url, allow_private, true).await
}

/// What a send checks before connecting: everything [`check_url`] does but the name
/// lookup, which the client's [`PublicOnly`] resolver makes at connect time anyway (a
/// literal address, which no resolver sees, is still checked here).
pub async fn check_before_send(url: &str, allow_private: bool) -> Result<reqwest::Url, String> {
    check(url, allow_private, false).await
}

async fn check(url: &str, allow_private: bool, resolve: bool) -> Result<reqwest::Url, String> {
    let parsed = reqwest::Url::parse(url).map_err(|error| format!("url is not a URL: {error}"))?;
    match parsed.scheme() {
        "https" => {}
        "http" if allow_private => {}
        "http" => return Err("url must use https".to_owned()),
        other => return Err(format!("url must use https, not {other}")),
    }
    let host = parsed.host_str().filter(|host| !host.is_empty()).ok_or("url has no host")?.to_owned();
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err("url must not carry credentials".to_owned());
    }
    if allow_private {
        return Ok(parsed);
    }
    let port = parsed.port_or_known_default().unwrap_or(443);
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    let addresses: Vec<SocketAddr> = match bare.parse::<IpAddr>() {
        Ok(ip) => vec![SocketAddr::new(ip, port)],
        Err(_) if !resolve => return Ok(parsed),
        Err(_) => tokio::net::lookup_host((bare, port))
            .await
            .map_err(|error| format!("url's host does not resolve: {error}"))?
            .collect(),
    };
    if addresses.is_empty() || !addresses.iter().all(|address| is_public(address.ip())) {
        return Err("url must not point at a loopback, private, link-local or metadata address".to_owned());
    }
    Ok(parsed)
}

/// A resolver that answers only public addresses: the connect-time half of the rule.
#[derive(Debug, Clone, Default)]
pub struct PublicOnly;

impl Resolve for PublicOnly {
    fn resolve(&self, name: Name) -> Resolving {
        Box::pin(async move {
            let found = tokio::net::lookup_host((name.as_str(), 0)).await?;
            let public: Vec<SocketAddr> = found.filter(|address| is_public(address.ip())).collect();
            if public.is_empty() {
                let refused: Box<dyn std::error::Error + Send + Sync> =
                    format!("{} resolves to no public address", name.as_str()).into();
                return Err(refused);
            }
            Ok(Box::new(public.into_iter()) as Addrs)
        })
    }
}

/// The HTTP client deliveries are sent with: no redirects, the given timeout, and (unless
/// `allow_private`) the public-only resolver.
pub fn client(timeout: std::time::Duration, allow_private: bool) -> Result<reqwest::Client, reqwest::Error> {
    let mut builder = reqwest::Client::builder()
        .timeout(timeout)
        .connect_timeout(timeout.min(std::time::Duration::from_secs(10)))
        .redirect(reqwest::redirect::Policy::none())
        .user_agent("kfs-webhooks/1");
    if !allow_private {
        builder = builder.dns_resolver(Arc::new(PublicOnly));
    }
    builder.build()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn private_and_special_addresses_are_not_public() {
        for private in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "::1",
            "fd00::1",
            "fe80::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
        ] {
            assert!(!is_public(private.parse().expect("an address")), "{private}");
        }
        for public in ["93.184.216.34", "1.1.1.1", "2606:4700::1111"] {
            assert!(is_public(public.parse().expect("an address")), "{public}");
        }
    }

    #[tokio::test]
    async fn urls_must_be_https_and_public_unless_private_is_allowed() {
        assert!(check_url("http://example.com/hook", false).await.is_err());
        assert!(check_url("https://127.0.0.1/hook", false).await.is_err());
        assert!(check_url("https://[::1]:8443/hook", false).await.is_err());
        assert!(check_url("https://169.254.169.254/latest/meta-data", false).await.is_err());
        assert!(check_url("https://user:pw@93.184.216.34/hook", false).await.is_err());
        assert!(check_url("ftp://93.184.216.34/hook", false).await.is_err());
        assert!(check_url("https://93.184.216.34/hook", false).await.is_ok());
        assert!(check_url("http://127.0.0.1:9/hook", true).await.is_ok());
        // At send time a literal address is still refused; a name is left to the resolver.
        assert!(check_before_send("https://169.254.169.254/", false).await.is_err());
        assert!(check_before_send("http://hooks.example.com/", false).await.is_err());
        assert!(check_before_send("https://hooks.example.com/", false).await.is_ok());
    }

    #[tokio::test]
    async fn the_connect_time_resolver_answers_no_private_address() {
        let name: Name = "localhost".parse().expect("a name");
        let refused = PublicOnly.resolve(name).await;
        assert!(refused.is_err(), "localhost resolved to a usable address");
    }
}
