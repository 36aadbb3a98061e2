//! The daemon's configuration: `runtime-config.toml`, its defaults, and how
//! command-line flags override it.
//!
//! Every key is checked: an unknown key or a bad value stops start-up with an
//! error naming the file, the key and what is allowed, so a typo never turns
//! silently into a default.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::cgroup_driver::CgroupDriverSetting;

/// Where berthd looks for its config when `--config` is not given.
pub const DEFAULT_CONFIG_PATH: &str = "/etc/berth/runtime-config.toml";

/// The commented default config, as `berthd config default` prints it:
/// every key set to its built-in default (a unit test holds them equal).
pub const DEFAULT_CONFIG_TEXT: &str = include_str!("../../../runtime-config.toml");

/// The longest duration the config may set, in seconds: one year.
pub const MAX_CONFIG_SECONDS: u64 = 365 * 24 * 3600;

/// `stats_collection_period`'s default, in seconds: kubelet asks for stats
/// at most every 10 s (its eviction manager; metrics-server and the
/// metrics endpoint scrape every 10-15 s), so each of its calls finds a
/// sample newer than its previous call, and a sampler pass every 10 s costs
/// the node little (PERFORMANCE.md).
pub const DEFAULT_STATS_COLLECTION_PERIOD: u64 = 10;

/// Errors reading or validating the configuration.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("invalid config file {path}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("invalid config ({origin}): key `{key}` {problem}")]
    Invalid {
        origin: String,
        key: &'static str,
        problem: String,
    },
}

/// The whole configuration, as written in `runtime-config.toml`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Unix socket the CRI services listen on.
    pub listen: PathBuf,
    /// Persistent data: images, unpacked layers, container metadata.
    pub root_dir: PathBuf,
    /// Runtime state that a reboot may discard: sockets, pinned namespaces.
    pub state_dir: PathBuf,
    /// Log filter used when neither `--log-level` nor `RUST_LOG` is set.
    pub log_level: LogLevel,
    /// Which cgroup manager to use and to report to kubelet.
    pub cgroup_driver: CgroupDriverSetting,
    /// Parent cgroup for sandboxes whose `CgroupParent` is empty. When
    /// absent it follows the driver: `/berth` (cgroupfs) or `system.slice` (systemd).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub default_cgroup_parent: Option<String>,
    /// RuntimeClass handlers besides the default `""` (libcontainer in
    /// the shim), each an OCI runtime binary, by handler name.
    pub runtime_handlers: BTreeMap<String, RuntimeHandlerConfig>,
    /// Directory of the helper binaries (berth-shim, berth-pinns). When
    /// absent: the directory berthd's own executable is in.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub helper_dir: Option<PathBuf>,
    /// Rlimits every container gets, as `name=soft:hard` (CRI-O's
    /// `default_ulimits`); empty: containers inherit berthd's.
    pub default_ulimits: Vec<String>,
    /// Images reported `pinned` (kubelet's image GC never removes them),
    /// by any name `ImageStatus` takes: a tag, a digest or an id.
    pub pinned_images: Vec<String>,
    /// Whether CreateContainer restores from a checkpoint image (see
    /// `container::checkpoint::restore_source`). Off: CRIU restores the
    /// processes' credentials and seccomp state from the checkpoint, so
    /// whoever can push such an image would choose them.
    pub allow_checkpoint_images: bool,
    /// Seconds between two samples of every container's and pod's usage,
    /// which the stats and metrics RPCs answer from (CRI-O's key of the
    /// same name); 0: read on each call (`crate::stats_sampler`).
    pub stats_collection_period: u64,
    pub cni: CniConfig,
    pub stream: StreamConfig,
    pub registry: RegistryConfig,
    pub metrics: MetricsConfig,
    pub cdi: CdiConfig,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            listen: PathBuf::from("/run/berth/berth.sock"),
            root_dir: PathBuf::from("/var/lib/berth"),
            state_dir: PathBuf::from("/run/berth"),
            log_level: LogLevel::Info,
            cgroup_driver: CgroupDriverSetting::Auto,
            default_cgroup_parent: None,
            runtime_handlers: BTreeMap::new(),
            helper_dir: None,
            default_ulimits: Vec::new(),
            pinned_images: Vec::new(),
            allow_checkpoint_images: false,
            stats_collection_period: DEFAULT_STATS_COLLECTION_PERIOD,
            cni: CniConfig::default(),
            stream: StreamConfig::default(),
            registry: RegistryConfig::default(),
            metrics: MetricsConfig::default(),
            cdi: CdiConfig::default(),
        }
    }
}

