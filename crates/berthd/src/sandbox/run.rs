//! RunPodSandbox: cgroup, namespaces, network and files, each step undone,
//! in reverse, when a later one fails, so a failed run leaves no namespace,
//! mount, cgroup or IP behind.

use std::path::{Path, PathBuf};

use berth_cgroups::CgroupLocation;
use berth_network::cni::{NetworkConfigList, PodNetwork};
use cri_api::v1::{LinuxPodSandboxConfig, NamespaceMode, PodSandboxConfig};

use super::dns::{pod_hostname, write_dns_files};
use super::namespaces::PinRequest;
use super::store::{SandboxRecord, SandboxState};
use super::{namespaces, store, SandboxError, SandboxManager};
use crate::clock::now_nanos;
use crate::recovery::intent::{self, SandboxIntent};

/// kubelet gives sandboxes this oom_score_adj (containerd's value); it is
/// clamped to what berthd itself has, as the host may not allow lower.
const SANDBOX_OOM_SCORE_ADJ: i32 = -998;

/// Size of a pod's /dev/shm, as Docker and containerd default.
const SHM_SIZE: &str = "size=65536k";

/// The pod's namespace modes, as asked.
struct Modes {
    network: NamespaceMode,
    ipc: NamespaceMode,
    pid: NamespaceMode,
}

impl Modes {
    fn of(linux: &LinuxPodSandboxConfig) -> Self {
        let options = linux
            .security_context
            .as_ref()
            .and_then(|context| context.namespace_options.clone())
            .unwrap_or_default();
        Self {
            network: options.network(),
            ipc: options.ipc(),
            pid: options.pid(),
        }
    }
}

/// A pod attached to its CNI network.
struct Attached {
    ips: Vec<String>,
    /// The network config as read, kept for DEL.
    config: String,
    /// The CNI result, kept for DEL's `prevResult`.
    result: serde_json::Value,
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
        if self.runtime_handlers.get(runtime_handler).is_none() {
            return Err(SandboxError::UnknownRuntimeHandler {
                handler: runtime_handler.to_string(),
            });
        }
        let security = config
            .linux
            .as_ref()
            .and_then(|linux| linux.security_context.as_ref());
        berth_spec::lsm::check_sandbox(security, &self.lsm, &berth_spec::OsHost)
            .map_err(SandboxError::SecurityModule)?;
        crate::lsm::log_unapplied_selinux_label(
            &self.lsm,
            security.and_then(|security| security.selinux_options.as_ref()),
            &config
                .metadata
                .as_ref()
                .map(|m| format!("pod {}/{}", m.namespace, m.name))
                .unwrap_or_default(),
        );
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

    /// Each step records in `undo` what it made, before the next begins.
    async fn set_up(
        &self,
        id: &str,
        name_key: &str,
        runtime_handler: &str,
        config: PodSandboxConfig,
        undo: &mut Undo,
    ) -> Result<SandboxRecord, SandboxError> {
        let linux = config.linux.clone().unwrap_or_default();
        let modes = Modes::of(&linux);
        let userns = berth_spec::userns::pod_user_namespace(
            linux
                .security_context
                .as_ref()
                .and_then(|context| context.namespace_options.as_ref()),
        )?;
        if userns.is_some() && !self.user_namespaces {
            return Err(SandboxError::UserNamespacesUnsupported);
        }
        let location = berth_cgroups::sandbox_cgroup(
            self.driver,
            &linux.cgroup_parent,
            &self.default_parent,
            id,
        )
        .map_err(|err| SandboxError::CgroupParentName(Box::new(err)))?;
        let network = if modes.network != NamespaceMode::Node {
            Some(self.load_network()?)
        } else {
            None
        };
        let (dir, ns_dir) = self.make_dirs(id, userns.as_ref().map(|u| u.host_root().1), undo)?;
        intent::write(
            &dir,
            &SandboxIntent {
                format: intent::FORMAT,
                id: id.to_string(),
                cgroup_path: location.path.clone(),
                dir: dir.clone(),
                ns_dir: ns_dir.clone(),
                network_config: network.as_ref().map(|(raw, _)| raw.clone()),
                config: config.clone(),
            },
        )?;
        self.make_cgroup(&location, undo)?;
        let hostname = pod_hostname(&config);
        let request = PinRequest {
            dir: ns_dir,
            net: modes.network != NamespaceMode::Node,
            ipc: modes.ipc != NamespaceMode::Node,
            uts: modes.network != NamespaceMode::Node,
            pid: modes.pid == NamespaceMode::Pod,
            hostname: (modes.network != NamespaceMode::Node).then(|| hostname.clone()),
            sysctls: namespaces::check_sysctls(&linux.sysctls, modes.network, modes.ipc)?,
            infra_root: dir.join("root"),
            userns,
        };
        let pinned = self.namespaces.pin(&request).await?;
        undo.pins = pinned.namespaces.values().cloned().collect();
        let infra = match pinned.infra_pid {
            Some(pid) => Some(self.adopt_infra(pid, undo)?),
            None => None,
        };
        let shm = if modes.ipc != NamespaceMode::Node {
            let shm = dir.join("shm");
            // Owned by the pod's root, so root inside owns its /dev/shm.
            let options = match &userns {
                Some(userns) => {
                    let (uid, gid) = userns.host_root();
                    format!("{SHM_SIZE},uid={uid},gid={gid}")
                }
                None => SHM_SIZE.to_string(),
            };
            self.namespaces.mount_shm(&shm, &options)?;
            undo.shm = Some(shm.clone());
            Some(shm)
        } else {
            None
        };
        // Moving a process between cgroups waits for an RCU grace period
        // (about 8 ms here) when no other move came just before; nothing
        // until the record needs the infra process in its cgroup, so the
        // move runs beside CNI ADD.
        let joining = infra
            .as_ref()
            .map(|infra| self.join_cgroup(infra.pid, &location.path));
        let network = match network {
            Some(network) => match pinned.namespaces.get("net") {
                Some(netns) => self
                    .attach_network(id, &config, netns, network, undo)
                    .await
                    .map(Some),
                None => Err(SandboxError::NetnsNotPinned),
            },
            None => Ok(None),
        };
        // Awaited before any error returns: undo kills the infra process,
        // which must not race its move.
        if let Some(joining) = joining {
            joining.await?;
        }
        let network = network?;
        let ips = network.as_ref().map(|n| n.ips.clone()).unwrap_or_default();
        write_dns_files(&dir, &config, &hostname, &ips)?;

        let record = SandboxRecord {
            format: crate::state_store::RECORD_FORMAT,
            id: id.to_string(),
            name_key: name_key.to_string(),
            created_at: now_nanos(),
            state: SandboxState::Ready,
            runtime_handler: runtime_handler.to_string(),
            config,
            dir,
            namespaces: pinned.namespaces,
            infra,
            // The parent in the driver's own form (a slice name under
            // systemd): containers' cgroups are named from it.
            cgroup_parent: location.parent,
            cgroup_path: location.path,
            network_attached: network.is_some(),
            ips,
            network_config: network.as_ref().map(|n| n.config.clone()),
            cni_result: network.map(|n| n.result),
            shm,
        };
        self.store.persist(&record)?;
        Ok(record)
    }

