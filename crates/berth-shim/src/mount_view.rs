//! A mount table trimmed to this container's own mounts, for the create.
//!
//! Every pod adds mounts under berth's state dir (namespace pins, `/dev/shm`,
//! the rootfs), and libcontainer reads the whole table more than once per
//! create: its cgroup v1 manager looks each controller's mount point up in
//! `/proc/self/mountinfo` (the whole table for a controller the host does
//! not mount), the container's init finds its rootfs's parent mount there,
//! and the init's new mount namespace starts as a copy of the table. With
//! 500 pods that was 40 of the create's 55 ms.
//!
//! So the shim creates the container from a mount namespace of its own in
//! which the state dir holds only what this container's spec names: the
//! state dir's own mount, and recursive copies of the record dirs (such as
//! `containers/<id>` or `ns/<pod>`) its spec paths lie in. The other pods'
//! mounts are dropped with one lazy unmount of the state dir (one RCU grace
//! period, where unmounting them one by one waited for one each).
//! Everything outside the state dir is a slave copy of the host's: host
//! mount events still reach the container (HostToContainer), but nothing
//! done in the trimmed namespace reaches the host. A spec that needs its
//! mounts to propagate back to the host (Bidirectional: a shared mount or
//! a shared rootfs) is created in the host's namespace, as before.
//!
//! The shim goes back to the host's mount namespace as soon as the
//! container is created, so the trimmed one dies with the container's
//! intermediate process and never keeps a copy of a host mount alive.

use std::fs::File;
use std::os::fd::AsFd;
use std::path::{Component, Path, PathBuf};

use berth_mount::{attach_tree, clone_tree};
use nix::mount::{mount, umount2, MntFlags, MsFlags};
use nix::sched::{setns, unshare, CloneFlags};

/// Failures of the trim. Any of them leaves the shim in the host's mount
/// namespace, except [`TrimError::Return`].
#[derive(Debug, thiserror::Error)]
pub enum TrimError {
    #[error("{step} {path}: {source}")]
    Step {
        step: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    /// Going back to the host's namespace failed: the shim must not go on
    /// in the trimmed one.
    #[error("returning to the host's mount namespace: {0}")]
    Return(std::io::Error),
}

/// A failed step on `path`, from an io or nix error.
fn step<'a, E: Into<std::io::Error>>(
    step: &'static str,
    path: &'a Path,
) -> impl FnOnce(E) -> TrimError + 'a {
    move |source| TrimError::Step {
        step,
        path: path.to_path_buf(),
        source: source.into(),
    }
}

/// The directories to keep under `state_dir`: for every path of `named`
/// inside it, the first two components below it (a record dir such as
/// `containers/<id>`, or the path itself when it is shallower). Sorted,
/// without duplicates, and none inside another.
pub fn kept_dirs(state_dir: &Path, named: &[PathBuf]) -> Vec<PathBuf> {
    let mut kept: Vec<PathBuf> = named
        .iter()
        .filter_map(|path| {
            let below = path.strip_prefix(state_dir).ok()?;
            let parts: Vec<Component> = below
                .components()
                .filter(|part| matches!(part, Component::Normal(_)))
                .take(2)
                .collect();
            if parts.is_empty() || below.components().any(|c| c == Component::ParentDir) {
                return None;
            }
            Some(
                parts
                    .iter()
                    .fold(state_dir.to_path_buf(), |dir, part| dir.join(part)),
            )
        })
        .collect();
    kept.sort();
    kept.dedup();
    // A kept path inside another kept one comes with it.
    let mut outer: Vec<PathBuf> = Vec::new();
    for path in kept {
        if !outer.iter().any(|dir| path.starts_with(dir)) {
            outer.push(path);
        }
    }
    outer
}

/// The shim inside a trimmed mount namespace; [`TrimmedView::leave`] goes
/// back to the host's.
#[derive(Debug)]
pub struct TrimmedView {
    host: File,
}

impl TrimmedView {
    /// Enters a new mount namespace whose `state_dir` holds only `kept`
    /// (from [`kept_dirs`]). `state_dir` must be a mount point. On error the
    /// shim is back in the host's namespace (or [`TrimError::Return`]).
    pub fn enter(state_dir: &Path, kept: &[PathBuf]) -> Result<Self, TrimError> {
        let host = File::open("/proc/self/ns/mnt")
            .map_err(step("opening", Path::new("/proc/self/ns/mnt")))?;
        unshare(CloneFlags::CLONE_NEWNS)
            .map_err(step("unsharing the mount namespace for", state_dir))?;
        let view = TrimmedView { host };
        match trim(state_dir, kept) {
            Ok(()) => Ok(view),
            Err(err) => {
                view.leave()?;
                Err(err)
            }
        }
    }

