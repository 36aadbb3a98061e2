//! What berthd keeps per container, in `<state_dir>/containers/<id>/container.json`.

use std::path::PathBuf;

use cri_api::v1::ContainerConfig;
use serde::{Deserialize, Serialize};

use crate::state_store::{Record, RecordStore};

/// Everything berthd keeps about one container. Its live state (running,
/// exited, exit code) comes from its shim and the shim's exit file.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ContainerRecord {
    /// The record's format ([`crate::state_store::RECORD_FORMAT`]).
    #[serde(default = "crate::state_store::first_format")]
    pub format: u32,
    pub id: String,
    /// `name_sandboxname_sandboxnamespace_sandboxuid_attempt`.
    pub name_key: String,
    pub sandbox_id: String,
    pub created_at: i64,
    /// The `ContainerConfig` as received (on disk: protobuf, then base64).
    #[serde(with = "crate::state_store::proto_base64")]
    pub config: ContainerConfig,
    /// The image id (config digest) and the reference the client used.
    pub image_id: String,
    pub image_ref: String,
    /// The layers (diff ids) of its image and its image volumes: kept from
    /// garbage collection while the container exists, even if the images
    /// are removed.
    #[serde(default)]
    pub layers: Vec<String>,
    pub log_path: Option<PathBuf>,
    /// The OCI bundle: config.json and the mounted rootfs.
    pub bundle: PathBuf,
    /// Upper and work dirs of the rootfs overlay.
    pub layer_dir: PathBuf,
    /// The shim's files: socket, pid, exit status.
    pub shim_dir: PathBuf,
    /// The spec's `linux.cgroupsPath` (`slice:berth:<id>` under systemd).
    pub cgroups_path: String,
    /// The container's cgroup as a path under each hierarchy's root
    /// (records from before it was kept have only `cgroups_path`).
    #[serde(default)]
    pub cgroup_path: String,
    /// The container's init pid as the shim reported it at creation.
    pub pid: i32,
    /// Signal StopContainer sends first (the image's STOPSIGNAL, else SIGTERM).
    pub stop_signal: i32,
    /// The checkpoint archive the container was created from: its start
    /// restores the checkpoint's processes instead of running its command.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restore_from: Option<PathBuf>,
}

impl ContainerRecord {
    /// The container's cgroup as a path under each hierarchy's root.
    pub fn cgroup_dir(&self) -> &str {
        if self.cgroup_path.is_empty() {
            &self.cgroups_path
        } else {
            &self.cgroup_path
        }
    }
}

impl Record for ContainerRecord {
    const KIND: &'static str = "container";
    const FILE: &'static str = "container.json";

    fn id(&self) -> &str {
        &self.id
    }

    fn name_key(&self) -> &str {
        &self.name_key
    }

    fn format(&self) -> u32 {
        self.format
    }

    fn owner(&self) -> Option<&str> {
        Some(&self.sandbox_id)
    }
}

/// All containers.
pub type ContainerStore = RecordStore<ContainerRecord>;
