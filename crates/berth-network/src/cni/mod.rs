//! A CNI client, the equivalent of libcni for berth.
//!
//! It loads the pod network from a configuration directory and runs the
//! list's plugins with the CNI protocol (environment + stdin JSON, result or
//! error JSON on stdout), spec versions 0.3.x/0.4.0 and 1.0.0.
//!
//! ```no_run
//! # async fn example() -> Result<(), berth_network::cni::CniError> {
//! use berth_network::cni::{CniConfig, PodNetwork};
//!
//! let cni = CniConfig::default(); // /etc/cni/net.d, /opt/cni/bin + /usr/lib/cni
//! let Some(net) = cni.load_network()? else {
//!     return Ok(()); // no network configured yet: NetworkReady=false
//! };
//! let pod = PodNetwork {
//!     sandbox_id: "0123abcd".into(),
//!     netns: "/run/berth/ns/0123abcd/net".into(),
//!     ifname: "eth0".into(),
//!     pod_namespace: "default".into(),
//!     pod_name: "web".into(),
//!     pod_uid: "5b0c...".into(),
//!     ..PodNetwork::default()
//! };
//! cni.loopback_up(&pod.netns).await?;
//! let added = cni.add(&net, &pod).await?;
//! println!("pod IPs: {:?}", added.ips);
//! // ... keep `added.raw` with the sandbox; on stop:
//! cni.del(&net, &pod, Some(&added.raw)).await?;
//! # Ok(())
//! # }
//! ```

mod config;
mod error;
mod exec;
mod request;
mod result;

#[cfg(test)]
mod fake_plugin_tests;
#[cfg(test)]
mod real_plugin_tests;

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Map, Value};

pub use config::{config_files, load_network, NetworkConfigList, PluginConfig, CONFIG_EXTENSIONS};
pub use error::{CniCommand, CniError, PluginFailure};
pub use exec::{find_plugin, join_paths, netns_env};
pub use request::{
    cni_args, plugin_stdin, runtime_config, PodNetwork, PortMapping, DEFAULT_IFNAME,
};
pub use result::{plugin_failure, result_ips, AddResult};

use exec::{run_plugin, Invocation};

/// How long one plugin invocation may take before it is killed.
pub const PLUGIN_TIMEOUT: Duration = Duration::from_secs(60);

/// Where CNI configuration lives by convention.
pub const DEFAULT_CONF_DIR: &str = "/etc/cni/net.d";

/// Where plugin binaries are looked for by default: the upstream location,
/// where network add-ons (Calico, Flannel, Cilium) install theirs, then
/// Debian's `containernetworking-plugins`, whose older builds must not
/// shadow an add-on's.
pub const DEFAULT_BIN_DIRS: [&str; 2] = ["/opt/cni/bin", "/usr/lib/cni"];

/// The container id given to the `loopback` plugin (it records nothing
/// under it).
const LOOPBACK_CONTAINER_ID: &str = "berth-loopback";

/// Where to find network configuration and plugin binaries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CniConfig {
    /// The configuration directory (`/etc/cni/net.d`).
    pub conf_dir: PathBuf,
    /// Plugin binary directories, searched in order; also `CNI_PATH`.
    pub bin_dirs: Vec<PathBuf>,
}

impl Default for CniConfig {
    fn default() -> Self {
        CniConfig {
            conf_dir: PathBuf::from(DEFAULT_CONF_DIR),
            bin_dirs: DEFAULT_BIN_DIRS.iter().map(PathBuf::from).collect(),
        }
    }
}

impl CniConfig {
    /// A client for `conf_dir` and `bin_dirs`.
    pub fn new(conf_dir: impl Into<PathBuf>, bin_dirs: Vec<PathBuf>) -> Self {
        CniConfig {
            conf_dir: conf_dir.into(),
            bin_dirs,
        }
    }

    /// Loads the pod network from [`Self::conf_dir`]; see [`load_network`].
    pub fn load_network(&self) -> Result<Option<NetworkConfigList>, CniError> {
        load_network(&self.conf_dir)
    }

