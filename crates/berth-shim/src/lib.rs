//! berth-shim: one per container, started by berthd with fork+exec.
//!
//! It creates the container from the bundle berthd prepared, through its
//! runtime backend ([`backend`]: libcontainer in-process by default),
//! reports readiness on stdout, and then lives on as a daemon:
//! parent and child subreaper of the container's init, it copies the
//! container's output into the CRI log file, runs exec sessions, writes the
//! exit file when the init exits, and answers a small JSON-lines protocol on
//! `<dir>/shim.sock` (see [`berth_shim_api::protocol`]). Attachers connect to
//! `<dir>/attach.sock` (see [`berth_shim_api::attach`]). It never depends on berthd being
//! alive. Single-threaded, no async runtime: libcontainer forks with raw
//! `clone3` and must not be called from a multi-threaded process.

pub mod attach_hub;
pub mod backend;
pub mod bundle;
pub mod cgroup_dirs;
pub mod checkpoint;
pub mod cli;
pub mod conn;
pub mod console;
pub mod crilog;
pub mod daemon;
pub mod exec;
pub mod exec_userns;
pub mod logfile;
pub mod mount_view;
pub mod oom;
pub mod output;
pub mod own_oom_score;
pub mod reaper;
pub mod server;
pub mod session;
pub mod setup;
pub mod signal;
// The exit file's timestamps are written by berthd too.
pub use berth_shim_api::timestamp;

use std::os::fd::AsFd;

use crate::backend::libcontainer::LibcontainerBackend;
use crate::backend::oci_cli::OciCliBackend;
use crate::backend::RuntimeBackend;
use crate::cli::Args;
use crate::reaper::SigchldChildren;
use crate::server::{error_chain, Server};
use crate::setup::{SetupError, ShimConfig};
use berth_shim_api::protocol::Ready;

/// Runs the shim; returns the process exit code. In the launcher (the
/// process berthd started) it returns once the container is created or
/// creating it failed; in the daemon, after `shutdown`.
pub fn run(args: &Args) -> i32 {
    if let Some(parent) = args.parent_pid {
        if let Err(launcher_exit) = daemon::die_with(parent) {
            return launcher_exit;
        }
    }
    let cfg = match ShimConfig::from_args(args) {
        Ok(c) => c,
        Err(e) => return daemon::report_failure(e.to_string()),
    };
    let ready = match daemon::fork_daemon() {
        Ok(pipe) => pipe,
        Err(launcher_exit) => return launcher_exit,
    };
    // From here on: the daemon.
    if let Err(e) = daemon::detach(&cfg.files.log()) {
        ready.send(&failed(format!("detaching: {e}")));
        return 1;
    }
    init_tracing();
    let shim_pid = std::process::id() as i32;
    tracing::info!(id = %cfg.container.id, shim_pid, "berth-shim starting");
    if let Err(e) = berth_atomic_file::write_atomic(
        &cfg.files.shim_pid(),
        shim_pid.to_string().as_bytes(),
        0o644,
    ) {
        tracing::warn!(%e, "cannot write shim.pid");
    }
    match start(cfg) {
        Ok(server) => {
            let pid = server.init_pid();
            ready.send(&Ready {
                ok: true,
                pid: Some(pid),
                shim_pid: Some(shim_pid),
                error: None,
            });
            server.run()
        }
        Err(e) => {
            let msg = error_chain(&e);
            tracing::error!(%msg, "creating the container failed");
            ready.send(&failed(msg));
            1
        }
    }
}

fn start(cfg: ShimConfig) -> Result<Server, SetupError> {
    let sigfd = setup::sigchld_fd()?;
    let created = setup::create(&cfg, |bundle| match &cfg.runtime_binary {
        Some(binary) => Box::new(OciCliBackend::new(
            binary.clone(),
            cfg.container.clone(),
            bundle,
            cfg.files.dir(),
        )) as Box<dyn RuntimeBackend>,
        None => Box::new(LibcontainerBackend::new(
            cfg.container.clone(),
            bundle,
            cfg.cgroup_dirs.clone(),
        )),
    })?;
    let listeners =
        setup::listen(&cfg.files).and_then(|l| setup::listen_attach(&cfg.files).map(|a| (l, a)));
    let (listener, attach) = match listeners {
        Ok(l) => l,
        Err(e) => {
            let mut backend = created.backend;
            if let Err(d) = backend.delete(true) {
                tracing::error!(error = %error_chain(&d), "removing the container");
            }
            return Err(e);
        }
    };
    let children = Box::new(SigchldChildren::new(sigfd));
    Ok(Server::new(cfg, created, listener, attach, children))
}

fn failed(error: String) -> Ready {
    Ready {
        ok: false,
        pid: None,
        shim_pid: None,
        error: Some(error),
    }
}

/// Logs go to `<dir>/shim.log` (stderr by now) through a close-on-exec
/// copy of stderr: libcontainer's intermediate and init processes inherit
/// this subscriber, and after their stderr became the container's pipe
/// they would write into the container's log, and block once its 64 KiB
/// filled while nobody reads it before create returns. `BERTH_SHIM_LOG`
/// takes a tracing filter. The default leaves out libcgroups' warning, on
/// every create, about each v1 controller this host lacks.
fn init_tracing() {
    let filter =
        tracing_subscriber::EnvFilter::try_from_env("BERTH_SHIM_LOG").unwrap_or_else(|_| {
            tracing_subscriber::EnvFilter::new("info,libcgroups::v1::manager=error")
        });
    let log = std::io::stderr()
        .as_fd()
        .try_clone_to_owned()
        .map(std::fs::File::from);
    let Ok(log) = log else {
        return;
    };
    let log: &'static std::fs::File = Box::leak(Box::new(log));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(move || log)
        .with_ansi(false)
        .try_init();
}
