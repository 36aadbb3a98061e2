//! RunPodSandbox: cgroup, namespaces, network and files. Each step's
//! resource goes into the pod's journal before the step runs; a failed run
//! is undone by the one teardown (`teardown.rs`), so it leaves no
//! namespace, mount, cgroup or IP behind, or, if that undo fails too, a
//! journal that the next RemovePodSandbox or start finishes.

use std::path::{Path, PathBuf};

use berth_cgroups::CgroupLocation;
use berth_network::cni::NetworkConfigList;
use cri_api::v1::{LinuxPodSandboxConfig, NamespaceMode, PodSandboxConfig};

use super::dns::{pod_hostname, write_dns_files};
use super::journal::{PodJournal, PodResource};
use super::namespaces::PinRequest;
use super::store::{SandboxRecord, SandboxState};
use super::teardown::Scope;
use super::{namespaces, store, SandboxError, SandboxManager};
use crate::clock::now_nanos;

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
        let mut journal = None;
        match self
            .set_up(&id, &name_key, runtime_handler, config, &mut journal)
            .await
        {
            Ok(record) => {
                self.store.insert(record);
                Ok(id)
            }
            Err(err) => {
                if let Some(mut journal) = journal {
                    if let Err(undo) = self.tear_down(&mut journal, Scope::All).await {
                        tracing::warn!(sandbox = %id, error = %undo,
                            "undoing a failed run: finished by the next RemovePodSandbox or start");
                        self.note_unfinished_run(&id).await;
                    }
                }
                // The name is free either way: what is left has no record
                // and needs none.
                self.store.release_name(&name_key, &id);
                Err(err)
            }
        }
    }

    /// Each step's resource goes into `journal` before the step runs.
    async fn set_up(
        &self,
        id: &str,
        name_key: &str,
        runtime_handler: &str,
        config: PodSandboxConfig,
        journal: &mut Option<PodJournal>,
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
        let (dir, ns_dir, journal) = self.make_dirs(
            id,
            &config,
            userns.as_ref().map(|u| u.host_root().1),
            journal,
        )?;
        self.make_cgroup(&location, journal)?;
        let hostname = pod_hostname(&config);
        let request = PinRequest {
            dir: ns_dir.clone(),
            net: modes.network != NamespaceMode::Node,
            ipc: modes.ipc != NamespaceMode::Node,
            uts: modes.network != NamespaceMode::Node,
            pid: modes.pid == NamespaceMode::Pod,
            hostname: (modes.network != NamespaceMode::Node).then(|| hostname.clone()),
            sysctls: namespaces::check_sysctls(&linux.sysctls, modes.network, modes.ipc)?,
            infra_root: dir.join("root"),
            userns,
        };
        journal.append(PodResource::Namespaces {
            dir: ns_dir,
            infra_root: request.infra_root.clone(),
            pins: None,
        })?;
        let pinned = self.namespaces.pin(&request).await?;
        let infra = self.adopt_infra(&pinned, journal)?;
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
            journal.append(PodResource::Shm { path: shm.clone() })?;
            self.namespaces.mount_shm(&shm, &options)?;
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
                    .attach_network(id, &config, netns, network, journal)
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
        let files_dir =
            self.make_files_dir(id, userns.as_ref().map(|u| u.host_root().1), journal)?;
        write_dns_files(&files_dir, &config, &hostname, &ips)?;

        let record = SandboxRecord {
            format: crate::state_store::RECORD_FORMAT,
            id: id.to_string(),
            name_key: name_key.to_string(),
            created_at: now_nanos(),
            state: SandboxState::Ready,
            runtime_handler: runtime_handler.to_string(),
            config,
            dir,
            files_dir: Some(files_dir),
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
    fn make_cgroup(
        &self,
        location: &CgroupLocation,
        journal: &mut PodJournal,
    ) -> Result<(), SandboxError> {
        journal.append(PodResource::CgroupParent {
            path: location.parent_path.clone(),
        })?;
        journal.append(PodResource::Cgroup {
            path: location.path.clone(),
        })?;
        let _cgroups = self.lock_cgroups();
        self.parents
            .ensure(&location.parent_path)
            .map_err(|source| SandboxError::CgroupParent {
                parent: location.parent_path.clone(),
                source: Box::new(source),
            })?;
        self.cgroups
            .create(&location.path)
            .map_err(|source| SandboxError::Cgroup {
                path: location.path.clone(),
                source: Box::new(source),
            })?;
        Ok(())
    }

    /// The sandbox's dir (with the infra process's root) and its pins' dir.
    /// The sandbox's dir comes first: the journal goes there before any
    /// other side effect, and recovery finds half-made sandboxes by it.
    ///
    /// The sandbox's dir holds the pod's /dev/shm: root's alone (0700), as
    /// containerd's, so no host user reaches the pod's shared memory. In a
    /// pod with its own user namespace its mapped root group may search it
    /// (0710): the containers' binds are made from inside the namespace.
    fn make_dirs<'j>(
        &self,
        id: &str,
        config: &PodSandboxConfig,
        userns_gid: Option<u32>,
        journal: &'j mut Option<PodJournal>,
    ) -> Result<(PathBuf, PathBuf, &'j mut PodJournal), SandboxError> {
        let dir = self.store.record_dir(id);
        let ns_dir = self.ns_dir.join(id);
        std::fs::create_dir_all(dir.join("root"))
            .map_err(|err| SandboxError::io("sandbox dir", err))?;
        // A dir without a journal is empty but for `root`: if the journal
        // cannot be written, the dir goes now (and recovery removes one
        // left by a crash).
        let made = match PodJournal::create(&dir, id, config) {
            Ok(made) => journal.insert(made),
            Err(err) => {
                crate::recovery::remove_tree(&dir);
                return Err(err.into());
            }
        };
        restrict_dir(&dir, userns_gid).map_err(|err| SandboxError::io("sandbox dir", err))?;
        made.append(PodResource::NamespaceDir {
            path: ns_dir.clone(),
        })?;
        std::fs::create_dir_all(&ns_dir).map_err(|err| SandboxError::io("namespace dir", err))?;
        restrict_dir(&ns_dir, userns_gid).map_err(|err| SandboxError::io("namespace dir", err))?;
        Ok((dir, ns_dir, made))
    }

    /// The pod's dir for its hostname, hosts and resolv.conf, under the
    /// root dir: on disk, as containers in a user namespace bind them
    /// idmapped and kernels before 6.3 cannot idmap the state dir's tmpfs.
    /// Journaled before it is made, so every teardown removes it; one a
    /// reboot's empty state dir no longer names is swept by recovery.
    fn make_files_dir(
        &self,
        id: &str,
        userns_gid: Option<u32>,
        journal: &mut PodJournal,
    ) -> Result<PathBuf, SandboxError> {
        let dir = self.pods_dir.join(id);
        journal.append(PodResource::PodFiles { dir: dir.clone() })?;
        std::fs::create_dir_all(&dir).map_err(|err| SandboxError::io("pod files dir", err))?;
        restrict_dir(&dir, userns_gid).map_err(|err| SandboxError::io("pod files dir", err))?;
        Ok(dir)
    }

    /// What berth-pinns made, into the journal in one write: its pins and
    /// the infra process it started, identified (so a reused pid is never
    /// killed), its OOM score set. [`SandboxManager::join_cgroup`] moves
    /// it into the sandbox's cgroup.
    fn adopt_infra(
        &self,
        pinned: &namespaces::Pinned,
        journal: &mut PodJournal,
    ) -> Result<Option<store::InfraProcess>, SandboxError> {
        let infra = pinned
            .infra_pid
            .map(|pid| {
                self.namespaces
                    .identify(pid)
                    .ok_or(SandboxError::InfraVanished { pid })
            })
            .transpose();
        let pins = pinned
            .namespaces
            .iter()
            .map(|(kind, path)| (kind.clone(), path.clone()))
            .collect();
        let identified = infra.as_ref().ok().cloned().flatten();
        journal.change(|entries| {
            if let Some(PodResource::Namespaces { pins: made, .. }) = entries.last_mut() {
                *made = Some(pins);
            }
            if let Some(process) = identified {
                entries.push(PodResource::Infra { process });
            }
        })?;
        let infra = infra?;
        if let Some(infra) = &infra {
            self.namespaces
                .clamp_oom_score_adj(infra.pid, SANDBOX_OOM_SCORE_ADJ);
        }
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
        journal: &mut PodJournal,
    ) -> Result<Attached, SandboxError> {
        let pod = self.pod_network(id, config, netns);
        journal.append(PodResource::Network {
            config: raw.clone(),
            netns: netns.to_path_buf(),
            result: None,
        })?;
        let result =
            self.network
                .add(&network, &pod)
                .await
                .map_err(|source| SandboxError::CniAdd {
                    network: network.name.clone(),
                    source: Box::new(source),
                })?;
        journal.change(|entries| {
            if let Some(PodResource::Network { result: kept, .. }) = entries.last_mut() {
                *kept = Some(result.raw.clone());
            }
        })?;
        Ok(Attached {
            ips: result.ips.iter().map(|ip| ip.to_string()).collect(),
            config: raw,
            result: result.raw,
        })
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
