//! The helper binaries berthd runs (berth-shim, berth-pinns), each from a
//! view a container cannot write through.
//!
//! A container's processes are forked from berth-shim and run it until
//! their last execve; the infra process of a pod sharing its PID namespace
//! is a fork of berth-pinns for good. A container process that executes
//! `#!/proc/self/exe` at the right time, or opens another one's
//! `/proc/PID/exe`, holds a handle on the binary berthd executed, and once
//! no process runs it any more (no more ETXTBSY) could open that handle
//! for writing and replace what every later container runs
//! (CVE-2019-5736). So berthd never executes the installed file: at start
//! it makes a detached, read-only mount of each helper (`open_tree` clone
//! plus `MOUNT_ATTR_RDONLY`: writes through it fail with EROFS whatever
//! the file's mode) and executes through that fd. One view serves every
//! process, costs no memory, and lives on in the processes running from it
//! when berthd exits. When the kernel cannot make one, a sealed memfd copy
//! (one per helper, shared by every process) stands in; when neither can
//! be made berthd does not start.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// How a helper's binary is kept out of the containers' reach.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protection {
    /// A detached read-only mount of the installed file.
    ReadOnlyMount,
    /// A sealed in-memory copy of it.
    SealedCopy,
    /// The installed file itself: only for tests that never start a
    /// container.
    None,
}

/// A view of a helper's binary, as the kernel calls make it.
#[derive(Debug)]
pub enum View {
    /// An `open_tree` clone of the file, read-only.
    Mount(OwnedFd),
    /// A memfd with the file's bytes, sealed.
    Sealed(OwnedFd),
}

impl View {
    fn fd(&self) -> &OwnedFd {
        match self {
            View::Mount(fd) | View::Sealed(fd) => fd,
        }
    }
}

/// The kernel calls behind the views: [`HostViews`] in production.
pub trait BinaryViews {
    /// A detached clone of the mount showing the file `path`, made
    /// read-only.
    fn read_only_mount(&self, path: &Path) -> io::Result<View>;
    /// A memfd holding the bytes of `path`, sealed against writes.
    fn sealed_copy(&self, path: &Path) -> io::Result<View>;
    /// Whether `view` refuses writers: its mount is read-only, or its
    /// memfd is sealed against writes.
    fn refuses_writes(&self, view: &View) -> io::Result<bool>;
}

#[derive(Debug, thiserror::Error)]
pub enum HelperBinaryError {
    #[error(
        "helper binary {path} {problem}; install berth's helpers there or set `helper_dir` \
         in the config to the directory holding them"
    )]
    Unusable { path: PathBuf, problem: String },
    #[error(
        "cannot run {path} out of the containers' reach: no read-only mount of it ({mount}) \
         and no sealed copy ({copy}); berthd does not start helpers a container could replace"
    )]
    Unprotected {
        path: PathBuf,
        mount: io::Error,
        copy: io::Error,
    },
}

/// A helper binary and the view berthd executes it through.
#[derive(Debug, Clone)]
pub struct HelperBinary {
    /// The installed file: argv[0] of every process (recovery finds
    /// helpers by its file name) and what messages name.
    path: PathBuf,
    /// What is executed: `/proc/self/fd/N` of the view.
    exec: PathBuf,
    protection: Protection,
    /// Keeps the view open (and so its fd number valid) while berthd runs.
    _view: Option<Arc<View>>,
}

impl HelperBinary {
    /// `path` behind a read-only mount, or else a sealed copy; an error
    /// naming both causes when neither can be made.
    pub fn protect(views: &dyn BinaryViews, path: &Path) -> Result<Self, HelperBinaryError> {
        let mount = views
            .read_only_mount(path)
            .and_then(|view| checked(views, view));
        let (view, protection) = match mount {
            Ok(view) => (view, Protection::ReadOnlyMount),
            Err(mount) => {
                tracing::warn!(
                    binary = %path.display(), error = %mount,
                    "no read-only mount of the helper; running it from a sealed copy"
                );
                match views
                    .sealed_copy(path)
                    .and_then(|view| checked(views, view))
                {
                    Ok(view) => (view, Protection::SealedCopy),
                    Err(copy) => {
                        return Err(HelperBinaryError::Unprotected {
                            path: path.to_path_buf(),
                            mount,
                            copy,
                        })
                    }
                }
            }
        };
        Ok(Self {
            path: path.to_path_buf(),
            exec: fd_path(view.fd()),
            protection,
            _view: Some(Arc::new(view)),
        })
    }

