//! Path resolution that keeps every write inside the layer directory.
//!
//! Tar entry names are untrusted. Rather than building host paths such as
//! `dest.join(name)` and hoping no component is a symlink (which is what a
//! canonicalize-then-compare check like `tar::Entry::unpack_in` amounts to),
//! every name is
//!
//! 1. cleaned lexically ([`normalize`]): a leading `/` is dropped, `.` is
//!    dropped and `..` pops the previous component; popping past the root is
//!    an error. What is left are plain names, none of them `..`.
//! 2. walked one component at a time from a directory fd on the layer root
//!    ([`LayerRoot::open_dir`]), opening each component with
//!    `openat(O_DIRECTORY | O_NOFOLLOW)`. A symlink (or any non-directory) in
//!    the parent chain therefore makes the walk fail instead of being
//!    followed, wherever it points to.
//! 3. created with `*at` calls relative to the parent fd the walk returned,
//!    using only the final, single component name, again never following a
//!    symlink (`O_EXCL`/`O_NOFOLLOW`, `AT_SYMLINK_NOFOLLOW`, `linkat` without
//!    `AT_SYMLINK_FOLLOW`).
//!
//! Because the kernel resolves nothing but single names below fds we hold,
//! there is no window between "checking" a path and "using" it that a later
//! entry of the same (sequentially processed) layer could exploit.