/// One RuntimeClass handler: the OCI runtime its pods' containers run
/// under (containerd's `runtimes.<name>`, CRI-O's `runtimes.<name>`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuntimeHandlerConfig {
    /// The runtime's binary (runc, crun, ...), absolute; berthd does not
    /// start when it is missing or not executable.
    pub runtime_path: PathBuf,
    /// The runtime's state dir (its `--root`); when absent
    /// `<state_dir>/runtimes/<name>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_root: Option<PathBuf>,
    /// The pod's sandbox is a container of `sandbox_image` this runtime
    /// runs first, which the pod's containers join (CRI-O's
    /// `drop_infra_ctr = false`; what gVisor's runsc needs). Off: the pod's
    /// namespaces are berth's own, with no container.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub sandbox_container: bool,
    /// The image of the sandbox container (already pulled: RunPodSandbox
    /// does not pull it); when absent [`DEFAULT_SANDBOX_IMAGE`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox_image: Option<String>,
}

/// The sandbox container's image when a handler names none (containerd's
/// and CRI-O's default).
pub const DEFAULT_SANDBOX_IMAGE: &str = "registry.k8s.io/pause:3.10";

impl RuntimeHandlerConfig {
    /// The sandbox container's image, when the pod's sandbox is one.
    pub fn sandbox_container_image(&self) -> Option<String> {
        self.sandbox_container.then(|| {
            self.sandbox_image
                .clone()
                .unwrap_or_else(|| DEFAULT_SANDBOX_IMAGE.to_string())
        })
    }
}

/// Container Device Interface spec files.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CdiConfig {
    /// Directories of CDI spec files (`*.json`, `*.yaml`); a device defined
    /// in two wins from the later one.
    pub spec_dirs: Vec<PathBuf>,
}

impl Default for CdiConfig {
    fn default() -> Self {
        Self {
            spec_dirs: vec![PathBuf::from("/etc/cdi"), PathBuf::from("/var/run/cdi")],
        }
    }
}

/// Log levels accepted in the config file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogLevel {
    Error,
    Warn,
    Info,
    Debug,
    Trace,
}

impl LogLevel {
    /// The level as a `tracing` filter directive.
    pub fn as_str(self) -> &'static str {
        match self {
            LogLevel::Error => "error",
            LogLevel::Warn => "warn",
            LogLevel::Info => "info",
            LogLevel::Debug => "debug",
            LogLevel::Trace => "trace",
        }
    }
}

/// CNI plugin configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CniConfig {
    /// Directory holding network configs (`*.conf`, `*.conflist`, `*.json`).
    pub conf_dir: PathBuf,
    /// Directories searched, in order, for plugin binaries: `/opt/cni/bin`
    /// first (where network add-ons install theirs, as containerd and
    /// CRI-O look), then Debian's packaged plugins.
    pub bin_dirs: Vec<PathBuf>,
    /// How many ADDs run at once while every CPU is busy and more than
    /// four times as many are asked for; the rest wait
    /// (`sandbox/paced_network.rs`). Unset: one per CPU berthd may use;
    /// 0: no pacing.
    pub adds_when_busy: Option<usize>,
}

impl Default for CniConfig {
    fn default() -> Self {
        Self {
            conf_dir: PathBuf::from("/etc/cni/net.d"),
            bin_dirs: vec![PathBuf::from("/opt/cni/bin"), PathBuf::from("/usr/lib/cni")],
            adds_when_busy: None,
        }
    }
}

/// The streaming server behind Exec, Attach and PortForward.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StreamConfig {
    /// Address the server listens on. Loopback by default: kubelet and
    /// crictl run on the node and dial the URLs berth hands out.
    pub address: IpAddr,
    /// TCP port; 0 picks a free one at start-up.
    pub port: u16,
    /// How long a URL from Exec, Attach or PortForward stays usable.
    pub token_ttl_seconds: u64,
    /// A session with no traffic for this long is closed.
    pub idle_timeout_seconds: u64,
    /// How long a client has to open a session's streams.
    pub stream_creation_timeout_seconds: u64,
}

impl Default for StreamConfig {
    fn default() -> Self {
        Self {
            address: IpAddr::V4(Ipv4Addr::LOCALHOST),
            port: 0,
            token_ttl_seconds: 60,
            idle_timeout_seconds: 4 * 3600,
            stream_creation_timeout_seconds: 30,
        }
    }
}

/// How image references map to the registries actually contacted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RegistryConfig {
    /// A containerd host directory (`<host>/hosts.toml`, `_default`): the
    /// endpoints, CAs, client certificates and headers per registry host.
    /// A directory that does not exist configures nothing; empty turns it off.
    pub config_path: PathBuf,
    /// Hosts (`host` or `host:port`) spoken to over plain HTTP. Registries on
    /// `localhost` and `127.0.0.1` always may use plain HTTP.
    pub insecure_hosts: Vec<String>,
    /// Mirrors per upstream host, keyed by the host in the image reference
    /// (`docker.io`, `registry.k8s.io`, ...).
    pub mirrors: BTreeMap<String, MirrorConfig>,
    /// How long connecting to a registry may take.
    pub connect_timeout_seconds: u64,
    /// How long a registry may send nothing (no response, no body bytes)
    /// before the request fails: a stalled registry cannot hold a pull.
    pub read_timeout_seconds: u64,
}