    /// Attaches the pod to `net`: ADD on every plugin in order, each one
    /// receiving the previous one's result as `prevResult`.
    ///
    /// If any plugin fails, DEL runs on the whole list (in reverse, without
    /// `prevResult`) to undo what the earlier plugins did; the ADD error is
    /// returned and cleanup errors are only logged.
    pub async fn add(
        &self,
        net: &NetworkConfigList,
        pod: &PodNetwork,
    ) -> Result<AddResult, CniError> {
        add_network(&self.bin_dirs, PLUGIN_TIMEOUT, net, pod).await
    }

    /// Detaches the pod from `net`: DEL on every plugin in reverse order.
    ///
    /// `prev_result` is the [`AddResult::raw`] kept from ADD, if any. When
    /// the namespace no longer exists (or its path is no longer an `nsfs`
    /// mount, see [`netns_env`]) `CNI_NETNS` is empty, and plugins
    /// release what lives outside it (IP allocations, iptables rules). DEL is
    /// idempotent. Every plugin runs even if an earlier one fails; the first
    /// error is returned. Without `prev_result` (ADD never answered) a
    /// plugin whose binary is missing is skipped: ADD cannot have run it.
    ///
    /// Pass the pod's port mappings again (keep them with the sandbox):
    /// `portmap` DEL does nothing when `runtimeConfig.portMappings` is empty,
    /// and its iptables chain would leak.
    pub async fn del(
        &self,
        net: &NetworkConfigList,
        pod: &PodNetwork,
        prev_result: Option<&Value>,
    ) -> Result<(), CniError> {
        del_network(&self.bin_dirs, PLUGIN_TIMEOUT, net, pod, prev_result).await
    }

    /// Brings up `lo` in `netns` with the `loopback` plugin and a built-in
    /// configuration, as containerd does for every sandbox.
    pub async fn loopback_up(&self, netns: &Path) -> Result<(), CniError> {
        loopback_up(&self.bin_dirs, PLUGIN_TIMEOUT, netns).await
    }
}

/// The built-in network that brings up `lo` (see [`CniConfig::loopback_up`]).
pub fn loopback_network() -> NetworkConfigList {
    let mut config = Map::new();
    config.insert("type".into(), json!("loopback"));
    NetworkConfigList {
        name: "cni-loopback".into(),
        cni_version: "1.0.0".into(),
        plugins: vec![PluginConfig {
            plugin_type: "loopback".into(),
            config,
        }],
        source: PathBuf::new(),
    }
}

fn ifname(pod: &PodNetwork) -> &str {
    if pod.ifname.is_empty() {
        DEFAULT_IFNAME
    } else {
        &pod.ifname
    }
}

fn stdin_bytes(net: &NetworkConfigList, stdin: &Value) -> Result<Vec<u8>, CniError> {
    serde_json::to_vec(stdin).map_err(|err| CniError::InvalidConfig {
        path: net.source.clone(),
        reason: format!("cannot serialize plugin config: {err}"),
    })
}

pub(crate) async fn add_network(
    bin_dirs: &[PathBuf],
    timeout: Duration,
    net: &NetworkConfigList,
    pod: &PodNetwork,
) -> Result<AddResult, CniError> {
    match add_chain(bin_dirs, timeout, net, pod).await {
        Ok(result) => Ok(result),
        Err(err) => {
            tracing::warn!(
                network = %net.name,
                sandbox_id = %pod.sandbox_id,
                error = %err,
                "CNI ADD failed; running DEL to clean up"
            );
            if let Err(cleanup) = del_network(bin_dirs, timeout, net, pod, None).await {
                tracing::warn!(
                    network = %net.name,
                    sandbox_id = %pod.sandbox_id,
                    error = %cleanup,
                    "CNI DEL after failed ADD failed"
                );
            }
            Err(err)
        }
    }
}