    /// Goes back to the host's mount namespace.
    pub fn leave(self) -> Result<(), TrimError> {
        setns(self.host.as_fd(), CloneFlags::CLONE_NEWNS).map_err(|e| TrimError::Return(e.into()))
    }
}

/// Runs `f` in a mount namespace whose `state_dir` holds only `kept`, and
/// says whether it did: when the trimmed namespace cannot be set up, `f`
/// runs in the host's (the same work, only slower with many pods). Fails
/// only when the shim cannot go back to the host's namespace afterwards.
pub fn run_trimmed<T>(
    state_dir: &Path,
    kept: &[PathBuf],
    f: impl FnOnce() -> T,
) -> Result<(T, bool), TrimError> {
    let view = match TrimmedView::enter(state_dir, kept) {
        Ok(view) => view,
        Err(err @ TrimError::Return(_)) => return Err(err),
        Err(err) => {
            tracing::warn!(%err, "running in the full mount table");
            return Ok((f(), false));
        }
    };
    let result = f();
    view.leave()?;
    Ok((result, true))
}

/// In the new namespace: detach the state dir's subtree and put back its
/// own mount and the kept dirs.
fn trim(state_dir: &Path, kept: &[PathBuf]) -> Result<(), TrimError> {
    // First of all: nothing done below may propagate to the host. The new
    // namespace's copies of shared mounts are peers of the host's, and the
    // copies are put back on the mount the state dir sits on (`/` or
    // `/run`, shared under systemd): as a peer, the host would get a second,
    // hidden state dir mount and the record dirs bound on it, which keep
    // every record dir busy. As slaves, the copies still receive the
    // host's mount events (so a container's HostToContainer volumes get
    // them, through slaves that outlive this namespace) but send none.
    mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_SLAVE,
        None::<&str>,
    )
    .map_err(step("making a slave of the host", Path::new("/")))?;
    // The state dir's subtree receives nothing either: the kept copies are
    // then private, like the record dirs they stand for.
    mount(
        None::<&str>,
        state_dir,
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None::<&str>,
    )
    .map_err(step("making private", state_dir))?;
    let root = clone_tree(state_dir, false).map_err(step("copying the mount of", state_dir))?;
    let mut copies = Vec::with_capacity(kept.len());
    for dir in kept {
        let copy = clone_tree(dir, true).map_err(step("copying", dir))?;
        copies.push((dir, copy));
    }
    umount2(state_dir, MntFlags::MNT_DETACH).map_err(step("detaching", state_dir))?;
    attach_tree(&root, state_dir).map_err(step("putting back", state_dir))?;
    for (dir, copy) in copies {
        attach_tree(&copy, dir).map_err(step("putting back", dir))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths(list: &[&str]) -> Vec<PathBuf> {
        list.iter().map(PathBuf::from).collect()
    }

    #[test]
    fn keeps_the_record_dirs_of_paths_in_the_state_dir() {
        let kept = kept_dirs(
            Path::new("/run/berth"),
            &paths(&[
                "/run/berth/containers/c1/rootfs",
                "/run/berth/ns/p1/net",
                "/run/berth/ns/p1/ipc",
                "/run/berth/sandboxes/p1/shm",
                "/run/berth/sandboxes/p1/hosts",
                "/var/lib/kubelet/pods/x/volumes/v",
                "/proc/42/ns/pid",
            ]),
        );
        assert_eq!(
            kept,
            paths(&[
                "/run/berth/containers/c1",
                "/run/berth/ns/p1",
                "/run/berth/sandboxes/p1",
            ])
        );
    }

    #[test]
    fn a_shallow_path_keeps_itself_and_what_is_inside_it() {
        let kept = kept_dirs(
            Path::new("/run/berth"),
            &paths(&["/run/berth/ns", "/run/berth/ns/p1/net", "/run/berth/extra"]),
        );
        assert_eq!(kept, paths(&["/run/berth/extra", "/run/berth/ns"]));
    }

    #[test]
    fn the_state_dir_itself_and_escapes_keep_nothing() {
        let kept = kept_dirs(
            Path::new("/run/berth"),
            &paths(&["/run/berth", "/run/berth/../etc/x", "/run/berthx/a/b"]),
        );
        assert!(kept.is_empty(), "{kept:?}");
    }
}
