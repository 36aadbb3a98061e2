//! Size and inodes of the filesystem holding a directory, and its device
//! number: cadvisor's `container_fs_limit_bytes`, `container_fs_inodes_*`.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use nix::sys::statvfs::statvfs;

/// A filesystem's capacity, from `statvfs`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FsCapacity {
    /// The device number of the filesystem (`major`, `minor`).
    pub device: (u64, u64),
    pub bytes: u64,
    pub inodes: u64,
    pub inodes_free: u64,
}

/// The capacity of the filesystem `dir` is on.
pub fn capacity(dir: &Path) -> std::io::Result<FsCapacity> {
    let stat = statvfs(dir).map_err(std::io::Error::from)?;
    let dev = std::fs::metadata(dir)?.dev();
    Ok(FsCapacity {
        device: (nix::sys::stat::major(dev), nix::sys::stat::minor(dev)),
        bytes: stat.blocks().saturating_mul(stat.fragment_size()),
        inodes: stat.files(),
        inodes_free: stat.files_free(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_real_filesystem_has_room_and_a_device() {
        let dir = tempfile::tempdir().unwrap();
        let fs = capacity(dir.path()).unwrap();
        assert!(fs.bytes > 0, "{fs:?}");
        assert!(fs.inodes_free <= fs.inodes, "{fs:?}");
        let dev = std::fs::metadata(dir.path()).unwrap().dev();
        assert_eq!(
            fs.device,
            (nix::sys::stat::major(dev), nix::sys::stat::minor(dev))
        );
    }

    #[test]
    fn a_missing_dir_is_an_error() {
        assert!(capacity(Path::new("/nonexistent/berth")).is_err());
    }
}
