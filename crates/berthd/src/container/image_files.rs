//! The image's `/etc/passwd` and `/etc/group`, read for user lookup before
//! the container exists.
//!
//! The image is not trusted: the file may be a symlink out of the rootfs, a
//! FIFO that blocks a reader forever, a device, or gigabytes. A symlink or a
//! file that is not regular counts as absent (a username then cannot be
//! resolved, and the create fails naming it, as containerd's lookup does);
//! a regular file above [`MAX_IMAGE_FILE_BYTES`] is an error, since ignoring
//! it would silently run with the wrong user or groups.

use std::fs::OpenOptions;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use berth_spec::host::Regular;
use nix::fcntl::OFlag;

use super::ContainerError;

/// The largest `/etc/passwd` or `/etc/group` berthd reads. Real ones are a
/// few KiB; large directories are served by NSS, never by these files.
pub const MAX_IMAGE_FILE_BYTES: u64 = 4 << 20;

/// What the image holds; `None` is absent (or not a regular file).
#[derive(Debug, Default)]
pub struct ImageUserFiles {
    pub passwd: Option<String>,
    pub group: Option<String>,
}

/// Reads both files on a blocking thread: file I/O on the image, whose
/// filesystem may be slow, stays off the async workers.
pub async fn read_user_files(rootfs: &Path) -> Result<ImageUserFiles, ContainerError> {
    let rootfs = rootfs.to_path_buf();
    tokio::task::spawn_blocking(move || {
        Ok(ImageUserFiles {
            passwd: read_image_file(&rootfs, "etc/passwd")?,
            group: read_image_file(&rootfs, "etc/group")?,
        })
    })
    .await
    .map_err(|source| ContainerError::Task {
        what: "reading the image's user files",
        source,
    })?
}

/// Reads `relative` (no leading `/`) under `rootfs`, following no symlink:
/// each component is checked, and the file itself is opened `O_NOFOLLOW`
/// (and `O_NONBLOCK`, so a FIFO does not block the open), then checked on
/// the open fd.
pub fn read_image_file(rootfs: &Path, relative: &str) -> Result<Option<String>, ContainerError> {
    let mut path = rootfs.to_path_buf();
    let mut parts = relative.split('/').peekable();
    while let Some(part) = parts.next() {
        path.push(part);
        if parts.peek().is_none() {
            break;
        }
        match std::fs::symlink_metadata(&path) {
            Ok(meta) if meta.is_dir() => {}
            _ => return Ok(None),
        }
    }
    let file = match OpenOptions::new()
        .read(true)
        .custom_flags((OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK).bits())
        .open(&path)
    {
        Ok(file) => file,
        Err(err) => {
            if err.kind() != std::io::ErrorKind::NotFound {
                tracing::debug!(file = relative, error = %err, "image file treated as absent");
            }
            return Ok(None);
        }
    };
    match berth_spec::host::read_regular(file, MAX_IMAGE_FILE_BYTES)
        .map_err(|err| ContainerError::io(format!("reading image file /{relative}"), err))?
    {
        Regular::Read(bytes) => Ok(Some(String::from_utf8_lossy(&bytes).into_owned())),
        Regular::NotRegular => {
            tracing::warn!(
                file = relative,
                "image file is not a regular file; treated as absent"
            );
            Ok(None)
        }
        Regular::TooLarge(size) => Err(ContainerError::ImageFileTooLarge {
            path: format!("/{relative}"),
            size,
            cap: MAX_IMAGE_FILE_BYTES,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rootfs() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("etc")).unwrap();
        dir
    }

    #[test]
    fn a_regular_file_is_read() {
        let dir = rootfs();
        std::fs::write(dir.path().join("etc/passwd"), "root:x:0:0::/root:/bin/sh\n").unwrap();
        let text = read_image_file(dir.path(), "etc/passwd").unwrap();
        assert_eq!(text.as_deref(), Some("root:x:0:0::/root:/bin/sh\n"));
        assert!(read_image_file(dir.path(), "etc/group").unwrap().is_none());
    }

    #[test]
    fn a_fifo_is_absent_and_does_not_block() {
        let dir = rootfs();
        let fifo = dir.path().join("etc/passwd");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o644)).unwrap();
        assert!(read_image_file(dir.path(), "etc/passwd").unwrap().is_none());
    }

    #[test]
    fn symlinks_are_absent() {
        let dir = rootfs();
        std::fs::write(dir.path().join("outside"), "x").unwrap();
        std::os::unix::fs::symlink("../outside", dir.path().join("etc/passwd")).unwrap();
        assert!(read_image_file(dir.path(), "etc/passwd").unwrap().is_none());
        let linked = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(dir.path().join("etc"), linked.path().join("etc")).unwrap();
        assert!(read_image_file(linked.path(), "etc/passwd")
            .unwrap()
            .is_none());
    }

    #[test]
    fn a_huge_file_is_an_error_naming_it() {
        let dir = rootfs();
        let file = std::fs::File::create(dir.path().join("etc/passwd")).unwrap();
        file.set_len(100 << 20).unwrap();
        let err = read_image_file(dir.path(), "etc/passwd").unwrap_err();
        let text = err.to_string();
        assert!(text.contains("/etc/passwd"), "{text}");
        assert!(text.contains(&MAX_IMAGE_FILE_BYTES.to_string()), "{text}");
    }
}
