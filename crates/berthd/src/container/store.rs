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
    /// The RuntimeClass handler whose runtime runs it (its pod's; `""`:
    /// the default, libcontainer in the shim): where its runtime state is.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub runtime_handler: String,
    /// The checkpoint archive the container was created from: its start
    /// restores the checkpoint's processes instead of running its command.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restore_from: Option<PathBuf>,
    /// Whether StartContainer started it: what the status reports when its
    /// shim does not answer ([`super::ContainerManager::state`]).
    #[serde(default)]
    pub start: StartMark,
}

/// What berthd knows of a container's start without asking its shim.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StartMark {
    /// A record written before starts were kept: not known.
    #[default]
    Unrecorded,
    /// Created; no StartContainer has succeeded.
    NotStarted,
    /// StartContainer succeeded at this time (RFC 3339, as the shim's).
    Started(String),
}

impl ContainerRecord {
    /// The pod's sandbox container (a handler's `sandbox_container`), which
    /// has the pod's id. kubelet never hears of it: lists, stats and
    /// events leave it out, the pod's stop and remove take it last.
    pub fn is_sandbox_container(&self) -> bool {
        self.id == self.sandbox_id
    }

    /// The image name to report back: the name the client asked for.
    /// kubelet sends the resolved image id in `image.image` and the pod's
    /// image in `user_specified_image`, and compares the status with the
    /// pod's image (containerd answers with the image's tag). The config
    /// is kept as received, so records made before this was read have it
    /// too. A restored checkpoint reports the image it was made from.
    pub fn image_name(&self) -> &str {
        let user = self
            .config
            .image
            .as_ref()
            .map(|image| image.user_specified_image.as_str())
            .unwrap_or_default();
        if user.is_empty() || self.restore_from.is_some() {
            &self.image_ref
        } else {
            user
        }
    }

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

#[cfg(test)]
mod tests {
    use cri_api::v1::ImageSpec;

    use super::*;

    const ID: &str = "sha256:77b8a2e4c6f1d3b5a7e9c0f2d4b6a8c0e2f4a6b8c0d2e4f6a8b0c2d4e6f8a0b2";
    const NAME: &str = "registry.k8s.io/e2e-test-images/busybox:1.37.0-1";

    fn record(image: &str, user_specified: &str) -> ContainerRecord {
        ContainerRecord {
            format: crate::state_store::RECORD_FORMAT,
            id: "c1".to_string(),
            name_key: "c_p_ns_uid_0".to_string(),
            sandbox_id: "p1".to_string(),
            created_at: 1,
            config: ContainerConfig {
                image: Some(ImageSpec {
                    image: image.to_string(),
                    user_specified_image: user_specified.to_string(),
                    ..Default::default()
                }),
                ..Default::default()
            },
            image_id: ID.to_string(),
            image_ref: image.to_string(),
            layers: Vec::new(),
            log_path: None,
            bundle: PathBuf::from("/b"),
            layer_dir: PathBuf::from("/l"),
            shim_dir: PathBuf::from("/s"),
            cgroups_path: String::new(),
            cgroup_path: String::new(),
            pid: 1,
            stop_signal: 15,
            restore_from: None,
            runtime_handler: String::new(),
            start: StartMark::NotStarted,
        }
    }

    /// Through the on-disk form, as a berthd restart reads it.
    fn reloaded(record: &ContainerRecord) -> ContainerRecord {
        let json = serde_json::to_string_pretty(record).unwrap();
        serde_json::from_str(&json).unwrap()
    }

    #[test]
    fn kubelet_gets_back_the_name_it_asked_for_not_the_id() {
        // kubelet: image.image is the resolved id, the pod's image beside it.
        let record = reloaded(&record(ID, NAME));
        assert_eq!(record.image_name(), NAME);
    }

    #[test]
    fn without_a_user_specified_image_the_image_asked_for_is_reported() {
        assert_eq!(reloaded(&record(NAME, "")).image_name(), NAME);
        assert_eq!(reloaded(&record(ID, "")).image_name(), ID);
    }

    #[test]
    fn a_restored_checkpoint_reports_its_source_image() {
        let mut restored = record("busybox:1", "/var/lib/checkpoint.tar");
        restored.restore_from = Some(PathBuf::from("/var/lib/checkpoint.tar"));
        assert_eq!(reloaded(&restored).image_name(), "busybox:1");
    }

    #[test]
    fn a_start_is_kept_across_a_restart() {
        let mut started = record(ID, NAME);
        started.start = StartMark::Started("2026-11-26T14:00:00.000000001Z".into());
        assert_eq!(reloaded(&started).start, started.start);
        assert_eq!(reloaded(&record(ID, NAME)).start, StartMark::NotStarted);
    }

    #[test]
    fn a_record_written_before_restore_from_existed_still_loads() {
        let mut json = serde_json::to_value(record(ID, NAME)).unwrap();
        let object = json.as_object_mut().unwrap();
        for key in ["format", "layers", "cgroup_path", "restore_from", "start"] {
            object.remove(key);
        }
        let old: ContainerRecord = serde_json::from_value(json).unwrap();
        assert_eq!(old.image_name(), NAME);
        assert_eq!(old.start, StartMark::Unrecorded);
    }
}
