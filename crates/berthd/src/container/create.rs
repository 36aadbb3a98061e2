//! CreateContainer: the bundle (overlay rootfs and OCI spec), then the
//! shim; each step is journaled (`journal.rs`) before it runs, and a
//! failure tears the journal down in reverse (`teardown.rs`).

use std::path::{Path, PathBuf};
use std::time::Duration;

use berth_image::store::ImageRecord;
use berth_shim_api::protocol::{Request, RunState, SignalArg};
use berth_spec::userns::PodUserNamespace;
use berth_spec::{ContainerInputs, ImageConfigView, OsHost, SandboxFiles, SandboxNamespaces};
use cri_api::v1::{ContainerConfig, NamespaceMode, PodSandboxConfig};
use nix::sys::signal::Signal;

use super::idmapped_binds;
use super::image_files::{self, ImageUserFiles};
use super::image_volumes::{self, ImageVolume};
use super::journal::{ContainerJournal, ContainerResource};
use super::rootfs::RootfsPaths;
use super::shim::ShimLaunch;
use super::store::ContainerRecord;
use super::{cgroup_view, shim_log, ContainerError, ContainerManager};
use crate::clock::now_nanos;
use crate::ids::new_id;
use crate::runtime_handlers::RuntimeHandler;
use crate::sandbox::store::SandboxRecord;
use crate::sandbox::SandboxError;

/// The sandbox container's name in its pod (kubelet's container names are
/// DNS labels: no app container has it).
pub const SANDBOX_CONTAINER_NAME: &str = "POD";

/// One CreateContainer request, resolved: what every step reads.
#[derive(Clone, Copy)]
struct Creation<'a> {
    id: &'a str,
    name_key: &'a str,
    sandbox: &'a SandboxRecord,
    /// The request's sandbox config, else the stored one.
    sandbox_config: &'a PodSandboxConfig,
    config: &'a ContainerConfig,
    image: &'a ImageRecord,
    /// The name the client used for the image.
    image_name: &'a str,
    /// The config's image volumes, their images found.
    volumes: &'a [ImageVolume],
    /// A checkpoint archive to restore the container from (its path was
    /// the request's image).
    restore_from: Option<&'a Path>,
    /// The pod's runtime handler: the runtime the shim drives.
    handler: &'a RuntimeHandler,
}

/// A container's directories.
struct Dirs {
    bundle: PathBuf,
    layer: PathBuf,
    shim: PathBuf,
}

/// What writing the spec settled, for the record.
struct SpecOutcome {
    cgroups_path: String,
    cgroup_path: String,
    /// Where the shim finds the container's cgroup (cgroupfs paths only).
    cgroup_dirs: Vec<PathBuf>,
    log_path: Option<PathBuf>,
    stop_signal: i32,
    /// What the container may do with devices, from the spec's rules.
    device_policy: berth_cgroups::DevicePolicy,
}

/// What a failed create has to undo: its journal, once written, and the
/// shim's dir once one may run (its container is stopped before the
/// teardown, as RemoveContainer stops it before its own).
#[derive(Default)]
struct Undo {
    journal: Option<ContainerJournal>,
    shim_dir: Option<PathBuf>,
}

