//! What a container's lifecycle does to the host, behind two seams: the
//! overlay mounts of its root filesystem, and its shim (started with
//! fork+exec, then called over its socket). The manager's rules (undo order,
//! name reservations, idempotent stop and remove) are unit-tested through
//! fakes of these, without root; cgroups have their own seam,
//! `berth_cgroups::CgroupManager`.

use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use async_trait::async_trait;
use berth_shim_api::protocol::{Request, Response, StateInfo};

use super::idmap::IdmapError;
use super::idmapped_binds::{self, IdmappedBind};
use super::rootfs::{self, DetachedRootfs, RootfsError, RootfsPaths};
use super::shim::{self, ShimLaunch};
use super::shim_signals::ShimSignals;
use super::state_cache::ShimWatch;
use super::ContainerError;

/// Mounting and unmounting a container's overlay root filesystem and the
/// mounts that live beside it in the bundle.
pub trait RootfsMounts: Send + Sync {
    /// Mounts `layers` (bottom-most first) under a writable upper dir.
    fn mount(&self, layers: &[PathBuf], paths: &RootfsPaths) -> Result<(), RootfsError>;
    /// Mounts `layers` (bottom-most first) read-only as image volume
    /// `index` of the container; returns the mount point.
    fn mount_image_volume(
        &self,
        layers: &[PathBuf],
        paths: &RootfsPaths,
        index: usize,
    ) -> Result<PathBuf, RootfsError>;
    /// Unmounts it, the image volumes and the idmapped views; not mounted
    /// is fine. The overlay is released when the result is dropped.
    fn unmount(&self, paths: &RootfsPaths) -> Result<DetachedRootfs, RootfsError>;
    /// Mounts it over views of the layers idmapped through the user
    /// namespace pinned at `userns` (a pod with `hostUsers: false`), the
    /// upper dir's root owned by `owner`, the host ids of its root.
    fn mount_idmapped(
        &self,
        layers: &[PathBuf],
        paths: &RootfsPaths,
        userns: &Path,
        owner: (u32, u32),
    ) -> Result<(), RootfsError>;
    /// Attaches the view of one bind mount's source idmapped through the
    /// user namespace pinned at `userns`, at `bind.target`.
    fn attach_idmapped_bind(&self, bind: &IdmappedBind, userns: &Path) -> Result<(), IdmapError>;
}

/// Starting shims and talking to them.
#[async_trait]
pub trait Shims: Send + Sync {
    /// Starts a shim and waits until it reports the container created;
    /// returns the container's init pid.
    async fn launch(&self, launch: &ShimLaunch<'_>) -> Result<i32, ContainerError>;
    /// One request to the shim of `dir`; `extra` adds to the call timeout.
    async fn call(&self, dir: &Path, request: Request, extra: Duration) -> io::Result<Response>;
    /// The container's state: from the live shim, else from its exit file.
    async fn state(&self, dir: &Path) -> Option<StateInfo>;
    /// The exit the shim of `dir` wrote in its exit file, without asking
    /// the shim.
    fn exited(&self, dir: &Path) -> Option<StateInfo>;
    /// What tells when the state the shim of `dir` gives from now on may
    /// be old; None if that cannot be told.
    fn watch(&self, dir: &Path) -> Option<Box<dyn ShimWatch>>;
    /// Whether a shim process serves `dir`, answering or not.
    fn is_alive(&self, dir: &Path) -> bool;
    /// Kills the shim of `dir` that no record names (its berthd died
    /// before writing the record), found by its arguments. Its container's
    /// processes are left to its cgroup.
    async fn kill_unrecorded(&self, dir: &Path);
    /// Writes the exit file of a container whose shim is gone and whose
    /// processes berthd killed: exit code 255, reason unknown.
    fn record_unknown_exit(&self, dir: &Path) -> io::Result<()>;
}

/// The real overlay mounts.
pub struct OverlayMounts;

impl RootfsMounts for OverlayMounts {
    fn mount(&self, layers: &[PathBuf], paths: &RootfsPaths) -> Result<(), RootfsError> {
        rootfs::mount_rootfs(layers, paths)
    }

    fn mount_image_volume(
        &self,
        layers: &[PathBuf],
        paths: &RootfsPaths,
        index: usize,
    ) -> Result<PathBuf, RootfsError> {
        rootfs::mount_image_volume(layers, paths, index)
    }

    fn unmount(&self, paths: &RootfsPaths) -> Result<DetachedRootfs, RootfsError> {
        rootfs::unmount_rootfs(paths)
    }

    fn mount_idmapped(
        &self,
        layers: &[PathBuf],
        paths: &RootfsPaths,
        userns: &Path,
        owner: (u32, u32),
    ) -> Result<(), RootfsError> {
        rootfs::mount_rootfs_idmapped(layers, paths, userns, owner)
    }