    /// `path` executed as it is. A container that catches such a process
    /// can replace the file: for tests that start no container, and tools.
    pub fn unprotected(path: impl Into<PathBuf>) -> Self {
        let path = path.into();
        Self {
            exec: path.clone(),
            path,
            protection: Protection::None,
            _view: None,
        }
    }

    /// The installed file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn protection(&self) -> Protection {
        self.protection
    }

    /// A command running the helper through its view, with the installed
    /// path as argv[0].
    pub fn command(&self) -> tokio::process::Command {
        let mut command = tokio::process::Command::new(&self.exec);
        command.arg0(&self.path);
        // systemd's notify socket is berthd's alone: a helper (or a
        // container it starts) must not be able to send READY or STOPPING.
        command.env_remove("NOTIFY_SOCKET");
        command
    }
}

/// Checks that `path` is an executable regular file, so that berthd stops
/// at start naming it rather than failing the first container create.
pub fn check_executable(path: &Path) -> Result<(), HelperBinaryError> {
    use std::os::unix::fs::PermissionsExt;
    let unusable = |problem: String| HelperBinaryError::Unusable {
        path: path.to_path_buf(),
        problem,
    };
    let meta = std::fs::metadata(path).map_err(|err| match err.kind() {
        io::ErrorKind::NotFound => unusable("is missing".to_string()),
        _ => unusable(format!("cannot be read: {err}")),
    })?;
    if !meta.is_file() {
        return Err(unusable("is not a regular file".to_string()));
    }
    if meta.permissions().mode() & 0o111 == 0 {
        return Err(unusable(format!(
            "is not executable (mode {:o})",
            meta.permissions().mode() & 0o7777
        )));
    }
    Ok(())
}

/// The view, if it really refuses writers: a view that does not is an
/// error, never a silent fallback to a writable binary.
fn checked(views: &dyn BinaryViews, view: View) -> io::Result<View> {
    if views.refuses_writes(&view)? {
        Ok(view)
    } else {
        Err(io::Error::other("the view still accepts writers"))
    }
}

/// The path that executes the file behind `fd`. The fd is close-on-exec:
/// execve resolves the path before it closes such fds, so the helper runs
/// without inheriting it.
fn fd_path(fd: &OwnedFd) -> PathBuf {
    PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()))
}

/// The real kernel calls.
pub struct HostViews;

impl BinaryViews for HostViews {
    fn read_only_mount(&self, path: &Path) -> io::Result<View> {
        let tree = berth_mount::clone_tree(path, false)?;
        berth_mount::read_only_tree(&tree)?;
        Ok(View::Mount(tree))
    }

    fn sealed_copy(&self, path: &Path) -> io::Result<View> {
        use nix::fcntl::{fcntl, FcntlArg, SealFlag};
        use nix::sys::memfd::{memfd_create, MFdFlags};

        let name = path.file_name().unwrap_or(path.as_os_str());
        let memfd = memfd_create(name, MFdFlags::MFD_CLOEXEC | MFdFlags::MFD_ALLOW_SEALING)?;
        let mut copy = std::fs::File::from(memfd);
        io::copy(&mut std::fs::File::open(path)?, &mut copy)?;
        fcntl(
            &copy,
            FcntlArg::F_ADD_SEALS(
                SealFlag::F_SEAL_SEAL
                    | SealFlag::F_SEAL_SHRINK
                    | SealFlag::F_SEAL_GROW
                    | SealFlag::F_SEAL_WRITE,
            ),
        )?;
        Ok(View::Sealed(copy.into()))
    }