impl Undo {
    /// Journals `entry`, durably, before the step that makes it.
    fn append(&mut self, entry: ContainerResource) -> Result<(), ContainerError> {
        match &mut self.journal {
            Some(journal) => Ok(journal.append(entry)?),
            // make_dirs writes the journal before any other step runs.
            None => Err(ContainerError::io(
                "container journal",
                std::io::Error::other("not written before a step"),
            )),
        }
    }
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
        self.create_as(None, sandbox_id, config, request_sandbox_config)
            .await
    }

    /// The sandbox container of pod `sandbox_id` (for a handler with
    /// `sandbox_container`): a container of `image` with the pod's own id,
    /// which makes its spec say `container-type: sandbox` and the runtime
    /// make the pod's sandbox of it (runsc's gVisor kernel, which the pod's
    /// containers then join). It has no log; `image` must be present.
    pub async fn create_sandbox_container(
        &self,
        sandbox_id: &str,
        image: &str,
    ) -> Result<String, ContainerError> {
        let config = ContainerConfig {
            metadata: Some(cri_api::v1::ContainerMetadata {
                name: SANDBOX_CONTAINER_NAME.to_string(),
                attempt: 0,
            }),
            image: Some(cri_api::v1::ImageSpec {
                image: image.to_string(),
                ..Default::default()
            }),
            ..Default::default()
        };
        self.create_as(Some(sandbox_id), sandbox_id, config, None)
            .await
    }

    /// CreateContainer with the id `id` (a fresh one when None).
    async fn create_as(
        &self,
        id: Option<&str>,
        sandbox_id: &str,
        config: ContainerConfig,
        request_sandbox_config: Option<PodSandboxConfig>,
    ) -> Result<String, ContainerError> {
        let metadata = config.metadata.clone().unwrap_or_default();
        let mut config = config;
        let mut image_name = config
            .image
            .as_ref()
            .map(|image| image.image.clone())
            .unwrap_or_default();
        // A checkpoint archive or image as the image (CRI-O's restore): the
        // container is made from the image the checkpoint was made from,
        // and its processes come from the archive at start.
        let restore_from = super::checkpoint::restore_source(
            &image_name,
            &self.images,
            self.allow_checkpoint_images,
        )?;
        if let Some((_, source_image)) = &restore_from {
            image_name = source_image.clone();
            if let Some(image) = config.image.as_mut() {
                image.image = source_image.clone();
            }
        }
        let restore_from = restore_from.map(|(archive, _)| archive);
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
        // A pod recovered with a handler no longer configured runs no new
        // container: its runtime is unknown, never taken for the default.
        let handler = self
            .sandboxes
            .runtime_handlers
            .get(&sandbox.runtime_handler)
            .ok_or_else(|| ContainerError::UnknownRuntimeHandler {
                what: format!("pod sandbox {}", sandbox.id),
                handler: sandbox.runtime_handler.clone(),
                action: "create containers in it",
            })?
            .clone();
        if let (Some(_), Some(runtime)) = (&restore_from, &handler.binary) {
            return Err(ContainerError::RestoreUnsupported {
                handler: handler.name.clone(),
                runtime: runtime.clone(),
            });
        }
        let image =
            self.images
                .resolve(&image_name)
                .ok_or_else(|| ContainerError::ImageNotFound {
                    image: image_name.clone(),
                })?;
        let volumes = image_volumes::find(&config, &self.images)?;
        // KEP-5365: ContainerStatus names each image volume's image by the
        // reference PullImage answered for it (the image id).
        for volume in &volumes {
            if let Some(spec) = config
                .mounts
                .get_mut(volume.index)
                .and_then(|mount| mount.image.as_mut())
            {
                spec.image_ref = volume.image.id.clone();
            }
        }

        let id = match id {
            Some(id) => id.to_string(),
            None => new_id().map_err(|err| ContainerError::io("generating a container id", err))?,
        };
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
        self.prime_cgroup_move();
        let mut undo = Undo::default();
        let creation = Creation {
            id: &id,
            name_key: &name_key,
            sandbox: &sandbox,
            sandbox_config: &sandbox_config,
            config: &config,
            image: &image,
            image_name: &image_name,
            volumes: &volumes,
            restore_from: restore_from.as_deref(),
            handler: &handler,
        };
        match self.set_up(&creation, &mut undo).await {
            Ok(record) => {
                self.store.insert(record);
                Ok(id)
            }
            Err(err) => {
                self.undo(undo).await;
                // Kubelet retries with a new id: the name is free even
                // when the teardown is left for recovery.
                self.store.release_name(&name_key, &id);
                Err(err)
            }
        }
    }

    /// Each step journals in `undo` what it makes, before it makes it.
    async fn set_up(
        &self,
        c: &Creation<'_>,
        undo: &mut Undo,
    ) -> Result<ContainerRecord, ContainerError> {
        let location =
            berth_cgroups::container_cgroup(self.sandboxes.driver, &c.sandbox.cgroup_parent, c.id)
                .map_err(|err| ContainerError::CgroupName(Box::new(err)))?;
        let dirs = self.make_dirs(c.id, undo)?;
        // The mappings of the user namespace the pod pinned: its stored config.
        let userns = pod_userns(&c.sandbox.config)?;
        if let Some(userns) = &userns {
            open_bundle_to(&dirs.bundle, userns.gids.host_id)
                .map_err(|err| ContainerError::io("container dir", err))?;
            // The init may reach the shim's console socket from inside.
            open_bundle_to(&dirs.shim, userns.gids.host_id)
                .map_err(|err| ContainerError::io("shim dir", err))?;
        }
        let layers = held_layers(c);
        // Held from before the mount: a RemoveImage racing this create must
        // not collect the layers being mounted.
        undo.append(ContainerResource::Layers)?;
        self.hold_layers(c.id, &layers);
        let pinned_userns = c.sandbox.namespaces.get("user");
        let idmap = match (userns, pinned_userns) {
            (Some(userns), Some(path)) => Some((path.as_path(), userns)),
            (None, None) => None,
            _ => return Err(berth_spec::SpecError::UserNamespaceNotPinned.into()),
        };
        let rootfs = self.mount_rootfs(c.image, &dirs, idmap, undo)?;
        let sources = self.mount_image_volumes(c.volumes, &rootfs)?;
        let restore_dir = match c.restore_from {
            Some(archive) => Some(
                super::checkpoint::prepare_restore(c.id, archive, &dirs.layer, &rootfs.merged)
                    .await?,
            ),
            None => None,
        };
        let target_pid = self.target_pid(c.config, &c.sandbox.id).await?;
        let user_files = image_files::read_user_files(&rootfs.merged).await?;
        let spec_config = image_volumes::bind_config(c.config, &sources);
        let spec_creation = Creation {
            config: &spec_config,
            ..*c
        };
        let spec = self.write_spec(
            &spec_creation,
            &dirs,
            &rootfs,
            &location,
            target_pid,
            &user_files,
        )?;
        undo.append(ContainerResource::Shim {
            dir: dirs.shim.clone(),
            // As `ContainerRecord::cgroup_dir`.
            cgroup: if spec.cgroup_path.is_empty() {
                spec.cgroups_path.clone()
            } else {
                spec.cgroup_path.clone()
            },
            handler: c.handler.name.clone(),
        })?;
        undo.shim_dir = Some(dirs.shim.clone());
        if let Some(runtime) = &c.handler.binary {
            tracing::debug!(
                container = c.id,
                handler = %c.handler.name,
                runtime = %runtime.display(),
                "the container's runtime is its pod's handler's"
            );
        }
        let pid = self
            .shims
            .launch(&ShimLaunch {
                binary: &self.shim,
                id: c.id,
                bundle: &dirs.bundle,
                state_root: &c.handler.root,
                runtime_binary: c.handler.binary.as_deref(),
                dir: &dirs.shim,
                log: spec.log_path.as_deref(),
                tty: c.config.tty,
                stdin: c.config.stdin,
                stdin_once: c.config.stdin_once,
                kept_log: &shim_log::kept_path(&c.sandbox.dir, c.id),
                timeout: super::shim::CREATE_TIMEOUT,
                restore: restore_dir.as_deref(),
                cgroup_dirs: &spec.cgroup_dirs,
                trim_mounts: self.trim_mounts.as_deref(),
            })
            .await?;
        // The runtime has applied its device rules (whose defaults allow
        // /dev/console); the container runs nothing of its own before
        // StartContainer. Without its filter it must not start: the undo
        // stops the shim.
        self.restrict_devices(c.id, &location.path, spec.device_policy)
            .await?;
        let record = ContainerRecord {
            format: crate::state_store::RECORD_FORMAT,
            id: c.id.to_string(),
            name_key: c.name_key.to_string(),
            sandbox_id: c.sandbox.id.clone(),
            created_at: now_nanos(),
            config: c.config.clone(),
            image_id: c.image.id.clone(),
            image_ref: c.image_name.to_string(),
            layers,
            log_path: spec.log_path,
            bundle: dirs.bundle,
            layer_dir: dirs.layer,
            shim_dir: dirs.shim,
            cgroups_path: spec.cgroups_path,
            cgroup_path: spec.cgroup_path,
            pid,
            stop_signal: spec.stop_signal,
            restore_from: c.restore_from.map(Path::to_path_buf),
            runtime_handler: c.handler.name.clone(),
            start: super::store::StartMark::NotStarted,
        };
        self.store.persist(&record)?;
        Ok(record)
    }

    /// The bundle, the layer dir (upper and work) and the shim's dir. The
    /// bundle comes first, with the journal in it, before anything else is
    /// made: recovery finds half-made containers by it.
    fn make_dirs(&self, id: &str, undo: &mut Undo) -> Result<Dirs, ContainerError> {
        let dirs = Dirs {
            bundle: self.store.record_dir(id),
            layer: self.layers_dir.join(id),
            // Unix socket paths are limited to 107 bytes: the shim's dir is
            // named by a 12-digit prefix of the (random) id, in a short path.
            shim: self.shims_dir.join(&id[..12.min(id.len())]),
        };
        std::fs::create_dir_all(&self.shims_dir)
            .map_err(|err| ContainerError::io("shims dir", err))?;
        // The bundle (config.json holds the env, often Secrets) and the
        // upper dir (the container's files, setuid binaries included) are
        // for root only, as containerd's and CRI-O's.
        private_dir(&dirs.bundle).map_err(|err| ContainerError::io("container dir", err))?;
        match ContainerJournal::create(&dirs.bundle, id) {
            Ok(journal) => undo.journal = Some(journal),
            Err(err) => {
                // Nothing but the bundle was made.
                let _ = std::fs::remove_dir_all(&dirs.bundle);
                return Err(err.into());
            }
        }
        undo.append(ContainerResource::LayerDir {
            path: dirs.layer.clone(),
        })?;
        private_dir(&dirs.layer).map_err(|err| ContainerError::io("container dir", err))?;
        undo.append(ContainerResource::ShimDir {
            path: dirs.shim.clone(),
        })?;
        std::fs::create_dir(&dirs.shim).map_err(|err| ContainerError::io("shim dir", err))?;
        // Its sockets, logs and exec specs (an exec's whole env) are root's.
        private_dir(&dirs.shim).map_err(|err| ContainerError::io("shim dir", err))?;
        Ok(dirs)
    }

    /// The image's layers under a writable upper dir, idmapped when the
    /// pod has its own user namespace.
    fn mount_rootfs(
        &self,
        image: &ImageRecord,
        dirs: &Dirs,
        idmap: Option<(&Path, PodUserNamespace)>,
        undo: &mut Undo,
    ) -> Result<RootfsPaths, ContainerError> {
        let layers = image
            .layers
            .iter()
            .map(|layer| self.images.layer_path(&layer.diff_id))
            .collect::<Result<Vec<_>, _>>()?;
        let paths = RootfsPaths::new(&dirs.layer, &dirs.bundle);
        // Image volumes and idmapped views are mounted in its dirs later:
        // its unmount takes them too.
        undo.append(ContainerResource::Rootfs {
            layer_dir: dirs.layer.clone(),
            bundle: dirs.bundle.clone(),
        })?;
        match idmap {
            Some((path, userns)) => {
                self.mounts
                    .mount_idmapped(&layers, &paths, path, userns.host_root())?
            }
            None => self.mounts.mount(&layers, &paths)?,
        }
        Ok(paths)
    }

    /// Each image volume, read-only, beside the rootfs (whose unmount takes
    /// them too); returns the mount index and host path of each, its sub
    /// path resolved inside it.
    fn mount_image_volumes(
        &self,
        volumes: &[ImageVolume],
        rootfs: &RootfsPaths,
    ) -> Result<Vec<(usize, PathBuf)>, ContainerError> {
        let mut sources = Vec::new();
        for volume in volumes {
            let layers = volume
                .image
                .layers
                .iter()
                .map(|layer| self.images.layer_path(&layer.diff_id))
                .collect::<Result<Vec<_>, _>>()?;
            let root = self
                .mounts
                .mount_image_volume(&layers, rootfs, volume.index)?;
            let source =
                image_volumes::resolve_sub_path(&root, &volume.sub_path).map_err(|source| {
                    ContainerError::ImageSubPath {
                        container_path: volume.container_path.clone(),
                        image: volume.reference.clone(),
                        sub_path: volume.sub_path.clone(),
                        source,
                    }
                })?;
            sources.push((volume.index, source));
        }
        Ok(sources)
    }

    /// Builds the OCI spec and writes it into the bundle (and makes the log
    /// file's dir). Nothing here awaits: the host lookup the spec builder
    /// borrows is not Send.
    fn write_spec(
        &self,
        c: &Creation<'_>,
        dirs: &Dirs,
        rootfs: &RootfsPaths,
        location: &berth_cgroups::CgroupLocation,
        target_pid: Option<u32>,
        user_files: &ImageUserFiles,
    ) -> Result<SpecOutcome, ContainerError> {
        let image_config = self.image_config(c.image)?;
        let image_view = ImageConfigView::from(&image_config);
        let cgroups_path = self.oci_cgroups_path(location);
        let hierarchy_dirs = self
            .cgroups
            .hierarchy_dirs(&location.path)
            .map_err(|err| ContainerError::Cgroup(Box::new(err)))?;
        let log_path = berth_spec::annotations::log_path(c.config, c.sandbox_config)?;
        let inputs = ContainerInputs {
            container_id: c.id,
            sandbox_id: &c.sandbox.id,
            config: c.config,
            sandbox_config: c.sandbox_config,
            image: &image_view,
            rootfs: &rootfs.merged,
            namespaces: &sandbox_namespaces(c.sandbox, target_pid),
            cgroups_path: &cgroups_path,
            cgroup_view: cgroup_view::cgroup_view(self.cgroups.layout(), &hierarchy_dirs),
            etc_passwd: user_files.passwd.as_deref(),
            etc_group: user_files.group.as_deref(),
            sandbox_files: sandbox_files(c.sandbox),
            host_oom_score_adj_floor: crate::sandbox::process::own_oom_score_adj(),
            features: self.features,
            lsm: &self.sandboxes.lsm,
            host: &OsHost,
        };
        let mut spec = berth_spec::container_spec(&inputs)?;
        crate::lsm::log_unapplied_selinux_label(
            &self.sandboxes.lsm,
            c.config
                .linux
                .as_ref()
                .and_then(|linux| linux.security_context.as_ref())
                .and_then(|security| security.selinux_options.as_ref()),
            &format!(
                "container {:?} of pod {}",
                c.config
                    .metadata
                    .as_ref()
                    .map(|m| m.name.as_str())
                    .unwrap_or_default(),
                c.sandbox.id
            ),
        );
        berth_spec::ulimits::apply_defaults(&mut spec, &self.default_rlimits);
        self.apply_cdi(&mut spec, c.config)?;
        if let Some(userns) = c.sandbox.namespaces.get("user") {
            self.idmap_binds(&mut spec, c, dirs, rootfs, userns)?;
        }
        let device_rules = spec
            .linux()
            .as_ref()
            .and_then(|linux| linux.resources().as_ref())
            .and_then(|resources| resources.devices().clone())
            .unwrap_or_default();
        let device_policy =
            berth_cgroups::DevicePolicy::for_container(&device_rules).map_err(|source| {
                ContainerError::DeviceRules {
                    id: c.id.to_string(),
                    source,
                }
            })?;
        let json = serde_json::to_vec(&spec)
            .map_err(|err| ContainerError::WriteSpec(oci_spec::OciSpecError::SerDe(err)))?;
        // 0600: the spec carries the container's env.
        berth_atomic_file::write_atomic(&dirs.bundle.join("config.json"), &json, 0o600)
            .map_err(|err| ContainerError::io("writing config.json", err))?;
        // Env values JSON cannot carry go to the shim beside the spec.
        let raw_env = berth_spec::process::raw_env(c.config);
        if !raw_env.is_empty() {
            let path = berth_shim_api::raw_env::path(&dirs.bundle);
            let bytes = berth_shim_api::raw_env::encode(&raw_env);
            berth_atomic_file::write_atomic(&path, &bytes, 0o600)
                .map_err(|err| ContainerError::io("writing raw-env", err))?;
        }
        if let Some(dir) = log_path.as_deref().and_then(Path::parent) {
            std::fs::create_dir_all(dir).map_err(|source| ContainerError::LogDir {
                path: dir.to_path_buf(),
                source,
            })?;
        }
        // A systemd scope (`slice:prefix:name`) is systemd's to remove.
        let cgroup_dirs = if cgroups_path.starts_with('/') {
            hierarchy_dirs
        } else {
            Vec::new()
        };
        Ok(SpecOutcome {
            cgroups_path,
            cgroup_path: location.path.clone(),
            cgroup_dirs,
            log_path,
            stop_signal: berth_spec::stop_signal(c.config, &image_view)
                .unwrap_or(Signal::SIGTERM as i32),
            device_policy,
        })
    }

    /// Puts `policy` into the created container's cgroup `path` (eBPF on
    /// v2, the devices files on v1, the scope's properties under systemd).
    async fn restrict_devices(
        &self,
        id: &str,
        path: &str,
        policy: berth_cgroups::DevicePolicy,
    ) -> Result<(), ContainerError> {
        let cgroups = self.cgroups.clone();
        let path = path.to_string();
        tokio::task::spawn_blocking(move || cgroups.restrict_devices(&path, &policy))
            .await
            .map_err(|source| ContainerError::Task {
                what: "device filter task",
                source,
            })?
            .map_err(|source| ContainerError::DeviceFilter {
                id: id.to_string(),
                source: Box::new(source),
            })
    }

    /// In a pod with its own user namespace: the spec's binds of host
    /// paths (volumes, the pod's files) bind views of them idmapped
    /// through it, attached in the bundle (see `idmapped_binds`). The
    /// views are unmounted with the rootfs, so the undo of a later
    /// failure takes them too.
    fn idmap_binds(
        &self,
        spec: &mut oci_spec::runtime::Spec,
        c: &Creation<'_>,
        dirs: &Dirs,
        rootfs: &RootfsPaths,
        userns: &Path,
    ) -> Result<(), ContainerError> {
        // The spec's sources have their symlinks resolved: so must what
        // they are told apart by.
        let bundle = std::fs::canonicalize(&dirs.bundle)
            .map_err(|err| ContainerError::io("container dir", err))?;
        let files = sandbox_files(c.sandbox);
        let files: Vec<PathBuf> = [files.hostname, files.hosts, files.resolv_conf]
            .into_iter()
            .flatten()
            .filter_map(|file| std::fs::canonicalize(file).ok())
            .collect();
        let mounts = spec.mounts_mut().get_or_insert_with(Vec::new);
        let binds = idmapped_binds::plan(
            mounts,
            &c.config.mounts,
            &files,
            &bundle,
            &rootfs.idmapped_binds,
        );
        for bind in &binds {
            self.mounts
                .attach_idmapped_bind(bind, userns)
                .map_err(|source| ContainerError::IdmappedMount {
                    container_path: bind.container_path.clone(),
                    host_path: bind.host_path.clone(),
                    source,
                })?;
        }
        idmapped_binds::rewrite(mounts, &binds);
        Ok(())
    }

    /// The edits of the CDI devices the container asks for, from the spec
    /// files on the node now.
    fn apply_cdi(
        &self,
        spec: &mut oci_spec::runtime::Spec,
        config: &ContainerConfig,
    ) -> Result<(), ContainerError> {
        let devices = berth_spec::cdi::requested_devices(config)?;
        if devices.is_empty() {
            return Ok(());
        }
        let (specs, problems) = super::cdi::load_specs(&self.cdi_spec_dirs);
        let edits = berth_spec::cdi::resolve(&specs, &devices, &problems)?;
        berth_spec::cdi::apply(spec, &edits, &OsHost)?;
        Ok(())
    }

    /// The image's config blob, parsed; the error says which step failed.
    fn image_config(
        &self,
        image: &ImageRecord,
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

    /// A failed create's undo: its container stopped, then its journal
    /// torn down. A teardown step that fails keeps its entry and all made
    /// before it (the bundle and journal stay, without a record): the next
    /// start's recovery finishes it.
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
        }
        if let Some(mut journal) = undo.journal {
            if let Err(err) = self.tear_down(&mut journal).await {
                tracing::warn!(container = %journal.id, error = %err,
                    "undo of a failed create: the rest is left for recovery at the next start");
            }
        }
    }
}

