//! Which endpoints a pull from a registry host actually contacts, in
//! order: from a containerd host directory (`hosts.toml`, see
//! [`crate::hosts_toml`]) when one configures the host, else from the
//! `[registry.mirrors]` table of berth's own config, else the host itself.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use crate::hosts_toml::{self, HostEntry, HostsFileError, TlsSettings};

/// Registry settings, as in the `[registry]` table of runtime-config.toml.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RegistryHosts {
    /// Hosts (`host` or `host:port`) reached over plain HTTP.
    pub insecure_hosts: Vec<String>,
    /// Mirrors per upstream host (`docker.io`, `registry.k8s.io`, ...).
    pub mirrors: BTreeMap<String, Mirrors>,
    /// The host directories of `config_path`, by directory name.
    pub host_dirs: BTreeMap<String, Vec<HostEntry>>,
}

/// The mirrors of one upstream host.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Mirrors {
    /// URLs (`http://localhost:5000`, `https://mirror/prefix`), tried in
    /// order. A URL's path is the mirror's prefix before `/v2`.
    pub endpoints: Vec<String>,
    /// Whether the upstream host is tried after every mirror failed.
    pub fallback_to_upstream: bool,
}

/// Registry settings that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum HostsError {
    #[error(transparent)]
    File(#[from] HostsFileError),
    #[error("registry.mirrors.{host:?}.endpoints: {url:?}: {message}")]
    Mirror {
        host: String,
        url: String,
        message: String,
    },
    #[error(
        "registry.mirrors.{host:?} and {dir} in config_path both configure {host:?}; keep one"
    )]
    Both { host: String, dir: String },
}

/// One registry endpoint to contact.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// `host` or `host:port`, as used in requests.
    pub host: String,
    /// Plain HTTP instead of HTTPS.
    pub plain_http: bool,
    /// The API prefix requests go under: `/v2`, or a mirror's own.
    pub path: String,
    /// Whether this is a mirror rather than the reference's own registry.
    pub is_mirror: bool,
    /// CA, client certificate, skip_verify.
    pub tls: Arc<TlsSettings>,
    /// Headers sent with every request to it.
    pub headers: Arc<Vec<(String, String)>>,
    /// Overrides the connect timeout (`dial_timeout`).
    pub connect_timeout: Option<Duration>,
}

impl Endpoint {
    /// `https://host/v2/<repository>/<rest>`: the URL of an API call.
    pub fn url(&self, repository: &str, rest: &str) -> String {
        let scheme = if self.plain_http { "http" } else { "https" };
        format!("{scheme}://{}{}/{repository}/{rest}", self.host, self.path)
    }

    /// What error messages call it: its host, and its path when not `/v2`.
    pub fn name(&self) -> String {
        if self.path == "/v2" {
            self.host.clone()
        } else {
            format!("{}{}", self.host, self.path)
        }
    }
}

impl RegistryHosts {
    /// Builds the settings: reads every host directory under `config_path`
    /// (if given) and checks every mirror URL, so that a broken entry is an
    /// error now rather than a pull failing later.
    pub fn load(
        insecure_hosts: Vec<String>,
        mirrors: BTreeMap<String, Mirrors>,
        config_path: Option<&Path>,
    ) -> Result<Self, HostsError> {
        for (host, mirror) in &mirrors {
            for url in &mirror.endpoints {
                mirror_url(url).map_err(|message| HostsError::Mirror {
                    host: host.clone(),
                    url: url.clone(),
                    message,
                })?;
            }
        }
        let host_dirs = match config_path {
            Some(path) => hosts_toml::load_dir(path)?,
            None => BTreeMap::new(),
        };
        for host in mirrors.keys() {
            if let Some(dir) = host_dir_names(host)
                .into_iter()
                .find(|dir| host_dirs.contains_key(dir))
            {
                return Err(HostsError::Both {
                    host: host.clone(),
                    dir,
                });
            }
        }
        Ok(Self {
            insecure_hosts,
            mirrors,
            host_dirs,
        })
    }

    /// The endpoints to try, in order, for a reference whose registry is
    /// `registry`. Without any configuration that is the registry itself.
    pub fn endpoints(&self, registry: &str) -> Vec<Endpoint> {
        if let Some(entries) = self.host_dir(registry) {
            return entries
                .iter()
                .filter(|entry| entry.capabilities.can_pull())
                .map(|entry| self.endpoint_for(registry, entry))
                .collect();
        }
        let upstream = self.upstream(registry);
        let Some(mirrors) = self.mirrors.get(registry) else {
            return vec![upstream];
        };
        let mut endpoints: Vec<Endpoint> = mirrors
            .endpoints
            .iter()
            // Checked when loaded: a URL that does not parse is not here.
            .filter_map(|url| mirror_url(url).ok())
            .map(|url| Endpoint {
                host: url.host,
                plain_http: url.plain_http,
                path: url.path,
                is_mirror: true,
                tls: Arc::default(),
                headers: Arc::default(),
                connect_timeout: None,
            })
            .collect();
        if mirrors.fallback_to_upstream {
            endpoints.push(upstream);
        }
        endpoints
    }

