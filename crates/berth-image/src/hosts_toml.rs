//! containerd's registry host directory, read as it is: `<dir>/<host>/hosts.toml`
//! (containerd's docs/hosts.md; `remotes/docker/config/hosts.go` for the
//! semantics). A host directory is named after the registry host
//! (`docker.io`, `localhost:5000` or `localhost_5000_`), or `_default` for
//! every host without one of its own.
//!
//! In a `hosts.toml`, `[host."URL"]` tables are tried in file order, then
//! the top-level `server` — or, without one, the registry itself — unless
//! the top level's `capabilities` leave out pull or resolve. Every file a
//! key names (`ca`, `client`) is read and checked here, so a broken entry
//! stops start-up (or a reload) with an error naming the file and the key
//! instead of failing pulls later. A directory without `hosts.toml` is read
//! the Docker way: `*.crt` are CAs, `*.cert` with a `*.key` of the same
//! stem are client certificates, for the registry itself.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

/// A host directory or a `hosts.toml` in it is unusable.
#[derive(Debug, thiserror::Error)]
pub enum HostsFileError {
    #[error("registry config_path {path}: {message}")]
    Dir { path: PathBuf, message: String },
    #[error("{file}: {message}")]
    File { file: PathBuf, message: String },
    #[error("{file}: key {key}: {message}")]
    Key {
        file: PathBuf,
        key: String,
        message: String,
    },
}

/// What a host may be used for (`capabilities`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capabilities {
    pub pull: bool,
    pub resolve: bool,
    pub push: bool,
}

impl Capabilities {
    pub const ALL: Capabilities = Capabilities {
        pull: true,
        resolve: true,
        push: true,
    };

    /// Pulls need both: resolving a tag and fetching its content.
    pub fn can_pull(self) -> bool {
        self.pull && self.resolve
    }
}

/// Where a host entry sends requests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostUrl {
    pub plain_http: bool,
    /// `host` or `host:port`.
    pub host: String,
    /// The API prefix: `/v2`, `/prefix/v2`, or with `override_path`
    /// whatever the URL's path is.
    pub path: String,
}

/// TLS settings of one host entry, with the files already read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsSettings {
    /// PEM bundles of extra root CAs, trusted besides the system's.
    pub ca_pems: Vec<Vec<u8>>,
    /// The client certificate chain and its key, PEM, concatenated.
    pub client_identity: Option<Vec<u8>>,
    pub skip_verify: bool,
}

impl TlsSettings {
    fn is_set(&self) -> bool {
        !self.ca_pems.is_empty() || self.client_identity.is_some() || self.skip_verify
    }
}

/// One host a registry's pulls may go to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostEntry {
    /// None: the registry itself (a top level without `server`).
    pub url: Option<HostUrl>,
    /// Whether this is the top level (`server`), tried last.
    pub is_server: bool,
    pub capabilities: Capabilities,
    pub tls: TlsSettings,
    /// Extra request headers, in file order per name.
    pub headers: Vec<(String, String)>,
    /// `dial_timeout`: how long connecting may take.
    pub connect_timeout: Option<Duration>,
}

/// Every host directory under `config_path`, by directory name. A missing
/// directory is an error: the operator named it.
pub fn load_dir(root: &Path) -> Result<BTreeMap<String, Vec<HostEntry>>, HostsFileError> {
    let dir_error = |message: String| HostsFileError::Dir {
        path: root.to_path_buf(),
        message,
    };
    let entries = std::fs::read_dir(root).map_err(|err| dir_error(err.to_string()))?;
    let mut hosts = BTreeMap::new();
    for entry in entries {
        let entry = entry.map_err(|err| dir_error(err.to_string()))?;
        let path = entry.path();
        if !path.is_dir() {
            continue;
        }
        let name = entry.file_name().to_string_lossy().into_owned();
        hosts.insert(name, load_host_dir(&path)?);
    }
    Ok(hosts)
}

