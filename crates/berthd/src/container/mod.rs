//! Containers: created from an image into a pod sandbox, run by one
//! berth-shim each. berthd prepares the bundle (overlay rootfs and OCI
//! spec); the shim creates, starts and reaps the container.

pub mod cdi;
pub mod cgroup_view;
mod checkpoint;
pub mod checkpoint_archive;
mod create;
#[cfg(test)]
mod create_fault_tests;
pub mod durations;
mod error;
mod exec_sync;
pub mod host;
pub mod idmap;
pub mod idmapped_binds;
pub mod image_files;
pub mod image_volumes;
pub mod journal;
#[cfg(test)]
pub(crate) mod lifecycle_tests;
mod recover;
mod remove;
mod reopen_log;
pub mod resources;
pub mod rootfs;
pub mod shim;
pub mod shim_log;
pub mod shim_signals;
mod start;
pub mod state_cache;
mod stop;
pub mod store;
mod teardown;
pub mod trash;
mod update;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use berth_image::store::{ImageStore, Lease};
use berth_shim_api::protocol::{Response, RunState, StateInfo};
use berth_spec::CgroupFeatures;

pub use self::checkpoint::archive_path;
pub use self::error::ContainerError;
use self::host::{RootfsMounts, Shims};
use self::store::{ContainerRecord, ContainerStore, StartMark};
use crate::sandbox::SandboxManager;

/// Everything containers need from the daemon.
pub struct ContainerManager {
    pub store: ContainerStore,
    pub images: Arc<ImageStore>,
    pub sandboxes: Arc<SandboxManager>,
    /// Persistent per-container dirs (the rootfs's upper and work dirs).
    pub layers_dir: PathBuf,
    /// Where each shim keeps its socket, pid and exit files.
    pub shims_dir: PathBuf,
    /// berth-shim, run through a view containers cannot write.
    pub shim: crate::helper_binary::HelperBinary,
    /// Starts shims and talks to them.
    pub shims: Arc<dyn Shims>,
    /// The overlay mounts of root filesystems.
    pub mounts: Arc<dyn RootfsMounts>,
    /// For each container's cgroup view and resource updates.
    pub cgroups: Arc<dyn berth_cgroups::CgroupManager>,
    /// What the host's cgroups offer, read at start-up.
    pub features: CgroupFeatures,
    /// Each container's hold on its image's layers, by container id.
    pub layer_leases: std::sync::Mutex<HashMap<String, Lease>>,
    /// Where CDI spec files are read from, lowest priority first.
    pub cdi_spec_dirs: Vec<PathBuf>,
    /// CRIU, for checkpoints.
    pub criu: Arc<dyn host::Criu>,
    /// Whether CRIU can run here: probed at the first checkpoint, kept
    /// (but for a probe that timed out).
    pub criu_check: tokio::sync::Mutex<Option<Result<(), host::CriuUnusable>>>,
    /// `allow_checkpoint_images`: whether a checkpoint image may be
    /// restored ([`checkpoint::restore_source`]).
    pub allow_checkpoint_images: bool,
    /// `default_ulimits`: the rlimits of containers that set none.
    pub default_rlimits: Vec<oci_spec::runtime::PosixRlimit>,
    /// The state dir, when it is a mount of its own (read at start-up):
    /// shims then create containers in a mount table without the other
    /// pods' mounts (berth-shim's `mount_view`).
    pub trim_mounts: Option<PathBuf>,
    /// The states shims last gave, for the calls that report them.
    pub states: state_cache::StateCache,
}

/// How long a report waits on a shim with no state kept
/// ([`ContainerManager::state`]). A shim answers in well under a
/// millisecond; this leaves room for a loaded node.
pub const REPORT_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

impl ContainerManager {
    /// Starts, on a blocking thread, the grace period that the shim's move
    /// of the container's first process into its cgroup will wait for
    /// (`berth_cgroups::prime`): called as a create begins. (An exec
    /// reaches its move too soon after it begins to gain from this.)
    pub fn prime_cgroup_move(&self) {
        let cgroups = self.cgroups.clone();
        drop(tokio::task::spawn_blocking(move || {
            cgroups.prime_migration()
        }));
    }

