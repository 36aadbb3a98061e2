//! SIGHUP: the config file is read again and what can change while berthd
//! runs is applied (the log filter and the registry settings); every other
//! changed key is named as needing a restart. A file that does not load
//! changes nothing: the error is logged and the running config kept.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, PoisonError, RwLock};

use berth_image::pull::ImagePuller;

use crate::config::{Config, Overrides};
use crate::logging::{self, LogHandle};

/// Keys (top-level, or `table.key`) applied on reload. Every other
/// registry key goes through the same loader into the puller, except the
/// timeouts, which the HTTP clients are built with.
const RELOADABLE: [&str; 1] = ["log_level"];
const REGISTRY_NEEDS_RESTART: [&str; 2] = [
    "registry.connect_timeout_seconds",
    "registry.read_timeout_seconds",
];

/// What a reload found changed.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Changes {
    /// Changed keys applied now.
    pub applied: Vec<String>,
    /// Changed keys that take effect only after a restart.
    pub need_restart: Vec<String>,
}

/// Whether a changed key is applied by a reload.
fn reloadable(key: &str) -> bool {
    RELOADABLE.contains(&key)
        || ((key == "registry" || key.starts_with("registry."))
            && !REGISTRY_NEEDS_RESTART.contains(&key))
}

/// The keys whose values differ between `old` and `new`, sorted into
/// applied and needing a restart. Keys are compared one table deep
/// (`registry.mirrors`, `cni.bin_dirs`).
pub fn changes(old: &Config, new: &Config) -> Changes {
    let (old, new) = (flatten(old), flatten(new));
    let keys: std::collections::BTreeSet<&String> = old.keys().chain(new.keys()).collect();
    let mut changes = Changes::default();
    for key in keys {
        if old.get(key) != new.get(key) {
            if reloadable(key) {
                changes.applied.push(key.clone());
            } else {
                changes.need_restart.push(key.clone());
            }
        }
    }
    changes
}

/// The config as `key` or `table.key` → value.
fn flatten(config: &Config) -> BTreeMap<String, serde_json::Value> {
    let mut flat = BTreeMap::new();
    if let Ok(serde_json::Value::Object(top)) = serde_json::to_value(config) {
        for (key, value) in top {
            match value {
                serde_json::Value::Object(table) => {
                    for (inner, value) in table {
                        flat.insert(format!("{key}.{inner}"), value);
                    }
                }
                value => {
                    flat.insert(key, value);
                }
            }
        }
    }
    flat
}

/// How berthd was started, as a reload must load the config again.
pub struct ReloadInputs {
    /// `--config`, when given (else the default path).
    pub path: Option<PathBuf>,
    pub overrides: Overrides,
    /// `--log-level`, which wins over the file's `log_level`.
    pub log_flag: Option<String>,
    pub log: Option<LogHandle>,
}

/// The config in force: the start-up config with what the last reload
/// applied. `Status` shows it, so `crictl info` after a reload shows the
/// mirrors and log level berthd now uses, not those it started with.
#[derive(Clone)]
pub struct ConfigInForce(Arc<RwLock<Config>>);

impl ConfigInForce {
    pub fn new(config: Config) -> Self {
        Self(Arc::new(RwLock::new(config)))
    }

    /// A copy of the config in force.
    pub fn get(&self) -> Config {
        // A writer only swaps a whole value in: a poisoned lock still
        // holds a complete config.
        self.0
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn set(&self, config: Config) {
        *self.0.write().unwrap_or_else(PoisonError::into_inner) = config;
    }
}

/// Reloads the config on request, holding what it applies to.
pub struct Reloader {
    inputs: ReloadInputs,
    images: Arc<ImagePuller>,
    /// The config in force, shared with `Status`.
    in_force: ConfigInForce,
}

impl Reloader {
    pub fn new(inputs: ReloadInputs, images: Arc<ImagePuller>, in_force: ConfigInForce) -> Self {
        Self {
            inputs,
            images,
            in_force,
        }
    }

    /// Reads the config file again and applies what can be applied; logs
    /// what changed, what was applied and what needs a restart.
    pub fn reload(&mut self) {
        let loaded = Config::load(self.inputs.path.as_deref()).and_then(|(config, source)| {
            Ok((config.with_overrides(&self.inputs.overrides)?, source))
        });
        let (new, source) = match loaded {
            Ok(loaded) => loaded,
            Err(err) => {
                tracing::error!(error = %err, "reload failed: the running config is kept");
                return;
            }
        };
        let filter = match logging::filter(self.inputs.log_flag.as_deref(), new.log_level) {
            Ok(filter) => filter,
            Err(err) => {
                tracing::error!(error = %err, "reload failed: the running config is kept");
                return;
            }
        };
        // The registry settings include the hosts.toml directory, read
        // again here: a broken entry there keeps the running config too.
        let hosts = match crate::registry::registry_hosts(&new) {
            Ok(hosts) => hosts,
            Err(err) => {
                tracing::error!(error = %err, "reload failed: the running config is kept");
                return;
            }
        };
        let current = self.in_force.get();
        let changes = changes(&current, &new);
        if let Some(log) = &self.inputs.log {
            if let Err(err) = log.reload(filter) {
                tracing::warn!(error = %err, "reload: cannot replace the log filter");
            }
        }
        self.images.set_hosts(hosts);
        // Keys needing a restart keep their running values: the next reload
        // compares against what is in force, and names them again.
        let mut kept = current;
        kept.log_level = new.log_level;
        let timeouts = (
            kept.registry.connect_timeout_seconds,
            kept.registry.read_timeout_seconds,
        );
        kept.registry = new.registry.clone();
        (
            kept.registry.connect_timeout_seconds,
            kept.registry.read_timeout_seconds,
        ) = timeouts;
        self.in_force.set(kept);
        tracing::info!(
            config = %source,
            applied = ?changes.applied,
            needs_restart = ?changes.need_restart,
            "config reloaded"
        );
        for key in &changes.need_restart {
            tracing::warn!(key = %key, "changed in the config file; takes effect after a restart of berthd");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::MirrorConfig;

    #[test]
    fn mirrors_and_log_level_apply_the_rest_needs_a_restart() {
        let old = Config::default();
        let mut new = old.clone();
        assert_eq!(changes(&old, &new), Changes::default());
        new.log_level = crate::config::LogLevel::Debug;
        new.registry.mirrors.insert(
            "docker.io".into(),
            MirrorConfig {
                endpoints: vec!["http://127.0.0.1:5000".into()],
                fallback_to_upstream: false,
            },
        );
        new.registry.insecure_hosts.push("mirror.local".into());
        new.registry.read_timeout_seconds = 5;
        new.cni.conf_dir = "/etc/other".into();
        new.listen = "/run/other.sock".into();
        new.default_ulimits.push("nofile=10".into());
        let found = changes(&old, &new);
        assert_eq!(
            found.applied,
            ["log_level", "registry.insecure_hosts", "registry.mirrors"]
        );
        assert_eq!(
            found.need_restart,
            [
                "cni.conf_dir",
                "default_ulimits",
                "listen",
                "registry.read_timeout_seconds"
            ]
        );
    }

    #[test]
    fn an_optional_key_set_or_unset_is_a_change() {
        let old = Config::default();
        let mut new = old.clone();
        new.helper_dir = Some("/opt/berth".into());
        assert_eq!(changes(&old, &new).need_restart, ["helper_dir"]);
        assert_eq!(changes(&new, &old).need_restart, ["helper_dir"]);
    }
}
