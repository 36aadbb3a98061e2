//! Interactive exec sessions: a process in the running container whose
//! stdio ends (or pty master) went to the client with the `session`
//! answer. The shim only keeps its pid: it answers `exited` when the
//! process is reaped, and kills it when the client's connection goes away
//! first, so a vanished client never leaks a process.

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::exec::{merge_env, resolve, ExecRequestError};
use berth_shim_api::protocol::{ExecRequest, SessionRequest};
use libcontainer::oci_spec::runtime::Process;

#[derive(Debug)]
pub struct InteractiveSession {
    pub pid: i32,
    /// The connection it belongs to; None once that closed.
    pub client: Option<u64>,
}

impl InteractiveSession {
    /// Kills the process and its process group (libcontainer makes it a
    /// session leader). Only called before it was reaped, so the pid is
    /// still ours.
    pub fn kill(&self) {
        let _ = kill(Pid::from_raw(-self.pid), Signal::SIGKILL);
        let _ = kill(Pid::from_raw(self.pid), Signal::SIGKILL);
    }
}

/// The session's process: as for `exec` ([`resolve`]), with a terminal
/// when asked. A terminal without `TERM` in the environment gets
/// `TERM=xterm`, as the container's own tty process does.
pub fn resolve_session(
    req: &SessionRequest,
    container: &Process,
) -> Result<Process, ExecRequestError> {
    let exec = ExecRequest {
        args: req.args.clone(),
        env: req.env.clone(),
        cwd: req.cwd.clone(),
        user: req.user.clone(),
        timeout_s: 0,
        max_output_bytes: None,
    };
    let mut p = resolve(&exec, container)?;
    if req.tty {
        p.set_terminal(Some(true));
        let env = p.env().clone().unwrap_or_default();
        if !env.iter().any(|e| e.starts_with("TERM=")) {
            p.set_env(Some(merge_env(&env, &["TERM=xterm".to_string()])));
        }
    }
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn container(env: &[&str]) -> Process {
        serde_json::from_value(serde_json::json!({
            "user": {"uid": 0, "gid": 0},
            "args": ["app"],
            "env": env,
            "cwd": "/",
        }))
        .expect("process")
    }

    fn request(tty: bool) -> SessionRequest {
        SessionRequest {
            args: vec!["sh".into()],
            env: vec!["A=1".into()],
            cwd: None,
            user: None,
            tty,
            stdin: true,
            stdout: true,
            stderr: !tty,
        }
    }

    #[test]
    fn tty_sessions_get_a_terminal_and_term() {
        let p = resolve_session(&request(true), &container(&["PATH=/bin"])).expect("resolve");
        assert_eq!(p.terminal(), Some(true));
        assert_eq!(
            p.env().as_deref(),
            Some(&["PATH=/bin".to_string(), "A=1".into(), "TERM=xterm".into()][..])
        );
        // the container's TERM stays
        let p = resolve_session(&request(true), &container(&["TERM=vt100"])).expect("resolve");
        assert_eq!(
            p.env().as_deref(),
            Some(&["TERM=vt100".to_string(), "A=1".into()][..])
        );
    }

    #[test]
    fn pipe_sessions_get_no_terminal() {
        let p = resolve_session(&request(false), &container(&[])).expect("resolve");
        assert_eq!(p.terminal(), Some(false));
        assert_eq!(p.env().as_deref(), Some(&["A=1".to_string()][..]));
        let mut empty = request(false);
        empty.args.clear();
        assert_eq!(
            resolve_session(&empty, &container(&[])),
            Err(ExecRequestError::NoArgs)
        );
    }
}
