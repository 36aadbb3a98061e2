//! The container's life as the shim sees it: children exit, the init's
//! exit is published once its output has ended, shutdown removes it.

use std::time::Instant;

use super::{error_chain, Exited, Server, INIT_OUTPUT_GRACE, SIGKILL};
use crate::backend::BackendError;
use crate::daemon::FINAL_FLUSH;
use crate::output::OutputPipe;
use crate::timestamp;
use berth_atomic_file::write_json_atomic;
use berth_shim_api::protocol::{ErrorCode, ExitRecord, Response};

impl Server {
    /// Signals every process of the container.
    pub(super) fn kill_all(&mut self, signal: i32) -> Result<(), BackendError> {
        self.backend.kill(signal, true)
    }

    pub(super) fn on_sigchld(&mut self) {
        let now = Instant::now();
        for r in self.children.reap() {
            self.backend.forget_exec(r.pid);
            if r.pid == self.init.pid && self.init.exited.is_none() {
                let code = self.backend.init_exit_code(r.exit_code);
                self.on_init_exit(code, now);
            } else if let Some(e) = self
                .execs
                .iter_mut()
                .find(|e| e.session.pid() == r.pid && !e.session.has_exited())
            {
                e.session.on_exit(r.exit_code, now);
            } else if let Some(i) = self.sessions.iter().position(|s| s.pid == r.pid) {
                let session = self.sessions.remove(i);
                tracing::info!(pid = r.pid, code = r.exit_code, "session process exited");
                if let Some(c) = session.client.and_then(|id| self.clients.get_mut(&id)) {
                    c.set_busy(false);
                    c.send(&Response::Exited {
                        exit_code: r.exit_code,
                    });
                }
            } else {
                tracing::debug!(pid = r.pid, code = r.exit_code, "reaped an orphan");
            }
        }
    }

    pub(super) fn on_init_exit(&mut self, code: i32, now: Instant) {
        tracing::info!(code, "container init exited");
        // While the cgroup may still be there (see crate::oom).
        self.oom.refresh();
        self.init.exited = Some(Exited {
            code,
            at: timestamp::now(),
            drain_until: now + INIT_OUTPUT_GRACE,
        });
        if !self.bundle.own_pid_namespace {
            // nothing kills the rest of the container with its init
            if let Err(e) = self.kill_all(SIGKILL) {
                tracing::warn!(error = %error_chain(&e), "killing the rest of the container");
            }
        }
        let attach = &mut self.attach;
        for o in &mut self.outputs {
            o.pump_all(&mut self.log, &mut |s, d| attach.broadcast(s, d));
        }
    }

    /// Writes the exit file once the output has ended (or its grace passed):
    /// whoever sees the exit also finds the container's last log lines.
    pub(super) fn publish_exit(&mut self, now: Instant) {
        let Some(ex) = &self.init.exited else { return };
        if self.init.record.is_some() {
            return;
        }
        if !(self.outputs.iter().all(OutputPipe::is_eof) || now >= ex.drain_until) {
            return;
        }
        let oom_killed = self.oom.killed_since(self.oom_baseline);
        let record = ExitRecord {
            exit_code: ex.code,
            exited_at: ex.at.clone(),
            oom_killed,
            unknown: false,
        };
        if let Err(err) = write_json_atomic(&self.cfg.files.exit(), &record, 0o644) {
            tracing::error!(%err, "cannot write the exit file");
        }
        tracing::info!(?record, "container stopped");
        self.attach.container_exited(record.exit_code);
        self.init.record = Some(record);
    }

    pub(super) fn begin_shutdown(&mut self, client: u64) -> Option<Response> {
        if self.shutdown.is_some() {
            return Some(Response::error(
                ErrorCode::InvalidState,
                "shutdown already in progress",
            ));
        }
        tracing::info!("shutdown requested");
        self.shutdown = Some(Some(client));
        for e in &mut self.execs {
            e.session.kill();
        }
        for s in &self.sessions {
            s.kill();
        }
        if self.init.exited.is_none() {
            if let Err(e) = self.backend.kill(SIGKILL, false) {
                tracing::warn!(error = %error_chain(&e), "killing the init");
            }
            if let Err(e) = self.kill_all(SIGKILL) {
                tracing::warn!(error = %error_chain(&e), "killing the container");
            }
        }
        None
    }

    /// Once the container has stopped: remove it and leave.
    pub(super) fn progress_shutdown(&mut self) {
        let Some(client) = self.shutdown else { return };
        if self.init.record.is_none() {
            return;
        }
        let result = self.backend.delete(true);
        if result.is_ok() {
            // gone before the answer arrives: whoever reads "ok" finds no socket
            let _ = std::fs::remove_file(self.cfg.files.socket());
            let _ = std::fs::remove_file(self.cfg.files.attach_socket());
        }
        let conn = client.and_then(|id| self.clients.get_mut(&id));
        match result {
            Ok(()) => {
                tracing::info!("container deleted; exiting");
                if let Some(c) = conn {
                    c.set_busy(false);
                    c.send(&Response::Ok);
                    c.flush_blocking(FINAL_FLUSH);
                }
                self.exit_with = Some(0);
            }
            Err(e) => {
                let msg = format!("delete: {}", error_chain(&e));
                tracing::error!(%msg, "shutdown failed");
                if let Some(c) = conn {
                    c.set_busy(false);
                    c.send(&Response::error(ErrorCode::Failed, msg));
                }
                self.shutdown = None;
            }
        }
    }
}
