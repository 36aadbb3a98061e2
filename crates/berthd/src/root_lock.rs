//! One berthd per root directory: two daemons sharing a store would delete
//! each other's downloads and layers.

use std::fs::File;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use nix::fcntl::{Flock, FlockArg};

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
    pub fn acquire(root: &Path) -> Result<Self, RootLockError> {
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
        let lock = Flock::lock(file, FlockArg::LockExclusiveNonblock)
            .map_err(|_| RootLockError::Busy(root.to_path_buf()))?;
        Ok(Self { _lock: lock })
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
            RootLock::acquire(dir.path()),
            Err(RootLockError::Busy(_))
        ));
        drop(first);
        RootLock::acquire(dir.path()).unwrap();
    }
}
