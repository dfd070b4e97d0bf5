//! Who is calling: the client address that per-address rate limits count.
//!
//! The TCP peer; but when the peer is one of the [`TrustedProxies`], what it
//! says in `X-Forwarded-For` (which wins, as common proxies append to it) or
//! RFC 7239 `Forwarded: for=`. Believing anyone's header would give a client
//! a fresh budget per request. Proxies append the address they received
//! from, so the header is read from the right past the trusted proxies: the
//! first other address is what the nearest trusted one saw. A header that
//! does not parse there counts against the peer, so breaking it escapes
//! nothing. A proxy that writes `Forwarded` must drop a client's
//! `X-Forwarded-For`.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::str::FromStr;

use http::HeaderMap;
use ipnet::IpNet;

/// The address a request is attributed to. IPv4-mapped addresses are
/// stored as IPv4, so one client has one key however it connected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ClientAddr(IpAddr);

impl ClientAddr {
    /// The address of a request from `peer` (None, a Unix socket, counts
    /// as `0.0.0.0`: all such callers share one budget).
    pub fn resolve(peer: Option<IpAddr>, headers: &HeaderMap, trusted: &TrustedProxies) -> Self {
        let peer = peer.map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), |ip| ip.to_canonical());
        if !trusted.contains(peer) {
            return Self(peer);
        }
        let forwarded = if headers.contains_key("x-forwarded-for") {
            let items = header_items(headers, "x-forwarded-for");
            items.and_then(|items| right_most_untrusted(items.into_iter().map(parse_host), trusted))
        } else if headers.contains_key("forwarded") {
            from_forwarded(headers, trusted)
        } else {
            None
        };
        Self(forwarded.unwrap_or(peer))
    }

    pub fn ip(&self) -> IpAddr {
        self.0
    }
}

impl From<IpAddr> for ClientAddr {
    fn from(ip: IpAddr) -> Self {
        Self(ip.to_canonical())
    }
}

impl fmt::Display for ClientAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// Every item of the header `name`, in order (a header may be repeated).
fn header_items<'a>(headers: &'a HeaderMap, name: &str) -> Option<Vec<&'a str>> {
    let mut items = Vec::new();
    for value in headers.get_all(name) {
        items.extend(value.to_str().ok()?.split(',').map(str::trim));
    }
    Some(items)
}

/// The right-most address that is not a trusted proxy; when every entry is
/// a trusted proxy, the left-most, which is where the chain started.
fn right_most_untrusted(
    addrs: impl DoubleEndedIterator<Item = Option<IpAddr>>,
    trusted: &TrustedProxies,
) -> Option<IpAddr> {
    let mut last = None;
    for addr in addrs.rev() {
        let addr = addr?.to_canonical();
        if !trusted.contains(addr) {
            return Some(addr);
        }
        last = Some(addr);
    }
    last
}

/// RFC 7239: `Forwarded: for=192.0.2.60;proto=http, for="[2001:db8::17]:4711"`.
/// An element without `for=`, or whose `for=` is `unknown` or an
/// obfuscated name, makes the header unusable.
fn from_forwarded(headers: &HeaderMap, trusted: &TrustedProxies) -> Option<IpAddr> {
    let elements = header_items(headers, "forwarded")?;
    let fors = elements.into_iter().map(|element| {
        element.split(';').find_map(|pair| {
            let (key, value) = pair.split_once('=')?;
            key.trim()
                .eq_ignore_ascii_case("for")
                .then(|| parse_host(value.trim().trim_matches('"')))?
        })
    });
    right_most_untrusted(fors, trusted)
}

/// `1.2.3.4`, `1.2.3.4:80`, `::1`, `[::1]` or `[::1]:80`.
fn parse_host(raw: &str) -> Option<IpAddr> {
    let bracketed = || raw.strip_prefix('[')?.strip_suffix(']')?.parse().ok();
    let socket = |_| raw.parse::<SocketAddr>().map(|addr| addr.ip());
    raw.parse().or_else(socket).ok().or_else(bracketed)
}

/// The proxies whose forwarding headers are believed
/// (`--trusted-proxies 10.0.0.0/8,::1`); none by default.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrustedProxies(Vec<IpNet>);