/// The entries of one host directory.
pub fn load_host_dir(dir: &Path) -> Result<Vec<HostEntry>, HostsFileError> {
    let file = dir.join("hosts.toml");
    match std::fs::read_to_string(&file) {
        Ok(text) if !text.trim().is_empty() => parse(&file, dir, &text),
        Ok(_) => load_cert_files(dir),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => load_cert_files(dir),
        Err(err) => Err(HostsFileError::File {
            file,
            message: err.to_string(),
        }),
    }
}

/// Keys of a host table and of the top level.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct HostKeys {
    capabilities: Option<Vec<String>>,
    ca: Option<toml::Value>,
    client: Option<toml::Value>,
    skip_verify: Option<bool>,
    header: Option<BTreeMap<String, toml::Value>>,
    #[serde(default)]
    override_path: bool,
    dial_timeout: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileKeys {
    server: Option<String>,
    capabilities: Option<Vec<String>>,
    ca: Option<toml::Value>,
    client: Option<toml::Value>,
    skip_verify: Option<bool>,
    header: Option<BTreeMap<String, toml::Value>>,
    #[serde(default)]
    override_path: bool,
    dial_timeout: Option<String>,
    /// Spanned: hosts are tried in the order the file lists them.
    #[serde(default)]
    host: BTreeMap<String, toml::Spanned<HostKeys>>,
}

/// Parses a `hosts.toml`; relative paths in it are relative to `base`.
pub fn parse(file: &Path, base: &Path, text: &str) -> Result<Vec<HostEntry>, HostsFileError> {
    let keys: FileKeys = toml::from_str(text).map_err(|err| HostsFileError::File {
        file: file.to_path_buf(),
        message: err.to_string().trim_end().to_string(),
    })?;
    let mut hosts: Vec<_> = keys.host.into_iter().collect();
    hosts.sort_by_key(|(_, spanned)| spanned.span().start);
    let mut entries = Vec::with_capacity(hosts.len() + 1);
    for (url, spanned) in hosts {
        let context = Context {
            file,
            base,
            prefix: format!("host.{url:?}"),
        };
        entries.push(context.entry(Some(&url), false, spanned.into_inner())?);
    }
    let top = HostKeys {
        capabilities: keys.capabilities,
        ca: keys.ca,
        client: keys.client,
        skip_verify: keys.skip_verify,
        header: keys.header,
        override_path: keys.override_path,
        dial_timeout: keys.dial_timeout,
    };
    let context = Context {
        file,
        base,
        prefix: String::new(),
    };
    entries.push(context.entry(keys.server.as_deref(), true, top)?);
    Ok(entries)
}

/// Where the keys being read are, for error messages.
struct Context<'a> {
    file: &'a Path,
    base: &'a Path,
    /// `host."URL"`, or empty at the top level.
    prefix: String,
}

