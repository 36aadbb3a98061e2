//! The files the shim leaves in its `--dir`, and how they are written.
//!
//! Every file a reader may look at while the shim runs is written
//! atomically: temp file in the same directory, fsync, rename, fsync of the
//! directory. A reader sees the old content, the new content, or no file.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use serde::Serialize;

/// Paths inside the shim's directory.
#[derive(Debug, Clone)]
pub struct ShimFiles {
    dir: PathBuf,
}

impl ShimFiles {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into() }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The container's init pid, decimal, no newline.
    pub fn pid(&self) -> PathBuf {
        self.dir.join("pid")
    }

    /// The shim daemon's own pid, decimal, no newline.
    pub fn shim_pid(&self) -> PathBuf {
        self.dir.join("shim.pid")
    }

    /// [`crate::protocol::ExitRecord`] as JSON, once the init exited.
    pub fn exit(&self) -> PathBuf {
        self.dir.join("exit")
    }

    /// The control socket.
    pub fn socket(&self) -> PathBuf {
        self.dir.join("shim.sock")
    }

    /// The shim's own log (also its stdout/stderr after the handshake).
    pub fn log(&self) -> PathBuf {
        self.dir.join("shim.log")
    }

    /// The process spec of the exec being started (exists only while
    /// libcontainer starts it).
    pub fn exec_process(&self) -> PathBuf {
        self.dir.join("exec-process.json")
    }

    /// The attach socket: the container's output and stdin, framed
    /// (see [`crate::attach`]).
    pub fn attach_socket(&self) -> PathBuf {
        self.dir.join("attach.sock")
    }

    /// Where libcontainer sends the pty master of a tty exec session
    /// (exists only while the session starts).
    pub fn exec_console_socket(&self) -> PathBuf {
        self.dir.join("exec-console.sock")
    }

    /// Where libcontainer sends the pty master of a `--tty` container.
    pub fn console_socket(&self) -> PathBuf {
        self.dir.join("console.sock")
    }
}

/// Writes `data` to `path` atomically (mode 0644).
pub fn write_atomic(path: &Path, data: &[u8]) -> io::Result<()> {
    let dir = path
        .parent()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "path has no parent"))?;
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "path has no file name"))?;
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(name);
    tmp_name.push(format!(".tmp{}", std::process::id()));
    let tmp = dir.join(tmp_name);
    let result = (|| {
        let mut f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o644)
            .open(&tmp)?;
        f.write_all(data)?;
        f.sync_all()?;
        fs::rename(&tmp, path)?;
        File::open(dir)?.sync_all()
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// Serializes `value` as JSON and writes it atomically.
pub fn write_json_atomic<T: Serialize>(path: &Path, value: &T) -> io::Result<()> {
    let data = serde_json::to_vec(value).map_err(io::Error::other)?;
    write_atomic(path, &data)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::ExitRecord;

    #[test]
    fn atomic_write_replaces_and_leaves_no_temp() {
        let dir = tempfile::tempdir().expect("tempdir");
        let files = ShimFiles::new(dir.path());
        write_atomic(&files.pid(), b"1").expect("write");
        write_atomic(&files.pid(), b"42").expect("rewrite");
        assert_eq!(fs::read_to_string(files.pid()).expect("read"), "42");
        let names: Vec<_> = fs::read_dir(dir.path())
            .expect("readdir")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(names, [std::ffi::OsString::from("pid")]);
    }

    #[test]
    fn exit_file_is_json() {
        let dir = tempfile::tempdir().expect("tempdir");
        let files = ShimFiles::new(dir.path());
        let rec = ExitRecord {
            exit_code: 3,
            exited_at: "2016-10-06T00:17:09.669794202Z".into(),
            oom_killed: false,
        };
        write_json_atomic(&files.exit(), &rec).expect("write");
        let back: ExitRecord =
            serde_json::from_slice(&fs::read(files.exit()).expect("read")).expect("json");
        assert_eq!(back, rec);
    }

    #[test]
    fn missing_directory_is_an_error() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert!(write_atomic(&dir.path().join("nope/pid"), b"1").is_err());
    }
}
