//! Where a webhook may be sent: by default only to public addresses over HTTPS, checked
//! when an endpoint is registered and again at every connect (a resolver that drops
//! private answers, so a name re-pointed at an internal address after registration reaches
//! nothing), with redirects never followed. `KFS_WEBHOOK_ALLOW_PRIVATE=true` lifts both
//! rules, for development and tests.
use std::net::{IpAddr, SocketAddr};

use std::sync::Arc;

use reqwest::dns::{Addrs, Name, Resolve, Resolving};

/// Whether `ip` is a public unicast address a webhook may be sent to: in no row of the
/// IANA IPv4 or IPv6 Special-Purpose Address Registry (loopback, private, shared, link-local
/// with the metadata address, documentation, benchmarking, the IETF protocol assignments,
/// NAT64, 6to4, Teredo, ORCHID, discard-only…; `iprfc` carries both registries), not
/// multicast, and for IPv6 within global unicast `2000::/3`. The registries list some
/// rows as globally reachable (192.0.0.9, 2001:1::1…): those are refused too, as no
/// webhook receiver lives there. Every form that embeds an IPv4 address is refused whole:
/// mapped `::ffff:0:0/96` and NAT64 `64:ff9b::/96`, `64:ff9b:1::/48` are registry rows,
/// the deprecated IPv4-compatible `::/96` and site-local `fec0::/10` lie outside
/// `2000::/3`, and 6to4 `2002::/16` and Teredo `2001::/32` are registry rows inside it.
pub fn is_public(ip: IpAddr) -> bool {
    if iprfc::RFC6890.contains(&ip) {
        return false;
    }
    match ip {
        // Multicast has a registry of its own, not the special-purpose one.
        IpAddr::V4(v4) => !v4.is_multicast(),
        // Everything outside 2000::/3 is reserved, unique-local, link- or site-local, or
        // multicast (the IPv6 Address Space registry).
        IpAddr::V6(v6) => (v6.segments()[0] & 0xe000) == 0x2000,
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

    use std::net::{Ipv4Addr, Ipv6Addr};

    /// Every row of the IANA IPv4 Special-Purpose Address Registry (2025-10).
    const IPV4_ROWS: &[&str] = &[
        "0.0.0.0/8",
        "0.0.0.0/32",
        "10.0.0.0/8",
        "100.64.0.0/10",
        "127.0.0.0/8",
        "169.254.0.0/16",
        "172.16.0.0/12",
        "192.0.0.0/24",
        "192.0.0.0/29",
        "192.0.0.8/32",
        "192.0.0.9/32",
        "192.0.0.10/32",
        "192.0.0.170/32",
        "192.0.0.171/32",
        "192.0.2.0/24",
        "192.31.196.0/24",
        "192.52.193.0/24",
        "192.88.99.0/24",
        "192.88.99.2/32",
        "192.168.0.0/16",
        "192.175.48.0/24",
        "198.18.0.0/15",
        "198.51.100.0/24",
        "203.0.113.0/24",
        "240.0.0.0/4",
        "255.255.255.255/32",
    ];

    /// Every row of the IANA IPv6 Special-Purpose Address Registry (2025-10).
    const IPV6_ROWS: &[&str] = &[
        "::1/128",
        "::/128",
        "::ffff:0:0/96",
        "64:ff9b::/96",
        "64:ff9b:1::/48",
        "100::/64",
        "100:0:0:1::/64",
        "2001::/23",
        "2001::/32",
        "2001:1::1/128",
        "2001:1::2/128",
        "2001:1::3/128",
        "2001:2::/48",
        "2001:3::/32",
        "2001:4:112::/48",
        "2001:10::/28",
        "2001:20::/28",
        "2001:30::/28",
        "2001:db8::/32",
        "2002::/16",
        "2620:4f:8000::/48",
        "3fff::/20",
        "5f00::/16",
        "fc00::/7",
        "fe80::/10",
    ];

    /// The first, last and a middle address of a `a.b.c.d/n` or IPv6 prefix.
    fn samples(row: &str) -> Vec<IpAddr> {
        let (address, length) = row.split_once('/').expect("a prefix");
        let length: u32 = length.parse().expect("a length");
        match address.parse::<IpAddr>().expect("an address") {
            IpAddr::V4(v4) => {
                let first = u32::from(v4);
                let last = first | u32::MAX.checked_shr(length).unwrap_or(0);
                [first, last, first + (last - first) / 2].map(|n| IpAddr::V4(Ipv4Addr::from(n))).to_vec()
            }
            IpAddr::V6(v6) => {
                let first = u128::from(v6);
                let last = first | u128::MAX.checked_shr(length).unwrap_or(0);
                [first, last, first + (last - first) / 2].map(|n| IpAddr::V6(Ipv6Addr::from(n))).to_vec()
            }
        }
    }

    /// An IPv4 address in each form that embeds one in IPv6.
    fn embedded(v4: Ipv4Addr) -> Vec<Ipv6Addr> {
        let n = u128::from(u32::from(v4));
        vec![
            v4.to_ipv6_mapped(),
            v4.to_ipv6_compatible(),
            Ipv6Addr::from((0x64_ff9b_u128 << 96) | n),
            Ipv6Addr::from((0x0064_ff9b_0001_u128 << 80) | n),
            Ipv6Addr::from((0x2002_u128 << 112) | (n << 80)),
            // Teredo: the server at bits 32–63, the client's address inverted at the end.
            Ipv6Addr::from((0x2001_0000_u128 << 96) | (n << 64) | (n ^ 0xffff_ffff)),
        ]
    }

    #[test]
    fn every_row_of_both_special_purpose_registries_is_refused() {
        for row in IPV4_ROWS.iter().chain(IPV6_ROWS) {
            for ip in samples(row) {
                assert!(!is_public(ip), "{ip} of {row}");
            }
        }
    }

    #[test]
    fn every_embedded_ipv4_form_is_refused_even_of_a_public_address() {
        for v4 in ["127.0.0.1", "169.254.169.254", "10.0.0.1", "192.0.0.1", "1.1.1.1"] {
            for v6 in embedded(v4.parse().expect("an address")) {
                assert!(!is_public(IpAddr::V6(v6)), "{v6}, embedding {v4}");
            }
        }
    }

    #[test]
    fn the_reported_gaps_and_multicast_site_local_and_reserved_space_are_refused() {
        for refused in [
            "::127.0.0.1",
            "64:ff9b::127.0.0.1",
            "64:ff9b::169.254.169.254",
            "fec0::1",
            "192.0.0.1",
            "192.0.0.170",
            "224.0.0.1",
            "239.255.255.250",
            "ff02::1",
            "ff0e::1",
            "4000::1",
            "::2",
        ] {
            assert!(!is_public(refused.parse().expect("an address")), "{refused}");
        }
    }

    #[test]
    fn public_unicast_addresses_are_accepted() {
        for public in ["93.184.216.34", "1.1.1.1", "8.8.8.8", "2606:4700::1111", "2a00:1450:4001::1", "2001:4860::8888"]
        {
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
