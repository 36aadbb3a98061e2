//! The container's CRI log file: opened for append, reopened on request.
//!
//! Writing never fails the caller: a write error is logged and the data is
//! dropped, so the shim keeps draining the container's output (containerd
//! does the same). Without a path, output is drained and discarded (CRI
//! allows an empty `log_path`).

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

#[derive(Debug)]
pub struct LogFile {
    path: Option<PathBuf>,
    file: Option<File>,
    reported_error: bool,
}

impl LogFile {
    pub fn open(path: Option<PathBuf>) -> io::Result<Self> {
        let file = match &path {
            Some(p) => Some(open_append(p)?),
            None => None,
        };
        Ok(Self {
            path,
            file,
            reported_error: false,
        })
    }

    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// Opens the path again (kubelet renamed the file to rotate it). On
    /// failure the old file stays in use.
    pub fn reopen(&mut self) -> io::Result<()> {
        if let Some(p) = &self.path {
            self.file = Some(open_append(p)?);
            self.reported_error = false;
        }
        Ok(())
    }

    /// Appends `data` (whole CRI records) in one write.
    pub fn write(&mut self, data: &[u8]) {
        if data.is_empty() {
            return;
        }
        let Some(f) = &mut self.file else { return };
        if let Err(err) = f.write_all(data) {
            if !self.reported_error {
                tracing::error!(%err, path = ?self.path, "cannot write the container log; dropping output");
                self.reported_error = true;
            }
        }
    }
}

fn open_append(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o640)
        .open(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn appends_and_reopens_after_rotation() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("c.log");
        std::fs::write(&path, "old\n").expect("seed");
        let mut log = LogFile::open(Some(path.clone())).expect("open");
        log.write(b"a\n");
        std::fs::rename(&path, dir.path().join("c.log.1")).expect("rotate");
        log.write(b"b\n"); // still the rotated file
        log.reopen().expect("reopen");
        log.write(b"c\n");
        let rotated = std::fs::read_to_string(dir.path().join("c.log.1")).expect("read");
        assert_eq!(rotated, "old\na\nb\n");
        assert_eq!(std::fs::read_to_string(&path).expect("read"), "c\n");
    }

    #[test]
    fn no_path_discards() {
        let mut log = LogFile::open(None).expect("open");
        log.write(b"x\n");
        log.reopen().expect("reopen");
        assert!(log.path().is_none());
    }

    #[test]
    fn reopen_failure_keeps_the_old_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let sub = dir.path().join("logs");
        std::fs::create_dir(&sub).expect("mkdir");
        let path = sub.join("c.log");
        let mut log = LogFile::open(Some(path.clone())).expect("open");
        std::fs::rename(&sub, dir.path().join("moved")).expect("move dir");
        assert!(log.reopen().is_err());
        log.write(b"still\n");
        let text = std::fs::read_to_string(dir.path().join("moved/c.log")).expect("read");
        assert_eq!(text, "still\n");
    }
}
