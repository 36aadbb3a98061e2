//! RuntimeClass handlers: which OCI runtime runs a pod's containers, where
//! that runtime keeps its state, and what it supports. The default handler
//! `""` is libcontainer inside the shim; every other one is configured
//! (`[runtime_handlers.<name>]`) with a runtime binary the shim drives.
//! Their features are read once at start-up from the runtime's `features`
//! command, as containerd and CRI-O do.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::config::Config;
use crate::kernel_features::KernelFeatures;

/// How long a runtime's `features` may take at start-up.
const FEATURES_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a runtime's `delete --force` of a dead container may take.
const DELETE_TIMEOUT: Duration = Duration::from_secs(30);

/// What a handler supports, as reported to kubelet in `Status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HandlerFeatures {
    pub recursive_read_only_mounts: bool,
    pub user_namespaces: bool,
}

/// One handler: its runtime binary (none: libcontainer in the shim), the
/// runtime's state root, and its features.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeHandler {
    pub name: String,
    pub binary: Option<PathBuf>,
    pub root: PathBuf,
    /// The root is berth's own (the default, or `<state_dir>/runtimes/
    /// <name>`): recovery may sweep what no record names there. A root the
    /// config names may be shared with another runtime's containers.
    pub own_root: bool,
    pub features: HandlerFeatures,
    /// The image of the pod's sandbox container, for a handler whose pods
    /// have one (`sandbox_container`); None: no sandbox container.
    pub sandbox_image: Option<String>,
}

impl RuntimeHandler {
    /// Removes the runtime's state of container `id`, whose processes are
    /// gone or killed, as its shim's delete would: a runtime binary's
    /// `delete --force` (it knows its own state), then whatever it left.
    /// Gone already is fine.
    pub async fn remove_state(&self, id: &str) -> std::io::Result<()> {
        if let Some(binary) = &self.binary {
            let run = tokio::process::Command::new(binary)
                .arg("--root")
                .arg(&self.root)
                .args(["delete", "--force", id])
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::piped())
                .kill_on_drop(true)
                .output();
            match tokio::time::timeout(DELETE_TIMEOUT, run).await {
                Ok(Ok(output)) if !output.status.success() => tracing::debug!(
                    container = id,
                    handler = %self.name,
                    stderr = %String::from_utf8_lossy(&output.stderr).trim(),
                    "the runtime's delete failed; its state dir is removed instead"
                ),
                Ok(Ok(_)) => {}
                Ok(Err(err)) => tracing::warn!(
                    container = id,
                    handler = %self.name,
                    error = %err,
                    "cannot run the runtime's delete; its state dir is removed instead"
                ),
                Err(_) => tracing::warn!(
                    container = id,
                    handler = %self.name,
                    "the runtime's delete did not finish within {DELETE_TIMEOUT:?}"
                ),
            }
        }
        match std::fs::remove_dir_all(self.root.join(id)) {
            Err(err) if err.kind() != std::io::ErrorKind::NotFound => Err(err),
            _ => Ok(()),
        }
    }
}

/// Every handler berthd offers, the default first.
#[derive(Debug, Clone)]
pub struct RuntimeHandlers {
    default: RuntimeHandler,
    configured: BTreeMap<String, RuntimeHandler>,
}

impl RuntimeHandlers {
    /// The default handler only, its state in `root`.
    pub fn default_only(root: PathBuf, kernel: &KernelFeatures) -> Self {
        Self {
            default: RuntimeHandler {
                name: String::new(),
                binary: None,
                root,
                own_root: true,
                features: HandlerFeatures {
                    recursive_read_only_mounts: kernel.recursive_read_only,
                    user_namespaces: kernel.user_namespaces,
                },
                sandbox_image: None,
            },
            configured: BTreeMap::new(),
        }
    }

