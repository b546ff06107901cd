//! Endpoints: `host:port[;host:port…]`, optionally behind a scheme.
//!
//! The access point a user configures and every broker in a route are [`Endpoints`]: one or more
//! addresses that serve the same broker (a proxy cluster behind several addresses, for example).
//! Two `Endpoints` are equal when their normalised key (`"h1:p1;h2:p2"`) is.

use std::fmt;
use std::hash::{Hash, Hasher};
use std::net::{Ipv4Addr, Ipv6Addr};

use crate::error::{Error, Result};
use crate::proto;

/// One `host:port`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Address {
    /// Host name or IP literal (IPv6 without brackets).
    pub host: String,
    /// TCP port.
    pub port: u16,
}

impl Address {
    /// `host:port`, with IPv6 literals in brackets.
    pub fn authority(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

/// The address family of an [`Endpoints`], as RocketMQ encodes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scheme {
    /// Every address is an IPv4 literal.
    Ipv4,
    /// Every address is an IPv6 literal.
    Ipv6,
    /// Host names (or a mix).
    DomainName,
}

/// A set of addresses serving one broker (or one access point). Cheap to clone (shared).
#[derive(Clone)]
pub struct Endpoints {
    inner: std::sync::Arc<Inner>,
}

struct Inner {
    addresses: Vec<Address>,
    scheme: Scheme,
    key: String,
}

/// What [`Endpoints::parse_access_point`] found in a user string.
#[derive(Debug, Clone)]
pub struct AccessPoint {
    /// The addresses.
    pub endpoints: Endpoints,
    /// The scheme asked for TLS (`https://`, `rocketmqs://`, `grpcs://`).
    pub tls: bool,
}

impl Endpoints {
    /// Build from addresses (at least one).
    pub fn new(addresses: Vec<Address>) -> Result<Self> {
        if addresses.is_empty() {
            return Err(Error::invalid("endpoints", "needs at least one host:port"));
        }
        let scheme = if addresses.iter().all(|a| a.host.parse::<Ipv4Addr>().is_ok()) {
            Scheme::Ipv4
        } else if addresses.iter().all(|a| a.host.parse::<Ipv6Addr>().is_ok()) {
            Scheme::Ipv6
        } else {
            Scheme::DomainName
        };
        let key = addresses
            .iter()
            .map(Address::authority)
            .collect::<Vec<_>>()
            .join(";");
        Ok(Self {
            inner: std::sync::Arc::new(Inner {
                addresses,
                scheme,
                key,
            }),
        })
    }

    /// Parse `"host:port[;host:port…]"` with an optional scheme (`rocketmq://`, `grpc://`,
    /// `http://` for plaintext; `rocketmqs://`, `grpcs://`, `https://` for TLS). `,` is accepted
    /// as a separator too.
    pub fn parse_access_point(s: &str) -> Result<AccessPoint> {
        let s = s.trim();
        let (tls, rest) = match s.split_once("://") {
            None => (false, s),
            Some((scheme, rest)) => match scheme.to_ascii_lowercase().as_str() {
                "rocketmq" | "grpc" | "http" => (false, rest),
                "rocketmqs" | "grpcs" | "https" => (true, rest),
                other => {
                    return Err(Error::invalid(
                        "endpoints",
                        format!(
                            "unsupported scheme {other:?} in {s:?}; use host:port or \
                             rocketmq://host:port"
                        ),
                    ))
                }
            },
        };
        let rest = rest.trim_end_matches('/');
        let mut addresses = Vec::new();
        for part in rest
            .split([';', ','])
            .map(str::trim)
            .filter(|p| !p.is_empty())
        {
            addresses.push(parse_address(part)?);
        }
        if addresses.is_empty() {
            return Err(Error::invalid(
                "endpoints",
                format!("{s:?} has no host:port"),
            ));
        }
        Ok(AccessPoint {
            endpoints: Self::new(addresses)?,
            tls,
        })
    }

    /// Read the endpoints of a broker from a route.
    pub fn from_proto(p: &proto::Endpoints) -> Result<Self> {
        let mut addresses = Vec::with_capacity(p.addresses.len());
        for a in &p.addresses {
            let port = u16::try_from(a.port).map_err(|_| {
                Error::protocol(format!(
                    "broker address {}:{} has a bad port",
                    a.host, a.port
                ))
            })?;
            addresses.push(Address {
                host: a.host.trim_matches(['[', ']']).to_string(),
                port,
            });
        }
        Self::new(addresses).map_err(|_| Error::protocol("broker endpoints without addresses"))
    }