impl Context<'_> {
    fn key(&self, key: &str) -> String {
        if self.prefix.is_empty() {
            key.to_string()
        } else {
            format!("{}.{key}", self.prefix)
        }
    }

    fn error(&self, key: &str, message: impl Into<String>) -> HostsFileError {
        HostsFileError::Key {
            file: self.file.to_path_buf(),
            key: self.key(key),
            message: message.into(),
        }
    }

    fn entry(
        &self,
        server: Option<&str>,
        is_server: bool,
        keys: HostKeys,
    ) -> Result<HostEntry, HostsFileError> {
        let url_key = if is_server { "server" } else { "host" };
        let url = match server {
            Some(server) => Some(
                host_url(server, keys.override_path)
                    .map_err(|message| self.url_error(url_key, server, message))?,
            ),
            None => {
                if keys.override_path {
                    return Err(self.error(
                        "override_path",
                        "needs a server URL whose path is the API prefix",
                    ));
                }
                None
            }
        };
        let capabilities = match keys.capabilities {
            None => Capabilities::ALL,
            Some(list) => self.capabilities(&list)?,
        };
        let mut tls = TlsSettings {
            skip_verify: keys.skip_verify.unwrap_or(false),
            ..TlsSettings::default()
        };
        if let Some(ca) = &keys.ca {
            for path in self.paths("ca", ca)? {
                let pem = self.read("ca", &path)?;
                check_ca(&pem).map_err(|message| {
                    self.error("ca", format!("{}: {message}", path.display()))
                })?;
                tls.ca_pems.push(pem);
            }
        }
        if let Some(client) = &keys.client {
            tls.client_identity = Some(self.client(client)?);
        }
        if url.as_ref().is_some_and(|url| url.plain_http) && tls.is_set() {
            return Err(self.error(
                url_key,
                "is an http:// URL but has TLS settings (ca, client or skip_verify); \
                 use https:// or remove them",
            ));
        }
        let mut headers = Vec::new();
        for (name, value) in keys.header.unwrap_or_default() {
            let key = format!("header.{name:?}");
            for value in self.strings(&key, &value)? {
                check_header(&name, &value).map_err(|message| self.error(&key, message))?;
                headers.push((name.clone(), value));
            }
        }
        let connect_timeout = match keys.dial_timeout {
            None => None,
            Some(text) => Some(
                parse_go_duration(&text).map_err(|message| self.error("dial_timeout", message))?,
            ),
        };
        Ok(HostEntry {
            url,
            is_server,
            capabilities,
            tls,
            headers,
            connect_timeout,
        })
    }

    fn url_error(&self, key: &str, url: &str, message: String) -> HostsFileError {
        if key == "host" {
            // The table name is the URL: the prefix already names it.
            HostsFileError::Key {
                file: self.file.to_path_buf(),
                key: self.prefix.clone(),
                message,
            }
        } else {
            self.error(key, format!("{url:?}: {message}"))
        }
    }

    fn capabilities(&self, list: &[String]) -> Result<Capabilities, HostsFileError> {
        let mut capabilities = Capabilities {
            pull: false,
            resolve: false,
            push: false,
        };
        for capability in list {
            match capability.to_ascii_lowercase().as_str() {
                "pull" => capabilities.pull = true,
                "resolve" => capabilities.resolve = true,
                "push" => capabilities.push = true,
                other => {
                    return Err(self.error(
                        "capabilities",
                        format!("unknown capability {other:?} (pull, resolve or push)"),
                    ))
                }
            }
        }
        // containerd: an empty list is "every capability"; only a list
        // naming some restricts the host.
        if list.is_empty() {
            return Ok(Capabilities::ALL);
        }
        Ok(capabilities)
    }

    /// A string or a list of strings.
    fn strings(&self, key: &str, value: &toml::Value) -> Result<Vec<String>, HostsFileError> {
        match value {
            toml::Value::String(text) => Ok(vec![text.clone()]),
            toml::Value::Array(items) => items
                .iter()
                .map(|item| match item {
                    toml::Value::String(text) => Ok(text.clone()),
                    other => Err(self.error(
                        key,
                        format!("list items must be strings, not {}", other.type_str()),
                    )),
                })
                .collect(),
            other => Err(self.error(
                key,
                format!(
                    "must be a string or a list of strings, not {}",
                    other.type_str()
                ),
            )),
        }
    }

    /// File paths, relative ones against the host directory.
    fn paths(&self, key: &str, value: &toml::Value) -> Result<Vec<PathBuf>, HostsFileError> {
        Ok(self
            .strings(key, value)?
            .into_iter()
            .map(|path| self.base.join(path))
            .collect())
    }

    fn read(&self, key: &str, path: &Path) -> Result<Vec<u8>, HostsFileError> {
        std::fs::read(path).map_err(|err| self.error(key, format!("{}: {err}", path.display())))
    }

    /// `client`: a path to a file with certificate and key, a list of
    /// such paths, or a list of `[cert, key]` pairs (containerd's forms).
    /// berth presents one client certificate per host: a second is an error
    /// rather than silently unused.
    fn client(&self, value: &toml::Value) -> Result<Vec<u8>, HostsFileError> {
        let mut pairs: Vec<(PathBuf, Option<PathBuf>)> = Vec::new();
        match value {
            toml::Value::String(path) => pairs.push((self.base.join(path), None)),
            toml::Value::Array(items) => {
                for item in items {
                    match item {
                        toml::Value::String(path) => pairs.push((self.base.join(path), None)),
                        toml::Value::Array(_) => {
                            let pair = self.paths("client", item)?;
                            let [cert, key] = <[PathBuf; 2]>::try_from(pair).map_err(|pair| {
                                self.error(
                                    "client",
                                    format!(
                                        "a pair is [certificate, key]; this one has {} items",
                                        pair.len()
                                    ),
                                )
                            })?;
                            pairs.push((cert, Some(key)));
                        }
                        other => {
                            return Err(self.error(
                                "client",
                                format!(
                                    "items must be paths or [certificate, key] pairs, not {}",
                                    other.type_str()
                                ),
                            ))
                        }
                    }
                }
            }
            other => {
                return Err(self.error(
                    "client",
                    format!(
                        "must be a path or a list of paths or pairs, not {}",
                        other.type_str()
                    ),
                ))
            }
        }
        let (cert, key) = match pairs.len() {
            1 => pairs.remove(0),
            0 => return Err(self.error("client", "is an empty list")),
            n => {
                return Err(self.error(
                    "client",
                    format!("lists {n} client certificates; berth presents one per host"),
                ))
            }
        };
        let mut identity = self.read("client", &cert)?;
        if let Some(key) = &key {
            identity.push(b'\n');
            identity.extend(self.read("client", key)?);
        }
        check_identity(&identity).map_err(|message| {
            let files = match &key {
                Some(key) => format!("{} and {}", cert.display(), key.display()),
                None => cert.display().to_string(),
            };
            self.error("client", format!("{files}: {message}"))
        })?;
        Ok(identity)
    }
}

