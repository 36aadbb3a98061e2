//! The answers to `start`, `kill`, `state`, `reopen-log`, `exec` and
//! `session`.

use std::path::Path;
use std::time::{Duration, Instant};

use super::{error_chain, send_signal, PendingExec, Server};
use crate::backend::{BackendError, ExecProcess};
use std::os::fd::OwnedFd;

use crate::console::ConsoleSocket;
use crate::exec::{resolve, ExecSession};
use crate::session::{resolve_session, InteractiveSession};
use crate::setup::{pipe, SetupError};
use crate::signal::signal_number;
use crate::timestamp;
use berth_shim_api::protocol::{
    CheckpointRequest, ErrorCode, ExecRequest, Response, RunState, SessionFd, SessionRequest,
    SignalArg, StateInfo,
};

/// An interactive exec that has started: its pid, whether it started from
/// a trimmed mount table, and the shim's ends of its stdio.
struct StartedSession {
    pid: i32,
    trimmed: bool,
    fds: Vec<(SessionFd, OwnedFd)>,
}

impl Server {
    pub(super) fn state(&self) -> StateInfo {
        let rec = self.init.record.as_ref();
        StateInfo {
            id: self.cfg.container.id.clone(),
            status: self.status(),
            pid: self.init.pid,
            created_at: self.init.created_at.clone(),
            started_at: self.init.started_at.clone(),
            exit_code: rec.map(|r| r.exit_code),
            exited_at: rec.map(|r| r.exited_at.clone()),
            oom_killed: rec.is_some_and(|r| r.oom_killed),
            unknown: false,
        }
    }

    pub(super) fn start(&mut self) -> Response {
        if self.init.exited.is_some() {
            return Response::error(ErrorCode::NotRunning, "the container's init has exited");
        }
        if self.status() != RunState::Created {
            return Response::error(ErrorCode::InvalidState, "the container was already started");
        }
        if let Some(dir) = self.cfg.restore.clone() {
            return self.restore(&dir);
        }
        match self.backend.start() {
            Ok(()) => {
                if let Some(waiter) = self.backend.init_waiter() {
                    // Reaped as the init from now on (`shares_init`).
                    tracing::info!(waiter, "the runtime's waiter stands in for the init");
                    self.init.pid = waiter;
                }
                self.init.started_at = Some(timestamp::now());
                tracing::info!("container started");
                Response::Ok
            }
            Err(e) => Response::error(ErrorCode::Failed, format!("start: {}", error_chain(&e))),
        }
    }

    pub(super) fn kill(&mut self, signal: &SignalArg, all: bool) -> Response {
        let sig = match signal_number(signal) {
            Ok(s) => s,
            Err(e) => return Response::error(ErrorCode::BadRequest, e.to_string()),
        };
        if all {
            return match self.kill_all(sig) {
                Ok(()) => Response::Ok,
                Err(e) => Response::error(ErrorCode::Failed, format!("kill: {}", error_chain(&e))),
            };
        }
        if self.init.exited.is_some() {
            return Response::error(ErrorCode::NotRunning, "the container's init has exited");
        }
        match self.backend.kill(sig, false) {
            Ok(()) => Response::Ok,
            Err(e) => Response::error(ErrorCode::Failed, format!("kill: {}", error_chain(&e))),
        }
    }

