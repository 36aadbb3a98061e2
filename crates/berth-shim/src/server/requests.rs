//! The answers to `start`, `kill`, `state`, `reopen-log` and `exec`.

use std::time::{Duration, Instant};

use nix::errno::Errno;

use super::{error_chain, send_signal, PendingExec, Server};
use crate::exec::{resolve, ExecSession};
use crate::protocol::{ErrorCode, ExecRequest, Response, SignalArg, StateInfo, Status};
use crate::runtime::{self, ExecProcess};
use crate::setup::{pipe, SetupError};
use crate::signal::signal_number;
use crate::timestamp;

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
        }
    }

    pub(super) fn start(&mut self) -> Response {
        if self.init.exited.is_some() {
            return Response::error(ErrorCode::NotRunning, "the container's init has exited");
        }
        if self.status() != Status::Created {
            return Response::error(ErrorCode::InvalidState, "the container was already started");
        }
        match self.container.start() {
            Ok(()) => {
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
            return match runtime::kill_all(&mut self.container, sig) {
                Ok(()) => Response::Ok,
                Err(e) => Response::error(ErrorCode::Failed, format!("kill: {}", error_chain(&e))),
            };
        }
        if self.init.exited.is_some() {
            return Response::error(ErrorCode::NotRunning, "the container's init has exited");
        }
        // The init is our child and not reaped yet, so its pid cannot have
        // been reused.
        match send_signal(self.init.pid, sig) {
            Ok(()) | Err(Errno::ESRCH) => Response::Ok,
            Err(e) => Response::error(ErrorCode::Failed, format!("kill: {e}")),
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
        if self.init.exited.is_some() || self.status() != Status::Running {
            return Some(Response::error(
                ErrorCode::NotRunning,
                "the container is not running",
            ));
        }
        let process = match resolve(&req, &self.bundle.process) {
            Ok(p) => ExecProcess {
                process: p,
                seccomp: self.bundle.seccomp.clone(),
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
        match self.cfg.container.exec(&process, child_stdio) {
            Ok(pid) => {
                tracing::info!(pid, args = ?req.args, "exec started");
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
