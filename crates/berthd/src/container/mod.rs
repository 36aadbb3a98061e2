//! Containers: created from an image into a pod sandbox, run by one
//! berth-shim each. berthd prepares the bundle (overlay rootfs and OCI
//! spec); the shim creates, starts and reaps the container.

pub mod cgroup_view;
mod error;
pub mod host;
#[cfg(test)]
mod lifecycle_tests;
pub mod resources;
pub mod rootfs;
pub mod shim;
pub mod shim_log;
pub mod store;
pub mod trash;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use berth_image::store::ImageStore;
use berth_shim_api::protocol::{ExecRequest, Request, Response, RunState, SignalArg, StateInfo};
use berth_spec::{
    CgroupFeatures, ContainerInputs, ImageConfigView, OsHost, SandboxFiles, SandboxNamespaces,
};
use cri_api::v1::{ContainerConfig, NamespaceMode, PodSandboxConfig};
use nix::sys::signal::Signal;

pub use self::error::ContainerError;
use self::host::{RootfsMounts, Shims};
use self::rootfs::RootfsPaths;
use self::shim::ShimLaunch;
use self::store::{ContainerRecord, ContainerStore};
use crate::clock::now_nanos;
use crate::ids::new_id;
use crate::sandbox::store::SandboxRecord;
use crate::sandbox::{SandboxError, SandboxManager};

/// Everything containers need from the daemon.
pub struct ContainerManager {
    pub store: ContainerStore,
    pub images: Arc<ImageStore>,
    pub sandboxes: Arc<SandboxManager>,
    /// Persistent per-container dirs (the rootfs's upper and work dirs).
    pub layers_dir: PathBuf,
    /// libcontainer's state root, shared by all shims.
    pub runtime_root: PathBuf,
    /// Where each shim keeps its socket, pid and exit files.
    pub shims_dir: PathBuf,
    pub shim: PathBuf,
    /// Starts shims and talks to them.
    pub shims: Arc<dyn Shims>,
    /// The overlay mounts of root filesystems.
    pub mounts: Arc<dyn RootfsMounts>,
    /// For each container's cgroup view and resource updates.
    pub cgroups: Arc<dyn berth_cgroups::CgroupManager>,
    /// What the host's cgroups offer, read at start-up.
    pub features: CgroupFeatures,
}

/// What a failed create has to undo.
#[derive(Default)]
struct Undo {
    name: Option<(String, String)>,
    rootfs: Option<RootfsPaths>,
    dirs: Vec<PathBuf>,
    shim_dir: Option<PathBuf>,
}

