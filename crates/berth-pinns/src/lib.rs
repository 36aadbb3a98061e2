//! berth-pinns: run by berthd (fork+exec, so berthd itself never forks) to
//! create a pod's namespaces. Like CRI-O's `pinns`, it unshares the
//! namespaces asked for, brings up the new network namespace's `lo`, sets
//! the hostname and namespaced sysctls inside them, and bind-mounts each
//! namespace onto a file so it outlives every process. For a pod-wide PID
//! namespace it also starts the pod's infra process: PID 1 of that
//! namespace, which reaps zombies, holds no capabilities and lives in an
//! empty root of its own.
//!
//! With `--uid-map` and `--gid-map` it first makes a user namespace with
//! those mappings, and the other namespaces inside it, so that the pod's
//! user namespace owns them (see [`userns`]).
//!
//! On success it prints the infra pid (or 0) on stdout and exits 0.

pub mod infra;
pub mod loopback;
pub mod sysctl;
pub mod userns;

use std::fs::File;
use std::path::{Path, PathBuf};

use nix::mount::{mount, MsFlags};
use nix::sched::{unshare, CloneFlags};

/// What to create.
#[derive(Debug, clap::Parser)]
#[command(name = "berth-pinns")]
pub struct Options {
    /// Directory where the namespace files are pinned (`user`, `net`, `ipc`,
    /// `uts`, `pid`).
    #[arg(long)]
    pub dir: PathBuf,
    /// A new network namespace, its `lo` up.
    #[arg(long)]
    pub net: bool,
    #[arg(long)]
    pub ipc: bool,
    #[arg(long)]
    pub uts: bool,
    /// A new PID namespace with an infra process as its PID 1.
    #[arg(long)]
    pub pid: bool,
    /// Hostname to set in the new UTS namespace.
    #[arg(long)]
    pub hostname: Option<String>,
    /// `key=value`, applied inside the new namespaces.
    #[arg(long = "sysctl")]
    pub sysctls: Vec<String>,
    /// Empty directory the infra process uses as its root.
    #[arg(long)]
    pub infra_root: Option<PathBuf>,
    /// User and group the infra process runs as.
    #[arg(long, default_value_t = 65535)]
    pub infra_id: u32,
    /// A new user namespace with this uid mapping, `container:host:length`
    /// (needs `--gid-map`); the other namespaces are made inside it.
    #[arg(long)]
    pub uid_map: Option<String>,
    /// The new user namespace's gid mapping, `container:host:length`.
    #[arg(long)]
    pub gid_map: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum PinError {
    #[error("{what}: {source}")]
    Sys { what: String, source: nix::Error },
    #[error("{what}: {source}")]
    Io {
        what: String,
        source: std::io::Error,
    },
    #[error("{0}")]
    Invalid(String),
    /// A sysctl that is not `key=value` with a well-formed key.
    #[error("{0}")]
    BadSysctl(String),
    /// The kernel refused a sysctl: no such key, or a value it rejects.
    #[error("{what}: {source}")]
    Sysctl {
        what: String,
        source: std::io::Error,
    },
}

/// The exit status for an error that is the request's rather than the
/// host's: a sysctl that is malformed or that the kernel refuses. berthd
/// tells these from host failures by it.
pub const EXIT_REFUSED: i32 = 2;

impl PinError {
    /// [`EXIT_REFUSED`] for errors of the request, 1 otherwise.
    pub fn exit_code(&self) -> i32 {
        match self {
            PinError::BadSysctl(_) | PinError::Sysctl { .. } => EXIT_REFUSED,
            PinError::Sys { .. } | PinError::Io { .. } | PinError::Invalid(_) => 1,
        }
    }
}

pub(crate) fn sys(what: impl Into<String>) -> impl FnOnce(nix::Error) -> PinError {
    let what = what.into();
    move |source| PinError::Sys { what, source }
}

/// Does the whole job; returns the infra pid, or 0 without one.
pub fn run(options: &Options) -> Result<i32, PinError> {
    let sysctls = options
        .sysctls
        .iter()
        .map(|text| sysctl::parse(text))
        .collect::<Result<Vec<_>, _>>()?;
    if options.pid && options.infra_root.is_none() {
        return Err(PinError::Invalid("--pid needs --infra-root".into()));
    }
    if options.hostname.is_some() && !options.uts {
        return Err(PinError::Invalid("--hostname needs --uts".into()));
    }
    match (&options.uid_map, &options.gid_map) {
        (None, None) => {}
        (Some(uid_map), Some(gid_map)) => {
            let maps = userns::Maps {
                uid: userns::parse_map(uid_map)?,
                gid: userns::parse_map(gid_map)?,
            };
            return userns::run(options, &sysctls, &maps);
        }
        _ => {
            return Err(PinError::Invalid(
                "--uid-map and --gid-map go together".into(),
            ))
        }
    }
    let infra = make_namespaces(options, &sysctls)?;
    if let Err(err) = pin_namespaces(options, "self", infra) {
        kill_infra(infra);
        return Err(err);
    }
    Ok(infra)
}

/// SIGKILLs the infra process a failed run started (0: none).
pub(crate) fn kill_infra(infra: i32) {
    if infra > 0 {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(infra),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}

/// Unshares the namespaces asked for (all but user), starts the infra
/// process and sets the hostname and sysctls inside them; returns the
/// infra pid, or 0.
fn make_namespaces(options: &Options, sysctls: &[sysctl::Sysctl]) -> Result<i32, PinError> {
    let mut flags = CloneFlags::empty();
    for (asked, flag) in [
        (options.net, CloneFlags::CLONE_NEWNET),
        (options.ipc, CloneFlags::CLONE_NEWIPC),
        (options.uts, CloneFlags::CLONE_NEWUTS),
        (options.pid, CloneFlags::CLONE_NEWPID),
    ] {
        if asked {
            flags |= flag;
        }
    }
    unshare(flags).map_err(sys("unshare"))?;
    if options.net {
        loopback::up()?;
    }
    if let Some(hostname) = &options.hostname {
        nix::unistd::sethostname(hostname).map_err(sys("sethostname"))?;
    }
    let infra = if options.pid {
        let root = options.infra_root.as_deref().unwrap_or(Path::new("/"));
        infra::start(root, options.infra_id)?
    } else {
        0
    };
    if options.uid_map.is_some() {
        // Last, as it gives up host root (see userns).
        userns::become_root()?;
    }
    let applied = sysctls.iter().try_for_each(|setting| setting.apply());
    if let Err(err) = applied {
        kill_infra(infra);
        return Err(err);
    }
    Ok(infra)
}

/// Pins the namespaces of `/proc/<process>` that were asked for, and the
/// infra process's PID namespace.
fn pin_namespaces(options: &Options, process: &str, infra: i32) -> Result<(), PinError> {
    for (asked, name) in [
        (options.uid_map.is_some(), "user"),
        (options.net, "net"),
        (options.ipc, "ipc"),
        (options.uts, "uts"),
    ] {
        if asked {
            pin(
                &format!("/proc/{process}/ns/{name}"),
                &options.dir.join(name),
            )?;
        }
    }
    if options.pid {
        pin(&format!("/proc/{infra}/ns/pid"), &options.dir.join("pid"))?;
    }
    Ok(())
}

/// Bind-mounts a namespace file onto `target` (created empty first).
fn pin(source: &str, target: &Path) -> Result<(), PinError> {
    File::create(target).map_err(|source| PinError::Io {
        what: format!("create {}", target.display()),
        source,
    })?;
    mount(
        Some(source),
        target,
        None::<&str>,
        MsFlags::MS_BIND,
        None::<&str>,
    )
    .map_err(sys(format!("bind {source} on {}", target.display())))
}
