//! Idmapped mounts, which nix does not wrap: a clone of a mounted tree,
//! idmapped through a user namespace and attached elsewhere. Files host
//! root owns then belong to root of that namespace when seen through the
//! clone, and what the namespace's root writes there belongs to host root.

use std::fs::File;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

/// Why a tree could not be idmapped and attached.
#[derive(Debug, thiserror::Error)]
pub enum IdmapError {
    #[error("path {0:?} contains a NUL byte")]
    BadPath(PathBuf),
    #[error("{what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    /// The kernel refused a step; `mount_setattr` failing with EINVAL
    /// means a filesystem of the tree cannot be idmapped, with EPERM that
    /// a mount in it is idmapped already.
    #[error("{step} {path}: {source}")]
    Syscall {
        step: &'static str,
        path: PathBuf,
        source: nix::Error,
    },
}

impl IdmapError {
    /// What the kernel's refusal means, when it is known: a suffix for
    /// messages.
    pub fn hint(&self) -> &'static str {
        match self {
            IdmapError::Syscall {
                step: "mount_setattr",
                source: nix::Error::EINVAL,
                ..
            } => " (its filesystem does not support idmapped mounts on this kernel)",
            // berth's own views, say, below a hostPath of /run.
            IdmapError::Syscall {
                step: "mount_setattr",
                source: nix::Error::EPERM,
                ..
            } => " (a mount in it is idmapped already)",
            _ => "",
        }
    }

    /// The kernel refused (rather than berth failing to prepare).
    pub fn is_refusal(&self) -> bool {
        matches!(self, IdmapError::Syscall { .. })
    }
}

fn failed(path: &Path, step: &'static str) -> impl FnOnce(nix::Error) -> IdmapError {
    let path = path.to_path_buf();
    move |source| IdmapError::Syscall { step, path, source }
}

/// A path with a NUL byte is berth's error, not a refusal of the kernel's
/// (which would say EINVAL, as it says of a filesystem it cannot idmap).
fn check_path(path: &Path) -> Result<(), IdmapError> {
    berth_mount::c_path(path)
        .map(drop)
        .map_err(|_| IdmapError::BadPath(path.to_path_buf()))
}

/// Attaches at `target` (an existing dir, or file for a file) a clone of
/// what `source` shows, idmapped through `userns`. `recursive` takes the
/// mounts below `source` along, each idmapped too (else the clone is that
/// one mount's subtree alone, as a plain `bind` would be).
pub fn attach_idmapped(
    source: &Path,
    target: &Path,
    userns: &File,
    recursive: bool,
) -> Result<(), IdmapError> {
    check_path(source)?;
    check_path(target)?;
    // Dropping it unattached frees the clone.
    let tree = berth_mount::clone_tree(source, recursive).map_err(failed(source, "open_tree"))?;
    berth_mount::idmap_tree(&tree, userns.as_fd(), recursive)
        .map_err(failed(source, "mount_setattr"))?;
    berth_mount::attach_tree(&tree, target).map_err(failed(target, "move_mount"))?;
    Ok(())
}