impl ContainerManager {
    /// CreateContainer: returns the new container's id.
    ///
    /// The container is judged against `request_sandbox_config`, the sandbox
    /// config that comes with the request, as containerd does: kubelet
    /// rebuilds it for every create, e.g. privileged once the pod has a
    /// privileged ephemeral container. Without one, the config stored at
    /// RunPodSandbox is used. The handler has checked that `config` names
    /// the container and its image.
    pub async fn create(
        &self,
        sandbox_id: &str,
        config: ContainerConfig,
        request_sandbox_config: Option<PodSandboxConfig>,
    ) -> Result<String, ContainerError> {
        let metadata = config.metadata.clone().unwrap_or_default();
        let image_name = config
            .image
            .as_ref()
            .map(|image| image.image.clone())
            .unwrap_or_default();
        let sandbox_handle =
            self.sandboxes
                .find(sandbox_id)?
                .ok_or_else(|| SandboxError::NotFound {
                    id: sandbox_id.to_string(),
                })?;
        let sandbox = sandbox_handle.lock().await.clone();
        let stored_config = sandbox.config.clone();
        let sandbox_meta = stored_config.metadata.clone().unwrap_or_default();
        let sandbox_config = request_sandbox_config.unwrap_or(stored_config);
        let image =
            self.images
                .resolve(&image_name)
                .ok_or_else(|| ContainerError::ImageNotFound {
                    image: image_name.clone(),
                })?;

        let id = new_id().map_err(|err| ContainerError::io("generating a container id", err))?;
        let name_key = format!(
            "{}_{}_{}_{}_{}",
            metadata.name,
            sandbox_meta.name,
            sandbox_meta.namespace,
            sandbox_meta.uid,
            metadata.attempt
        );
        if let Err(holder) = self.store.reserve_name(&name_key, &id) {
            return Err(ContainerError::NameReserved {
                name: name_key,
                holder,
            });
        }
        let mut undo = Undo {
            name: Some((name_key.clone(), id.clone())),
            ..Default::default()
        };
        match self
            .set_up(
                &id,
                &name_key,
                &sandbox,
                &sandbox_config,
                config,
                &image,
                &image_name,
                &mut undo,
            )
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

    #[allow(clippy::too_many_arguments)]
    async fn set_up(
        &self,
        id: &str,
        name_key: &str,
        sandbox: &SandboxRecord,
        sandbox_config: &PodSandboxConfig,
        config: ContainerConfig,
        image: &berth_image::store::ImageRecord,
        image_name: &str,
        undo: &mut Undo,
    ) -> Result<ContainerRecord, ContainerError> {
        let bundle = self.store.record_dir(id);
        let layer_dir = self.layers_dir.join(id);
        // Unix socket paths are limited to 107 bytes: the shim's dir is
        // named by a 12-digit prefix of the (random) id, in a short path.
        let shim_dir = self.shims_dir.join(&id[..12.min(id.len())]);
        for dir in [&bundle, &layer_dir, &self.shims_dir] {
            std::fs::create_dir_all(dir).map_err(|err| ContainerError::io("container dir", err))?;
        }
        std::fs::create_dir(&shim_dir).map_err(|err| ContainerError::io("shim dir", err))?;
        undo.dirs = vec![bundle.clone(), layer_dir.clone(), shim_dir.clone()];

        // Root filesystem: the image's layers under a writable upper dir.
        let layers = image
            .layers
            .iter()
            .map(|layer| self.images.layer_path(&layer.diff_id))
            .collect::<Result<Vec<_>, _>>()?;
        let paths = RootfsPaths::new(&layer_dir, &bundle);
        self.mounts.mount(&layers, &paths)?;
        undo.rootfs = Some(paths.clone());

        // The OCI spec.
        let image_config = self.image_config(image)?;
        let image_view = ImageConfigView::from(&image_config);
        let location =
            berth_cgroups::container_cgroup(self.sandboxes.driver, &sandbox.cgroup_parent, id)
                .map_err(|err| ContainerError::CgroupName(Box::new(err)))?;
        let cgroups_path = self.oci_cgroups_path(&location);
        let hierarchy_dirs = self
            .cgroups
            .hierarchy_dirs(&location.path)
            .map_err(|err| ContainerError::Cgroup(Box::new(err)))?;
        let cgroup_view = cgroup_view::cgroup_view(self.cgroups.layout(), &hierarchy_dirs);
        let target_pid = self.target_pid(&config, &sandbox.id).await?;
        let namespaces = SandboxNamespaces {
            network: sandbox.namespaces.get("net").cloned(),
            ipc: sandbox.namespaces.get("ipc").cloned(),
            uts: sandbox.namespaces.get("uts").cloned(),
            pid: sandbox.namespaces.get("pid").cloned(),
            target_pid,
        };
        let files = SandboxFiles {
            hostname: Some(sandbox.dir.join("hostname")),
            hosts: Some(sandbox.dir.join("hosts")),
            resolv_conf: Some(sandbox.dir.join("resolv.conf")),
            shm: sandbox.shm.clone(),
        };
        let log_path = berth_spec::annotations::log_path(&config, sandbox_config)?;
        let etc_passwd = read_image_file(&paths.merged, "etc/passwd");
        let etc_group = read_image_file(&paths.merged, "etc/group");
        // The spec is built and written before any await: the host lookup
        // it borrows is not Send.
        {
            let inputs = ContainerInputs {
                container_id: id,
                sandbox_id: &sandbox.id,
                config: &config,
                sandbox_config,
                image: &image_view,
                rootfs: &paths.merged,
                namespaces: &namespaces,
                cgroups_path: &cgroups_path,
                cgroup_view,
                etc_passwd: etc_passwd.as_deref(),
                etc_group: etc_group.as_deref(),
                sandbox_files: files,
                host_oom_score_adj_floor: crate::sandbox::process::own_oom_score_adj(),
                features: self.features,
                host: &OsHost,
            };
            let spec = berth_spec::container_spec(&inputs)?;
            spec.save(bundle.join("config.json"))
                .map_err(ContainerError::WriteSpec)?;
        }
        if let Some(log) = &log_path {
            if let Some(dir) = log.parent() {
                std::fs::create_dir_all(dir).map_err(|err| ContainerError::io("log dir", err))?;
            }
        }
        let stop_signal =
            berth_spec::stop_signal(&config, &image_view).unwrap_or(Signal::SIGTERM as i32);

        undo.shim_dir = Some(shim_dir.clone());
        let pid = self
            .shims
            .launch(&ShimLaunch {
                binary: &self.shim,
                id,
                bundle: &bundle,
                state_root: &self.runtime_root,
                dir: &shim_dir,
                log: log_path.as_deref(),
                tty: config.tty,
                stdin: config.stdin,
                stdin_once: config.stdin_once,
                kept_log: &shim_log::kept_path(&sandbox.dir, id),
            })
            .await?;

        let record = ContainerRecord {
            id: id.to_string(),
            name_key: name_key.to_string(),
            sandbox_id: sandbox.id.clone(),
            created_at: now_nanos(),
            config: config.clone(),
            image_id: image.id.clone(),
            image_ref: image_name.to_string(),
            log_path,
            bundle,
            layer_dir,
            shim_dir,
            cgroups_path,
            cgroup_path: location.path.clone(),
            pid,
            stop_signal,
        };
        self.store.persist(&record)?;
        Ok(record)
    }

    /// The image's config blob, parsed; the error says which step failed.
    fn image_config(
        &self,
        image: &berth_image::store::ImageRecord,
    ) -> Result<oci_spec::image::ImageConfiguration, ContainerError> {
        let unreadable =
            |source: Box<dyn std::error::Error + Send + Sync>| ContainerError::ImageConfig {
                image: image.id.clone(),
                source,
            };
        let path = self.images.blob_path(&image.id)?;
        let bytes = std::fs::read(&path).map_err(|err| unreadable(Box::new(err)))?;
        oci_spec::image::ImageConfiguration::from_reader(bytes.as_slice())
            .map_err(|err| unreadable(Box::new(err)))
    }

    /// The spec's `linux.cgroupsPath`: systemd's `slice:berth:<id>` under
    /// the systemd driver on cgroup v2, where libcontainer makes the scope;
    /// the expanded path otherwise (libcontainer's systemd support is v2
    /// only, so on a v1 systemd host the container's cgroups are made
    /// directly inside its pod's slice).
    fn oci_cgroups_path(&self, location: &berth_cgroups::CgroupLocation) -> String {
        if self.features.v2 {
            location.oci_cgroups_path().to_string()
        } else {
            location.path.clone()
        }
    }

    /// For PID TARGET: the init pid of the target container, which must
    /// be a running container of the same sandbox.
    async fn target_pid(
        &self,
        config: &ContainerConfig,
        sandbox_id: &str,
    ) -> Result<Option<u32>, ContainerError> {
        let options = config
            .linux
            .as_ref()
            .and_then(|linux| linux.security_context.as_ref())
            .and_then(|context| context.namespace_options.as_ref());
        let Some(options) = options.filter(|options| options.pid() == NamespaceMode::Target) else {
            return Ok(None);
        };
        let target_id = &options.target_id;
        let handle = self.store.find(target_id)?;
        let Some(handle) = handle.filter(|_| !target_id.is_empty()) else {
            return Err(ContainerError::TargetNotFound {
                target_id: target_id.clone(),
            });
        };
        let target = handle.lock().await.clone();
        if target.sandbox_id != sandbox_id {
            return Err(ContainerError::TargetInOtherSandbox {
                target_id: target.id,
            });
        }
        match self.shims.state(&target.shim_dir).await {
            Some(state) if state.status == RunState::Running => Ok(u32::try_from(state.pid).ok()),
            _ => Err(ContainerError::TargetNotRunning {
                target_id: target.id,
            }),
        }
    }

    async fn undo(&self, undo: Undo) {
        if let Some(dir) = &undo.shim_dir {
            let _ = self
                .shims
                .call(
                    dir,
                    Request::Kill {
                        signal: SignalArg::Number(Signal::SIGKILL as i32),
                        all: true,
                    },
                    Duration::ZERO,
                )
                .await;
            let _ = self
                .shims
                .call(dir, Request::Shutdown, Duration::ZERO)
                .await;
        }
        if let Some(paths) = &undo.rootfs {
            if let Err(err) = self.mounts.unmount(paths) {
                tracing::warn!(error = %err, "undo: unmount rootfs");
            }
        }
        for dir in &undo.dirs {
            let _ = std::fs::remove_dir_all(dir);
        }
        if let Some((name, id)) = &undo.name {
            self.store.release_name(name, id);
        }
    }

    /// StartContainer.
    pub async fn start(&self, id: &str) -> Result<(), ContainerError> {
        let record = self.get(id).await?;
        match self
            .shims
            .call(&record.shim_dir, Request::Start, Duration::ZERO)
            .await
        {
            Ok(Response::Ok) => Ok(()),
            // The shim's log stays in its dir until RemoveContainer.
            Ok(Response::Error { message, .. }) => {
                let log = shim::log_path(&record.shim_dir);
                Err(ContainerError::StartFailed {
                    message: shim_log::with_reason(
                        &format!("starting container {}: {message}", record.id),
                        &log,
                        Some(&log),
                    ),
                    id: record.id,
                })
            }
            Ok(other) => Err(shim_answer(&record, &other)),
            Err(err) => Err(shim_unreachable(&record, err)),
        }
    }

    /// StopContainer: the stop signal, then SIGKILL after `timeout`
    /// seconds. Stopped or unknown is success.
    pub async fn stop(&self, id: &str, timeout: i64) -> Result<(), ContainerError> {
        let Some(handle) = self.find(id)? else {
            return Ok(());
        };
        let record = handle.lock().await.clone();
        if !self.is_running(&record).await {
            return Ok(());
        }
        if timeout > 0 {
            let _ = self
                .shims
                .call(
                    &record.shim_dir,
                    Request::Kill {
                        signal: SignalArg::Number(record.stop_signal),
                        all: false,
                    },
                    Duration::ZERO,
                )
                .await;
            if self
                .wait_stopped(&record, Duration::from_secs(timeout as u64))
                .await
            {
                return Ok(());
            }
        }
        let _ = self
            .shims
            .call(
                &record.shim_dir,
                Request::Kill {
                    signal: SignalArg::Number(Signal::SIGKILL as i32),
                    all: true,
                },
                Duration::ZERO,
            )
            .await;
        if self.wait_stopped(&record, Duration::from_secs(10)).await {
            Ok(())
        } else {
            Err(ContainerError::DidNotStop { id: record.id })
        }
    }

    /// RemoveContainer: stops it, then removes its shim, rootfs and files.
    /// Unknown is success.
    pub async fn remove(&self, id: &str) -> Result<(), ContainerError> {
        let Some(handle) = self.find(id)? else {
            return Ok(());
        };
        let full_id = handle.lock().await.id.clone();
        self.stop(&full_id, 0).await?;
        let record = handle.lock().await;
        if !self.store.contains(&record.id) {
            return Ok(());
        }
        let _ = self
            .shims
            .call(&record.shim_dir, Request::Shutdown, Duration::ZERO)
            .await;
        self.mounts
            .unmount(&RootfsPaths::new(&record.layer_dir, &record.bundle))?;
        let mut trashed = Vec::new();
        for dir in [&record.bundle, &record.layer_dir, &record.shim_dir] {
            match trash::discard(dir).await {
                Ok(moved) => trashed.extend(moved),
                Err(err) => {
                    trash::purge(trashed);
                    return Err(ContainerError::io(
                        format!("removing {}", dir.display()),
                        err,
                    ));
                }
            }
        }
        trash::purge(trashed);
        self.store.remove(&record.id);
        self.store.release_name(&record.name_key, &record.id);
        Ok(())
    }

    /// ExecSync: runs a command in the container, returning its output.
    /// The handler has checked that `args` is not empty.
    pub async fn exec_sync(
        &self,
        id: &str,
        args: Vec<String>,
        timeout: i64,
    ) -> Result<berth_shim_api::protocol::ExecResult, ContainerError> {
        let record = self.get(id).await?;
        let timeout_s = u64::try_from(timeout).unwrap_or(0);
        let request = Request::Exec(ExecRequest {
            args,
            env: Vec::new(),
            cwd: None,
            user: None,
            timeout_s,
            max_output_bytes: None,
        });
        match self
            .shims
            .call(&record.shim_dir, request, Duration::from_secs(timeout_s))
            .await
        {
            Ok(Response::Exec(result)) => Ok(result),
            Ok(Response::Error { message, .. }) => Err(ContainerError::ExecRefused {
                id: record.id,
                message,
            }),
            Ok(other) => Err(shim_answer(&record, &other)),
            Err(err) => Err(shim_unreachable(&record, err)),
        }
    }

    /// UpdateContainerResources: applied to the container's cgroup as sent,
    /// then kept in the record so `ContainerStatus` reports what is in effect.
    pub async fn update_resources(
        &self,
        id: &str,
        resources: &cri_api::v1::LinuxContainerResources,
    ) -> Result<(), ContainerError> {
        let handle = self.handle(id)?;
        // Held across the cgroup write so two updates cannot interleave
        // their cgroup writes and their record writes differently.
        let mut record = handle.lock().await;
        let update = resources::cgroup_update(resources);
        let cgroups = self.cgroups.clone();
        let path = record.cgroup_dir().to_string();
        tokio::task::spawn_blocking(move || cgroups.update(&path, &update))
            .await
            .map_err(|source| ContainerError::Task {
                what: "update task",
                source,
            })?
            .map_err(|source| ContainerError::UpdateRefused {
                id: record.id.clone(),
                source: Box::new(source),
            })?;
        let mut config = record.config.clone();
        let linux = config.linux.get_or_insert_with(Default::default);
        let current = linux.resources.clone().unwrap_or_default();
        linux.resources = Some(resources::after_update(&current, resources));
        record.config = config;
        Ok(self.store.persist(&record)?)
    }

    /// ReopenContainerLog.
    pub async fn reopen_log(&self, id: &str) -> Result<(), ContainerError> {
        let record = self.get(id).await?;
        if !self.is_running(&record).await {
            return Err(ContainerError::NotRunning { id: record.id });
        }
        match self
            .shims
            .call(&record.shim_dir, Request::ReopenLog, Duration::ZERO)
            .await
        {
            Ok(Response::Ok) => Ok(()),
            Ok(other) => Err(shim_answer(&record, &other)),
            Err(err) => Err(shim_unreachable(&record, err)),
        }
    }

    /// The live state of a container.
    pub async fn state(&self, record: &ContainerRecord) -> Option<StateInfo> {
        self.shims.state(&record.shim_dir).await
    }

    /// The container `id` names (full id or unique prefix).
    pub fn find(
        &self,
        id: &str,
    ) -> Result<Option<Arc<tokio::sync::Mutex<ContainerRecord>>>, ContainerError> {
        Ok(self.store.find(id)?)
    }

    /// A container's record, or NotFound naming the id.
    pub async fn get(&self, id: &str) -> Result<ContainerRecord, ContainerError> {
        let record = self.handle(id)?.lock().await.clone();
        Ok(record)
    }

    /// A container's shared record, or NotFound naming the id.
    fn handle(&self, id: &str) -> Result<Arc<tokio::sync::Mutex<ContainerRecord>>, ContainerError> {
        self.find(id)?
            .ok_or_else(|| ContainerError::NotFound { id: id.to_string() })
    }

    /// Every container of a sandbox.
    pub async fn of_sandbox(&self, sandbox_id: &str) -> Vec<ContainerRecord> {
        let mut records = Vec::new();
        for handle in self.store.all() {
            let record = handle.lock().await.clone();
            if record.sandbox_id == sandbox_id {
                records.push(record);
            }
        }
        records
    }

    async fn is_running(&self, record: &ContainerRecord) -> bool {
        matches!(self.shims.state(&record.shim_dir).await, Some(state) if state.status == RunState::Running)
    }

    /// Polls the shim until the container is no longer running. The interval
    /// starts at 1 ms and doubles up to 50 ms: most containers exit within a few
    /// ms of their stop signal, and a fixed 50 ms made every StopContainer last
    /// at least that long.
    async fn wait_stopped(&self, record: &ContainerRecord, limit: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + limit;
        let mut interval = Duration::from_millis(1);
        loop {
            if !self.is_running(record).await {
                return true;
            }
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(interval).await;
            interval = (interval * 2).min(Duration::from_millis(50));
        }
    }
}

/// Reads a small file of the image without following a symlink out of the
/// rootfs: a symlinked `/etc` or `/etc/passwd` is treated as absent.
fn read_image_file(rootfs: &Path, relative: &str) -> Option<String> {
    let mut path = rootfs.to_path_buf();
    for part in relative.split('/') {
        path.push(part);
        if std::fs::symlink_metadata(&path)
            .ok()?
            .file_type()
            .is_symlink()
        {
            return None;
        }
    }
    std::fs::read_to_string(path).ok()
}

/// A shim answer that does not fit the request.
fn shim_answer(record: &ContainerRecord, answer: &Response) -> ContainerError {
    ContainerError::ShimAnswer {
        id: record.id.clone(),
        answer: format!("{answer:?}"),
    }
}

/// The shim's socket could not be used.
fn shim_unreachable(record: &ContainerRecord, source: std::io::Error) -> ContainerError {
    ContainerError::ShimUnreachable {
        id: record.id.clone(),
        source,
    }
}
