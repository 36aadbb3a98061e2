//! An exec session: the shim starts the process and hands over its stdio
//! ends; this copies them to and from the client's streams until the
//! process exited and its output ended. The session's control connection
//! lives in this future: dropping the future closes it, and the shim then
//! kills the process.

use std::io::Cursor;
use std::path::PathBuf;
use std::time::Duration;

use berth_shim_api::client::{self, open_session, Session};
use berth_shim_api::protocol::{ErrorCode, SessionFd, SessionRequest};
use berth_shim_api::pty::set_window_size;
use berth_stream::{BoxedReader, BoxedWriter, ExecSpec, SessionError, SessionStreams};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;

use super::fdio::FdIo;

/// How long the shim may take to start the process.
const OPEN_TIMEOUT: Duration = Duration::from_secs(30);

/// After the process exited, how long its output may take to end (a
/// child it left behind may hold the pipes or the pty open).
const OUTPUT_GRACE: Duration = Duration::from_secs(2);

const CHUNK: usize = 32 * 1024;

/// The shim's `session` request for `spec`.
pub fn session_request(spec: &ExecSpec) -> SessionRequest {
    SessionRequest {
        args: spec.cmd.clone(),
        env: Vec::new(),
        cwd: None,
        user: None,
        tty: spec.tty,
        stdin: spec.stdin,
        stdout: spec.stdout,
        // a terminal has no separate stderr
        stderr: spec.stderr && !spec.tty,
    }
}

/// The session error for a shim that refused the session.
pub fn refusal(container_id: &str, code: ErrorCode, message: String) -> SessionError {
    match code {
        ErrorCode::NotRunning => SessionError::NotRunning(container_id.to_string()),
        _ => SessionError::Failed(format!("exec in container {container_id}: {message}")),
    }
}

/// The process's stdio as handed over.
struct SessionIo {
    pty: Option<FdIo>,
    stdin: Option<FdIo>,
    stdout: Option<FdIo>,
    stderr: Option<FdIo>,
}

impl SessionIo {
    fn new(session: &mut Session) -> std::io::Result<Self> {
        let mut take = |which| session.take(which).map(FdIo::new).transpose();
        Ok(Self {
            pty: take(SessionFd::Pty)?,
            stdin: take(SessionFd::Stdin)?,
            stdout: take(SessionFd::Stdout)?,
            stderr: take(SessionFd::Stderr)?,
        })
    }
}

pub async fn run(
    container_id: &str,
    socket: PathBuf,
    spec: &ExecSpec,
    streams: SessionStreams,
) -> Result<i32, SessionError> {
    if spec.cmd.is_empty() {
        return Err(SessionError::Failed("exec: cmd must not be empty".into()));
    }
    let request = session_request(spec);
    // if this future is dropped meanwhile, the session is dropped with the
    // blocking task's result, which closes it and kills the process
    let opened =
        tokio::task::spawn_blocking(move || open_session(&socket, &request, Some(OPEN_TIMEOUT)))
            .await
            .map_err(|err| SessionError::Failed(format!("exec task: {err}")))?;
    let mut session = match opened {
        Ok(s) => s,
        Err(client::SessionError::Refused { code, message }) => {
            return Err(refusal(container_id, code, message))
        }
        Err(client::SessionError::Io(err)) => {
            return Err(SessionError::Failed(format!(
                "shim of container {container_id}: {err}"
            )))
        }
    };
    tracing::debug!(
        container = container_id,
        pid = session.pid,
        "exec session started"
    );
    let io = SessionIo::new(&mut session).map_err(failed)?;
    let leftover = std::mem::take(&mut session.leftover);
    session.stream.set_nonblocking(true).map_err(failed)?;
    let control = tokio::net::UnixStream::from_std(session.stream).map_err(failed)?;
    let control = BufReader::new(Cursor::new(leftover).chain(control));
    copy_session(io, control, streams).await
}

fn failed(err: std::io::Error) -> SessionError {
    SessionError::Failed(format!("exec session: {err}"))
}

async fn copy_session(
    io: SessionIo,
    mut control: impl tokio::io::AsyncBufRead + Unpin + Send,
    streams: SessionStreams,
) -> Result<i32, SessionError> {
    let SessionStreams {
        stdin,
        stdout,
        stderr,
        resize,
    } = streams;
    let tty = io.pty.is_some();
    let (out_reader, in_writer) = match &io.pty {
        Some(pty) => (Some(pty.clone()), io.stdin.clone().or(Some(pty.clone()))),
        None => (io.stdout.clone(), io.stdin.clone()),
    };
    // only these copies may keep the fds open
    let resize_fd = io.pty.clone();
    drop(io.stdin);
    drop(io.stdout);
    drop(io.pty);
    // Sizes sent before the session opened (crictl and kubectl send the
    // terminal's as they start) are set before any input reaches the
    // process: one that reads and then asks its size gets it, not 0x0.
    let mut resize = resize;
    if let (Some(rx), Some(pty)) = (resize.as_mut(), resize_fd.as_ref()) {
        while let Ok(size) = rx.try_recv() {
            if let Err(err) = set_window_size(pty.fd(), size.width, size.height) {
                tracing::debug!(%err, "resizing an exec terminal");
            }
        }
    }

    let exit = async {
        let mut line = Vec::new();
        match control.read_until(b'\n', &mut line).await {
            Ok(0) => Err(SessionError::Failed(
                "the shim ended the exec session without an exit status".into(),
            )),
            Ok(_) => {
                if line.last() == Some(&b'\n') {
                    line.pop();
                }
                client::parse_exited(&line).map_err(failed)
            }
            Err(err) => Err(failed(err)),
        }
    };
    let outputs = async {
        tokio::join!(copy_out(out_reader, stdout), copy_out(io.stderr, stderr));
    };
    let input = async {
        if let (Some(reader), Some(writer)) = (stdin, in_writer) {
            copy_in(reader, writer, !tty).await;
        }
        std::future::pending::<()>().await
    };
    let resizes = async {
        if let (Some(rx), Some(pty)) = (resize, resize_fd) {
            forward_resizes(rx, pty).await;
        }
        std::future::pending::<()>().await
    };
    tokio::select! {
        result = finish(exit, outputs) => result,
        () = input => unreachable!("stdin copy never completes"),
        () = resizes => unreachable!("resize forwarding never completes"),
    }
}

