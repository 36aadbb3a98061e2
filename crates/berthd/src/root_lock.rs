//! One berthd per root directory: two daemons sharing a store would delete
//! each other's downloads and layers.

use std::fs::File;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::fcntl::{Flock, FlockArg};

/// How long a starting berthd waits for the lock. A killed berthd's lock
/// lives on in any child it was forking at that moment until the child
/// execs (the fd is close-on-exec); under load that takes a while, and a
/// berthd restarted at once would otherwise refuse to start.
pub const HANDOVER: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum RootLockError {
    #[error("cannot open lock file {path}: {source}")]
    Open {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("another berthd is using root directory {0}")]
    Busy(PathBuf),
}

/// An exclusive `flock` on `<root>/berthd.lock`, released when dropped or
/// when the process dies.
#[derive(Debug)]
pub struct RootLock {
    _lock: Flock<File>,
}

impl RootLock {
    /// Takes the lock, waiting up to [`HANDOVER`] for it.
    pub fn acquire(root: &Path) -> Result<Self, RootLockError> {
        Self::acquire_within(root, HANDOVER)
    }

    /// Takes the lock, waiting up to `patience` for it.
    pub fn acquire_within(root: &Path, patience: Duration) -> Result<Self, RootLockError> {
        let path = root.join("berthd.lock");
        // root's alone, like everything under the root dir
        let file = File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .open(&path)
            .and_then(|file| {
                file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
                Ok(file)
            })
            .map_err(|source| RootLockError::Open {
                path: path.clone(),
                source,
            })?;
        let deadline = Instant::now() + patience;
        let mut file = file;
        loop {
            match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
                Ok(lock) => return Ok(Self { _lock: lock }),
                Err((back, _)) if Instant::now() < deadline => {
                    file = back;
                    std::thread::sleep(Duration::from_millis(50));
                }
                Err(_) => return Err(RootLockError::Busy(root.to_path_buf())),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn second_lock_on_the_same_root_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let first = RootLock::acquire(dir.path()).unwrap();
        assert!(matches!(
            RootLock::acquire_within(dir.path(), Duration::from_millis(200)),
            Err(RootLockError::Busy(_))
        ));
        drop(first);
        RootLock::acquire(dir.path()).unwrap();
    }

    #[test]
    fn a_lock_released_while_waiting_is_taken() {
        let dir = tempfile::tempdir().unwrap();
        let first = RootLock::acquire(dir.path()).unwrap();
        let release = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            drop(first);
        });
        RootLock::acquire_within(dir.path(), Duration::from_secs(5)).unwrap();
        release.join().unwrap();
    }
}
