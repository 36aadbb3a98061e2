//! Pod sandboxes: what RunPodSandbox builds and Stop/RemovePodSandbox take
//! down. Each step of a run is written into the pod's journal before it
//! runs (`journal.rs`); one teardown (`teardown.rs`) undoes a journal in
//! reverse for a failed run, a stop, a remove and start-up recovery.

mod dns;
mod error;
pub mod host;
mod infra_watch;
pub mod journal;
#[cfg(test)]
pub(crate) mod lifecycle_tests;
pub mod metered_network;
pub mod namespaces;
pub mod paced_network;
pub mod process;
mod recover;
mod remove;
mod run;
mod stop;
pub mod store;
mod teardown;
#[cfg(test)]
mod teardown_tests;
mod update;

use std::path::PathBuf;
use std::sync::{Arc, RwLock};

pub use self::error::SandboxError;
use self::host::{PodNamespaces, PodNetworks};
use self::store::SandboxStore;
pub use self::teardown::UnfinishedRuns;
use berth_cgroups::{CgroupManager, Driver, ParentTracker};
use berth_network::cni::{NetworkConfigList, PodNetwork, PortMapping};
use cri_api::v1::{PodSandboxConfig, Protocol};

/// Everything sandboxes need from the daemon.
pub struct SandboxManager {
    pub store: SandboxStore,
    pub cgroups: Arc<dyn CgroupManager>,
    pub parents: ParentTracker,
    pub driver: Driver,
    pub default_parent: String,
    /// CNI: the pod network.
    pub network: Arc<dyn PodNetworks>,
    /// berth-pinns and mounts: the pod's namespaces and /dev/shm.
    pub namespaces: Arc<dyn PodNamespaces>,
    /// Where namespaces are pinned: `<state_dir>/ns/<sandbox id>/<kind>`.
    pub ns_dir: PathBuf,
    /// Where pods' hostname, hosts and resolv.conf are, on disk:
    /// `<root_dir>/pods/<sandbox id>/` (`RootLayout::pods`).
    pub pods_dir: PathBuf,
    /// Held while creating a sandbox cgroup under a parent, and while
    /// removing cgroups and unused parents, so a parent is never removed
    /// between being ensured and receiving its child.
    pub cgroup_lock: std::sync::Mutex<()>,
    /// The handlers pods may name: the default `""` and the configured ones.
    pub runtime_handlers: Arc<crate::runtime_handlers::RuntimeHandlers>,
    /// Whether this host can run pods in a user namespace (see
    /// `berth_spec::userns::kernel_supports_userns`).
    pub user_namespaces: bool,
    /// The host's AppArmor (and berth's default profile) and SELinux,
    /// found at start-up (`crate::lsm`); containers' specs use it too.
    pub lsm: berth_spec::LsmHost,
    /// The pod CIDR from UpdateRuntimeConfig, passed to CNI as `ipRanges`.
    pub pod_cidr: RwLock<Option<String>>,
    /// Failed runs whose undo failed too, finished by the next Remove.
    pub unfinished: UnfinishedRuns,
}

impl SandboxManager {
    fn lock_cgroups(&self) -> std::sync::MutexGuard<'_, ()> {
        self.cgroup_lock
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The sandbox `id` names (full id or unique prefix).
    pub fn find(&self, id: &str) -> Result<Option<store::SandboxHandle>, SandboxError> {
        Ok(self.store.find(id)?)
    }

    /// The sandbox `id` names, or NotFound naming the id.
    pub fn get(&self, id: &str) -> Result<store::SandboxHandle, SandboxError> {
        self.find(id)?
            .ok_or_else(|| SandboxError::NotFound { id: id.to_string() })
    }

    /// The sandbox `id` names as last persisted, or NotFound naming the id:
    /// for the calls that only report, which must not wait for a stop
    /// in progress (it holds the record through CNI DEL).
    pub fn published(&self, id: &str) -> Result<Arc<store::SandboxRecord>, SandboxError> {
        self.store
            .published(id)?
            .ok_or_else(|| SandboxError::NotFound { id: id.to_string() })
    }

    /// Reads the first CNI config: its raw text (kept for DEL) and parsed form.
    fn load_network(&self) -> Result<(String, NetworkConfigList), SandboxError> {
        let files = berth_network::cni::config_files(self.network.conf_dir())
            .map_err(|err| SandboxError::NetworkNotReady(err.to_string()))?;
        let file = files.first().ok_or_else(|| {
            SandboxError::NetworkNotReady(format!(
                "no CNI config in {}",
                self.network.conf_dir().display()
            ))
        })?;
        let raw = std::fs::read_to_string(file)
            .map_err(|err| SandboxError::io(file.display().to_string(), err))?;
        let network = NetworkConfigList::from_slice(raw.as_bytes(), file)
            .map_err(|err| SandboxError::NetworkNotReady(err.to_string()))?;
        Ok((raw, network))
    }

    fn pod_network(
        &self,
        id: &str,
        config: &PodSandboxConfig,
        netns: &std::path::Path,
    ) -> PodNetwork {
        let metadata = config.metadata.clone().unwrap_or_default();
        PodNetwork {
            sandbox_id: id.to_string(),
            netns: netns.to_path_buf(),
            ifname: "eth0".to_string(),
            pod_namespace: metadata.namespace,
            pod_name: metadata.name,
            pod_uid: metadata.uid,
            port_mappings: config
                .port_mappings
                .iter()
                .map(|mapping| PortMapping {
                    host_port: mapping.host_port,
                    container_port: mapping.container_port,
                    protocol: protocol_name(mapping.protocol()).to_string(),
                    host_ip: mapping.host_ip.clone(),
                })
                .collect(),
            pod_cidr: self
                .pod_cidr
                .read()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .clone(),
        }
    }
}

/// CNI's protocol names.
fn protocol_name(protocol: Protocol) -> &'static str {
    match protocol {
        Protocol::Tcp => "tcp",
        Protocol::Udp => "udp",
        Protocol::Sctp => "sctp",
    }
}
