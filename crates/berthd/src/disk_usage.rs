//! Disk usage of a directory tree, counted as `du` does: allocated blocks,
//! each inode once however many hard links reach it, symlinks not followed.

use std::collections::HashSet;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// Bytes and inodes used by a tree.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DiskUsage {
    pub bytes: u64,
    pub inodes: u64,
}

/// Walks `root` and adds up what it uses. A missing root uses nothing; an
/// entry that vanishes during the walk (a layer being removed) is skipped.
pub fn disk_usage(root: &Path) -> io::Result<DiskUsage> {
    let mut usage = DiskUsage::default();
    let mut seen = HashSet::new();
    let mut pending = vec![root.to_path_buf()];
    while let Some(path) = pending.pop() {
        let meta = match std::fs::symlink_metadata(&path) {
            Ok(meta) => meta,
            Err(err) if err.kind() == io::ErrorKind::NotFound => continue,
            Err(err) => return Err(err),
        };
        if !seen.insert((meta.dev(), meta.ino())) {
            continue;
        }
        usage.inodes += 1;
        // st_blocks is always in 512-byte units, whatever the fs block size.
        usage.bytes += meta.blocks() * 512;
        if meta.is_dir() {
            let entries = match std::fs::read_dir(&path) {
                Ok(entries) => entries,
                Err(err) if err.kind() == io::ErrorKind::NotFound => continue,
                Err(err) => return Err(err),
            };
            for entry in entries {
                pending.push(entry?.path());
            }
        }
    }
    Ok(usage)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_files_dirs_and_hard_links_once() {
        let dir = tempfile::tempdir().unwrap();
        let empty = disk_usage(dir.path()).unwrap();
        assert_eq!(empty.inodes, 1);

        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(dir.path().join("sub/data"), vec![7u8; 64 * 1024]).unwrap();
        std::fs::hard_link(dir.path().join("sub/data"), dir.path().join("link")).unwrap();
        std::os::unix::fs::symlink("/", dir.path().join("escape")).unwrap();

        let usage = disk_usage(dir.path()).unwrap();
        // root, sub, data (linked twice), the symlink itself
        assert_eq!(usage.inodes, 4);
        assert!(usage.bytes >= 64 * 1024, "{usage:?}");
        assert!(
            usage.bytes < 1024 * 1024,
            "symlink to / not followed: {usage:?}"
        );
    }

    #[test]
    fn missing_root_uses_nothing() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(
            disk_usage(&dir.path().join("gone")).unwrap(),
            DiskUsage::default()
        );
    }
}