/// The exit code, once the process exited and its output ended (or the
/// grace after the exit passed).
async fn finish(
    exit: impl std::future::Future<Output = Result<i32, SessionError>>,
    outputs: impl std::future::Future<Output = ()>,
) -> Result<i32, SessionError> {
    tokio::pin!(exit, outputs);
    let early = tokio::select! {
        code = &mut exit => Some(code?),
        () = &mut outputs => None,
    };
    match early {
        Some(code) => {
            if tokio::time::timeout(OUTPUT_GRACE, &mut outputs)
                .await
                .is_err()
            {
                tracing::debug!("exec output still open after the process exited");
            }
            Ok(code)
        }
        None => exit.await,
    }
}

/// Copies one output of the process to the client until it ends. A client
/// stream that fails is dropped, and the output drained anyway.
async fn copy_out(reader: Option<FdIo>, mut writer: Option<BoxedWriter>) {
    let Some(mut reader) = reader else { return };
    let mut buf = vec![0u8; CHUNK];
    loop {
        let n = match reader.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if let Some(w) = writer.as_mut() {
            if w.write_all(&buf[..n]).await.is_err() || w.flush().await.is_err() {
                writer = None;
            }
        }
    }
}

/// Copies the client's stdin to the process. Its end closes the process's
/// stdin pipe; a terminal stays open (the client sends its own EOF).
async fn copy_in(mut reader: BoxedReader, writer: FdIo, close_at_end: bool) {
    let mut writer = Some(writer);
    let mut buf = vec![0u8; CHUNK];
    loop {
        let n = match reader.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let Some(w) = writer.as_mut() else { break };
        if w.write_all(&buf[..n]).await.is_err() {
            // the process closed its stdin or is gone
            return;
        }
    }
    if close_at_end {
        drop(writer.take());
    } else {
        // hold the pty open: the output side shares it
        std::future::pending::<()>().await;
    }
}

async fn forward_resizes(mut rx: mpsc::Receiver<berth_stream::TerminalSize>, pty: FdIo) {
    while let Some(size) = rx.recv().await {
        if let Err(err) = set_window_size(pty.fd(), size.width, size.height) {
            tracing::debug!(%err, "resizing an exec terminal");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(tty: bool) -> ExecSpec {
        ExecSpec {
            container_id: "c".into(),
            cmd: vec!["sh".into()],
            tty,
            stdin: true,
            stdout: true,
            stderr: true,
        }
    }

    #[test]
    fn a_terminal_has_no_stderr() {
        let r = session_request(&spec(true));
        assert!(r.tty && r.stdin && r.stdout && !r.stderr);
        let r = session_request(&spec(false));
        assert!(!r.tty && r.stdin && r.stdout && r.stderr);
        assert_eq!(r.args, ["sh"]);
    }

    #[test]
    fn refusals_map_to_session_errors() {
        assert!(matches!(
            refusal("c1", ErrorCode::NotRunning, "x".into()),
            SessionError::NotRunning(id) if id == "c1"
        ));
        let e = refusal("c1", ErrorCode::Failed, "exec: no such file".into());
        assert!(e.to_string().contains("c1") && e.to_string().contains("no such file"));
    }

    #[tokio::test]
    async fn output_after_the_exit_is_still_delivered() {
        // the exit line comes before the output ends: the output still
        // arrives in full, and then the exit code
        let (r, w) = nix::unistd::pipe().expect("pipe");
        let io = SessionIo {
            pty: None,
            stdin: None,
            stdout: Some(FdIo::new(r).expect("fdio")),
            stderr: None,
        };
        let (client_out, mut server_side) = tokio::io::duplex(64);
        let control = BufReader::new(Cursor::new(
            b"{\"result\":\"exited\",\"exit_code\":9}\n".to_vec(),
        ));
        let writer = std::thread::spawn(move || {
            let mut w = std::fs::File::from(w);
            std::io::Write::write_all(&mut w, &vec![b'x'; 1000]).expect("write");
        });
        let streams = SessionStreams {
            stdin: None,
            stdout: Some(Box::new(client_out)),
            stderr: None,
            resize: None,
        };
        let reading = tokio::spawn(async move {
            let mut got = Vec::new();
            server_side.read_to_end(&mut got).await.expect("read");
            got
        });
        let code = copy_session(io, control, streams).await.expect("exit code");
        assert_eq!(code, 9);
        writer.join().expect("writer");
        assert_eq!(reading.await.expect("join").len(), 1000);
    }
}
