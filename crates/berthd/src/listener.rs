//! The CRI unix socket: created with its directory, a stale socket from a
//! crashed run replaced, and a live one left alone.

use std::io;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};

use tokio::net::UnixListener;

/// Socket mode: kubelet and operators in the owning group may connect.
const SOCKET_MODE: u32 = 0o660;

#[derive(Debug, thiserror::Error)]
pub enum ListenError {
    #[error("another runtime is already serving on {0}; refusing to replace its socket")]
    InUse(PathBuf),
    #[error("{0} exists and is not a socket; refusing to remove it")]
    NotASocket(PathBuf),
    #[error("cannot create socket directory {path}: {source}")]
    CreateDir { path: PathBuf, source: io::Error },
    #[error("cannot listen on {path}: {source}")]
    Bind { path: PathBuf, source: io::Error },
}

/// Binds the socket at `path`, ready to serve.
pub fn bind(path: &Path) -> Result<UnixListener, ListenError> {
    if let Some(dir) = path.parent() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o711)
            .create(dir)
            .map_err(|source| ListenError::CreateDir {
                path: dir.to_path_buf(),
                source,
            })?;
    }
    remove_if_stale(path)?;
    let bind_err = |source| ListenError::Bind {
        path: path.to_path_buf(),
        source,
    };
    let listener = UnixListener::bind(path).map_err(bind_err)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(SOCKET_MODE))
        .map_err(bind_err)?;
    Ok(listener)
}

/// Removes a socket nobody answers on; refuses when someone does.
fn remove_if_stale(path: &Path) -> Result<(), ListenError> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(source) => {
            return Err(ListenError::Bind {
                path: path.to_path_buf(),
                source,
            })
        }
    };
    if !meta.file_type().is_socket() {
        return Err(ListenError::NotASocket(path.to_path_buf()));
    }
    // A blocking connect on a unix socket returns at once: either a listener
    // accepts it, or nobody is there (ECONNREFUSED).
    let stale = match std::os::unix::net::UnixStream::connect(path) {
        Ok(stream) => listener_is_gone(&stream),
        Err(_) => true,
    };
    if !stale {
        return Err(ListenError::InUse(path.to_path_buf()));
    }
    std::fs::remove_file(path).map_err(|source| ListenError::Bind {
        path: path.to_path_buf(),
        source,
    })
}

/// Whether the process that listens on the socket `stream` reached has
/// exited. A killed berthd's listening socket lives on in any child it
/// was forking at that moment, until that child execs: connecting then
/// succeeds although nobody will ever accept. The peer credentials of a
/// connection name the process that called listen(2).
fn listener_is_gone(stream: &std::os::unix::net::UnixStream) -> bool {
    use nix::sys::socket::{getsockopt, sockopt::PeerCredentials};
    let Ok(credentials) = getsockopt(stream, PeerCredentials) else {
        return false;
    };
    let pid = credentials.pid();
    pid > 0
        && nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None)
            == Err(nix::errno::Errno::ESRCH)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_live_listener_is_not_gone_and_its_socket_is_kept() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.sock");
        let _listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
        let stream = std::os::unix::net::UnixStream::connect(&path).unwrap();
        assert!(!listener_is_gone(&stream));
        assert!(matches!(remove_if_stale(&path), Err(ListenError::InUse(_))));
    }

    #[test]
    fn a_socket_whose_listener_exited_is_replaced_though_a_child_holds_it() {
        use nix::sys::wait::waitpid;
        use nix::unistd::{fork, ForkResult};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.sock");
        let (ready_r, ready_w) = nix::unistd::pipe().unwrap();
        // SAFETY: the child only binds, listens, forks and exits (the
        // grandchild sleeps holding the socket, as a berthd child between
        // fork and exec would), touching no lock the test threads hold.
        let child = match unsafe { fork() }.unwrap() {
            ForkResult::Child => {
                let listener = std::os::unix::net::UnixListener::bind(&path);
                // SAFETY: as above.
                if let (Ok(_listener), Ok(ForkResult::Child)) = (listener, unsafe { fork() }) {
                    let _ = nix::unistd::write(&ready_w, &std::process::id().to_ne_bytes());
                    std::thread::sleep(std::time::Duration::from_secs(30));
                }
                // SAFETY: leaving the forked child without unwinding.
                unsafe { nix::libc::_exit(0) }
            }
            ForkResult::Parent { child } => child,
        };
        drop(ready_w);
        let mut pid = [0u8; 4];
        assert_eq!(nix::unistd::read(&ready_r, &mut pid).unwrap(), 4);
        let holder = nix::unistd::Pid::from_raw(u32::from_ne_bytes(pid) as i32);
        waitpid(child, None).unwrap();
        let stream = std::os::unix::net::UnixStream::connect(&path).unwrap();
        assert!(listener_is_gone(&stream), "the listener exited");
        drop(stream);
        assert!(remove_if_stale(&path).is_ok());
        assert!(!path.exists());
        let _ = nix::sys::signal::kill(holder, nix::sys::signal::Signal::SIGKILL);
    }

    #[tokio::test]
    async fn creates_directory_and_sets_mode() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a/b/berth.sock");
        let _listener = bind(&path).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, SOCKET_MODE);
    }

    #[tokio::test]
    async fn replaces_stale_socket_but_not_live_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("berth.sock");
        // A socket file whose listener is gone is stale.
        drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
        let live = bind(&path).unwrap();
        assert!(matches!(bind(&path), Err(ListenError::InUse(_))));
        drop(live);
    }

    #[tokio::test]
    async fn never_removes_a_regular_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("berth.sock");
        std::fs::write(&path, "data").unwrap();
        assert!(matches!(bind(&path), Err(ListenError::NotASocket(_))));
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "data");
    }
}
