//! The console socket of a `--tty` container: libcontainer connects to it
//! while creating the container, and the init sends the pty master over it
//! (SCM_RIGHTS) before it reports ready. So once `build()` has returned the
//! fd is already queued and receiving it does not block.

use std::io::{self, IoSliceMut};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};

use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags};

pub struct ConsoleSocket {
    listener: UnixListener,
    path: PathBuf,
}

impl ConsoleSocket {
    pub fn bind(path: &Path) -> io::Result<Self> {
        let _ = std::fs::remove_file(path);
        Ok(Self {
            listener: UnixListener::bind(path)?,
            path: path.to_path_buf(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Accepts libcontainer's connection and receives the pty master.
    pub fn receive_master(self) -> io::Result<OwnedFd> {
        self.listener.set_nonblocking(true)?;
        let (conn, _) = self.listener.accept()?;
        let mut data = [0u8; 4096];
        let mut iov = [IoSliceMut::new(&mut data)];
        let mut cmsg = nix::cmsg_space!([RawFd; 1]);
        let msg = recvmsg::<()>(
            conn.as_raw_fd(),
            &mut iov,
            Some(&mut cmsg),
            MsgFlags::MSG_CMSG_CLOEXEC,
        )
        .map_err(io::Error::from)?;
        for c in msg.cmsgs().map_err(io::Error::from)? {
            if let ControlMessageOwned::ScmRights(fds) = c {
                if let Some(&fd) = fds.first() {
                    // SAFETY: the kernel just installed this fd for us.
                    return Ok(unsafe { OwnedFd::from_raw_fd(fd) });
                }
            }
        }
        Err(io::Error::other("console socket message carried no fd"))
    }
}

impl Drop for ConsoleSocket {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}
