//! Minimal extended attribute setters; nix has no xattr API, so these wrap
//! libc directly.

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use nix::libc;

/// overlayfs' opaque-directory marker (see `Documentation/filesystems/overlayfs.rst`).
pub(super) const OVERLAY_OPAQUE: &CStr = c"trusted.overlay.opaque";

/// Prefixes of xattrs that overlayfs interprets: `trusted.overlay.` normally,
/// `user.overlay.` on mounts with `userxattr`. Such attributes in a layer tar
/// would let an image forge whiteouts, opaque markers or redirects, so they
/// are dropped.
const OVERLAY_PREFIXES: [&[u8]; 2] = [b"trusted.overlay.", b"user.overlay."];

/// Whether an xattr name is one overlayfs interprets.
pub(super) fn is_overlay_xattr(name: &[u8]) -> bool {
    OVERLAY_PREFIXES
        .iter()
        .any(|prefix| name.starts_with(prefix))
}

/// Sets xattr `name` on the open file `fd`.
pub(super) fn fset(fd: BorrowedFd<'_>, name: &CStr, value: &[u8]) -> io::Result<()> {
    // SAFETY: `name` is NUL-terminated, `value` is a live slice whose pointer
    // and length are passed together, and `fd` is open for the call.
    let rc = unsafe {
        libc::fsetxattr(
            fd.as_raw_fd(),
            name.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    };
    check(rc)
}

/// Sets xattr `name` on `path` without following a final symlink.
pub(super) fn lset(path: &Path, name: &CStr, value: &[u8]) -> io::Result<()> {
    let path = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains NUL"))?;
    // SAFETY: both strings are NUL-terminated and `value` is a live slice
    // whose pointer and length are passed together.
    let rc = unsafe {
        libc::lsetxattr(
            path.as_ptr(),
            name.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    };
    check(rc)
}

/// Maps a libc return code to `io::Result`.
fn check(rc: libc::c_int) -> io::Result<()> {
    if rc == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}