/// The layers a container holds: its image's and its image volumes',
/// each once.
fn held_layers(c: &Creation<'_>) -> Vec<String> {
    let mut layers: Vec<String> = Vec::new();
    let images = std::iter::once(c.image).chain(c.volumes.iter().map(|volume| &volume.image));
    for layer in images.flat_map(|image| &image.layers) {
        if !layers.contains(&layer.diff_id) {
            layers.push(layer.diff_id.clone());
        }
    }
    layers
}

/// The pod's namespaces a container joins, and a PID TARGET's init.
fn sandbox_namespaces(sandbox: &SandboxRecord, target_pid: Option<u32>) -> SandboxNamespaces {
    SandboxNamespaces {
        network: sandbox.namespaces.get("net").cloned(),
        ipc: sandbox.namespaces.get("ipc").cloned(),
        uts: sandbox.namespaces.get("uts").cloned(),
        pid: sandbox.namespaces.get("pid").cloned(),
        user: sandbox.namespaces.get("user").cloned(),
        target_pid,
    }
}

/// The pod's files every container mounts.
fn sandbox_files(sandbox: &SandboxRecord) -> SandboxFiles {
    let dir = sandbox.files_dir();
    SandboxFiles {
        hostname: Some(dir.join("hostname")),
        hosts: Some(dir.join("hosts")),
        resolv_conf: Some(dir.join("resolv.conf")),
        shm: sandbox.shm.clone(),
    }
}

/// The user namespace the container's pod asks for, checked.
fn pod_userns(
    sandbox_config: &PodSandboxConfig,
) -> Result<Option<PodUserNamespace>, ContainerError> {
    let options = sandbox_config
        .linux
        .as_ref()
        .and_then(|linux| linux.security_context.as_ref())
        .and_then(|context| context.namespace_options.as_ref());
    berth_spec::userns::pod_user_namespace(options).map_err(|err| ContainerError::Spec(err.into()))
}

/// Lets the pod's mapped root group search the bundle (0710), as
/// containerd does: libcontainer mounts the rootfs from inside the user
/// namespace, where host root's 0700 dirs are closed. config.json stays
/// 0600, so the env is still root's alone.
fn open_bundle_to(bundle: &Path, host_gid: u32) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::os::unix::fs::chown(bundle, None, Some(host_gid))?;
    std::fs::set_permissions(bundle, std::fs::Permissions::from_mode(0o710))
}

/// Creates `dir` (and its parents) and makes it 0700, also when it existed.
fn private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(dir)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
}