impl Default for RegistryConfig {
    fn default() -> Self {
        Self {
            config_path: PathBuf::from(DEFAULT_REGISTRY_CONFIG_PATH),
            insecure_hosts: Vec::new(),
            mirrors: BTreeMap::new(),
            connect_timeout_seconds: 30,
            read_timeout_seconds: 60,
        }
    }
}

/// Where berthd looks for containerd-style registry host directories.
pub const DEFAULT_REGISTRY_CONFIG_PATH: &str = "/etc/berth/certs.d";

/// The mirrors of one upstream registry host.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MirrorConfig {
    /// Mirror endpoints tried in order, as URLs (`http://localhost:5000`,
    /// `https://mirror.example.com/prefix`); a URL's path is the mirror's
    /// prefix before `/v2`.
    pub endpoints: Vec<String>,
    /// Whether the upstream host is tried after every mirror failed. On by
    /// default, as containerd does with both its hosts.toml (the registry
    /// is the last host unless `server` names another) and its older
    /// `mirrors` table; off makes an unusable mirror fail the pull.
    pub fallback_to_upstream: bool,
}

impl Default for MirrorConfig {
    fn default() -> Self {
        Self {
            endpoints: Vec::new(),
            fallback_to_upstream: true,
        }
    }
}

/// The Prometheus endpoint.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MetricsConfig {
    /// Whether berthd serves `/metrics` over HTTP. Off by default.
    pub enabled: bool,
    /// `ip:port` the endpoint listens on. It has no authentication: keep it
    /// on loopback unless the network in between is trusted.
    pub address: std::net::SocketAddr,
}

impl Default for MetricsConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            address: std::net::SocketAddr::from(([127, 0, 0, 1], 9464)),
        }
    }
}

/// Values given on the command line; each one set replaces the config's.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    pub listen: Option<PathBuf>,
    pub root_dir: Option<PathBuf>,
    pub state_dir: Option<PathBuf>,
}

/// Where the effective config came from, for the start-up log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigSource {
    File(PathBuf),
    BuiltInDefaults { absent: PathBuf },
}

impl std::fmt::Display for ConfigSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConfigSource::File(path) => write!(f, "config file {}", path.display()),
            ConfigSource::BuiltInDefaults { absent } => {
                write!(f, "built-in defaults ({} is absent)", absent.display())
            }
        }
    }
}

impl Config {
    /// Loads the config. An explicit path must exist; the default path may be
    /// absent, and then the built-in defaults apply.
    pub fn load(explicit: Option<&Path>) -> Result<(Self, ConfigSource), ConfigError> {
        let path = explicit.unwrap_or(Path::new(DEFAULT_CONFIG_PATH));
        match std::fs::read_to_string(path) {
            Ok(text) => {
                let config = Self::parse(&text, path)?;
                Ok((config, ConfigSource::File(path.to_path_buf())))
            }
            Err(err) if explicit.is_none() && err.kind() == std::io::ErrorKind::NotFound => Ok((
                Self::default(),
                ConfigSource::BuiltInDefaults {
                    absent: path.to_path_buf(),
                },
            )),
            Err(source) => Err(ConfigError::Read {
                path: path.to_path_buf(),
                source,
            }),
        }
    }

    /// Parses and validates config text; `path` only names it in errors.
    pub fn parse(text: &str, path: &Path) -> Result<Self, ConfigError> {
        let text = refuse_handler_list(text, path)?;
        let config: Config = toml::from_str(&text).map_err(|err| ConfigError::Parse {
            path: path.to_path_buf(),
            message: err.to_string().trim_end().to_string(),
        })?;
        config.validate(&path.display().to_string())?;
        Ok(config)
    }

    /// Applies command-line overrides and re-validates the result.
    pub fn with_overrides(mut self, overrides: &Overrides) -> Result<Self, ConfigError> {
        if let Some(listen) = &overrides.listen {
            self.listen = listen.clone();
        }
        if let Some(root) = &overrides.root_dir {
            self.root_dir = root.clone();
        }
        if let Some(state) = &overrides.state_dir {
            self.state_dir = state.clone();
        }
        self.validate("command line")?;
        Ok(self)
    }