async fn add_chain(
    bin_dirs: &[PathBuf],
    timeout: Duration,
    net: &NetworkConfigList,
    pod: &PodNetwork,
) -> Result<AddResult, CniError> {
    let args = cni_args(pod);
    let mut prev: Option<(Value, &str)> = None;
    for plugin in &net.plugins {
        let stdin = plugin_stdin(
            net,
            plugin,
            prev.as_ref().map(|(result, _)| result),
            runtime_config(plugin, pod),
        );
        let invocation = Invocation {
            command: CniCommand::Add,
            plugin_type: &plugin.plugin_type,
            container_id: &pod.sandbox_id,
            netns: pod.netns.as_os_str().to_os_string(),
            ifname: ifname(pod),
            cni_args: &args,
            stdin: stdin_bytes(net, &stdin)?,
        };
        let stdout = run_plugin(bin_dirs, &invocation, timeout).await?;
        let invalid = |reason: String| CniError::InvalidResult {
            plugin: plugin.plugin_type.clone(),
            command: CniCommand::Add,
            reason,
        };
        let result: Value = serde_json::from_slice(&stdout)
            .map_err(|err| invalid(format!("{err}: {:?}", String::from_utf8_lossy(&stdout))))?;
        if !result.is_object() {
            return Err(invalid(format!("not a JSON object: {result}")));
        }
        prev = Some((result, &plugin.plugin_type));
    }
    let Some((raw, last_plugin)) = prev else {
        return Err(CniError::InvalidConfig {
            path: net.source.clone(),
            reason: format!("network {:?} has no plugins", net.name),
        });
    };
    let ips = result_ips(&raw).map_err(|reason| CniError::InvalidResult {
        plugin: last_plugin.to_string(),
        command: CniCommand::Add,
        reason,
    })?;
    Ok(AddResult { raw, ips })
}

pub(crate) async fn del_network(
    bin_dirs: &[PathBuf],
    timeout: Duration,
    net: &NetworkConfigList,
    pod: &PodNetwork,
    prev_result: Option<&Value>,
) -> Result<(), CniError> {
    let args = cni_args(pod);
    let netns = netns_env(&pod.netns);
    let mut first_error = None;
    for plugin in net.plugins.iter().rev() {
        let stdin = plugin_stdin(net, plugin, prev_result, runtime_config(plugin, pod));
        let invocation = Invocation {
            command: CniCommand::Del,
            plugin_type: &plugin.plugin_type,
            container_id: &pod.sandbox_id,
            netns: netns.clone(),
            ifname: ifname(pod),
            cni_args: &args,
            stdin: stdin_bytes(net, &stdin)?,
        };
        if let Err(err) = run_plugin(bin_dirs, &invocation, timeout).await {
            // Without ADD's result the ADD may have stopped at this very
            // plugin because its binary is missing: then it never ran and
            // made nothing, and failing its DEL forever would keep the pod
            // (and everything else it holds) from ever being removed. A
            // plugin missing after a complete ADD was removed since: that
            // stays an error, as its state may still be there.
            if prev_result.is_none() && matches!(err, CniError::PluginNotFound { .. }) {
                tracing::warn!(
                    network = %net.name,
                    sandbox_id = %pod.sandbox_id,
                    error = %err,
                    "CNI DEL skips a plugin that is not installed: ADD never answered, so it never ran"
                );
                continue;
            }
            if first_error.is_some() {
                tracing::warn!(
                    network = %net.name,
                    sandbox_id = %pod.sandbox_id,
                    error = %err,
                    "CNI DEL failed"
                );
            } else {
                first_error = Some(err);
            }
        }
    }
    first_error.map_or(Ok(()), Err)
}

pub(crate) async fn loopback_up(
    bin_dirs: &[PathBuf],
    timeout: Duration,
    netns: &Path,
) -> Result<(), CniError> {
    let net = loopback_network();
    for plugin in &net.plugins {
        let stdin = plugin_stdin(&net, plugin, None, Map::new());
        let invocation = Invocation {
            command: CniCommand::Add,
            plugin_type: &plugin.plugin_type,
            container_id: LOOPBACK_CONTAINER_ID,
            netns: netns.as_os_str().to_os_string(),
            ifname: "lo",
            cni_args: "",
            stdin: stdin_bytes(&net, &stdin)?,
        };
        run_plugin(bin_dirs, &invocation, timeout).await?;
    }
    Ok(())
}