    /// The pod's parent (created if missing), then the sandbox's child.
    fn make_cgroup(&self, location: &CgroupLocation, undo: &mut Undo) -> Result<(), SandboxError> {
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
        Ok(())
    }

    /// The sandbox's dir (with the infra process's root) and its pins' dir.
    /// The sandbox's dir comes first: the intent goes there before any
    /// other side effect, and recovery finds half-made sandboxes by it.
    ///
    /// The sandbox's dir holds the pod's /dev/shm and its DNS files: root's
    /// alone (0700), as containerd's, so no host user reaches the pod's
    /// shared memory. In a pod with its own user namespace its mapped root
    /// group may search it (0710): the containers' binds of those files are
    /// made from inside the namespace.
    fn make_dirs(
        &self,
        id: &str,
        userns_gid: Option<u32>,
        undo: &mut Undo,
    ) -> Result<(PathBuf, PathBuf), SandboxError> {
        let dir = self.store.record_dir(id);
        let ns_dir = self.ns_dir.join(id);
        std::fs::create_dir_all(dir.join("root"))
            .map_err(|err| SandboxError::io("sandbox dir", err))?;
        undo.dir = Some(dir.clone());
        restrict_dir(&dir, userns_gid).map_err(|err| SandboxError::io("sandbox dir", err))?;
        std::fs::create_dir_all(&ns_dir).map_err(|err| SandboxError::io("namespace dir", err))?;
        undo.ns_dir = Some(ns_dir.clone());
        restrict_dir(&ns_dir, userns_gid).map_err(|err| SandboxError::io("namespace dir", err))?;
        Ok((dir, ns_dir))
    }

    /// The infra process berth-pinns started: identified (so a reused pid
    /// is never killed), its OOM score set. [`SandboxManager::join_cgroup`]
    /// moves it into the sandbox's cgroup.
    fn adopt_infra(&self, pid: i32, undo: &mut Undo) -> Result<store::InfraProcess, SandboxError> {
        let infra = self
            .namespaces
            .identify(pid)
            .ok_or(SandboxError::InfraVanished { pid })?;
        undo.infra = Some(infra.clone());
        self.namespaces
            .clamp_oom_score_adj(pid, SANDBOX_OOM_SCORE_ADJ);
        Ok(infra)
    }

    /// Moves the infra process into the sandbox's cgroup on a blocking
    /// thread, started at once; the future says how it went.
    fn join_cgroup(
        &self,
        pid: i32,
        cgroup: &str,
    ) -> impl std::future::Future<Output = Result<(), SandboxError>> {
        let cgroups = self.cgroups.clone();
        let path = cgroup.to_string();
        let moving = tokio::task::spawn_blocking({
            let path = path.clone();
            move || cgroups.add_process(&path, pid)
        });
        async move {
            let moved = moving.await.map_err(|err| {
                SandboxError::io(
                    "moving the infra process into its cgroup",
                    std::io::Error::other(err),
                )
            })?;
            moved.map_err(|source| SandboxError::InfraCgroup {
                path,
                source: Box::new(source),
            })
        }
    }

    /// The CNI network, in the pod's network namespace (berth-pinns has
    /// brought its `lo` up already).
    async fn attach_network(
        &self,
        id: &str,
        config: &PodSandboxConfig,
        netns: &Path,
        (raw, network): (String, NetworkConfigList),
        undo: &mut Undo,
    ) -> Result<Attached, SandboxError> {
        let pod = self.pod_network(id, config, netns);
        let result =
            self.network
                .add(&network, &pod)
                .await
                .map_err(|source| SandboxError::CniAdd {
                    network: network.name.clone(),
                    source: Box::new(source),
                })?;
        undo.network = Some((network, pod));
        Ok(Attached {
            ips: result.ips.iter().map(|ip| ip.to_string()).collect(),
            config: raw,
            result: result.raw,
        })
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
}

/// `dir` root's alone (0700), or searchable by group `gid` too (0710).
fn restrict_dir(dir: &std::path::Path, gid: Option<u32>) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let mode = match gid {
        Some(gid) => {
            std::os::unix::fs::chown(dir, None, Some(gid))?;
            0o710
        }
        None => 0o700,
    };
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode))
}
