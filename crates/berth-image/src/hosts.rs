//! Which endpoints a pull from a registry host actually contacts: its
//! mirrors in order, then the host itself only where the config allows it.

use std::collections::BTreeMap;

/// Registry settings, as in the `[registry]` table of runtime-config.toml.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RegistryHosts {
    /// Hosts (`host` or `host:port`) reached over plain HTTP.
    pub insecure_hosts: Vec<String>,
    /// Mirrors per upstream host (`docker.io`, `registry.k8s.io`, ...).
    pub mirrors: BTreeMap<String, Mirrors>,
}

/// The mirrors of one upstream host.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Mirrors {
    /// URLs (`http://localhost:5000`), tried in order.
    pub endpoints: Vec<String>,
    /// Whether the upstream host is tried after every mirror failed.
    pub fallback_to_upstream: bool,
}

/// One registry to contact.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// `host` or `host:port`, as used in requests.
    pub host: String,
    /// Plain HTTP instead of HTTPS.
    pub plain_http: bool,
    /// Whether this is a mirror rather than the reference's own registry.
    pub is_mirror: bool,
}

impl RegistryHosts {
    /// The endpoints to try, in order, for a reference whose registry is
    /// `registry`. Without mirrors that is the registry itself.
    pub fn endpoints(&self, registry: &str) -> Vec<Endpoint> {
        let upstream = Endpoint {
            host: registry.to_string(),
            plain_http: self.is_plain_http(registry),
            is_mirror: false,
        };
        let Some(mirrors) = self.mirrors.get(registry) else {
            return vec![upstream];
        };
        let mut endpoints: Vec<Endpoint> = mirrors
            .endpoints
            .iter()
            .filter_map(|url| mirror_endpoint(url))
            .collect();
        if mirrors.fallback_to_upstream {
            endpoints.push(upstream);
        }
        endpoints
    }

    /// localhost and loopback registries may use plain HTTP without
    /// configuration, as containerd and docker allow.
    fn is_plain_http(&self, host: &str) -> bool {
        is_loopback_host(host) || self.insecure_hosts.iter().any(|insecure| insecure == host)
    }
}

/// `http://host:port` → a plain-HTTP endpoint; `https://host` → TLS. Any
/// path after the host is ignored: repositories keep their upstream path.
fn mirror_endpoint(url: &str) -> Option<Endpoint> {
    let (plain_http, rest) = if let Some(rest) = url.strip_prefix("http://") {
        (true, rest)
    } else {
        (false, url.strip_prefix("https://")?)
    };
    let host = rest.split('/').next().filter(|host| !host.is_empty())?;
    Some(Endpoint {
        host: host.to_string(),
        plain_http,
        is_mirror: true,
    })
}

/// `localhost`, `127.x.x.x` or `[::1]`, with or without a port.
pub fn is_loopback_host(host: &str) -> bool {
    let name = if let Some(bracketed) = host.strip_prefix('[') {
        bracketed.split(']').next().unwrap_or_default()
    } else {
        host.split(':').next().unwrap_or_default()
    };
    name == "localhost" || name == "::1" || name.starts_with("127.")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hosts(fallback: bool) -> RegistryHosts {
        let mut hosts = RegistryHosts::default();
        hosts.mirrors.insert(
            "docker.io".into(),
            Mirrors {
                endpoints: vec![
                    "http://localhost:5000".into(),
                    "https://mirror.example.com/v2/ignored".into(),
                ],
                fallback_to_upstream: fallback,
            },
        );
        hosts.insecure_hosts.push("registry.lan:5000".into());
        hosts
    }

    #[test]
    fn mirrors_in_order_and_fail_closed() {
        let endpoints = hosts(false).endpoints("docker.io");
        let names: Vec<_> = endpoints.iter().map(|e| e.host.as_str()).collect();
        assert_eq!(names, ["localhost:5000", "mirror.example.com"]);
        assert!(endpoints[0].plain_http && !endpoints[1].plain_http);
        assert!(endpoints.iter().all(|e| e.is_mirror));
    }

    #[test]
    fn fallback_appends_upstream_last() {
        let endpoints = hosts(true).endpoints("docker.io");
        let last = endpoints.last().unwrap();
        assert_eq!(last.host, "docker.io");
        assert!(!last.is_mirror && !last.plain_http);
    }

    #[test]
    fn unmirrored_hosts_go_direct_and_loopback_is_plain_http() {
        let hosts = hosts(false);
        assert_eq!(
            hosts.endpoints("gcr.io"),
            [Endpoint {
                host: "gcr.io".into(),
                plain_http: false,
                is_mirror: false
            }]
        );
        assert!(hosts.endpoints("127.0.0.1:5000")[0].plain_http);
        assert!(hosts.endpoints("localhost:5000")[0].plain_http);
        assert!(hosts.endpoints("registry.lan:5000")[0].plain_http);
        assert!(!hosts.endpoints("registry.lan")[0].plain_http);
    }

    #[test]
    fn loopback_detection() {
        for host in ["localhost", "localhost:5000", "127.0.0.1:80", "[::1]:5000"] {
            assert!(is_loopback_host(host), "{host}");
        }
        for host in ["localhost.example.com", "10.0.0.1", "docker.io"] {
            assert!(!is_loopback_host(host), "{host}");
        }
    }
}