impl TrustedProxies {
    pub fn contains(&self, ip: IpAddr) -> bool {
        self.0.iter().any(|net| net.contains(&ip))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl FromStr for TrustedProxies {
    type Err = String;

    fn from_str(raw: &str) -> Result<Self, String> {
        raw.split(',')
            .map(str::trim)
            .filter(|item| !item.is_empty())
            .map(|item| {
                item.parse::<IpNet>()
                    .or_else(|_| item.parse::<IpAddr>().map(IpNet::from))
                    .map(|net| net.trunc())
                    .map_err(|_| {
                        format!("{item:?} is not an IP address or CIDR network (e.g. 10.0.0.0/8)")
                    })
            })
            .collect::<Result<_, _>>()
            .map(Self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, HeaderValue::from_str(value).unwrap());
        }
        map
    }

    fn resolve(peer: &str, pairs: &[(&'static str, &str)], trusted: &str) -> String {
        ClientAddr::resolve(Some(ip(peer)), &headers(pairs), &trusted.parse().unwrap()).to_string()
    }

    #[test]
    fn trusted_proxies_parse_addresses_and_networks() {
        let t: TrustedProxies = " 10.0.0.0/8, ::1 ,192.168.1.7,2001:db8::/32"
            .parse()
            .unwrap();
        assert!(t.contains(ip("10.200.3.4")));
        assert!(!t.contains(ip("11.0.0.1")));
        assert!(t.contains(ip("::1")));
        assert!(t.contains(ip("192.168.1.7")));
        assert!(!t.contains(ip("192.168.1.8")));
        assert!(t.contains(ip("2001:db8:ffff::1")));
        assert!("".parse::<TrustedProxies>().unwrap().is_empty());
        // Host bits in a network are accepted and ignored.
        assert!("10.1.2.3/8"
            .parse::<TrustedProxies>()
            .unwrap()
            .contains(ip("10.9.9.9")));
        for bad in ["10.0.0.0/33", "proxy.local", "10.0.0", "1.2.3.4/x"] {
            let err = bad.parse::<TrustedProxies>().unwrap_err();
            assert!(err.contains(bad), "{err}");
        }
    }

    #[test]
    fn headers_from_an_untrusted_peer_are_ignored() {
        let xff = [("x-forwarded-for", "1.1.1.1")];
        assert_eq!(resolve("127.0.0.1", &xff, ""), "127.0.0.1");
        assert_eq!(resolve("203.0.113.9", &xff, "10.0.0.0/8"), "203.0.113.9");
        let fwd = [("forwarded", "for=1.1.1.1")];
        assert_eq!(resolve("203.0.113.9", &fwd, "10.0.0.0/8"), "203.0.113.9");
    }

    #[test]
    fn x_forwarded_for_is_read_from_the_right_past_trusted_proxies() {
        let t = "10.0.0.0/8";
        // The client forged 6.6.6.6; the trusted proxy appended what it saw.
        let chain = [("x-forwarded-for", "6.6.6.6, 198.51.100.7, 10.0.0.3")];
        assert_eq!(resolve("10.0.0.1", &chain, t), "198.51.100.7");
        // Repeated headers are one list, in order.
        let repeated = [
            ("x-forwarded-for", "6.6.6.6"),
            ("x-forwarded-for", "198.51.100.7"),
        ];
        assert_eq!(resolve("10.0.0.1", &repeated, t), "198.51.100.7");
        // Ports, brackets and mapped addresses are understood.
        let forms = [("x-forwarded-for", "198.51.100.7:4711")];
        assert_eq!(resolve("10.0.0.1", &forms, t), "198.51.100.7");
        let v6 = [("x-forwarded-for", "[2001:db8::5]:80")];
        assert_eq!(resolve("10.0.0.1", &v6, t), "2001:db8::5");
        let mapped = [("x-forwarded-for", "::ffff:198.51.100.7")];
        assert_eq!(resolve("10.0.0.1", &mapped, t), "198.51.100.7");
        // Only trusted proxies: the chain's start.
        let inner = [("x-forwarded-for", "10.1.1.1, 10.2.2.2")];
        assert_eq!(resolve("10.0.0.1", &inner, t), "10.1.1.1");
    }

    #[test]
    fn malformed_headers_fall_back_to_the_peer() {
        let t = "127.0.0.1";
        for value in ["", "nonsense", "1.2.3.4, ", "1.2.3.4,,", "unknown"] {
            let h = [("x-forwarded-for", value)];
            assert_eq!(resolve("127.0.0.1", &h, t), "127.0.0.1", "{value:?}");
        }
        // Garbage to the left of the right-most untrusted entry is the
        // client's own doing and does not matter.
        let h = [("x-forwarded-for", "garbage, 198.51.100.7")];
        assert_eq!(resolve("127.0.0.1", &h, t), "198.51.100.7");
        for value in ["for=unknown", "for=_hidden", "proto=https", "for=\"[::1\""] {
            let h = [("forwarded", value)];
            assert_eq!(resolve("127.0.0.1", &h, t), "127.0.0.1", "{value:?}");
        }
    }

    #[test]
    fn forwarded_for_is_honoured_from_a_trusted_peer() {
        let t = "10.0.0.0/8";
        let h = [(
            "forwarded",
            "for=6.6.6.6, For=\"[2001:db8:cafe::17]:4711\";proto=https;by=10.0.0.1, for=10.0.0.2",
        )];
        assert_eq!(resolve("10.0.0.1", &h, t), "2001:db8:cafe::17");
        let h = [("forwarded", "proto=http;for=192.0.2.60:8080")];
        assert_eq!(resolve("10.0.0.1", &h, t), "192.0.2.60");
        // X-Forwarded-For wins when both are present.
        let both = [
            ("forwarded", "for=192.0.2.60"),
            ("x-forwarded-for", "198.51.100.7"),
        ];
        assert_eq!(resolve("10.0.0.1", &both, t), "198.51.100.7");
    }

    #[test]
    fn mapped_and_missing_peers() {
        let none = ClientAddr::resolve(None, &HeaderMap::new(), &TrustedProxies::default());
        assert_eq!(none.to_string(), "0.0.0.0");
        assert_eq!(resolve("::ffff:127.0.0.1", &[], ""), "127.0.0.1");
        // A mapped peer matches an IPv4 trusted entry.
        let h = [("x-forwarded-for", "198.51.100.7")];
        assert_eq!(resolve("::ffff:127.0.0.1", &h, "127.0.0.1"), "198.51.100.7");
    }
}
