//! The shim's wire types: the socket protocol, the readiness line and the
//! exit file. berthd depends on this crate and use these types directly.
//!
//! Socket protocol: JSON lines over a unix stream socket (`<dir>/shim.sock`).
//! The client writes one request per line; the shim answers each with one
//! response line, in order. A connection may carry any number of requests.
//!
//! ```text
//! → {"op":"start"}
//! ← {"result":"ok"}
//! → {"op":"kill","signal":"SIGTERM"}
//! ← {"result":"ok"}
//! → {"op":"state"}
//! ← {"result":"state","id":"c1","status":"stopped","pid":4242,"exit_code":143,...}
//! → {"op":"checkpoint","images_dir":"/w/checkpoint","work_dir":"/w"}
//! ← {"result":"ok"}
//! → {"op":"exec","args":["echo","hi"],"timeout_s":5}
//! ← {"result":"exec","exit_code":0,"stdout":"aGkK","stderr":"","timed_out":false,...}
//! → {"op":"nope"}
//! ← {"result":"error","code":"bad_request","message":"..."}
//! ```
//!
//! An interactive exec session owns its connection:
//!
//! ```text
//! → {"op":"session","args":["sh"],"tty":true,"stdin":true,"stdout":true}
//! ← {"result":"session","pid":4243,"fds":["pty"]}      (+ the fds, SCM_RIGHTS)
//!   ... the client reads and writes the process's stdio through the fds ...
//! ← {"result":"exited","exit_code":0}
//! ```
//!
//! The fds travel with the first byte of the `session` line, in the order
//! `fds` names them. Closing the connection before `exited` kills the
//! process. Attach has its own socket and framing: see [`crate::attach`].
//!
//! Unknown fields are ignored, so either side can add optional ones.

use serde::{Deserialize, Serialize};

/// One request line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "kebab-case")]
pub enum Request {
    /// Start the created container (libcontainer `Container::start`).
    Start,
    /// Send a signal to the init process, or with `all` to every process
    /// in the container's cgroup.
    Kill {
        signal: SignalArg,
        #[serde(default)]
        all: bool,
    },
    /// Report the container's state.
    State,
    /// Reopen the CRI log file at its path (kubelet rotated it).
    ReopenLog,
    /// Run a process in the running container and collect its output.
    Exec(ExecRequest),
    /// Run a process in the running container and hand its stdio (or its
    /// pty master) to the client; answered twice: `session`, then `exited`.
    Session(SessionRequest),
    /// Kill the container if it still runs, wait for it, remove its
    /// libcontainer state and cgroup, answer, and exit.
    Shutdown,
    /// Dump the running container's processes with CRIU into `images_dir`
    /// and leave them running; CRIU's `dump.log` and `stats-dump` go to
    /// `work_dir`. The shim answers nothing else until CRIU is done.
    Checkpoint(CheckpointRequest),
}

/// `checkpoint`: where CRIU writes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointRequest {
    pub images_dir: std::path::PathBuf,
    pub work_dir: std::path::PathBuf,
}

/// A signal by number (`15`) or by name (`"SIGTERM"`, `"TERM"`, `"15"`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum SignalArg {
    Number(i32),
    Name(String),
}

/// `exec`: the process joins every namespace and the cgroup of the
/// container. Unset fields default to the container's own process spec.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecRequest {
    pub args: Vec<String>,
    /// `KEY=VALUE` entries, added to (and overriding) the container's env.
    #[serde(default)]
    pub env: Vec<String>,
    /// Absolute working directory; default: the container's.
    #[serde(default)]
    pub cwd: Option<String>,
    /// Default: the container's user.
    #[serde(default)]
    pub user: Option<ExecUser>,
    /// Seconds; 0 means no timeout. At the deadline the process gets SIGKILL.
    #[serde(default)]
    pub timeout_s: u64,
    /// Per stream; bytes beyond it are read and dropped. Default
    /// [`DEFAULT_EXEC_OUTPUT_LIMIT`].
    #[serde(default)]
    pub max_output_bytes: Option<usize>,
}

/// `session`: like `exec`, but interactive. A stream not asked for is
/// `/dev/null` for the process. With `tty` the process gets a new pty and
/// the client its master (no separate stderr).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionRequest {
    pub args: Vec<String>,
    #[serde(default)]
    pub env: Vec<String>,
    #[serde(default)]
    pub cwd: Option<String>,
    #[serde(default)]
    pub user: Option<ExecUser>,
    #[serde(default)]
    pub tty: bool,
    #[serde(default)]
    pub stdin: bool,
    #[serde(default)]
    pub stdout: bool,
    #[serde(default)]
    pub stderr: bool,
}

