//! From the command line to a created container and a listening socket:
//! everything the daemon does before it reports ready.

use std::fs::File;
use std::io::Write;
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};

use nix::fcntl::{fcntl, FcntlArg, OFlag};
use nix::sys::signal::{sigprocmask, SigSet, SigmaskHow, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::unistd::pipe2;

use crate::backend::{BackendError, ContainerRef, InitStdio, RuntimeBackend};
use crate::bundle::{BundleError, BundleInfo};
use crate::cli::Args;
use crate::console::ConsoleSocket;
use crate::crilog::Stream;
use crate::logfile::LogFile;
use crate::output::OutputPipe;
use crate::server::error_chain;
use berth_atomic_file::write_atomic;
use berth_shim_api::files::ShimFiles;

#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error("{what} {path}: {source}")]
    Path {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Bundle(#[from] BundleError),
    #[error("--tty is {flag} but the spec's process.terminal is {spec}")]
    TtyMismatch { flag: bool, spec: bool },
    #[error("cannot open the container log: {0}")]
    Log(std::io::Error),
    #[error("{0}: {1}")]
    Sys(&'static str, std::io::Error),
    #[error("creating the container: {0}")]
    Create(BackendError),
    #[error("receiving the pty master: {0}")]
    Console(std::io::Error),
    #[error("a container with a terminal cannot be restored from a checkpoint")]
    RestoreTty,
    #[error("trimming the create's mount table: {0}")]
    Trim(crate::mount_view::TrimError),
}

/// The command line, with paths made absolute and checked.
#[derive(Debug, Clone)]
pub struct ShimConfig {
    pub container: ContainerRef,
    pub bundle: PathBuf,
    pub files: ShimFiles,
    pub log_path: Option<PathBuf>,
    pub tty: bool,
    /// Keep the container's stdin for attachers; close it after the first
    /// attacher's stdin ends.
    pub stdin: bool,
    pub stdin_once: bool,
    pub max_log_line: usize,
    /// An unpacked checkpoint to restore at `start` (`--restore`).
    pub restore: Option<PathBuf>,
    /// The container's cgroup dirs, when berthd named them.
    pub cgroup_dirs: Option<crate::cgroup_dirs::CgroupDirs>,
    /// The state dir to trim the create's mount table to (`--trim-mounts`).
    pub trim_mounts: Option<PathBuf>,
    /// The OCI runtime binary to drive (`--runtime-binary`); libcontainer
    /// in-process without one.
    pub runtime_binary: Option<PathBuf>,
}

impl ShimConfig {
    /// Creates `--dir` and `--state-root` if missing; the bundle must exist.
    pub fn from_args(args: &Args) -> Result<Self, SetupError> {
        let dir = make_dir("shim directory", &args.dir)?;
        let state_root = make_dir("state root", &args.state_root)?;
        let bundle = canonical("bundle", &args.bundle)?;
        let log_path = match &args.log {
            Some(p) if p.is_absolute() => Some(p.clone()),
            Some(p) => Some(absolute("log path", p)?),
            None => None,
        };
        Ok(Self {
            container: ContainerRef {
                id: args.id.clone(),
                state_root,
            },
            bundle,
            files: ShimFiles::new(dir),
            log_path,
            tty: args.tty,
            stdin: args.stdin,
            stdin_once: args.stdin_once,
            max_log_line: args.max_log_line,
            restore: match &args.restore {
                Some(dir) => Some(canonical("checkpoint", dir)?),
                None => None,
            },
            cgroup_dirs: crate::cgroup_dirs::CgroupDirs::new(&args.cgroup_dir),
            trim_mounts: args.trim_mounts.clone(),
            runtime_binary: match &args.runtime_binary {
                Some(path) => Some(canonical("runtime binary", path)?),
                None => None,
            },
        })
    }
}

fn make_dir(what: &'static str, p: &Path) -> Result<PathBuf, SetupError> {
    std::fs::create_dir_all(p).map_err(|source| SetupError::Path {
        what,
        path: p.to_path_buf(),
        source,
    })?;
    canonical(what, p)
}

fn canonical(what: &'static str, p: &Path) -> Result<PathBuf, SetupError> {
    p.canonicalize().map_err(|source| SetupError::Path {
        what,
        path: p.to_path_buf(),
        source,
    })
}

fn absolute(what: &'static str, p: &Path) -> Result<PathBuf, SetupError> {
    std::path::absolute(p).map_err(|source| SetupError::Path {
        what,
        path: p.to_path_buf(),
        source,
    })
}

/// SIGCHLD is blocked and read from a signalfd; must happen before any
/// child exists so no exit is missed.
pub fn sigchld_fd() -> Result<SignalFd, SetupError> {
    let mut mask = SigSet::empty();
    mask.add(Signal::SIGCHLD);
    sigprocmask(SigmaskHow::SIG_BLOCK, Some(&mask), None)
        .map_err(|e| SetupError::Sys("blocking SIGCHLD", e.into()))?;
    SignalFd::with_flags(&mask, SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC)
        .map_err(|e| SetupError::Sys("signalfd", e.into()))
}

/// A created container and the shim's ends of its stdio.
pub struct Created {
    /// The runtime that created the container, for every later call.
    pub backend: Box<dyn RuntimeBackend>,
    pub init_pid: i32,
    pub outputs: Vec<OutputPipe>,
    /// With `--stdin`: the write end of its stdin (a copy of the pty master
    /// for a tty), non-blocking.
    pub stdin: Option<OwnedFd>,
    /// A tty container's pty master (a copy), for resizes.
    pub pty: Option<OwnedFd>,
    pub log: LogFile,
    pub bundle: BundleInfo,
    /// With `--restore`: copies of the container's stdin, stdout and
    /// stderr ends, for the restored processes (the placeholder init's
    /// copies die with it).
    pub restore_stdio: Option<[OwnedFd; 3]>,
}

/// The state dir to trim the create's mount table to (`mount_view`): the
/// one berthd named, unless this is a restore (CRIU restores the mounts
/// itself), a mount must propagate back to the host (the trimmed namespace
/// sends nothing there), or a path the spec names under the state dir needs
/// propagation (its kept copy is private).
fn trim_dir<'a>(
    trim_mounts: Option<&'a Path>,
    restore: bool,
    bundle: &BundleInfo,
) -> Option<&'a Path> {
    let state_dir = trim_mounts.filter(|_| !restore)?;
    let propagated_inside = bundle
        .propagated_paths
        .iter()
        .any(|path| path.starts_with(state_dir));
    (!bundle.shares_with_host && !propagated_inside).then_some(state_dir)
}

/// Runs `create` in a mount namespace trimmed to what the spec names when
/// [`trim_dir`] allows it; in the host's otherwise, or when the trim fails
/// (the create is the same, only slower with many pods).
fn create_trimmed<T>(
    cfg: &ShimConfig,
    bundle: &BundleInfo,
    create: impl FnOnce() -> T,
) -> Result<T, SetupError> {
    let Some(state_dir) = trim_dir(cfg.trim_mounts.as_deref(), cfg.restore.is_some(), bundle)
    else {
        return Ok(create());
    };
    let kept = crate::mount_view::kept_dirs(state_dir, &bundle.host_paths);
    // Should going back fail, the shim exits and berthd's failed create
    // removes what was made.
    let (created, trimmed) =
        crate::mount_view::run_trimmed(state_dir, &kept, create).map_err(SetupError::Trim)?;
    if trimmed {
        tracing::info!(kept = ?kept, "created the container in a trimmed mount table");
    }
    Ok(created)
}

/// Creates the container with the backend `make_backend` gives for the
/// bundle.
pub fn create(
    cfg: &ShimConfig,
    make_backend: impl FnOnce(&BundleInfo) -> Box<dyn RuntimeBackend>,
) -> Result<Created, SetupError> {
    let bundle = BundleInfo::load(&cfg.bundle)?;
    if bundle.terminal != cfg.tty {
        return Err(SetupError::TtyMismatch {
            flag: cfg.tty,
            spec: bundle.terminal,
        });
    }
    if cfg.tty && cfg.restore.is_some() {
        return Err(SetupError::RestoreTty);
    }
    let log = LogFile::open(cfg.log_path.clone()).map_err(SetupError::Log)?;
    let mut restore_stdio = None;
    let mut backend = make_backend(&bundle);

    let (init_pid, outputs, stdin, pty) = if cfg.tty {
        let console = ConsoleSocket::bind(&cfg.files.console_socket())
            .map_err(|e| SetupError::Sys("binding the console socket", e))?;
        let init_pid = create_trimmed(cfg, &bundle, || {
            backend.create(
                &cfg.bundle,
                InitStdio::Console(console.path().to_path_buf()),
            )
        })?
        .map_err(SetupError::Create)?;
        let master = match console
            .receive_master()
            .map_err(SetupError::Console)
            .and_then(|m| set_nonblocking(&m).map(|()| m))
        {
            Ok(m) => m,
            Err(err) => {
                if let Err(e) = backend.delete(true) {
                    tracing::error!(error = %error_chain(&e), "removing the half-made container");
                }
                return Err(err);
            }
        };
        let copies = (|| {
            let pty = master.try_clone()?;
            let stdin = if cfg.stdin {
                Some(master.try_clone()?)
            } else {
                None
            };
            Ok::<_, std::io::Error>((stdin, pty))
        })();
        let (stdin, pty) = match copies {
            Ok(c) => c,
            Err(e) => {
                if let Err(d) = backend.delete(true) {
                    tracing::error!(error = %error_chain(&d), "removing the half-made container");
                }
                return Err(SetupError::Sys("copying the pty master", e));
            }
        };
        let out = OutputPipe::new(master, Stream::Stdout, cfg.max_log_line);
        (init_pid, vec![out], stdin, Some(pty))
    } else {
        let (out_r, out_w) = pipe()?;
        let (err_r, err_w) = pipe()?;
        let sizes = [widen_for_create(&out_r), widen_for_create(&err_r)];
        let (child_stdin, stdin) = if cfg.stdin {
            // the container's end stays blocking; ours must not block the shim
            let (r, w) = pipe2(OFlag::O_CLOEXEC).map_err(|e| SetupError::Sys("pipe", e.into()))?;
            set_nonblocking(&w)?;
            (r, Some(w))
        } else {
            let null = File::open("/dev/null").map_err(|e| SetupError::Sys("/dev/null", e))?;
            (null.into(), None)
        };
        if cfg.restore.is_some() {
            let copy = |fd: &OwnedFd| {
                fd.try_clone()
                    .map_err(|e| SetupError::Sys("copying the container's stdio", e))
            };
            restore_stdio = Some([copy(&child_stdin)?, copy(&out_w)?, copy(&err_w)?]);
        }
        let created = create_trimmed(cfg, &bundle, || {
            backend.create(
                &cfg.bundle,
                InitStdio::Pipes {
                    stdin: child_stdin,
                    stdout: out_w,
                    stderr: err_w,
                },
            )
        })?;
        let init_pid = match created {
            Ok(pid) => pid,
            Err(err) => {
                // The runtime's own messages are in our log already
                // (`init_tracing`); anything else its init wrote to the
                // container's stderr before failing joins them.
                copy_pending(&err_r, &mut std::io::stderr());
                return Err(SetupError::Create(err));
            }
        };
        for (fd, size) in [&out_r, &err_r].into_iter().zip(sizes) {
            restore_size(fd, size);
        }
        let outputs = vec![
            OutputPipe::new(out_r, Stream::Stdout, cfg.max_log_line),
            OutputPipe::new(err_r, Stream::Stderr, cfg.max_log_line),
        ];
        (init_pid, outputs, stdin, None)
    };
    // A shared init (a runsc subcontainer's sandbox) is not this
    // container's to move.
    let joined = if backend.shares_init() {
        Ok(())
    } else {
        join_every_hierarchy(cfg, init_pid)
    };
    if let Err(err) = joined.and_then(|()| publish_pid(cfg, init_pid)) {
        // do not leave a created container nobody will ever start
        if let Err(e) = backend.delete(true) {
            tracing::error!(error = %error_chain(&e), "removing the half-made container");
        }
        return Err(err);
    }
    Ok(Created {
        backend,
        init_pid,
        outputs,
        stdin,
        pty,
        log,
        bundle,
        restore_stdio,
    })
}

/// The init joins the container's cgroup in the hierarchies the runtime
/// left it out of (see [`crate::cgroup_dirs::CgroupDirs::adopt_init`]),
/// before anything of the workload runs.
fn join_every_hierarchy(cfg: &ShimConfig, pid: i32) -> Result<(), SetupError> {
    let Some(dirs) = &cfg.cgroup_dirs else {
        return Ok(());
    };
    dirs.adopt_init(pid)
        .map_err(|e| SetupError::Sys("moving the container into its cgroups", e))
}

fn publish_pid(cfg: &ShimConfig, init_pid: i32) -> Result<(), SetupError> {
    write_atomic(&cfg.files.pid(), init_pid.to_string().as_bytes(), 0o644).map_err(|source| {
        SetupError::Path {
            what: "pid file",
            path: cfg.files.pid(),
            source,
        }
    })
}

/// A pipe whose read end (returned first) is non-blocking. Both ends are
/// close-on-exec: libcontainer `dup2`s the write end onto 0/1/2, which
/// clears the flag on the copy.
pub fn pipe() -> Result<(OwnedFd, OwnedFd), SetupError> {
    let (r, w) = pipe2(OFlag::O_CLOEXEC).map_err(|e| SetupError::Sys("pipe", e.into()))?;
    set_nonblocking(&r)?;
    Ok((r, w))
}

/// A pipe's capacity while libcontainer creates the container. Nobody reads
/// the container's stdout and stderr until the create returns, and its
/// init may write a long message before it fails (a panic naming a 64 KiB
/// env value did): with the default capacity that write blocked the init,
/// and the create with it, until berthd's timeout. The kernel allocates a
/// pipe's pages only as they fill, so the size costs nothing unused.
const CREATE_PIPE_SIZE: i32 = 1 << 20;

/// Widens the pipe of `fd` for the create; returns its capacity before,
/// or None if it could not be read or changed (the create goes on).
fn widen_for_create(fd: &OwnedFd) -> Option<i32> {
    let before = fcntl(fd, FcntlArg::F_GETPIPE_SZ).ok()?;
    match fcntl(fd, FcntlArg::F_SETPIPE_SZ(CREATE_PIPE_SIZE.max(before))) {
        Ok(_) => Some(before),
        Err(err) => {
            tracing::debug!(%err, "widening an output pipe for the create");
            None
        }
    }
}

/// Gives the pipe of `fd` back its capacity before the create, so a
/// running container's output is buffered as any other's (best effort:
/// the kernel refuses while more than that is waiting).
fn restore_size(fd: &OwnedFd, size: Option<i32>) {
    if let Some(size) = size {
        if let Err(err) = fcntl(fd, FcntlArg::F_SETPIPE_SZ(size)) {
            tracing::debug!(%err, "restoring an output pipe's size");
        }
    }
}

/// Copies what is waiting in the non-blocking pipe `fd` (at most 64 KiB,
/// a pipe's default capacity) to `out`.
fn copy_pending(fd: &OwnedFd, out: &mut dyn Write) {
    let mut pending = Vec::new();
    let mut chunk = [0u8; 4096];
    while pending.len() < PENDING_MAX {
        match nix::unistd::read(fd, &mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => pending.extend_from_slice(&chunk[..n]),
        }
    }
    let _ = out.write_all(&pending);
}

/// See [`copy_pending`].
const PENDING_MAX: usize = 64 << 10;

fn set_nonblocking(fd: &OwnedFd) -> Result<(), SetupError> {
    let flags = fcntl(fd, FcntlArg::F_GETFL).map_err(|e| SetupError::Sys("fcntl", e.into()))?;
    let flags = OFlag::from_bits_truncate(flags) | OFlag::O_NONBLOCK;
    fcntl(fd, FcntlArg::F_SETFL(flags)).map_err(|e| SetupError::Sys("fcntl", e.into()))?;
    Ok(())
}

/// Binds the control socket (replacing a stale one).
pub fn listen(files: &ShimFiles) -> Result<UnixListener, SetupError> {
    bind("control socket", files.socket())
}

/// Binds the attach socket (replacing a stale one).
pub fn listen_attach(files: &ShimFiles) -> Result<UnixListener, SetupError> {
    bind("attach socket", files.attach_socket())
}

fn bind(what: &'static str, path: PathBuf) -> Result<UnixListener, SetupError> {
    let _ = std::fs::remove_file(&path);
    let listener = UnixListener::bind(&path).map_err(|source| SetupError::Path {
        what,
        path: path.clone(),
        source,
    })?;
    listener
        .set_nonblocking(true)
        .map_err(|e| SetupError::Sys(what, e))?;
    Ok(listener)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pipe_widened_for_the_create_takes_a_long_message_then_shrinks_back() {
        let (r, w) = pipe().unwrap();
        set_nonblocking(&w).unwrap();
        let message = vec![b'x'; 200 << 10];
        // The default capacity takes only part of it.
        let default_written = nix::unistd::write(&w, &message).unwrap();
        assert!(default_written < message.len());
        copy_pending(&r, &mut std::io::sink());
        copy_pending(&r, &mut std::io::sink());
        let before = widen_for_create(&r).expect("widened");
        assert_eq!(nix::unistd::write(&w, &message).unwrap(), message.len());
        let mut drained = Vec::new();
        while drained.len() < message.len() {
            copy_pending(&r, &mut drained);
        }
        restore_size(&r, Some(before));
        assert_eq!(fcntl(&r, FcntlArg::F_GETPIPE_SZ).unwrap(), before);
    }

    #[test]
    fn pending_output_is_copied_without_blocking() {
        let (r, w) = pipe().expect("pipe");
        let line = b"t ERROR libcontainer::rootfs::mount: failed to mount: ENOTDIR\n";
        nix::unistd::write(&w, line).expect("write");
        let mut out = Vec::new();
        // The write end stays open: a blocking read would hang here.
        copy_pending(&r, &mut out);
        assert_eq!(out, line);
    }

    fn bundle(mounts: &str, rootfs_propagation: Option<&str>) -> BundleInfo {
        let propagation = rootfs_propagation
            .map(|p| format!(r#", "rootfsPropagation": "{p}""#))
            .unwrap_or_default();
        let json = format!(
            r#"{{"ociVersion": "1.0.2",
                "process": {{"args": ["sh"], "cwd": "/", "user": {{"uid": 0, "gid": 0}}}},
                "root": {{"path": "/run/berth/containers/c1/rootfs"}},
                "mounts": [{mounts}],
                "linux": {{"namespaces": [{{"type": "mount"}}]{propagation}}}}}"#
        );
        BundleInfo::from_spec(&serde_json::from_str(&json).expect("spec"))
    }

    const STATE: &str = "/run/berth";

    #[test]
    fn private_and_host_to_container_mounts_are_trimmed() {
        let b = bundle(
            r#"{"destination": "/etc/hosts", "source": "/run/berth/sandboxes/p1/hosts",
                "options": ["rbind", "rprivate"]},
               {"destination": "/data", "source": "/var/lib/kubelet/v",
                "options": ["rbind", "rslave"]}"#,
            Some("rslave"),
        );
        assert_eq!(
            trim_dir(Some(Path::new(STATE)), false, &b),
            Some(Path::new(STATE))
        );
        assert_eq!(trim_dir(None, false, &b), None);
        assert_eq!(trim_dir(Some(Path::new(STATE)), true, &b), None, "restore");
    }

    #[test]
    fn bidirectional_mounts_are_not_trimmed() {
        let shared_mount = bundle(
            r#"{"destination": "/data", "source": "/var/lib/kubelet/v",
                "options": ["rbind", "rshared"]}"#,
            None,
        );
        assert_eq!(trim_dir(Some(Path::new(STATE)), false, &shared_mount), None);
        let shared_rootfs = bundle("", Some("rshared"));
        assert_eq!(
            trim_dir(Some(Path::new(STATE)), false, &shared_rootfs),
            None
        );
    }

    #[test]
    fn propagation_under_the_state_dir_is_not_trimmed() {
        let b = bundle(
            r#"{"destination": "/x", "source": "/run/berth/sandboxes/p1/x",
                "options": ["rbind", "rslave"]}"#,
            None,
        );
        assert_eq!(trim_dir(Some(Path::new(STATE)), false, &b), None);
    }
}