    fn refuses_writes(&self, view: &View) -> io::Result<bool> {
        use nix::fcntl::{fcntl, FcntlArg, SealFlag};
        use nix::sys::statvfs::{fstatvfs, FsFlags};

        Ok(match view {
            View::Mount(fd) => fstatvfs(fd)?.flags().contains(FsFlags::ST_RDONLY),
            View::Sealed(fd) => SealFlag::from_bits_truncate(fcntl(fd, FcntlArg::F_GET_SEALS)?)
                .contains(SealFlag::F_SEAL_WRITE),
        })
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;

    use super::*;

    #[test]
    fn missing_or_non_executable_helpers_are_named() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("berth-shim");
        let err = check_executable(&path).unwrap_err().to_string();
        assert!(
            err.contains("berth-shim is missing") && err.contains("helper_dir"),
            "{err}"
        );
        std::fs::write(&path, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let err = check_executable(&path).unwrap_err().to_string();
        assert!(err.contains("not executable (mode 644)"), "{err}");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        check_executable(&path).unwrap();
        assert!(check_executable(dir.path()).is_err());
    }

    /// Views whose making and checking fail or succeed as told; each view
    /// is an fd of /dev/null.
    #[derive(Default)]
    struct FakeViews {
        no_mount: bool,
        no_copy: bool,
        writable: bool,
        made: RefCell<Vec<&'static str>>,
    }

    fn devnull() -> OwnedFd {
        std::fs::File::open("/dev/null").unwrap().into()
    }

    impl BinaryViews for FakeViews {
        fn read_only_mount(&self, _: &Path) -> io::Result<View> {
            self.made.borrow_mut().push("mount");
            if self.no_mount {
                return Err(io::Error::from_raw_os_error(nix::libc::ENOSYS));
            }
            Ok(View::Mount(devnull()))
        }

        fn sealed_copy(&self, _: &Path) -> io::Result<View> {
            self.made.borrow_mut().push("copy");
            if self.no_copy {
                return Err(io::Error::from_raw_os_error(nix::libc::EPERM));
            }
            Ok(View::Sealed(devnull()))
        }

        fn refuses_writes(&self, _: &View) -> io::Result<bool> {
            Ok(!self.writable)
        }
    }

    #[test]
    fn a_read_only_mount_is_the_first_choice() {
        let views = FakeViews::default();
        let helper = HelperBinary::protect(&views, Path::new("/usr/bin/berth-shim")).unwrap();
        assert_eq!(helper.protection(), Protection::ReadOnlyMount);
        assert_eq!(*views.made.borrow(), ["mount"]);
        assert_eq!(helper.path(), Path::new("/usr/bin/berth-shim"));
        assert!(helper.exec.starts_with("/proc/self/fd/"));
    }

    #[test]
    fn without_a_mount_a_sealed_copy_stands_in() {
        let views = FakeViews {
            no_mount: true,
            ..Default::default()
        };
        let helper = HelperBinary::protect(&views, Path::new("/b/berth-pinns")).unwrap();
        assert_eq!(helper.protection(), Protection::SealedCopy);
        assert_eq!(*views.made.borrow(), ["mount", "copy"]);
    }

    #[test]
    fn neither_is_an_error_naming_the_binary_and_both_causes() {
        let views = FakeViews {
            no_mount: true,
            no_copy: true,
            ..Default::default()
        };
        let err = HelperBinary::protect(&views, Path::new("/b/berth-shim")).unwrap_err();
        let message = err.to_string();
        assert!(message.contains("/b/berth-shim"), "{message}");
        assert!(message.contains("os error 38"), "{message}");
        assert!(message.contains("os error 1"), "{message}");
    }

    #[test]
    fn a_view_that_accepts_writers_is_refused() {
        let views = FakeViews {
            writable: true,
            ..Default::default()
        };
        let err = HelperBinary::protect(&views, Path::new("/b/berth-shim")).unwrap_err();
        assert!(err.to_string().contains("still accepts writers"), "{err}");
    }

    #[test]
    fn the_installed_path_stays_argv0() {
        let helper = HelperBinary::unprotected("/usr/bin/berth-shim");
        let command = helper.command();
        let std = command.as_std();
        assert_eq!(std.get_program(), "/usr/bin/berth-shim");
        assert_eq!(helper.protection(), Protection::None);
    }

    /// The real calls (root only: open_tree needs CAP_SYS_ADMIN).
    #[test]
    fn the_host_views_refuse_writers() {
        if !nix::unistd::geteuid().is_root() {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("helper");
        std::fs::write(&file, b"#!/bin/sh\n").unwrap();
        for view in [
            HostViews.read_only_mount(&file).unwrap(),
            HostViews.sealed_copy(&file).unwrap(),
        ] {
            assert!(HostViews.refuses_writes(&view).unwrap(), "{view:?}");
            let through = fd_path(view.fd());
            assert_eq!(std::fs::read(&through).unwrap(), b"#!/bin/sh\n");
            let mut opened = std::fs::OpenOptions::new().write(true).open(&through);
            if let Ok(file) = &mut opened {
                // A sealed memfd opens, but no byte goes in.
                use std::io::Write;
                assert!(file.write_all(b"x").is_err(), "{view:?}");
            } else {
                assert!(matches!(view, View::Mount(_)));
            }
        }
    }
}
