//! Terminal control both ends of a tty session need: the shim for attached
//! tty containers, berthd for exec sessions whose pty master it holds.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

/// `TIOCSWINSZ` on a pty master: the size the terminal's processes see
/// (they get SIGWINCH).
pub fn set_window_size(pty: BorrowedFd<'_>, width: u16, height: u16) -> io::Result<()> {
    let ws = nix::libc::winsize {
        ws_row: height,
        ws_col: width,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCSWINSZ reads one winsize from a live local.
    let rc = unsafe { nix::libc::ioctl(pty.as_raw_fd(), nix::libc::TIOCSWINSZ, &ws) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
