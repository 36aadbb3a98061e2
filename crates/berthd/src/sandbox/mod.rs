//! Pod sandboxes: what RunPodSandbox builds and Stop/RemovePodSandbox take
//! down. Each step of a run is undone, in reverse, when a later one fails,
//! so a failed run leaves no namespace, mount, cgroup or IP behind.

mod error;
pub mod host;
#[cfg(test)]
pub(crate) mod lifecycle_tests;
pub mod namespaces;
pub mod process;
pub mod store;

use std::path::PathBuf;
use std::sync::{Arc, RwLock};

pub use self::error::SandboxError;
use self::host::{PodNamespaces, PodNetworks};
use self::namespaces::PinRequest;
use self::store::{SandboxRecord, SandboxState, SandboxStore};
use crate::clock::now_nanos;
use berth_cgroups::{CgroupManager, Driver, ParentTracker};
use berth_network::cni::{NetworkConfigList, PodNetwork, PortMapping};
use cri_api::v1::{NamespaceMode, PodSandboxConfig, Protocol};

/// kubelet gives sandboxes this oom_score_adj (containerd's value); it is
/// clamped to what berthd itself has, as the host may not allow lower.
const SANDBOX_OOM_SCORE_ADJ: i32 = -998;

/// Size of a pod's /dev/shm, as Docker and containerd default.
const SHM_SIZE: &str = "size=65536k";

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
    /// Held while creating a sandbox cgroup under a parent, and while
    /// removing cgroups and unused parents, so a parent is never removed
    /// between being ensured and receiving its child.
    pub cgroup_lock: std::sync::Mutex<()>,
    /// Handler names accepted besides the default `""`.
    pub runtime_handlers: Vec<String>,
    /// The pod CIDR from UpdateRuntimeConfig, passed to CNI as `ipRanges`.
    pub pod_cidr: RwLock<Option<String>>,
}

/// What a failed run has to undo.
#[derive(Default)]
struct Undo {
    name: Option<(String, String)>,
    /// The parent was ensured: a parent berth created for this pod alone
    /// goes with it.
    parent: bool,
    cgroup: Option<String>,
    dir: Option<PathBuf>,
    ns_dir: Option<PathBuf>,
    pins: Vec<PathBuf>,
    shm: Option<PathBuf>,
    infra: Option<store::InfraProcess>,
    network: Option<(NetworkConfigList, PodNetwork)>,
}

impl SandboxManager {
    /// RunPodSandbox: returns the new sandbox's id. The handler has checked
    /// the request's shape (metadata, namespace modes).
    pub async fn run(
        &self,
        config: PodSandboxConfig,
        runtime_handler: &str,
    ) -> Result<String, SandboxError> {
        let metadata = config.metadata.clone().unwrap_or_default();
        if !runtime_handler.is_empty()
            && !self
                .runtime_handlers
                .iter()
                .any(|name| name == runtime_handler)
        {
            return Err(SandboxError::UnknownRuntimeHandler {
                handler: runtime_handler.to_string(),
            });
        }
        let id =
            crate::ids::new_id().map_err(|err| SandboxError::io("generating a sandbox id", err))?;
        let name_key = format!(
            "{}_{}_{}_{}",
            metadata.name, metadata.namespace, metadata.uid, metadata.attempt
        );
        if let Err(holder) = self.store.reserve_name(&name_key, &id) {
            return Err(SandboxError::NameReserved {
                name: name_key,
                holder,
            });
        }
        let mut undo = Undo {
            name: Some((name_key.clone(), id.clone())),
            ..Default::default()
        };
        match self
            .set_up(&id, &name_key, runtime_handler, config, &mut undo)
            .await
        {
            Ok(record) => {
                self.store.insert(record);
                Ok(id)
            }
            Err(err) => {
                self.undo(undo).await;
                Err(err)
            }
        }
    }