/// containerd's reading of a host URL: `https://` when no scheme is given,
/// the path cleaned, and `/v2` appended unless it ends so already or
/// `override_path` says the path is the whole API prefix.
pub fn host_url(url: &str, override_path: bool) -> Result<HostUrl, String> {
    let with_scheme;
    let url = if url.starts_with("http") {
        url
    } else {
        with_scheme = format!("https://{url}");
        &with_scheme
    };
    let (plain_http, rest) = if let Some(rest) = url.strip_prefix("http://") {
        (true, rest)
    } else if let Some(rest) = url.strip_prefix("https://") {
        (false, rest)
    } else {
        return Err("the scheme must be http:// or https://".to_string());
    };
    if rest.contains(['?', '#']) {
        return Err("a query or fragment is not allowed".to_string());
    }
    let (host, path) = match rest.find('/') {
        Some(at) => rest.split_at(at),
        None => (rest, ""),
    };
    check_authority(host)?;
    let mut path = clean_path(path);
    if !override_path && !path.ends_with("/v2") {
        path.push_str("/v2");
    }
    Ok(HostUrl {
        plain_http,
        host: host.to_string(),
        path,
    })
}

/// `host`, `host:port` or `[v6]:port`: no user info, a numeric port.
fn check_authority(host: &str) -> Result<(), String> {
    if host.is_empty() {
        return Err("it has no host".to_string());
    }
    if host.contains('@') {
        return Err("credentials in the URL are not supported".to_string());
    }
    let port = if let Some(rest) = host.strip_prefix('[') {
        let (_, after) = rest
            .split_once(']')
            .ok_or_else(|| format!("bad IPv6 host {host:?}"))?;
        after.strip_prefix(':')
    } else {
        host.split_once(':').map(|(_, port)| port)
    };
    if let Some(port) = port {
        if port.parse::<u16>().is_err() {
            return Err(format!("bad port {port:?}"));
        }
    }
    let name = host.split(':').next().unwrap_or_default();
    if !host.starts_with('[')
        && !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-' || b == b'_')
    {
        return Err(format!("bad host name {name:?}"));
    }
    Ok(())
}