    /// Checks what serde's types cannot express.
    fn validate(&self, origin: &str) -> Result<(), ConfigError> {
        let invalid = |key, problem: String| ConfigError::Invalid {
            origin: origin.to_string(),
            key,
            problem,
        };
        for (key, path) in [
            ("listen", &self.listen),
            ("root_dir", &self.root_dir),
            ("state_dir", &self.state_dir),
            ("cni.conf_dir", &self.cni.conf_dir),
            ("registry.config_path", &self.registry.config_path),
        ] {
            let off = key == "registry.config_path" && path.as_os_str().is_empty();
            if !path.is_absolute() && !off {
                return Err(invalid(
                    key,
                    format!(
                        "must be an absolute path, got {:?}",
                        path.display().to_string()
                    ),
                ));
            }
        }
        if let Some(dir) = &self.helper_dir {
            if !dir.is_absolute() {
                return Err(invalid(
                    "helper_dir",
                    format!(
                        "must be an absolute path, got {:?}",
                        dir.display().to_string()
                    ),
                ));
            }
        }
        berth_spec::ulimits::parse_all(&self.default_ulimits)
            .map_err(|problem| invalid("default_ulimits", format!("has {problem}")))?;
        if let Some(parent) = &self.default_cgroup_parent {
            if parent.is_empty() {
                return Err(invalid(
                    "default_cgroup_parent",
                    "must not be empty; omit it to use the driver's default".to_string(),
                ));
            }
        }
        for (name, handler) in &self.runtime_handlers {
            let valid = !name.is_empty()
                && name.len() <= 63
                && name.bytes().all(|b| {
                    b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.'
                });
            if !valid {
                return Err(invalid(
                    "runtime_handlers",
                    format!("has {name:?}; handler names are lowercase DNS labels, as RuntimeClass handlers"),
                ));
            }
            check_runtime_binary(&handler.runtime_path).map_err(|problem| {
                invalid(
                    "runtime_handlers.<name>.runtime_path",
                    format!("of handler {name:?} {problem}"),
                )
            })?;
            if let Some(image) = &handler.sandbox_image {
                if image.trim().is_empty() || image.contains(char::is_whitespace) {
                    return Err(invalid(
                        "runtime_handlers.<name>.sandbox_image",
                        format!("of handler {name:?} is not an image name: {image:?}"),
                    ));
                }
                if !handler.sandbox_container {
                    return Err(invalid(
                        "runtime_handlers.<name>.sandbox_image",
                        format!(
                            "of handler {name:?} is set without sandbox_container = true, \
                             which is what runs it"
                        ),
                    ));
                }
            }
            if let Some(root) = &handler.runtime_root {
                if !root.is_absolute() {
                    return Err(invalid(
                        "runtime_handlers.<name>.runtime_root",
                        format!(
                            "of handler {name:?} must be an absolute path, got {:?}",
                            root.display().to_string()
                        ),
                    ));
                }
            }
        }
        if let Some(bad) = self
            .pinned_images
            .iter()
            .find(|name| name.trim().is_empty() || name.contains(char::is_whitespace))
        {
            return Err(invalid(
                "pinned_images",
                format!("has {bad:?}; each entry names an image (tag, digest or id)"),
            ));
        }
        for (key, value) in [
            ("stream.token_ttl_seconds", self.stream.token_ttl_seconds),
            (
                "registry.connect_timeout_seconds",
                self.registry.connect_timeout_seconds,
            ),
            (
                "registry.read_timeout_seconds",
                self.registry.read_timeout_seconds,
            ),
            (
                "stream.idle_timeout_seconds",
                self.stream.idle_timeout_seconds,
            ),
            (
                "stream.stream_creation_timeout_seconds",
                self.stream.stream_creation_timeout_seconds,
            ),
        ] {
            if value == 0 {
                return Err(invalid(key, "must be at least 1 (seconds)".to_string()));
            }
            // Each becomes `Instant::now() + value`, which must not overflow.
            if value > MAX_CONFIG_SECONDS {
                return Err(invalid(
                    key,
                    format!("is {value}; at most {MAX_CONFIG_SECONDS} (one year) is allowed"),
                ));
            }
        }
        // 0 is allowed here: stats read on each call.
        if self.stats_collection_period > MAX_CONFIG_SECONDS {
            let value = self.stats_collection_period;
            return Err(invalid(
                "stats_collection_period",
                format!("is {value}; at most {MAX_CONFIG_SECONDS} (one year) is allowed"),
            ));
        }
        for (host, mirror) in &self.registry.mirrors {
            if host.is_empty() || host.contains('/') {
                return Err(invalid(
                    "registry.mirrors",
                    format!("has key {host:?}; keys are registry hosts such as \"docker.io\""),
                ));
            }
            if mirror.endpoints.is_empty() && !mirror.fallback_to_upstream {
                return Err(invalid(
                    "registry.mirrors.endpoints",
                    format!("for {host:?} is empty, which would make every pull from it fail"),
                ));
            }
            for endpoint in &mirror.endpoints {
                if !(endpoint.starts_with("http://") || endpoint.starts_with("https://")) {
                    return Err(invalid(
                        "registry.mirrors.endpoints",
                        format!(
                            "for {host:?} has {endpoint:?}; allowed are URLs starting with http:// or https://"
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    /// The parsed `default_ulimits` (validated when the config was loaded).
    pub fn default_rlimits(&self) -> Vec<oci_spec::runtime::PosixRlimit> {
        berth_spec::ulimits::parse_all(&self.default_ulimits).unwrap_or_default()
    }

    /// The directory the helper binaries are taken from: `helper_dir`; when
    /// unset, `../libexec/berth` beside berthd's executable if berth-shim is
    /// there (the installed layout: /usr/local/bin and
    /// /usr/local/libexec/berth), else the executable's own directory (a
    /// build tree).
    pub fn helper_dir(&self) -> PathBuf {
        if let Some(dir) = &self.helper_dir {
            return dir.clone();
        }
        let exe_dir = std::env::current_exe()
            .ok()
            .and_then(|exe| exe.parent().map(Path::to_path_buf))
            .unwrap_or_else(|| PathBuf::from("."));
        default_helper_dir(&exe_dir)
    }

    /// The config as TOML, for `berthd config`.
    pub fn to_toml(&self) -> String {
        toml::to_string_pretty(self)
            .unwrap_or_else(|err| format!("# cannot render config: {err}\n"))
    }

    /// The config as JSON for `Status` verbose info. Keys are the TOML keys,
    /// plus `rootDir`/`stateDir` under the names containerd uses, which
    /// critest and other tools read. `cgroup_driver` is the driver in use
    /// (`auto` resolved); `cgroup_driver_setting` what the config says.
    pub fn to_info_json(&self, driver_in_use: &str) -> serde_json::Value {
        let mut value = serde_json::to_value(self).unwrap_or(serde_json::Value::Null);
        if let serde_json::Value::Object(map) = &mut value {
            if let Some(setting) = map.insert("cgroup_driver".into(), driver_in_use.into()) {
                map.insert("cgroup_driver_setting".into(), setting);
            }
            map.insert("rootDir".into(), self.root_dir.display().to_string().into());
            map.insert(
                "stateDir".into(),
                self.state_dir.display().to_string().into(),
            );
        }
        value
    }
}

/// The old form, `runtime_handlers = ["name"]`, named handlers that ran
/// the default runtime: a pod asking for a stronger sandbox silently got
/// none. It is refused, naming the table form that replaced it. The empty
/// list (in every config `berthd config default` wrote before) names
/// nothing and is dropped: the text without it.
fn refuse_handler_list<'a>(
    text: &'a str,
    path: &Path,
) -> Result<std::borrow::Cow<'a, str>, ConfigError> {
    let Ok(mut table) = toml::from_str::<toml::Table>(text) else {
        // The typed parse reports the syntax error.
        return Ok(text.into());
    };
    if let Some(toml::Value::Array(names)) = table.get("runtime_handlers") {
        if names.is_empty() {
            table.remove("runtime_handlers");
            return Ok(toml::to_string(&table).unwrap_or_default().into());
        }
        let example = names.iter().find_map(toml::Value::as_str).unwrap_or("runc");
        return Err(ConfigError::Invalid {
            origin: path.display().to_string(),
            key: "runtime_handlers",
            problem: format!(
                "is a list of names, the old form (its handlers ran the default runtime); \
                 name each handler's OCI runtime in a table instead: \
                 [runtime_handlers.{example}] with runtime_path = \"<absolute path of its OCI runtime, e.g. runc>\""
            ),
        });
    }
    Ok(text.into())
}

/// Why `path` cannot be a handler's runtime: not absolute, missing, not a
/// file or not executable.
fn check_runtime_binary(path: &Path) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    if !path.is_absolute() {
        return Err(format!(
            "must be an absolute path, got {:?}",
            path.display().to_string()
        ));
    }
    match std::fs::metadata(path) {
        Err(err) => Err(format!("{}: {err}", path.display())),
        Ok(meta) if !meta.is_file() => Err(format!("{} is not a file", path.display())),
        Ok(meta) if meta.permissions().mode() & 0o111 == 0 => {
            Err(format!("{} is not executable", path.display()))
        }
        Ok(_) => Ok(()),
    }
}

/// The installed layout's helper directory when it holds berth-shim, else
/// `exe_dir` itself.
fn default_helper_dir(exe_dir: &Path) -> PathBuf {
    let installed = exe_dir.join("../libexec/berth");
    if installed.join("berth-shim").exists() {
        installed
    } else {
        exe_dir.to_path_buf()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Config, ConfigError> {
        Config::parse(text, Path::new("/etc/berth/test.toml"))
    }

    #[test]
    fn empty_file_gives_defaults() {
        assert_eq!(parse("").unwrap(), Config::default());
    }

    #[test]
    fn repo_default_config_matches_built_in_defaults() {
        assert_eq!(parse(DEFAULT_CONFIG_TEXT).unwrap(), Config::default());
    }

    #[test]
    fn helper_dir_and_default_ulimits_parse_and_are_checked() {
        let config = parse(
            "helper_dir = \"/usr/local/libexec/berth\"\ndefault_ulimits = [\"nofile=1024:4096\"]\n",
        )
        .unwrap();
        assert_eq!(
            config.helper_dir(),
            PathBuf::from("/usr/local/libexec/berth")
        );
        assert_eq!(config.default_rlimits().len(), 1);
        assert_eq!(config.default_rlimits()[0].hard(), 4096);
        let err = parse("default_ulimits = [\"nofiles=1\"]\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("default_ulimits") && err.contains("nofiles"),
            "{err}"
        );
        let err = parse("helper_dir = \"libexec\"\n").unwrap_err().to_string();
        assert!(err.contains("helper_dir"), "{err}");
        assert!(parse("").unwrap().helper_dir().is_absolute());
    }

    #[test]
    fn helpers_default_to_libexec_berth_beside_the_binary_else_its_own_dir() {
        let root = tempfile::tempdir().unwrap();
        let bin = root.path().join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        assert_eq!(default_helper_dir(&bin), bin);
        let libexec = root.path().join("libexec/berth");
        std::fs::create_dir_all(&libexec).unwrap();
        std::fs::write(libexec.join("berth-shim"), "").unwrap();
        assert_eq!(default_helper_dir(&bin), bin.join("../libexec/berth"));
    }

    /// runtime-config.toml is the reference operators read: every key the
    /// code knows must be written there, set or commented, in its table.
    #[test]
    fn repo_default_config_documents_every_key() {
        let reference = include_str!("../../../runtime-config.toml");
        let rendered: toml::Table = toml::from_str(&Config::default().to_toml()).unwrap();
        let mut missing = Vec::new();
        let mut tables = vec![(String::new(), rendered)];
        while let Some((name, table)) = tables.pop() {
            let section = reference_section(reference, &name);
            for (key, value) in table {
                match value {
                    toml::Value::Table(inner) => {
                        let path = if name.is_empty() {
                            key
                        } else {
                            format!("{name}.{key}")
                        };
                        tables.push((path, inner));
                    }
                    _ => {
                        let written = section.lines().any(|line| {
                            let line = line.trim_start_matches('#').trim_start();
                            line.strip_prefix(key.as_str())
                                .is_some_and(|rest| rest.trim_start().starts_with('='))
                        });
                        if !written {
                            missing.push(format!("[{name}] {key}"));
                        }
                    }
                }
            }
        }
        assert!(
            missing.is_empty(),
            "runtime-config.toml does not document {missing:?}"
        );
    }

    /// The lines of `text` under the table header `[name]` up to the next
    /// header; for "" the lines before the first header.
    fn reference_section<'a>(text: &'a str, name: &str) -> &'a str {
        let start = if name.is_empty() {
            0
        } else {
            let header = format!("\n[{name}]\n");
            match text.find(&header) {
                Some(at) => at + header.len(),
                None => return "",
            }
        };
        let rest = &text[start..];
        let end = rest.find("\n[").map_or(rest.len(), |at| at + 1);
        &rest[..end]
    }

    /// An executable stand-in for a runtime binary, in `dir`.
    fn runtime_binary(dir: &Path, mode: u32) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let path = dir.join("runc");
        std::fs::write(&path, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        path
    }

    #[test]
    fn runtime_handlers_are_tables_naming_their_runtime() {
        let dir = tempfile::tempdir().unwrap();
        let runc = runtime_binary(dir.path(), 0o755);
        let config = parse(&format!(
            "[runtime_handlers.runc]\nruntime_path = {:?}\n\n\
             [runtime_handlers.\"runc-2\"]\nruntime_path = {:?}\nruntime_root = \"/run/r2\"\n",
            runc.display().to_string(),
            runc.display().to_string(),
        ))
        .unwrap();
        assert_eq!(config.runtime_handlers.len(), 2);
        assert_eq!(config.runtime_handlers["runc"].runtime_path, runc);
        assert_eq!(config.runtime_handlers["runc"].runtime_root, None);
        assert_eq!(
            config.runtime_handlers["runc-2"].runtime_root,
            Some(PathBuf::from("/run/r2"))
        );
        // `berthd config` prints what loads back.
        assert_eq!(parse(&config.to_toml()).unwrap(), config);
    }

    #[test]
    fn a_handler_may_run_a_sandbox_container_of_its_image() {
        let dir = tempfile::tempdir().unwrap();
        let runsc = runtime_binary(dir.path(), 0o755).display().to_string();
        let table =
            |body: &str| format!("[runtime_handlers.runsc]\nruntime_path = {runsc:?}\n{body}");
        let config = parse(&table("sandbox_container = true\n")).unwrap();
        let handler = &config.runtime_handlers["runsc"];
        assert_eq!(
            handler.sandbox_container_image().as_deref(),
            Some(DEFAULT_SANDBOX_IMAGE)
        );
        assert_eq!(parse(&config.to_toml()).unwrap(), config);
        let config = parse(&table(
            "sandbox_container = true\nsandbox_image = \"pause:1\"\n",
        ))
        .unwrap();
        assert_eq!(
            config.runtime_handlers["runsc"]
                .sandbox_container_image()
                .as_deref(),
            Some("pause:1")
        );
        assert_eq!(parse(&config.to_toml()).unwrap(), config);
        let config = parse(&table("")).unwrap();
        assert_eq!(
            config.runtime_handlers["runsc"].sandbox_container_image(),
            None
        );

        for body in [
            "sandbox_image = \"pause:1\"\n",
            "sandbox_container = true\nsandbox_image = \" \"\n",
        ] {
            let err = parse(&table(body)).unwrap_err().to_string();
            assert!(err.contains("sandbox_image"), "{body}: {err}");
            assert!(err.contains("\"runsc\""), "{body}: {err}");
        }
    }

    #[test]
    fn the_old_list_of_handler_names_is_refused_naming_the_table_form() {
        let err = parse("runtime_handlers = [\"kata\"]\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("`runtime_handlers`"), "{err}");
        assert!(err.contains("[runtime_handlers.kata]"), "{err}");
        assert!(err.contains("runtime_path"), "{err}");
        // Empty, as every default config written before says: nothing.
        let config =
            parse("log_level = \"debug\"\nruntime_handlers = []\n[cni]\nconf_dir = \"/x\"\n")
                .unwrap();
        assert!(config.runtime_handlers.is_empty());
        assert_eq!(config.log_level, LogLevel::Debug);
        assert_eq!(config.cni.conf_dir, PathBuf::from("/x"));
    }

    #[test]
    fn cni_adds_are_paced_per_cpu_unless_told() {
        assert_eq!(parse("").unwrap().cni.adds_when_busy, None);
        let config = parse("[cni]\nadds_when_busy = 0\n").unwrap();
        assert_eq!(config.cni.adds_when_busy, Some(0));
        assert!(parse("[cni]\nadds_when_busy = -1\n").is_err());
    }

    #[test]
    fn a_handler_whose_runtime_is_missing_or_not_executable_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("no-such-runc");
        let err = parse(&format!(
            "[runtime_handlers.runc]\nruntime_path = {:?}\n",
            missing.display().to_string()
        ))
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("runtime_handlers.<name>.runtime_path"),
            "{err}"
        );
        assert!(err.contains("\"runc\""), "{err}");
        assert!(err.contains(&missing.display().to_string()), "{err}");

        let plain = runtime_binary(dir.path(), 0o644);
        let err = parse(&format!(
            "[runtime_handlers.runc]\nruntime_path = {:?}\n",
            plain.display().to_string()
        ))
        .unwrap_err()
        .to_string();
        assert!(err.contains("not executable"), "{err}");

        for (body, key) in [
            ("runtime_path = \"runc\"\n", "absolute"),
            (
                "runtime_path = \"/bin/sh\"\nruntime_root = \"r\"\n",
                "runtime_root",
            ),
            (
                "runtime_path = \"/bin/sh\"\nruntime_type = \"oci\"\n",
                "runtime_type",
            ),
            ("", "runtime_path"),
        ] {
            let err = parse(&format!("[runtime_handlers.runc]\n{body}"))
                .unwrap_err()
                .to_string();
            assert!(err.contains(key), "{body}: {err}");
        }
        let err = parse("[runtime_handlers.Runc]\nruntime_path = \"/bin/sh\"\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("DNS label"), "{err}");
    }

    #[test]
    fn unknown_key_is_rejected_by_name_and_file() {
        let err = parse("cgroup_drivr = \"cgroupfs\"\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("cgroup_drivr"), "{err}");
        assert!(err.contains("/etc/berth/test.toml"), "{err}");
        assert!(
            err.contains("cgroup_driver"),
            "should list allowed keys: {err}"
        );
    }

    #[test]
    fn pinned_images_take_names_and_refuse_blank_ones() {
        let config = parse("pinned_images = [\"registry.k8s.io/pause:3.10\"]\n").unwrap();
        assert_eq!(config.pinned_images, ["registry.k8s.io/pause:3.10"]);
        for bad in ["\"\"", "\"a b\""] {
            let err = parse(&format!("pinned_images = [{bad}]\n"))
                .unwrap_err()
                .to_string();
            assert!(err.contains("pinned_images"), "{err}");
        }
    }

    #[test]
    fn unknown_nested_key_is_rejected() {
        let err = parse("[cni]\nconfdir = \"/x\"\n").unwrap_err().to_string();
        assert!(err.contains("confdir"), "{err}");
    }

    #[test]
    fn bad_driver_value_lists_allowed_values() {
        let err = parse("cgroup_driver = \"cgroupv3\"\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("cgroup_driver"), "{err}");
        for allowed in ["cgroupfs", "systemd", "auto"] {
            assert!(err.contains(allowed), "{err}");
        }
    }

    #[test]
    fn the_stats_period_may_be_zero_but_not_past_a_year() {
        assert_eq!(
            parse("").unwrap().stats_collection_period,
            DEFAULT_STATS_COLLECTION_PERIOD
        );
        assert_eq!(
            parse("stats_collection_period = 0\n")
                .unwrap()
                .stats_collection_period,
            0
        );
        let err = parse("stats_collection_period = 9223372036854775807\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("stats_collection_period"), "{err}");
    }

    #[test]
    fn durations_past_a_year_are_rejected_naming_the_key() {
        for key in [
            "[stream]\ntoken_ttl_seconds",
            "[stream]\nidle_timeout_seconds",
            "[stream]\nstream_creation_timeout_seconds",
            "[registry]\nconnect_timeout_seconds",
            "[registry]\nread_timeout_seconds",
        ] {
            let err = parse(&format!("{key} = 9223372036854775807\n"))
                .unwrap_err()
                .to_string();
            let name = key.replace("[", "").replace("]\n", ".");
            assert!(err.contains(&name), "{err}");
            assert!(err.contains("one year"), "{err}");
            assert!(parse(&format!("{key} = {MAX_CONFIG_SECONDS}\n")).is_ok());
        }
        let config = parse("").unwrap();
        assert_eq!(config.registry.connect_timeout_seconds, 30);
        assert_eq!(config.registry.read_timeout_seconds, 60);
    }

    #[test]
    fn stream_table_parses_and_rejects_zero_timeouts() {
        let config =
            parse("[stream]\naddress = \"0.0.0.0\"\nport = 10010\ntoken_ttl_seconds = 5\n")
                .unwrap();
        assert_eq!(config.stream.address.to_string(), "0.0.0.0");
        assert_eq!(config.stream.port, 10010);
        assert_eq!(config.stream.token_ttl_seconds, 5);
        assert_eq!(config.stream.idle_timeout_seconds, 4 * 3600);
        let err = parse("[stream]\nidle_timeout_seconds = 0\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("stream.idle_timeout_seconds"), "{err}");
        let err = parse("[stream]\nadress = \"::1\"\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("adress"), "{err}");
    }

    #[test]
    fn relative_paths_are_rejected() {
        let err = parse("state_dir = \"run/berth\"\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("state_dir"), "{err}");
    }

    #[test]
    fn mirrors_parse_and_endpoints_need_a_scheme() {
        let config =
            parse("[registry.mirrors.\"docker.io\"]\nendpoints = [\"http://localhost:5000\"]\n")
                .unwrap();
        assert_eq!(
            config.registry.mirrors["docker.io"].endpoints,
            vec!["http://localhost:5000".to_string()]
        );
        assert!(config.registry.mirrors["docker.io"].fallback_to_upstream);

        let err = parse("[registry.mirrors.\"docker.io\"]\nendpoints = [\"localhost:5000\"]\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("registry.mirrors.endpoints"), "{err}");
    }

    #[test]
    fn metrics_are_off_by_default_and_take_an_address() {
        assert!(!Config::default().metrics.enabled);
        assert!(Config::default().metrics.address.ip().is_loopback());
        let config = parse("[metrics]\nenabled = true\naddress = \"127.0.0.1:19101\"\n").unwrap();
        assert!(config.metrics.enabled);
        assert_eq!(config.metrics.address.port(), 19101);
        let err = parse("[metrics]\naddress = \"localhost\"\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("address"), "{err}");
    }

    #[test]
    fn overrides_replace_paths() {
        let config = Config::default()
            .with_overrides(&Overrides {
                listen: Some("/tmp/x.sock".into()),
                root_dir: Some("/tmp/root".into()),
                state_dir: None,
            })
            .unwrap();
        assert_eq!(config.listen, PathBuf::from("/tmp/x.sock"));
        assert_eq!(config.root_dir, PathBuf::from("/tmp/root"));
        assert_eq!(config.state_dir, PathBuf::from("/run/berth"));
        assert!(Config::default()
            .with_overrides(&Overrides {
                listen: Some("x.sock".into()),
                ..Default::default()
            })
            .is_err());
    }

    #[test]
    fn printed_config_parses_back() {
        let mut config = Config::default();
        config.registry.mirrors.insert(
            "docker.io".into(),
            MirrorConfig {
                endpoints: vec!["http://localhost:5000".into()],
                fallback_to_upstream: false,
            },
        );
        assert_eq!(parse(&config.to_toml()).unwrap(), config);
    }

    #[test]
    fn info_json_carries_state_dir() {
        let json = Config::default().to_info_json("systemd");
        assert_eq!(json["cgroup_driver"], "systemd");
        assert_eq!(json["cgroup_driver_setting"], "auto");
        assert_eq!(json["stateDir"], "/run/berth");
        assert_eq!(json["state_dir"], "/run/berth");
    }

    #[test]
    fn missing_default_file_means_built_in_defaults_but_explicit_must_exist() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("nope.toml");
        assert!(matches!(
            Config::load(Some(&missing)),
            Err(ConfigError::Read { .. })
        ));
    }
}