    async fn set_up(
        &self,
        id: &str,
        name_key: &str,
        runtime_handler: &str,
        config: PodSandboxConfig,
        undo: &mut Undo,
    ) -> Result<SandboxRecord, SandboxError> {
        let linux = config.linux.clone().unwrap_or_default();
        let options = linux
            .security_context
            .as_ref()
            .and_then(|context| context.namespace_options.clone())
            .unwrap_or_default();
        let network_mode = options.network();
        let ipc_mode = options.ipc();
        let pid_mode = options.pid();

        // Cgroup: the pod's parent (created if missing), the sandbox's child.
        let location = berth_cgroups::sandbox_cgroup(
            self.driver,
            &linux.cgroup_parent,
            &self.default_parent,
            id,
        )
        .map_err(|err| SandboxError::CgroupParentName(Box::new(err)))?;
        {
            let _cgroups = self.lock_cgroups();
            self.parents
                .ensure(&location.parent_path)
                .map_err(|source| SandboxError::CgroupParent {
                    parent: location.parent_path.clone(),
                    source: Box::new(source),
                })?;
            undo.parent = true;
            self.cgroups
                .create(&location.path)
                .map_err(|source| SandboxError::Cgroup {
                    path: location.path.clone(),
                    source: Box::new(source),
                })?;
            undo.cgroup = Some(location.path.clone());
        }

        let dir = self.store.record_dir(id);
        let ns_dir = self.ns_dir.join(id);
        std::fs::create_dir_all(dir.join("root"))
            .map_err(|err| SandboxError::io("sandbox dir", err))?;
        undo.dir = Some(dir.clone());
        std::fs::create_dir_all(&ns_dir).map_err(|err| SandboxError::io("namespace dir", err))?;
        undo.ns_dir = Some(ns_dir.clone());

        // Namespaces, hostname, sysctls and the infra process.
        let hostname = pod_hostname(&config);
        let request = PinRequest {
            dir: ns_dir.clone(),
            net: network_mode != NamespaceMode::Node,
            ipc: ipc_mode != NamespaceMode::Node,
            uts: network_mode != NamespaceMode::Node,
            pid: pid_mode == NamespaceMode::Pod,
            hostname: (network_mode != NamespaceMode::Node).then(|| hostname.clone()),
            sysctls: namespaces::check_sysctls(&linux.sysctls, network_mode, ipc_mode)?,
            infra_root: dir.join("root"),
        };
        let pinned = self.namespaces.pin(&request).await?;
        undo.pins = pinned.namespaces.values().cloned().collect();
        let infra = match pinned.infra_pid {
            Some(pid) => {
                let infra = self
                    .namespaces
                    .identify(pid)
                    .ok_or(SandboxError::InfraVanished { pid })?;
                undo.infra = Some(infra.clone());
                self.cgroups
                    .add_process(&location.path, pid)
                    .map_err(|source| SandboxError::InfraCgroup {
                        path: location.path.clone(),
                        source: Box::new(source),
                    })?;
                self.namespaces
                    .clamp_oom_score_adj(pid, SANDBOX_OOM_SCORE_ADJ);
                Some(infra)
            }
            None => None,
        };

        let shm = if ipc_mode != NamespaceMode::Node {
            let shm = dir.join("shm");
            self.namespaces.mount_shm(&shm, SHM_SIZE)?;
            undo.shm = Some(shm.clone());
            Some(shm)
        } else {
            None
        };

        // Network: loopback, then the CNI network.
        let mut ips = Vec::new();
        let mut network_config = None;
        let mut cni_result = None;
        if network_mode != NamespaceMode::Node {
            let netns = pinned
                .namespaces
                .get("net")
                .cloned()
                .ok_or(SandboxError::NetnsNotPinned)?;
            let (raw, network) = self.load_network()?;
            let pod = self.pod_network(id, &config, &netns);
            self.network
                .loopback_up(&netns)
                .await
                .map_err(|source| SandboxError::Loopback {
                    netns: netns.clone(),
                    source: Box::new(source),
                })?;
            let result =
                self.network
                    .add(&network, &pod)
                    .await
                    .map_err(|source| SandboxError::CniAdd {
                        network: network.name.clone(),
                        source: Box::new(source),
                    })?;
            undo.network = Some((network, pod));
            ips = result.ips.iter().map(|ip| ip.to_string()).collect();
            network_config = Some(raw);
            cni_result = Some(result.raw);
        }

        write_dns_files(&dir, &config, &hostname, &ips)?;

        let record = SandboxRecord {
            id: id.to_string(),
            name_key: name_key.to_string(),
            created_at: now_nanos(),
            state: SandboxState::Ready,
            runtime_handler: runtime_handler.to_string(),
            config: config.clone(),
            dir,
            namespaces: pinned.namespaces,
            infra,
            // The parent in the driver's own form (a slice name under
            // systemd): containers' cgroups are named from it.
            cgroup_parent: location.parent.clone(),
            cgroup_path: location.path.clone(),
            network_attached: network_config.is_some(),
            ips,
            network_config,
            cni_result,
            shm,
        };
        self.store.persist(&record)?;
        Ok(record)
    }