    fn attach_idmapped_bind(&self, bind: &IdmappedBind, userns: &Path) -> Result<(), IdmapError> {
        idmapped_binds::attach(bind, userns)
    }
}

/// Real berth-shim processes.
pub struct ShimProcesses {
    /// What the state cache's watches share; None where the kernel gave no
    /// inotify or epoll fd, and each watch checks its container alone.
    signals: Option<ShimSignals>,
}

impl ShimProcesses {
    pub fn new() -> Self {
        let signals = ShimSignals::new()
            .map_err(|err| {
                tracing::warn!(error = %err, "no shared exit watch: each cached container state is checked on its own");
            })
            .ok();
        Self { signals }
    }
}

impl Default for ShimProcesses {
    fn default() -> Self {
        Self::new()
    }
}

#[async_trait]
impl Shims for ShimProcesses {
    async fn launch(&self, launch: &ShimLaunch<'_>) -> Result<i32, ContainerError> {
        shim::launch(launch).await
    }

    async fn call(&self, dir: &Path, request: Request, extra: Duration) -> io::Result<Response> {
        shim::call(dir, request, extra).await
    }

    async fn state(&self, dir: &Path) -> Option<StateInfo> {
        shim::state(dir).await
    }

    fn exited(&self, dir: &Path) -> Option<StateInfo> {
        shim::exit_state(dir)
    }

    fn watch(&self, dir: &Path) -> Option<Box<dyn ShimWatch>> {
        shim::watch(dir, self.signals.as_ref())
    }

    fn is_alive(&self, dir: &Path) -> bool {
        !crate::procs::with_argument("berth-shim", "--dir", dir).is_empty()
    }

    async fn kill_unrecorded(&self, dir: &Path) {
        crate::procs::kill_and_wait(&crate::procs::with_argument("berth-shim", "--dir", dir)).await;
    }

    fn record_unknown_exit(&self, dir: &Path) -> io::Result<()> {
        shim::record_unknown_exit(dir)
    }
}

/// CRIU, as far as berthd needs it: whether it can run on this node. The
/// dump itself runs in the shim, which is the container's parent.
#[async_trait]
pub trait Criu: Send + Sync {
    /// `criu check`.
    async fn check(&self) -> Result<(), CriuUnusable>;
}

/// Why CRIU cannot checkpoint here.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CriuUnusable {
    #[error("criu is not installed (no `criu` on PATH)")]
    NotInstalled,
    #[error("cannot run `criu check`: {0}")]
    Spawn(String),
    /// CRIU's own reason: its first error line.
    #[error("`criu check` failed ({status}): {reason}")]
    CheckFailed { status: String, reason: String },
    /// Says nothing about CRIU (a busy node): not kept, asked again.
    #[error("`criu check` did not finish in {0} s")]
    TimedOut(u64),
}

/// The `criu` binary on `PATH` (where libcontainer's CRIU client looks).
pub struct CriuBinary;

/// `criu check` takes a second natively; under emulation far longer.
const CRIU_CHECK_TIMEOUT: Duration = Duration::from_secs(120);

#[async_trait]
impl Criu for CriuBinary {
    async fn check(&self) -> Result<(), CriuUnusable> {
        let run = tokio::process::Command::new("criu")
            .arg("check")
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true)
            .output();
        let output = match tokio::time::timeout(CRIU_CHECK_TIMEOUT, run).await {
            Err(_) => return Err(CriuUnusable::TimedOut(CRIU_CHECK_TIMEOUT.as_secs())),
            Ok(Err(err)) if err.kind() == io::ErrorKind::NotFound => {
                return Err(CriuUnusable::NotInstalled)
            }
            Ok(Err(err)) => return Err(CriuUnusable::Spawn(err.to_string())),
            Ok(Ok(output)) => output,
        };
        if output.status.success() {
            return Ok(());
        }
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stderr),
            String::from_utf8_lossy(&output.stdout)
        );
        Err(CriuUnusable::CheckFailed {
            status: output.status.to_string(),
            reason: criu_reason(&text),
        })
    }
}

/// CRIU's first error line: the cause; later ones are its consequences.
/// Without one, its last line.
pub fn criu_reason(output: &str) -> String {
    let lines: Vec<&str> = output
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    lines
        .iter()
        .find(|l| l.starts_with("Error") || l.contains(" Error ("))
        .or(lines.last())
        .map(|l| l.to_string())
        .unwrap_or_else(|| "no output".to_string())
}

#[cfg(test)]
mod criu_tests {
    use super::criu_reason;

    #[test]
    fn the_first_error_line_is_the_reason() {
        let out = "Error (criu/vdso.c:381): vdso: Unexpected rt vDSO area bounds\n\
                   Error (criu/vdso.c:613): vdso: Failed to fill self vdso symtable\n\
                   Error (criu/crtools.c:260): Could not initialize kernel features detection.\n";
        assert_eq!(
            criu_reason(out),
            "Error (criu/vdso.c:381): vdso: Unexpected rt vDSO area bounds"
        );
        assert_eq!(criu_reason("Warn: x\nLooks bad\n"), "Looks bad");
        assert_eq!(criu_reason(""), "no output");
    }
}