    /// The host directory for `registry`: `host_port_`, then `host:port`
    /// (or `host`), then `_default`, as containerd looks.
    fn host_dir(&self, registry: &str) -> Option<&Vec<HostEntry>> {
        if self.host_dirs.is_empty() {
            return None;
        }
        let own = host_dir_names(registry)
            .into_iter()
            .find_map(|name| self.host_dirs.get(&name));
        // berth's own mirrors for this very host beat a catch-all directory.
        if own.is_none() && self.mirrors.contains_key(registry) {
            return None;
        }
        own.or_else(|| self.host_dirs.get("_default"))
    }

    fn endpoint_for(&self, registry: &str, entry: &HostEntry) -> Endpoint {
        let mut endpoint = match &entry.url {
            Some(url) => Endpoint {
                host: url.host.clone(),
                plain_http: url.plain_http,
                path: url.path.clone(),
                is_mirror: !entry.is_server,
                tls: Arc::default(),
                headers: Arc::default(),
                connect_timeout: None,
            },
            None => self.upstream(registry),
        };
        endpoint.tls = Arc::new(entry.tls.clone());
        endpoint.headers = Arc::new(entry.headers.clone());
        endpoint.connect_timeout = entry.connect_timeout;
        endpoint
    }

    /// The registry itself: `registry-1.docker.io` for `docker.io`, as
    /// containerd; plain HTTP for loopback and `insecure_hosts`.
    fn upstream(&self, registry: &str) -> Endpoint {
        let host = if registry == "docker.io" {
            "registry-1.docker.io"
        } else {
            registry
        };
        Endpoint {
            host: host.to_string(),
            plain_http: self.is_plain_http(registry),
            path: "/v2".to_string(),
            is_mirror: false,
            tls: Arc::default(),
            headers: Arc::default(),
            connect_timeout: None,
        }
    }

    /// localhost and loopback registries may use plain HTTP without
    /// configuration, as containerd and docker allow.
    fn is_plain_http(&self, host: &str) -> bool {
        is_loopback_host(host) || self.insecure_hosts.iter().any(|insecure| insecure == host)
    }
}

/// A `[registry.mirrors]` endpoint: a URL with its scheme spelled out
/// (berth's config has always asked for one), its path the prefix.
fn mirror_url(url: &str) -> Result<hosts_toml::HostUrl, String> {
    if !(url.starts_with("http://") || url.starts_with("https://")) {
        return Err("must start with http:// or https://".to_string());
    }
    hosts_toml::host_url(url, false)
}