    /// Reverses whatever a failed run did, in reverse order.
    async fn undo(&self, undo: Undo) {
        if let Some((network, pod)) = &undo.network {
            if let Err(err) = self.network.del(network, pod, None).await {
                tracing::warn!(sandbox = %pod.sandbox_id, error = %err, "undo: CNI DEL");
            }
        }
        if let Some(shm) = &undo.shm {
            self.namespaces.unmount(shm);
        }
        if let Some(infra) = &undo.infra {
            self.namespaces.kill_and_wait(infra).await;
        }
        for pin in &undo.pins {
            self.namespaces.unmount(pin);
        }
        if let Some(ns_dir) = &undo.ns_dir {
            let _ = std::fs::remove_dir(ns_dir);
        }
        if let Some(dir) = &undo.dir {
            let _ = std::fs::remove_dir_all(dir);
        }
        if undo.parent || undo.cgroup.is_some() {
            let _cgroups = self.lock_cgroups();
            if let Some(path) = &undo.cgroup {
                if let Err(err) = self.cgroups.remove(path) {
                    tracing::warn!(cgroup = %path, error = %err, "undo: remove cgroup");
                }
            }
            if let Err(err) = self.parents.remove_unused_parents() {
                tracing::warn!(error = %err, "undo: remove unused cgroup parents");
            }
        }
        if let Some((name, id)) = &undo.name {
            self.store.release_name(name, id);
        }
    }

    /// StopPodSandbox: the infra process is killed and the network detached.
    /// Already stopped, or unknown, is success.
    pub async fn stop(&self, id: &str) -> Result<(), SandboxError> {
        let Some(handle) = self.find(id)? else {
            return Ok(());
        };
        let mut record = handle.lock().await;
        // A concurrent RemovePodSandbox finished while we waited: success.
        if !self.store.contains(&record.id) {
            return Ok(());
        }
        if let Some(infra) = &record.infra {
            self.namespaces.kill_and_wait(infra).await;
        }
        if record.network_attached {
            self.detach_network(&record).await?;
            record.network_attached = false;
        }
        record.state = SandboxState::NotReady;
        Ok(self.store.persist(&record)?)
    }

    async fn detach_network(&self, record: &SandboxRecord) -> Result<(), SandboxError> {
        let Some(raw) = &record.network_config else {
            return Ok(());
        };
        let network =
            NetworkConfigList::from_slice(raw.as_bytes(), std::path::Path::new("(saved)"))
                .map_err(|source| SandboxError::SavedCniConfig {
                    id: record.id.clone(),
                    source: Box::new(source),
                })?;
        let netns = record.namespaces.get("net").cloned().unwrap_or_default();
        let pod = self.pod_network(&record.id, &record.config.clone(), &netns);
        self.network
            .del(&network, &pod, record.cni_result.as_ref())
            .await
            .map_err(|source| SandboxError::CniDel {
                id: record.id.clone(),
                source: Box::new(source),
            })
    }

