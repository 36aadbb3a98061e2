//! The files the shim leaves in its `--dir`, and how they are written.
//!
//! Every file a reader may look at while the shim runs is written with
//! `berth_atomic_file`: a reader sees the old content, the new content, or
//! no file.

use std::path::{Path, PathBuf};

/// The exit file's name in the shim's directory ([`ShimFiles::exit`]):
/// for watchers that match the names of files appearing there.
pub const EXIT_FILE: &str = "exit";

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
        self.dir.join(EXIT_FILE)
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

#[cfg(test)]
mod tests {
    use std::fs;

    use super::*;
    use crate::protocol::ExitRecord;

    #[test]
    fn exit_file_is_json() {
        let dir = tempfile::tempdir().expect("tempdir");
        let files = ShimFiles::new(dir.path());
        let rec = ExitRecord {
            exit_code: 3,
            exited_at: "2016-10-06T00:17:09.669794202Z".into(),
            oom_killed: false,
            unknown: false,
        };
        berth_atomic_file::write_json_atomic(&files.exit(), &rec, 0o644).expect("write");
        let back: ExitRecord =
            serde_json::from_slice(&fs::read(files.exit()).expect("read")).expect("json");
        assert_eq!(back, rec);
    }
}