    /// The handlers of `config`, each runtime's features from `features`
    /// (its `features` output, or why there is none).
    pub fn from_config(
        config: &Config,
        kernel: &KernelFeatures,
        features: &dyn Fn(&Path) -> Result<Vec<u8>, String>,
    ) -> Self {
        let layout = crate::layout::StateLayout::new(&config.state_dir);
        let mut handlers = Self::default_only(layout.runtime_root(), kernel);
        for (name, handler) in &config.runtime_handlers {
            let reported = match features(&handler.runtime_path) {
                Ok(json) => parse_features(&json),
                Err(reason) => {
                    tracing::warn!(
                        handler = %name,
                        runtime = %handler.runtime_path.display(),
                        %reason,
                        "the runtime's features are unknown: user namespaces and recursive \
                         read-only mounts are not advertised for this handler"
                    );
                    HandlerFeatures::default()
                }
            };
            let handler = RuntimeHandler {
                name: name.clone(),
                binary: Some(handler.runtime_path.clone()),
                root: handler
                    .runtime_root
                    .clone()
                    .unwrap_or_else(|| layout.handler_root(name)),
                own_root: handler.runtime_root.is_none(),
                // Only what both the kernel and the runtime do.
                features: HandlerFeatures {
                    recursive_read_only_mounts: kernel.recursive_read_only
                        && reported.recursive_read_only_mounts,
                    user_namespaces: kernel.user_namespaces && reported.user_namespaces,
                },
                sandbox_image: handler.sandbox_container_image(),
            };
            tracing::info!(
                handler = %handler.name,
                runtime = %handler.runtime_path_display(),
                root = %handler.root.display(),
                features = ?handler.features,
                sandbox_image = ?handler.sandbox_image,
                "runtime handler"
            );
            handlers.configured.insert(name.clone(), handler);
        }
        handlers
    }

    /// A handler with a runtime binary, for tests.
    pub fn with(mut self, handler: RuntimeHandler) -> Self {
        self.configured.insert(handler.name.clone(), handler);
        self
    }

    /// The handler `name` names (`""`: the default); None if it is not
    /// configured.
    pub fn get(&self, name: &str) -> Option<&RuntimeHandler> {
        if name.is_empty() {
            Some(&self.default)
        } else {
            self.configured.get(name)
        }
    }

    /// Every handler, the default first.
    pub fn all(&self) -> impl Iterator<Item = &RuntimeHandler> {
        std::iter::once(&self.default).chain(self.configured.values())
    }
}

impl RuntimeHandler {
    fn runtime_path_display(&self) -> String {
        self.binary
            .as_ref()
            .map_or_else(|| "libcontainer".to_string(), |b| b.display().to_string())
    }
}

/// What an OCI runtime's `features` JSON (runtime-spec features.md) says
/// of what kubelet asks: user namespaces need idmapped mounts
/// (`linux.mountExtensions.idmap.enabled`) and the `user` namespace;
/// recursive read-only mounts the `rro` mount option. Anything unreadable
/// supports nothing.
pub fn parse_features(json: &[u8]) -> HandlerFeatures {
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(json) else {
        return HandlerFeatures::default();
    };
    let has = |list: &serde_json::Value, item: &str| {
        list.as_array()
            .is_some_and(|items| items.iter().any(|i| i.as_str() == Some(item)))
    };
    let linux = &value["linux"];
    HandlerFeatures {
        recursive_read_only_mounts: has(&value["mountOptions"], "rro"),
        user_namespaces: linux["mountExtensions"]["idmap"]["enabled"].as_bool() == Some(true)
            && has(&linux["namespaces"], "user"),
    }
}