    /// RemovePodSandbox: stops it if needed, then removes everything it
    /// owns. Unknown is success.
    pub async fn remove(&self, id: &str) -> Result<(), SandboxError> {
        let Some(handle) = self.find(id)? else {
            return Ok(());
        };
        let full_id = handle.lock().await.id.clone();
        self.stop(&full_id).await?;
        let record = handle.lock().await;
        if !self.store.contains(&record.id) {
            return Ok(());
        }
        if let Some(shm) = &record.shm {
            self.namespaces.unmount(shm);
        }
        for pin in record.namespaces.values() {
            self.namespaces.unmount(pin);
        }
        // Pods with only host namespaces have no pins, but still the dir.
        let _ = std::fs::remove_dir(self.ns_dir.join(&record.id));
        {
            let _cgroups = self.lock_cgroups();
            self.cgroups
                .remove(&record.cgroup_path)
                .map_err(|source| SandboxError::Cgroup {
                    path: record.cgroup_path.clone(),
                    source: Box::new(source),
                })?;
            if let Err(err) = self.parents.remove_unused_parents() {
                tracing::warn!(error = %err, "removing unused cgroup parents");
            }
        }
        if let Err(err) = std::fs::remove_dir_all(&record.dir) {
            if err.kind() != std::io::ErrorKind::NotFound {
                return Err(SandboxError::io(
                    format!("sandbox dir {}", record.dir.display()),
                    err,
                ));
            }
        }
        self.store.remove(&record.id);
        self.store.release_name(&record.name_key, &record.id);
        Ok(())
    }

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

/// The hostname a pod gets: the config's, else the node's, as containerd
/// does (kubelet always sends one; a pod name may be too long for one).
fn pod_hostname(config: &PodSandboxConfig) -> String {
    if !config.hostname.is_empty() {
        return config.hostname.clone();
    }
    nix::unistd::gethostname()
        .ok()
        .and_then(|name| name.into_string().ok())
        .unwrap_or_else(|| "localhost".to_string())
}

/// The pod's hostname, hosts and resolv.conf files, which containers mount.
fn write_dns_files(
    dir: &std::path::Path,
    config: &PodSandboxConfig,
    hostname: &str,
    ips: &[String],
) -> Result<(), SandboxError> {
    use berth_network::dns;
    let parsed_ips: Vec<std::net::IpAddr> = ips.iter().filter_map(|ip| ip.parse().ok()).collect();
    let resolv = match &config.dns_config {
        Some(dns_config)
            if !(dns_config.servers.is_empty()
                && dns_config.searches.is_empty()
                && dns_config.options.is_empty()) =>
        {
            dns::resolv_conf(
                &dns_config.servers,
                &dns_config.searches,
                &dns_config.options,
            )
        }
        _ => dns::host_resolv_conf().unwrap_or_default(),
    };
    for (name, contents) in [
        ("hostname", dns::hostname_file(hostname)),
        ("hosts", dns::hosts_file(hostname, &parsed_ips)),
        ("resolv.conf", resolv),
    ] {
        berth_atomic_file::write_atomic(&dir.join(name), contents.as_bytes(), 0o644)
            .map_err(|err| SandboxError::io(format!("pod {name} file"), err))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostname_falls_back_to_the_nodes() {
        let mut config = PodSandboxConfig::default();
        let node = nix::unistd::gethostname().unwrap().into_string().unwrap();
        assert_eq!(pod_hostname(&config), node);
        config.hostname = "web-0".into();
        assert_eq!(pod_hostname(&config), "web-0");
    }
}
