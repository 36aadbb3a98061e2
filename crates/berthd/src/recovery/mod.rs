//! Start-up recovery: the one place that decides what a berthd killed at
//! any moment left behind, and finishes or undoes it before the socket
//! serves. containerd's `internal/cri/server/restart.go` plays this part
//! there.
//!
//! What it relies on:
//! - **Journal before side effects.** RunPodSandbox and CreateContainer
//!   write each resource into the object's journal
//!   (`crate::sandbox::journal`, `crate::container::journal`) before the
//!   step that makes it (an older berthd wrote an intent ([`intent`]),
//!   still read and converted); both write the record last. So a state
//!   directory without a record is a create that never answered its
//!   client (or a failed create whose undo failed): undone from its
//!   journal. A record is complete: kept, never re-created or repaired.
//! - **Undo is idempotent.** Each step (kill, CNI DEL, unmount, cgroup
//!   removal, rmdir) is harmless when its object was never made or is
//!   already gone, so an intent may name more than was made, and recovery
//!   itself may be cut short and run again.
//! - **Removals are retried by their client.** Stop and Remove keep the
//!   record until everything else is gone, so one cut short leaves a record
//!   and the next call finishes it. What a removal had already moved out
//!   from under its record (a container's dirs, its shim's dir, a pod's
//!   pins) is swept here by name: nothing under berth's directories is
//!   kept unless a record names it.
//! - **Nothing berth did not make is touched.** Processes are found by the
//!   arguments and root berth gave them and killed by pid after checking
//!   their start time; cgroups only at the paths intents name; mounts only
//!   under berth's own directories.
//! - **No create is under way.** It runs before the socket serves, under
//!   the root lock.
//! - **A record or intent of a newer format is left alone** (and reported):
//!   this berthd cannot know what it names.

pub mod intent;

use crate::container::ContainerManager;
use crate::sandbox::SandboxManager;

/// What recovery undid, for the log.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Recovered {
    /// Containers whose create never finished.
    pub containers: usize,
    /// Sandboxes whose run never finished.
    pub sandboxes: usize,
    /// Directories, pins and shims no record named.
    pub orphans: usize,
}

/// Removes a directory recovery found unused; gone already is fine, and a
/// failure is reported, not fatal: the other leftovers still matter.
pub(crate) fn remove_tree(dir: &std::path::Path) {
    if let Err(err) = std::fs::remove_dir_all(dir) {
        if err.kind() != std::io::ErrorKind::NotFound {
            tracing::warn!(dir = %dir.display(), error = %err, "recovery: remove dir");
        }
    }
}

/// Undoes every create that never finished and sweeps what removals cut
/// short left: containers first (their processes live in their pod's
/// cgroup), then sandboxes, then cgroup parents left empty.
pub async fn recover(sandboxes: &SandboxManager, containers: &ContainerManager) -> Recovered {
    let mut recovered = Recovered::default();
    let (undone, orphans) = containers.recover().await;
    recovered.containers = undone;
    recovered.orphans += orphans;
    let (undone, orphans) = sandboxes.recover().await;
    recovered.sandboxes = undone;
    recovered.orphans += orphans;
    sandboxes.remove_unused_parents();
    if recovered != Recovered::default() {
        tracing::info!(
            containers = recovered.containers,
            sandboxes = recovered.sandboxes,
            orphans = recovered.orphans,
            "recovery: undid unfinished creates and swept leftovers"
        );
    }
    recovered
}
