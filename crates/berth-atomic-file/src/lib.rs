//! Replacing a file atomically: the one way berth's daemon, shim and
//! libraries write state that another process, or the next run, reads.
//!
//! The data goes to a temporary file beside the target, which is synced and
//! renamed over it; the directory is then synced so the rename survives a
//! crash. A reader sees the old file or the new one, never a part. Temporary
//! names are unique per process and call, so concurrent writers of one path
//! never share a temporary file (the last rename wins), and a failed write
//! removes its temporary file.

#![forbid(unsafe_code)]

use std::ffi::OsString;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;

/// Writes `data` to `path` atomically, with permission bits `mode` (set
/// explicitly: the umask must not decide who can read it). The directory
/// must exist.
pub fn write_atomic(path: &Path, data: &[u8], mode: u32) -> io::Result<()> {
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    let tmp = temp_path(dir, path)?;
    let result =
        write_then_rename(&tmp, path, data, mode).and_then(|()| File::open(dir)?.sync_all());
    if result.is_err() {
        // Gone already when the rename happened; anything else is ours.
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// Serializes `value` as JSON and writes it atomically with `mode`.
pub fn write_json_atomic<T: Serialize>(path: &Path, value: &T, mode: u32) -> io::Result<()> {
    let data = serde_json::to_vec(value).map_err(io::Error::other)?;
    write_atomic(path, &data, mode)
}

fn write_then_rename(tmp: &Path, path: &Path, data: &[u8], mode: u32) -> io::Result<()> {
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(tmp)?;
    file.set_permissions(fs::Permissions::from_mode(mode))?;
    file.write_all(data)?;
    file.sync_all()?;
    fs::rename(tmp, path)
}

/// `.<name>.<pid>.<n>.tmp` in `dir`: hidden, and unique to this process and
/// call.
fn temp_path(dir: &Path, path: &Path) -> io::Result<PathBuf> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "path has no file name"))?;
    let mut tmp = OsString::from(".");
    tmp.push(name);
    tmp.push(format!(
        ".{}.{}.tmp",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    Ok(dir.join(tmp))
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::MetadataExt;
    use std::sync::Arc;

    use super::*;

    fn names(dir: &Path) -> Vec<OsString> {
        let mut names: Vec<_> = fs::read_dir(dir)
            .expect("readdir")
            .map(|entry| entry.expect("entry").file_name())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn replaces_with_mode_and_leaves_no_temp_files() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("resolv.conf");
        write_atomic(&path, b"nameserver 1.1.1.1\n", 0o644).expect("write");
        assert_eq!(fs::metadata(&path).expect("stat").mode() & 0o7777, 0o644);
        let before = fs::metadata(&path).expect("stat").ino();
        write_atomic(&path, b"nameserver 9.9.9.9\n", 0o600).expect("rewrite");
        // Replaced by rename, not rewritten in place.
        assert_ne!(fs::metadata(&path).expect("stat").ino(), before);
        assert_eq!(fs::read(&path).expect("read"), b"nameserver 9.9.9.9\n");
        assert_eq!(fs::metadata(&path).expect("stat").mode() & 0o777, 0o600);
        assert_eq!(names(dir.path()), [OsString::from("resolv.conf")]);
    }

    #[test]
    fn a_missing_directory_is_an_error() {
        let dir = tempfile::tempdir().expect("tempdir");
        let err = write_atomic(&dir.path().join("no/such/file"), b"x", 0o644).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
    }

    #[test]
    fn a_failed_rename_removes_the_temp_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        // A directory where the file should go: the rename fails.
        let path = dir.path().join("taken");
        fs::create_dir(path.join("")).expect("mkdir");
        fs::write(path.join("inside"), b"x").expect("fill");
        assert!(write_atomic(&path, b"new", 0o644).is_err());
        assert_eq!(names(dir.path()), [OsString::from("taken")]);
    }

    #[test]
    fn concurrent_writers_of_one_path_never_collide() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = Arc::new(dir.path().join("state.json"));
        let writers: Vec<_> = (0..8)
            .map(|i| {
                let path = path.clone();
                std::thread::spawn(move || {
                    for n in 0..50 {
                        write_atomic(&path, format!("{i}-{n}").as_bytes(), 0o600).expect("write");
                    }
                })
            })
            .collect();
        for writer in writers {
            writer.join().expect("writer");
        }
        let last = fs::read_to_string(&*path).expect("read");
        assert!(last.ends_with("-49"), "{last}");
        assert_eq!(names(dir.path()), [OsString::from("state.json")]);
    }

    #[test]
    fn json_round_trips() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("exit");
        write_json_atomic(&path, &serde_json::json!({"exit_code": 3}), 0o644).expect("write");
        let back: serde_json::Value =
            serde_json::from_slice(&fs::read(&path).expect("read")).expect("json");
        assert_eq!(back["exit_code"], 3);
    }
}