    /// The state of a container to report (status, lists, events,
    /// metrics): as its shim last gave it while that still holds
    /// ([`state_cache`]), else from the shim. The lifecycle's own steps
    /// ask the shim.
    ///
    /// A shim that does not answer within [`REPORT_WAIT`] (stopped, hung)
    /// is not waited on for the 30 s a shim call may take: kubelet's
    /// relists, status and events must not stall on one container, also
    /// when nothing is kept of it (after a berthd restart). Its container
    /// is then reported as last known on disk ([`Self::last_known`]), not
    /// unknown: kubelet kills and restarts a container it sees unknown, and
    /// a slow shim on a loaded node must not cost a healthy workload that.
    pub async fn state(&self, record: &ContainerRecord) -> Option<StateInfo> {
        let dir = &record.shim_dir;
        if let Some(state) = self.states.get(dir) {
            return Some(state);
        }
        let epoch = self.states.epoch();
        let watch = self.shims.watch(dir);
        let Ok(state) = tokio::time::timeout(REPORT_WAIT, self.shims.state(dir)).await else {
            let known = last_known(record, self.shims.exited(dir));
            tracing::warn!(
                container = %record.id,
                state = ?known.as_ref().map(|state| state.status),
                "its shim did not answer within {REPORT_WAIT:?}: reported as last known"
            );
            return known;
        };
        if let Some(state) = &state {
            self.states.store(dir, epoch, state, watch);
        }
        state
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

    /// A container's record as last persisted, or NotFound naming the id:
    /// for the calls that only report, which must not wait for a removal
    /// in progress.
    pub fn published(&self, id: &str) -> Result<Arc<ContainerRecord>, ContainerError> {
        self.store
            .published(id)?
            .ok_or_else(|| ContainerError::NotFound { id: id.to_string() })
    }

    /// A container's shared record, or NotFound naming the id.
    fn handle(&self, id: &str) -> Result<Arc<tokio::sync::Mutex<ContainerRecord>>, ContainerError> {
        self.find(id)?
            .ok_or_else(|| ContainerError::NotFound { id: id.to_string() })
    }

    /// Every container of a sandbox (its full id), from the store's index:
    /// every container event and pod stop asks, so it must not visit the
    /// node's other containers.
    pub async fn of_sandbox(&self, sandbox_id: &str) -> Vec<ContainerRecord> {
        let mut records = Vec::new();
        for handle in self.store.owned_by(sandbox_id) {
            records.push(handle.lock().await.clone());
        }
        records
    }

    /// Keeps a container's layers from garbage collection until it is
    /// removed: RemoveImage must not delete what a rootfs is made of.
    fn hold_layers(&self, id: &str, layers: &[String]) {
        let lease = self.images.lease(layers.iter().cloned());
        self.layer_leases
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .insert(id.to_string(), lease);
    }

    /// Lets a removed container's layers go.
    fn release_layers(&self, id: &str) {
        self.layer_leases
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .remove(id);
    }

    pub(crate) async fn is_running(&self, record: &ContainerRecord) -> bool {
        matches!(self.shims.state(&record.shim_dir).await, Some(state) if state.status == RunState::Running)
    }
}

/// A container's state from what berthd keeps on disk, for a shim that
/// does not answer: the exit its shim wrote if there is one, else started
/// or created as StartContainer left the record. None (unknown) only for a
/// record that never kept its start (written before starts were kept).
/// containerd answers the same from its own store.
fn last_known(record: &ContainerRecord, exit: Option<StateInfo>) -> Option<StateInfo> {
    let started_at = match &record.start {
        StartMark::Started(at) => Some(at.clone()),
        StartMark::NotStarted | StartMark::Unrecorded => None,
    };
    let known = |status| StateInfo {
        id: record.id.clone(),
        status,
        pid: record.pid,
        created_at: String::new(),
        started_at: started_at.clone(),
        exit_code: None,
        exited_at: None,
        oom_killed: false,
        unknown: false,
    };
    match (exit, &record.start) {
        (Some(exit), _) => Some(StateInfo {
            id: record.id.clone(),
            pid: record.pid,
            started_at: exit.started_at.clone().or_else(|| started_at.clone()),
            ..exit
        }),
        (None, StartMark::Started(_)) => Some(known(RunState::Running)),
        (None, StartMark::NotStarted) => Some(known(RunState::Created)),
        (None, StartMark::Unrecorded) => None,
    }
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