    /// `start` of a container created with `--restore`: CRIU restores the
    /// dumped processes into it, and the placeholder init libcontainer
    /// created (never started) is killed and reaped here, so the exit the
    /// loop records is the restored init's.
    fn restore(&mut self, dir: &std::path::Path) -> Response {
        let Some(stdio) = self.restore_stdio.as_ref() else {
            return Response::error(ErrorCode::InvalidState, "nothing is left to restore");
        };
        let placeholder = self.init.pid;
        let input = crate::checkpoint::RestoreInput {
            images_dir: &dir.join("checkpoint"),
            work_dir: dir,
            bundle: &self.cfg.bundle,
            placeholder,
            stdio,
        };
        tracing::info!(from = %dir.display(), "restoring");
        let pid = match self.backend.restore(&input) {
            Ok(pid) => pid,
            Err(err) => {
                let message = error_chain(&err);
                tracing::error!(%message, "restore failed");
                return Response::error(ErrorCode::Failed, message);
            }
        };
        // Only the restored processes hold the container's pipes now.
        self.restore_stdio = None;
        let _ = send_signal(placeholder, 9);
        let _ = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(placeholder), None);
        self.init.pid = pid;
        if let Err(err) = berth_atomic_file::write_atomic(
            &self.cfg.files.pid(),
            pid.to_string().as_bytes(),
            0o644,
        ) {
            tracing::warn!(%err, "cannot rewrite the pid file");
        }
        self.init.started_at = Some(timestamp::now());
        tracing::info!(pid, "container restored");
        Response::Ok
    }

    /// `checkpoint`: blocks the loop while CRIU dumps; the container is
    /// frozen meanwhile, so it produces no output to drain.
    pub(super) fn checkpoint(&mut self, req: &CheckpointRequest) -> Response {
        if self.init.exited.is_some() || self.status() != RunState::Running {
            return Response::error(ErrorCode::NotRunning, "the container is not running");
        }
        tracing::info!(images = ?req.images_dir, "checkpointing");
        match self.backend.checkpoint(&req.images_dir, &req.work_dir) {
            Ok(()) => {
                tracing::info!("checkpointed; the container runs on");
                Response::Ok
            }
            Err(err) => {
                let message = error_chain(&err);
                tracing::error!(%message, "checkpoint failed");
                Response::error(ErrorCode::Failed, message)
            }
        }
    }

    pub(super) fn reopen_log(&mut self) -> Response {
        if self.init.record.is_some() {
            return Response::error(ErrorCode::NotRunning, "the container is not running");
        }
        match self.log.reopen() {
            Ok(()) => Response::Ok,
            Err(e) => Response::error(
                ErrorCode::Failed,
                format!("reopening {:?}: {e}", self.log.path()),
            ),
        }
    }

    pub(super) fn exec(&mut self, client: u64, req: ExecRequest) -> Option<Response> {
        if self.init.exited.is_some() || self.status() != RunState::Running {
            return Some(Response::error(
                ErrorCode::NotRunning,
                "the container is not running",
            ));
        }
        let process = match resolve(&req, &self.bundle.process) {
            Ok(p) => ExecProcess {
                process: p,
                json_path: self.cfg.files.exec_process(),
            },
            Err(e) => return Some(Response::error(ErrorCode::BadRequest, e.to_string())),
        };
        let stdio = (|| {
            let (out_r, out_w) = pipe()?;
            let (err_r, err_w) = pipe()?;
            let null =
                std::fs::File::open("/dev/null").map_err(|e| SetupError::Sys("/dev/null", e))?;
            Ok::<_, SetupError>((out_r, err_r, [null.into(), out_w, err_w]))
        })();
        let (out_r, err_r, child_stdio) = match stdio {
            Ok(s) => s,
            Err(e) => return Some(Response::error(ErrorCode::Failed, e.to_string())),
        };
        match self.exec_process(&process, child_stdio, None) {
            Ok((pid, trimmed)) => {
                tracing::info!(pid, args = ?req.args, trimmed, "exec started");
                let timeout = (req.timeout_s > 0).then(|| Duration::from_secs(req.timeout_s));
                let session = ExecSession::new(pid, out_r, err_r, timeout, req.max_output_bytes);
                self.execs.push(PendingExec {
                    session,
                    client: Some(client),
                });
                None
            }
            Err(e) => Some(Response::error(
                ErrorCode::Failed,
                format!("exec: {}", error_chain(&e)),
            )),
        }
    }

    /// `session`: starts the process and hands the client its stdio ends
    /// with the answer; `exited` follows from [`Server::on_sigchld`].
    pub(super) fn start_session(&mut self, client: u64, req: SessionRequest) -> Option<Response> {
        if self.init.exited.is_some() || self.status() != RunState::Running {
            return Some(Response::error(
                ErrorCode::NotRunning,
                "the container is not running",
            ));
        }
        let process = match resolve_session(&req, &self.bundle.process) {
            Ok(p) => ExecProcess {
                process: p,
                json_path: self.cfg.files.exec_process(),
            },
            Err(e) => return Some(Response::error(ErrorCode::BadRequest, e.to_string())),
        };
        let started = if req.tty {
            self.start_tty_session(&process)
        } else {
            self.start_pipe_session(&process, &req)
        };
        let StartedSession { pid, trimmed, fds } = match started {
            Ok(s) => s,
            Err(msg) => return Some(Response::error(ErrorCode::Failed, msg)),
        };
        tracing::info!(pid, args = ?req.args, tty = req.tty, trimmed, "session started");
        let (names, fds): (Vec<SessionFd>, Vec<OwnedFd>) = fds.into_iter().unzip();
        self.sessions.push(InteractiveSession {
            pid,
            client: Some(client),
        });
        match self.clients.get_mut(&client) {
            Some(c) => c.send_with_fds(&Response::Session { pid, fds: names }, fds),
            None => {
                // cannot happen (the request came from it); never leak the process
                if let Some(s) = self.sessions.last_mut() {
                    s.kill();
                    s.client = None;
                }
            }
        }
        None
    }

    /// Starts an exec'd process in the container; returns its pid and
    /// whether it was started from a trimmed mount table. A runtime's exec
    /// (libcontainer's) builds a cgroup v1 manager that reads the whole
    /// table once per controller, so with berthd's state dir on a mount of
    /// its own it runs in a table trimmed as for the create (`mount_view`);
    /// the process itself joins the container's mount namespace either way.
    fn exec_process(
        &mut self,
        process: &ExecProcess,
        stdio: [OwnedFd; 3],
        console: Option<&Path>,
    ) -> Result<(i32, bool), BackendError> {
        // Born in every hierarchy's cgroup of the container, as the init
        // (cgroup_dirs): the shim stands there while the runtime forks it.
        let backend = &mut self.backend;
        let exec = || match &self.cfg.cgroup_dirs {
            Some(dirs) => dirs
                .with_extras(|| backend.exec(process, stdio, console))
                .map_err(|e| BackendError::io("joining the container's cgroups", e))?,
            None => backend.exec(process, stdio, console),
        };
        let Some(state_dir) = self.cfg.trim_mounts.as_deref() else {
            return exec().map(|pid| (pid, false));
        };
        let kept = crate::mount_view::kept_dirs(state_dir, &self.bundle.host_paths);
        let (started, trimmed) =
            crate::mount_view::run_trimmed(state_dir, &kept, exec).map_err(|err| {
                tracing::error!(%err, "after an exec");
                BackendError::Message(err.to_string())
            })?;
        started.map(|pid| (pid, trimmed))
    }

    fn start_tty_session(&mut self, process: &ExecProcess) -> Result<StartedSession, String> {
        let console = ConsoleSocket::bind(&self.cfg.files.exec_console_socket())
            .map_err(|e| format!("binding the console socket: {e}"))?;
        let null = || {
            std::fs::File::open("/dev/null")
                .map(OwnedFd::from)
                .map_err(|e| format!("/dev/null: {e}"))
        };
        let stdio = [null()?, null()?, null()?];
        let (pid, trimmed) = self
            .exec_process(process, stdio, Some(console.path()))
            .map_err(|e| format!("exec: {}", error_chain(&e)))?;
        match console.receive_master() {
            Ok(master) => Ok(StartedSession {
                pid,
                trimmed,
                fds: vec![(SessionFd::Pty, master)],
            }),
            Err(e) => {
                InteractiveSession { pid, client: None }.kill();
                Err(format!("receiving the pty master: {e}"))
            }
        }
    }

    fn start_pipe_session(
        &mut self,
        process: &ExecProcess,
        req: &SessionRequest,
    ) -> Result<StartedSession, String> {
        let mut ours = Vec::new();
        let mut child = Vec::new();
        for (wanted, which) in [
            (req.stdin, SessionFd::Stdin),
            (req.stdout, SessionFd::Stdout),
            (req.stderr, SessionFd::Stderr),
        ] {
            if !wanted {
                let null = std::fs::File::options()
                    .read(which == SessionFd::Stdin)
                    .write(which != SessionFd::Stdin)
                    .open("/dev/null")
                    .map_err(|e| format!("/dev/null: {e}"))?;
                child.push(OwnedFd::from(null));
                continue;
            }
            // both ends blocking: the shim never touches them, the
            // process expects blocking stdio, and the client sets its own
            let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
                .map_err(|e| format!("pipe: {e}"))?;
            let (mine, theirs) = if which == SessionFd::Stdin {
                (w, r)
            } else {
                (r, w)
            };
            ours.push((which, mine));
            child.push(theirs);
        }
        let [stdin, stdout, stderr]: [OwnedFd; 3] =
            child.try_into().map_err(|_| "session stdio".to_string())?;
        let (pid, trimmed) = self
            .exec_process(process, [stdin, stdout, stderr], None)
            .map_err(|e| format!("exec: {}", error_chain(&e)))?;
        Ok(StartedSession {
            pid,
            trimmed,
            fds: ours,
        })
    }

    pub(super) fn finish_execs(&mut self, now: Instant) {
        let mut i = 0;
        while i < self.execs.len() {
            if !self.execs[i].session.is_done(now) {
                i += 1;
                continue;
            }
            let done = self.execs.remove(i);
            let result = done.session.into_result();
            tracing::info!(
                exit_code = result.exit_code,
                timed_out = result.timed_out,
                "exec finished"
            );
            if let Some(c) = done.client.and_then(|id| self.clients.get_mut(&id)) {
                c.set_busy(false);
                c.send(&Response::Exec(result));
            }
        }
    }
}