/// Go's `path.Clean` for an absolute URL path, without a trailing slash;
/// an empty path stays empty.
fn clean_path(path: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            part => parts.push(part),
        }
    }
    if parts.is_empty() {
        return String::new();
    }
    format!("/{}", parts.join("/"))
}

/// The PEM must hold at least one certificate.
fn check_ca(pem: &[u8]) -> Result<(), String> {
    let certs = reqwest::Certificate::from_pem_bundle(pem).map_err(|err| err.to_string())?;
    if certs.is_empty() {
        return Err("no PEM certificate in it".to_string());
    }
    Ok(())
}

/// A certificate and a private key, PEM.
fn check_identity(pem: &[u8]) -> Result<(), String> {
    reqwest::Identity::from_pem(pem)
        .map(|_| ())
        .map_err(|err| format!("not a PEM certificate with its private key: {err}"))
}

fn check_header(name: &str, value: &str) -> Result<(), String> {
    reqwest::header::HeaderName::from_bytes(name.as_bytes())
        .map_err(|_| format!("{name:?} is not a valid header name"))?;
    reqwest::header::HeaderValue::from_str(value)
        .map_err(|_| format!("{value:?} is not a valid header value"))?;
    Ok(())
}

/// Go's `time.ParseDuration`, for `dial_timeout`: decimal numbers with
/// units `ns`, `us`, `µs`, `ms`, `s`, `m`, `h` (`1m30s`, `500ms`).
pub fn parse_go_duration(text: &str) -> Result<Duration, String> {
    let bad = || format!("{text:?} is not a duration such as \"10s\" or \"1m30s\"");
    if text.is_empty() || text.starts_with('-') {
        return Err(bad());
    }
    let mut rest = text.strip_prefix('+').unwrap_or(text);
    if rest == "0" {
        return Ok(Duration::ZERO);
    }
    let mut total = 0f64;
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(bad)?;
        let number: f64 = rest[..number_len].parse().map_err(|_| bad())?;
        rest = &rest[number_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let seconds = match &rest[..unit_len] {
            "ns" => 1e-9,
            "us" | "µs" | "μs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return Err(bad()),
        };
        rest = &rest[unit_len..];
        total += number * seconds;
    }
    Duration::try_from_secs_f64(total).map_err(|_| bad())
}

/// A host directory without `hosts.toml`, as Docker's certs.d: `*.crt`
/// CA files, `*.cert` client certificates with the `*.key` of the same
/// stem, for the registry itself.
fn load_cert_files(dir: &Path) -> Result<Vec<HostEntry>, HostsFileError> {
    let file_error = |file: &Path, message: String| HostsFileError::File {
        file: file.to_path_buf(),
        message,
    };
    let mut names: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|err| file_error(dir, err.to_string()))?
        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
        .collect();
    names.sort();
    let mut tls = TlsSettings::default();
    for path in &names {
        match path.extension().and_then(|ext| ext.to_str()) {
            Some("crt") => {
                let pem = std::fs::read(path).map_err(|err| file_error(path, err.to_string()))?;
                check_ca(&pem).map_err(|message| file_error(path, message))?;
                tls.ca_pems.push(pem);
            }
            Some("cert") => {
                let key = path.with_extension("key");
                let mut identity =
                    std::fs::read(path).map_err(|err| file_error(path, err.to_string()))?;
                identity.push(b'\n');
                identity.extend(std::fs::read(&key).map_err(|err| {
                    file_error(path, format!("its key {}: {err}", key.display()))
                })?);
                check_identity(&identity).map_err(|message| file_error(path, message))?;
                if tls.client_identity.is_some() {
                    return Err(file_error(
                        path,
                        "a second client certificate; berth presents one per host".to_string(),
                    ));
                }
                tls.client_identity = Some(identity);
            }
            _ => {}
        }
    }
    Ok(vec![HostEntry {
        url: None,
        is_server: true,
        capabilities: Capabilities::ALL,
        tls,
        headers: Vec::new(),
        connect_timeout: None,
    }])
}

#[cfg(test)]
#[path = "hosts_toml_tests.rs"]
mod tests;