/// One fd handed over with a `session` answer: the client's end of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SessionFd {
    /// The pty master: read the output, write the input, resize.
    Pty,
    /// The write end of the process's stdin pipe.
    Stdin,
    /// The read end of the process's stdout pipe.
    Stdout,
    /// The read end of the process's stderr pipe.
    Stderr,
}

/// The default cap on each of exec's stdout and stderr (16 MiB, as CRI-O).
pub const DEFAULT_EXEC_OUTPUT_LIMIT: usize = 16 * 1024 * 1024;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecUser {
    pub uid: u32,
    pub gid: u32,
    #[serde(default)]
    pub additional_gids: Vec<u32>,
}

/// One response line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "result", rename_all = "kebab-case")]
pub enum Response {
    Ok,
    State(StateInfo),
    Exec(ExecResult),
    /// A session started; its fds come with this line.
    Session {
        pid: i32,
        fds: Vec<SessionFd>,
    },
    /// The session's process exited: its status, 128+signal when killed.
    Exited {
        exit_code: i32,
    },
    Error {
        code: ErrorCode,
        message: String,
    },
}

impl Response {
    pub fn error(code: ErrorCode, message: impl Into<String>) -> Self {
        Response::Error {
            code,
            message: message.into(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// The line is not a valid request.
    BadRequest,
    /// The request does not fit the container's state (e.g. `start` twice).
    InvalidState,
    /// The container's init has exited (`kill` without `all`, `exec`,
    /// `reopen-log`).
    NotRunning,
    /// The operation was tried and failed; the message says why.
    Failed,
}

/// Where the container's init is in its life, as the shim sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunState {
    Created,
    Running,
    Stopped,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateInfo {
    pub id: String,
    pub status: RunState,
    /// The init pid (in the host pid namespace); kept after it exited.
    pub pid: i32,
    pub created_at: String,
    pub started_at: Option<String>,
    /// Set once `status` is `stopped`.
    pub exit_code: Option<i32>,
    pub exited_at: Option<String>,
    pub oom_killed: bool,
    /// The shim was gone and berthd killed the container through its
    /// cgroup: how it ended is not known (reason "Unknown", code 255).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unknown: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecResult {
    /// The exit status, 128+signal when killed by a signal (137 after a timeout).
    pub exit_code: i32,
    #[serde(with = "base64_bytes")]
    pub stdout: Vec<u8>,
    #[serde(with = "base64_bytes")]
    pub stderr: Vec<u8>,
    pub timed_out: bool,
    pub stdout_truncated: bool,
    pub stderr_truncated: bool,
}

/// The one line the shim prints on stdout once the container is created
/// (or creating it failed). Then stdout is closed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ready {
    pub ok: bool,
    /// Container init pid.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<i32>,
    /// Pid of the long-running shim daemon.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shim_pid: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The content of `<dir>/exit`, written atomically when the init exited.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExitRecord {
    /// Exit status, or 128+signal when the init was killed by a signal.
    pub exit_code: i32,
    pub exited_at: String,
    pub oom_killed: bool,
    /// Written by berthd for a container whose shim was gone.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unknown: bool,
}

mod base64_bytes {
    use base64::engine::general_purpose::STANDARD;
    use base64::Engine;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&STANDARD.encode(bytes))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let text = String::deserialize(d)?;
        STANDARD.decode(text).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(v: serde_json::Value) -> Request {
        serde_json::from_value(v).expect("request")
    }

    #[test]
    fn requests_parse() {
        assert_eq!(parse(json!({"op": "start"})), Request::Start);
        assert_eq!(parse(json!({"op": "state"})), Request::State);
        assert_eq!(parse(json!({"op": "reopen-log"})), Request::ReopenLog);
        assert_eq!(parse(json!({"op": "shutdown"})), Request::Shutdown);
        assert_eq!(
            parse(json!({"op": "kill", "signal": 9})),
            Request::Kill {
                signal: SignalArg::Number(9),
                all: false
            }
        );
        assert_eq!(
            parse(json!({"op": "kill", "signal": "SIGTERM", "all": true})),
            Request::Kill {
                signal: SignalArg::Name("SIGTERM".into()),
                all: true
            }
        );
    }

    #[test]
    fn exec_request_defaults() {
        let r = parse(json!({"op": "exec", "args": ["echo", "hi"]}));
        assert_eq!(
            r,
            Request::Exec(ExecRequest {
                args: vec!["echo".into(), "hi".into()],
                env: vec![],
                cwd: None,
                user: None,
                timeout_s: 0,
                max_output_bytes: None,
            })
        );
        let r = parse(json!({
            "op": "exec", "args": ["id"], "env": ["A=1"], "cwd": "/tmp",
            "user": {"uid": 1000, "gid": 1000}, "timeout_s": 3
        }));
        let Request::Exec(e) = r else {
            panic!("not exec")
        };
        assert_eq!(
            e.user,
            Some(ExecUser {
                uid: 1000,
                gid: 1000,
                additional_gids: vec![]
            })
        );
        assert_eq!(e.timeout_s, 3);
    }

    #[test]
    fn session_request_and_answers() {
        let r = parse(json!({"op": "session", "args": ["sh"], "tty": true, "stdin": true}));
        let Request::Session(s) = r else {
            panic!("not a session")
        };
        assert_eq!(s.args, ["sh"]);
        assert!(s.tty && s.stdin && !s.stdout && !s.stderr);
        assert_eq!(s.cwd, None);
        assert_eq!(
            serde_json::to_value(Response::Session {
                pid: 7,
                fds: vec![SessionFd::Stdin, SessionFd::Stdout, SessionFd::Pty]
            })
            .expect("json"),
            json!({"result": "session", "pid": 7, "fds": ["stdin", "stdout", "pty"]})
        );
        assert_eq!(
            serde_json::to_value(Response::Exited { exit_code: 130 }).expect("json"),
            json!({"result": "exited", "exit_code": 130})
        );
    }

    #[test]
    fn checkpoint_request() {
        let r = parse(json!({"op": "checkpoint", "images_dir": "/w/checkpoint", "work_dir": "/w"}));
        assert_eq!(
            r,
            Request::Checkpoint(CheckpointRequest {
                images_dir: "/w/checkpoint".into(),
                work_dir: "/w".into(),
            })
        );
        assert!(serde_json::from_value::<Request>(json!({"op": "checkpoint"})).is_err());
    }

    #[test]
    fn unknown_fields_are_ignored() {
        assert_eq!(parse(json!({"op": "start", "extra": 1})), Request::Start);
    }

    #[test]
    fn bad_requests_are_rejected() {
        for v in [
            json!({"op": "fly"}),
            json!({"op": "kill"}),
            json!({"op": "kill", "signal": true}),
            json!({"op": "exec"}),
            json!({"signal": 9}),
        ] {
            assert!(serde_json::from_value::<Request>(v.clone()).is_err(), "{v}");
        }
    }

    #[test]
    fn responses_serialize() {
        assert_eq!(
            serde_json::to_value(Response::Ok).expect("json"),
            json!({"result": "ok"})
        );
        assert_eq!(
            serde_json::to_value(Response::error(ErrorCode::NotRunning, "gone")).expect("json"),
            json!({"result": "error", "code": "not_running", "message": "gone"})
        );
        let state = Response::State(StateInfo {
            id: "c1".into(),
            status: RunState::Stopped,
            pid: 42,
            created_at: "t0".into(),
            started_at: Some("t1".into()),
            exit_code: Some(3),
            exited_at: Some("t2".into()),
            oom_killed: false,
            unknown: false,
        });
        assert_eq!(
            serde_json::to_value(&state).expect("json"),
            json!({"result": "state", "id": "c1", "status": "stopped", "pid": 42,
                   "created_at": "t0", "started_at": "t1", "exit_code": 3,
                   "exited_at": "t2", "oom_killed": false})
        );
    }

    #[test]
    fn exec_result_round_trips_bytes_as_base64() {
        let r = Response::Exec(ExecResult {
            exit_code: 0,
            stdout: b"hi\n".to_vec(),
            stderr: vec![0xff, 0x00],
            timed_out: false,
            stdout_truncated: false,
            stderr_truncated: false,
        });
        let line = serde_json::to_string(&r).expect("json");
        assert!(line.contains(r#""stdout":"aGkK""#), "{line}");
        assert!(line.contains(r#""stderr":"/wA=""#), "{line}");
        let back: Response = serde_json::from_str(&line).expect("parse");
        assert_eq!(back, r);
    }

    #[test]
    fn ready_line() {
        let ok = Ready {
            ok: true,
            pid: Some(10),
            shim_pid: Some(9),
            error: None,
        };
        assert_eq!(
            serde_json::to_string(&ok).expect("json"),
            r#"{"ok":true,"pid":10,"shim_pid":9}"#
        );
        let err: Ready = serde_json::from_str(r#"{"ok":false,"error":"boom"}"#).expect("parse");
        assert_eq!(err.error.as_deref(), Some("boom"));
    }

    #[test]
    fn exit_record() {
        let e = ExitRecord {
            exit_code: 137,
            exited_at: "2016-10-06T00:17:09.669794202Z".into(),
            oom_killed: true,
            unknown: false,
        };
        let text = serde_json::to_string(&e).expect("json");
        assert_eq!(
            text,
            r#"{"exit_code":137,"exited_at":"2016-10-06T00:17:09.669794202Z","oom_killed":true}"#
        );
    }
}