use std::ffi::{OsStr, OsString};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::{Component, Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{open, openat, AtFlags, OFlag};
use nix::sys::stat::{fstatat, mkdirat, Mode, SFlag};
use nix::unistd::{unlinkat, UnlinkatFlags};

/// Mode of parent directories the layer needs but does not list itself; the
/// same default containerd and the tar crate use.
const IMPLICIT_DIR_MODE: u32 = 0o755;

/// Why a path could not be resolved inside the layer root. The paths carried
/// are the offending prefix of the (cleaned) path, relative to the root.
#[derive(Debug)]
pub(super) enum ResolveError {
    /// `..` components climb above the layer root.
    Escapes,
    /// This prefix is a symlink, which is never followed.
    Symlink(PathBuf),
    /// This prefix exists but is neither a directory nor a symlink.
    NotADirectory(PathBuf),
    /// This prefix does not exist (only when not asked to create it).
    Missing(PathBuf),
    /// A system call on this prefix failed.
    Io(PathBuf, io::Error),
}

/// Cleans a tar entry name lexically into plain components relative to the
/// layer root.
///
/// Absolute names are taken as relative to the root, as containerd does.
/// Cleaning `..` lexically (instead of letting the kernel resolve it) is safe
/// because the result is then resolved without following any symlink.
pub(super) fn normalize(path: &Path) -> Result<Vec<OsString>, ResolveError> {
    let mut components = Vec::new();
    for component in path.components() {
        match component {
            Component::RootDir | Component::CurDir => {}
            Component::ParentDir => {
                if components.pop().is_none() {
                    return Err(ResolveError::Escapes);
                }
            }
            Component::Normal(name) => components.push(name.to_os_string()),
            // Windows drive prefixes cannot occur on Unix; refuse rather
            // than guess.
            Component::Prefix(_) => return Err(ResolveError::Escapes),
        }
    }
    Ok(components)
}

/// Joins cleaned components back into a relative path for messages.
pub(super) fn join(components: &[OsString]) -> PathBuf {
    components.iter().collect()
}

/// An open handle on the directory a layer is unpacked into. All resolution
/// starts here, so renaming or replacing `dest` on the host after opening
/// cannot redirect writes.
#[derive(Debug)]
pub(super) struct LayerRoot {
    fd: OwnedFd,
}

impl LayerRoot {
    /// Opens `dest`, which the caller owns and trusts (it may itself be
    /// reached through host symlinks).
    pub(super) fn open(dest: &Path) -> io::Result<Self> {
        let fd = open(
            dest,
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )?;
        Ok(Self { fd })
    }

    /// The root directory fd.
    pub(super) fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Opens the directory named by `components` below the root without
    /// following symlinks; with `create`, missing directories are made with
    /// mode 0755 (ownership of the unpacking process, i.e. root).
    pub(super) fn open_dir(
        &self,
        components: &[OsString],
        create: bool,
    ) -> Result<OwnedFd, ResolveError> {
        let mut current = self
            .fd
            .try_clone()
            .map_err(|e| ResolveError::Io(PathBuf::new(), e))?;
        for (depth, name) in components.iter().enumerate() {
            let prefix = || join(&components[..=depth]);
            current = match open_child_dir(current.as_fd(), name) {
                Ok(fd) => fd,
                Err(Errno::ENOENT) if create => {
                    mkdirat(
                        current.as_fd(),
                        name.as_os_str(),
                        Mode::from_bits_truncate(IMPLICIT_DIR_MODE),
                    )
                    .map_err(|e| ResolveError::Io(prefix(), e.into()))?;
                    open_child_dir(current.as_fd(), name)
                        .map_err(|e| classify(current.as_fd(), name, prefix(), e))?
                }
                Err(e) => return Err(classify(current.as_fd(), name, prefix(), e)),
            };
        }
        Ok(current)
    }
}

/// Opens directory `name` in `dir`, refusing to follow a symlink.
fn open_child_dir(dir: BorrowedFd<'_>, name: &OsStr) -> nix::Result<OwnedFd> {
    openat(
        dir,
        name,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
}

/// Turns a failed `open_child_dir` into a precise reason. `O_NOFOLLOW` and
/// `O_DIRECTORY` report symlinks and other non-directories as `ELOOP` or
/// `ENOTDIR` depending on the case, so look at what is there instead.
fn classify(dir: BorrowedFd<'_>, name: &OsStr, prefix: PathBuf, err: Errno) -> ResolveError {
    match err {
        Errno::ENOENT => ResolveError::Missing(prefix),
        Errno::ELOOP | Errno::ENOTDIR => match node_kind(dir, name) {
            Ok(Some(SFlag::S_IFLNK)) => ResolveError::Symlink(prefix),
            Ok(Some(_)) => ResolveError::NotADirectory(prefix),
            Ok(None) => ResolveError::Missing(prefix),
            Err(e) => ResolveError::Io(prefix, e),
        },
        other => ResolveError::Io(prefix, other.into()),
    }
}

/// The file type of `name` in `dir` (not following symlinks), or `None` if
/// nothing is there.
pub(super) fn node_kind(dir: BorrowedFd<'_>, name: &OsStr) -> io::Result<Option<SFlag>> {
    match fstatat(dir, name, AtFlags::AT_SYMLINK_NOFOLLOW) {
        Ok(stat) => Ok(Some(SFlag::from_bits_truncate(
            stat.st_mode & SFlag::S_IFMT.bits(),
        ))),
        Err(Errno::ENOENT) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// What [`clear_slot`] found and did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Slot {
    /// Nothing was there.
    Empty,
    /// A directory was there and was kept, as asked.
    KeptDir,
    /// Something was there and has been removed.
    Removed,
}

/// Makes room for a new entry `name` in `dir`: a later tar entry replaces an
/// earlier one. An existing directory is kept when `keep_dir` is set (a
/// directory entry over a directory only updates its metadata); anything
/// else is removed. Symlinks are unlinked, never followed, and directories
/// are removed recursively without crossing symlinks.
pub(super) fn clear_slot(dir: BorrowedFd<'_>, name: &OsStr, keep_dir: bool) -> io::Result<Slot> {
    match node_kind(dir, name)? {
        None => Ok(Slot::Empty),
        Some(SFlag::S_IFDIR) if keep_dir => Ok(Slot::KeptDir),
        Some(SFlag::S_IFDIR) => {
            // std's remove_dir_all does not follow a symlink at the top and
            // descends with openat(O_NOFOLLOW), so it stays inside the tree.
            // Going through /proc/self/fd binds the top to the fd we
            // resolved, not to a host path.
            std::fs::remove_dir_all(fd_path(dir, name))?;
            Ok(Slot::Removed)
        }
        Some(_) => {
            unlinkat(dir, name, UnlinkatFlags::NoRemoveDir)?;
            Ok(Slot::Removed)
        }
    }
}

/// A path naming `name` inside the directory open as `dir`, for the few
/// calls that only take paths (`lsetxattr`, `remove_dir_all`). The kernel
/// resolves `/proc/self/fd/N` to the directory itself, so only the single
/// final component is looked up by name, and path-taking `l*` calls do not
/// follow it.
pub(super) fn fd_path(dir: BorrowedFd<'_>, name: &OsStr) -> PathBuf {
    Path::new("/proc/self/fd")
        .join(dir.as_raw_fd().to_string())
        .join(name)
}
