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
use super::rootfs::{self, RootfsError, RootfsPaths};
use super::shim::{self, ShimLaunch};
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
    /// is fine.
    fn unmount(&self, paths: &RootfsPaths) -> Result<(), RootfsError>;
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

    fn unmount(&self, paths: &RootfsPaths) -> Result<(), RootfsError> {
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
pub struct ShimProcesses;

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
