//! The new mount API calls nix does not wrap: a detached clone of a mounted
//! tree (`open_tree(2)`), idmapping such a tree or making it read-only
//! (`mount_setattr(2)`), and attaching it somewhere (`move_mount(2)`).
//! berthd clones trees to idmap them and runs its helpers from read-only
//! clones of their binaries; the shim clones a container's record dirs to
//! put them back into a trimmed mount table.

use std::ffi::CString;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::path::Path;

use nix::errno::Errno;
use nix::libc;

/// `path` as the kernel takes it; a path with a NUL byte is `EINVAL`, as
/// the kernel would say of any path it cannot take.
pub fn c_path(path: &Path) -> nix::Result<CString> {
    CString::new(path.as_os_str().as_encoded_bytes()).map_err(|_| Errno::EINVAL)
}

/// A detached clone of the mount at `path`, the part of it `path` shows
/// (with the mounts below when `recursive`). Dropping the fd unattached
/// frees the clone.
pub fn clone_tree(path: &Path, recursive: bool) -> nix::Result<OwnedFd> {
    let path = c_path(path)?;
    let mut flags = libc::OPEN_TREE_CLONE | libc::OPEN_TREE_CLOEXEC;
    if recursive {
        flags |= libc::AT_RECURSIVE as libc::c_uint;
    }
    // SAFETY: open_tree reads the NUL-terminated path and returns a new fd
    // or -1.
    let fd = unsafe { libc::syscall(libc::SYS_open_tree, libc::AT_FDCWD, path.as_ptr(), flags) };
    let fd = Errno::result(fd)?;
    let fd = i32::try_from(fd).map_err(|_| Errno::EBADF)?;
    // SAFETY: open_tree returned a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Makes the detached tree `tree` (from [`clone_tree`]) read-only: every
/// open for writing through it fails with `EROFS`, whatever the file's
/// mode.
pub fn read_only_tree(tree: &OwnedFd) -> nix::Result<()> {
    set_attr(tree, libc::MOUNT_ATTR_RDONLY, 0, false)
}

/// Idmaps the detached tree `tree` (from [`clone_tree`]) through the user
/// namespace `userns`: the mounts below it too when `recursive`.
pub fn idmap_tree(tree: &OwnedFd, userns: BorrowedFd<'_>, recursive: bool) -> nix::Result<()> {
    set_attr(
        tree,
        libc::MOUNT_ATTR_IDMAP,
        userns.as_raw_fd() as u64,
        recursive,
    )
}

/// `mount_setattr(2)` on the tree `tree` itself: sets the attributes
/// `attr_set` (`userns_fd` for `MOUNT_ATTR_IDMAP`).
fn set_attr(tree: &OwnedFd, attr_set: u64, userns_fd: u64, recursive: bool) -> nix::Result<()> {
    let attr = libc::mount_attr {
        attr_set,
        attr_clr: 0,
        propagation: 0,
        userns_fd,
    };
    let recursive_flag = if recursive { libc::AT_RECURSIVE } else { 0 };
    let empty = c"";
    // SAFETY: mount_setattr reads a live fd, the empty path and `attr`, of
    // the size given.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            tree.as_raw_fd(),
            empty.as_ptr(),
            libc::AT_EMPTY_PATH | recursive_flag,
            &attr as *const libc::mount_attr,
            std::mem::size_of::<libc::mount_attr>(),
        )
    };
    Errno::result(rc).map(drop)
}

/// Attaches the detached tree `tree` (from [`clone_tree`]) at `target`.
pub fn attach_tree(tree: &OwnedFd, target: &Path) -> nix::Result<()> {
    let target = c_path(target)?;
    let empty = c"";
    // SAFETY: move_mount reads a live fd and two NUL-terminated paths.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            tree.as_raw_fd(),
            empty.as_ptr(),
            libc::AT_FDCWD,
            target.as_ptr(),
            libc::MOVE_MOUNT_F_EMPTY_PATH,
        )
    };
    Errno::result(rc).map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_with_a_nul_byte_is_einval() {
        use std::os::unix::ffi::OsStrExt;
        let path = Path::new(std::ffi::OsStr::from_bytes(b"/tmp/a\0b"));
        assert_eq!(c_path(path), Err(Errno::EINVAL));
        assert_eq!(clone_tree(path, false).err(), Some(Errno::EINVAL));
    }

    #[test]
    fn a_read_only_clone_of_a_file_refuses_writers() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("binary");
        std::fs::write(&file, b"x").expect("write");
        let tree = match clone_tree(&file, false) {
            Ok(tree) => tree,
            // Cloning needs CAP_SYS_ADMIN: nothing to check without it.
            Err(Errno::EPERM) => return,
            Err(err) => panic!("clone_tree: {err}"),
        };
        read_only_tree(&tree).expect("read_only_tree");
        let through = format!("/proc/self/fd/{}", tree.as_raw_fd());
        let err = std::fs::OpenOptions::new()
            .write(true)
            .open(&through)
            .expect_err("a write open through the read-only clone");
        assert_eq!(err.raw_os_error(), Some(libc::EROFS));
        assert_eq!(std::fs::read(&through).expect("read"), b"x");
        std::fs::OpenOptions::new()
            .write(true)
            .open(&file)
            .expect("the file itself stays writable");
    }

    #[test]
    fn a_path_that_is_not_there_cannot_be_cloned() {
        let dir = tempfile::tempdir().expect("tempdir");
        let missing = dir.path().join("missing");
        assert_eq!(clone_tree(&missing, false).err(), Some(Errno::ENOENT));
    }
}