/// Directory names containerd looks for a host under, most specific first:
/// `localhost_5000_` then `localhost:5000`.
fn host_dir_names(host: &str) -> Vec<String> {
    let mut names = Vec::with_capacity(2);
    if let Some(at) = host.rfind(':').filter(|at| *at > 0) {
        names.push(format!("{}_{}_", &host[..at], &host[at + 1..]));
    }
    names.push(host.to_string());
    names
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
    use crate::hosts_toml::parse;
    use std::path::PathBuf;

    fn hosts(fallback: bool) -> RegistryHosts {
        let mut mirrors = BTreeMap::new();
        mirrors.insert(
            "docker.io".into(),
            Mirrors {
                endpoints: vec![
                    "http://localhost:5000".into(),
                    "https://mirror.example.com/cache".into(),
                ],
                fallback_to_upstream: fallback,
            },
        );
        RegistryHosts::load(vec!["registry.lan:5000".into()], mirrors, None).unwrap()
    }

    fn with_dirs(dirs: &[(&str, &str)]) -> RegistryHosts {
        let host_dirs = dirs
            .iter()
            .map(|(name, text)| {
                let file = PathBuf::from(format!("/certs.d/{name}/hosts.toml"));
                let entries = parse(&file, Path::new("/certs.d"), text).unwrap();
                (name.to_string(), entries)
            })
            .collect();
        RegistryHosts {
            host_dirs,
            ..RegistryHosts::default()
        }
    }

    fn urls(endpoints: &[Endpoint]) -> Vec<String> {
        endpoints
            .iter()
            .map(|e| e.url("library/busybox", "manifests/latest"))
            .collect()
    }

    #[test]
    fn mirrors_in_order_keep_their_path_and_fail_closed() {
        let endpoints = hosts(false).endpoints("docker.io");
        assert_eq!(
            urls(&endpoints),
            [
                "http://localhost:5000/v2/library/busybox/manifests/latest",
                "https://mirror.example.com/cache/v2/library/busybox/manifests/latest",
            ]
        );
        assert!(endpoints.iter().all(|e| e.is_mirror));
        assert_eq!(endpoints[1].name(), "mirror.example.com/cache/v2");
    }

    #[test]
    fn fallback_appends_upstream_last() {
        let endpoints = hosts(true).endpoints("docker.io");
        let last = endpoints.last().unwrap();
        assert_eq!(last.host, "registry-1.docker.io");
        assert!(!last.is_mirror && !last.plain_http);
    }

    #[test]
    fn a_malformed_mirror_url_is_an_error_naming_it() {
        for bad in [
            "localhost:5000",
            "ftp://m",
            "https://",
            "https://user@m",
            "https://m:x",
        ] {
            let mirrors = BTreeMap::from([(
                "docker.io".to_string(),
                Mirrors {
                    endpoints: vec![bad.to_string()],
                    fallback_to_upstream: false,
                },
            )]);
            let err = RegistryHosts::load(Vec::new(), mirrors, None)
                .unwrap_err()
                .to_string();
            assert!(err.contains(&format!("{bad:?}")), "{err}");
            assert!(err.contains("registry.mirrors"), "{err}");
        }
    }

    #[test]
    fn unmirrored_hosts_go_direct_and_loopback_is_plain_http() {
        let hosts = hosts(false);
        let direct = hosts.endpoints("gcr.io");
        assert_eq!(
            urls(&direct),
            ["https://gcr.io/v2/library/busybox/manifests/latest"]
        );
        assert!(!direct[0].is_mirror);
        assert!(hosts.endpoints("127.0.0.1:5000")[0].plain_http);
        assert!(hosts.endpoints("localhost:5000")[0].plain_http);
        assert!(hosts.endpoints("registry.lan:5000")[0].plain_http);
        assert!(!hosts.endpoints("registry.lan")[0].plain_http);
    }

    #[test]
    fn hosts_toml_order_then_upstream_and_prefixes() {
        let hosts = with_dirs(&[(
            "docker.io",
            r#"
[host."https://b.example/prefix"]
  capabilities = ["pull", "resolve"]
[host."https://a.example/api/custom"]
  capabilities = ["pull", "resolve"]
  override_path = true
[host."https://push-only.example"]
  capabilities = ["push"]
[host."http://c.example:5000/v2"]
"#,
        )]);
        let endpoints = hosts.endpoints("docker.io");
        assert_eq!(
            urls(&endpoints),
            [
                "https://b.example/prefix/v2/library/busybox/manifests/latest",
                "https://a.example/api/custom/library/busybox/manifests/latest",
                "http://c.example:5000/v2/library/busybox/manifests/latest",
                "https://registry-1.docker.io/v2/library/busybox/manifests/latest",
            ]
        );
        assert_eq!(
            endpoints.iter().map(|e| e.is_mirror).collect::<Vec<_>>(),
            [true, true, true, false]
        );
    }

    #[test]
    fn server_replaces_the_upstream_and_capabilities_can_drop_it() {
        let hosts = with_dirs(&[
            (
                "registry.k8s.io",
                "server = \"https://k8s.mirror.lan\"\n[host.\"https://m.lan\"]\n",
            ),
            (
                "quay.io",
                "capabilities = [\"push\"]\n[host.\"https://m.lan\"]\n",
            ),
        ]);
        assert_eq!(
            urls(&hosts.endpoints("registry.k8s.io")),
            [
                "https://m.lan/v2/library/busybox/manifests/latest",
                "https://k8s.mirror.lan/v2/library/busybox/manifests/latest",
            ]
        );
        let server = hosts.endpoints("registry.k8s.io").pop().unwrap();
        assert!(!server.is_mirror);
        assert_eq!(
            urls(&hosts.endpoints("quay.io")),
            ["https://m.lan/v2/library/busybox/manifests/latest"]
        );
    }

    #[test]
    fn default_dir_and_port_dir_names() {
        let hosts = with_dirs(&[
            ("_default", "[host.\"https://all.lan\"]\n"),
            ("localhost_5000_", "[host.\"https://five.lan\"]\n"),
            ("reg.lan:8443", "[host.\"https://eight.lan\"]\n"),
        ]);
        let first = |registry: &str| hosts.endpoints(registry)[0].host.clone();
        assert_eq!(first("gcr.io"), "all.lan");
        assert_eq!(first("localhost:5000"), "five.lan");
        assert_eq!(first("reg.lan:8443"), "eight.lan");
        // The upstream after a _default mirror is the registry asked for.
        assert_eq!(hosts.endpoints("gcr.io")[1].host, "gcr.io");
        assert_eq!(host_dir_names("a:1"), ["a_1_", "a:1"]);
        assert_eq!(host_dir_names("a"), ["a"]);
    }

    #[test]
    fn berth_mirrors_beat_default_but_not_a_host_dir() {
        let mut hosts = with_dirs(&[("_default", "[host.\"https://all.lan\"]\n")]);
        hosts.mirrors.insert(
            "gcr.io".into(),
            Mirrors {
                endpoints: vec!["https://gcr-mirror.lan".into()],
                fallback_to_upstream: false,
            },
        );
        assert_eq!(hosts.endpoints("gcr.io")[0].host, "gcr-mirror.lan");
        assert_eq!(hosts.endpoints("quay.io")[0].host, "all.lan");
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