/// Runs `<binary> features` and returns its output; why not, when it
/// fails (a runtime without the command, one that hangs).
pub fn run_features(binary: &Path) -> Result<Vec<u8>, String> {
    let mut child = std::process::Command::new(binary)
        .arg("features")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|err| format!("cannot run it: {err}"))?;
    let deadline = std::time::Instant::now() + FEATURES_TIMEOUT;
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if std::time::Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "`features` did not finish within {FEATURES_TIMEOUT:?}"
                ));
            }
            Err(err) => return Err(format!("waiting for it: {err}")),
        }
    }
    let output = child
        .wait_with_output()
        .map_err(|err| format!("reading its output: {err}"))?;
    if !output.status.success() {
        return Err(format!(
            "`features` failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        ));
    }
    Ok(output.stdout)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// runc 1.5.2's `features`, cut to what is read.
    const RUNC: &str = r#"{
        "ociVersionMin": "1.0.0",
        "mountOptions": ["bind", "rbind", "ro", "rro", "rw"],
        "linux": {
            "namespaces": ["cgroup", "ipc", "mount", "network", "pid", "time", "user", "uts"],
            "mountExtensions": {"idmap": {"enabled": true}}
        }
    }"#;

    #[test]
    fn runc_features_give_user_namespaces_and_recursive_read_only() {
        assert_eq!(
            parse_features(RUNC.as_bytes()),
            HandlerFeatures {
                recursive_read_only_mounts: true,
                user_namespaces: true,
            }
        );
    }

    #[test]
    fn a_runtime_without_idmap_or_rro_gets_neither() {
        let old = r#"{"mountOptions": ["ro", "rw"], "linux": {"namespaces": ["user"]}}"#;
        assert_eq!(parse_features(old.as_bytes()), HandlerFeatures::default());
        let no_user = RUNC.replace("\"time\", \"user\",", "");
        assert!(!parse_features(no_user.as_bytes()).user_namespaces);
        assert_eq!(parse_features(b"not json"), HandlerFeatures::default());
    }

    fn config_with(handlers: &[(&str, Option<&str>)]) -> Config {
        let mut config = Config {
            state_dir: PathBuf::from("/run/b"),
            ..Config::default()
        };
        for (name, root) in handlers {
            config.runtime_handlers.insert(
                name.to_string(),
                crate::config::RuntimeHandlerConfig {
                    runtime_path: PathBuf::from(format!("/opt/{name}")),
                    runtime_root: root.map(PathBuf::from),
                    sandbox_container: false,
                    sandbox_image: None,
                },
            );
        }
        config
    }

    #[test]
    fn handlers_get_their_runtime_a_root_and_what_kernel_and_runtime_both_do() {
        let config = config_with(&[("runc", None), ("old", Some("/var/run/old"))]);
        let kernel = KernelFeatures {
            recursive_read_only: true,
            user_namespaces: false,
        };
        let handlers = RuntimeHandlers::from_config(&config, &kernel, &|binary| {
            if binary.ends_with("runc") {
                Ok(RUNC.as_bytes().to_vec())
            } else {
                Err("no features command".to_string())
            }
        });
        let names: Vec<&str> = handlers.all().map(|h| h.name.as_str()).collect();
        assert_eq!(names, ["", "old", "runc"]);

        let default = handlers.get("").unwrap();
        assert_eq!(default.binary, None);
        assert_eq!(default.root, PathBuf::from("/run/b/runtime"));
        assert!(default.features.recursive_read_only_mounts);
        assert!(!default.features.user_namespaces);

        let runc = handlers.get("runc").unwrap();
        assert_eq!(runc.binary, Some(PathBuf::from("/opt/runc")));
        assert_eq!(runc.root, PathBuf::from("/run/b/runtimes/runc"));
        // The runtime can, the kernel cannot: not advertised.
        assert!(runc.features.recursive_read_only_mounts);
        assert!(!runc.features.user_namespaces);

        assert!(runc.own_root);
        let old = handlers.get("old").unwrap();
        assert_eq!(old.root, PathBuf::from("/var/run/old"));
        assert!(!old.own_root);
        assert_eq!(old.features, HandlerFeatures::default());

        assert!(handlers.get("kata").is_none());
    }

    #[test]
    fn features_of_a_real_binary_and_of_one_that_fails() {
        let err = run_features(Path::new("/nonexistent/runc")).unwrap_err();
        assert!(err.contains("cannot run"), "{err}");
        // `false features` exits 1.
        let err = run_features(Path::new("/bin/false")).unwrap_err();
        assert!(err.contains("failed"), "{err}");
        // `echo features` prints the word: not JSON, so nothing supported.
        let out = run_features(Path::new("/bin/echo")).unwrap();
        assert_eq!(parse_features(&out), HandlerFeatures::default());
    }
}