    /// The wire form.
    pub fn to_proto(&self) -> proto::Endpoints {
        let scheme = match self.inner.scheme {
            Scheme::Ipv4 => proto::AddressScheme::IPv4,
            Scheme::Ipv6 => proto::AddressScheme::IPv6,
            Scheme::DomainName => proto::AddressScheme::DomainName,
        };
        proto::Endpoints {
            scheme: scheme as i32,
            addresses: self
                .inner
                .addresses
                .iter()
                .map(|a| proto::Address {
                    host: a.host.clone(),
                    port: i32::from(a.port),
                })
                .collect(),
        }
    }

    /// The addresses.
    pub fn addresses(&self) -> &[Address] {
        &self.inner.addresses
    }

    /// The address family.
    pub fn scheme(&self) -> Scheme {
        self.inner.scheme
    }

    /// The normalised `"h1:p1;h2:p2"` form, used as a map key.
    pub fn key(&self) -> &str {
        &self.inner.key
    }
}

fn parse_address(part: &str) -> Result<Address> {
    let bad = |why: &str| Error::invalid("endpoints", format!("{part:?}: {why}"));
    let (host, port) = if let Some(rest) = part.strip_prefix('[') {
        let (host, after) = rest
            .split_once(']')
            .ok_or_else(|| bad("unclosed '[' in an IPv6 address"))?;
        let port = after
            .strip_prefix(':')
            .ok_or_else(|| bad("expected host:port"))?;
        (host, port)
    } else {
        part.rsplit_once(':')
            .ok_or_else(|| bad("expected host:port"))?
    };
    if host.is_empty() {
        return Err(bad("empty host"));
    }
    if host.contains(':') && !part.starts_with('[') {
        return Err(bad("put IPv6 addresses in brackets, e.g. [::1]:8081"));
    }
    if part.starts_with('[') && host.parse::<Ipv6Addr>().is_err() {
        return Err(bad("not an IPv6 address in brackets"));
    }
    if host
        .chars()
        .any(|c| c.is_whitespace() || c == '/' || c == '@')
    {
        return Err(bad("bad character in host"));
    }
    let port: u16 = port
        .parse()
        .map_err(|_| bad("port must be a number from 1 to 65535"))?;
    if port == 0 {
        return Err(bad("port must be a number from 1 to 65535"));
    }
    Ok(Address {
        host: host.to_string(),
        port,
    })
}

impl PartialEq for Endpoints {
    fn eq(&self, other: &Self) -> bool {
        self.inner.key == other.inner.key
    }
}
impl Eq for Endpoints {}
impl Hash for Endpoints {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.inner.key.hash(state);
    }
}
impl fmt::Debug for Endpoints {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Endpoints({})", self.inner.key)
    }
}
impl fmt::Display for Endpoints {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.inner.key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;

    #[test]
    fn parses_lists_and_schemes() {
        let a = Endpoints::parse_access_point("127.0.0.1:8081;127.0.0.2:8082").unwrap();
        assert!(!a.tls);
        assert_eq!(a.endpoints.key(), "127.0.0.1:8081;127.0.0.2:8082");
        assert_eq!(a.endpoints.scheme(), Scheme::Ipv4);

        let a = Endpoints::parse_access_point("rocketmq://broker.local:8081/").unwrap();
        assert_eq!(a.endpoints.scheme(), Scheme::DomainName);
        assert_eq!(a.endpoints.addresses()[0].port, 8081);

        let a = Endpoints::parse_access_point("https://[::1]:9876").unwrap();
        assert!(a.tls);
        assert_eq!(a.endpoints.scheme(), Scheme::Ipv6);
        assert_eq!(a.endpoints.key(), "[::1]:9876");
        assert_eq!(a.endpoints.to_proto().addresses[0].host, "::1");
    }

    #[test]
    fn rejects_bad_input_naming_the_field() {
        for bad in [
            "",
            "localhost",
            "host:0",
            "host:99999",
            "jmq://h:1",
            ":80",
            "::1:80",
        ] {
            let e = Endpoints::parse_access_point(bad).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{bad}");
            assert!(e.message().starts_with("endpoints:"), "{e}");
        }
    }

    #[test]
    fn round_trips_through_proto() {
        let a = Endpoints::parse_access_point("a:1;b:2").unwrap().endpoints;
        let b = Endpoints::from_proto(&a.to_proto()).unwrap();
        assert_eq!(a, b);
    }
}
