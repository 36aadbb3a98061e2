//! Attach: the client's streams joined to the container's stdio through
//! the shim's attach socket (framing in [`berth_shim::attach`]). Dropping
//! the future only closes that connection: the container runs on.
//!
//! When the client's stdin ends, as containerd does for kubectl: a
//! container with `stdin_once` and no tty has its stdin closed by the shim
//! and the session goes on until the container exits, so the client sees
//! the output that follows; otherwise the session ends there (detach).

use std::path::PathBuf;

use berth_shim_api::attach::{encode, Decoder, Frame};
use berth_stream::{AttachSpec, BoxedWriter, SessionError, SessionStreams};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::unix::OwnedWriteHalf;
use tokio::net::UnixStream;
use tokio::sync::Mutex;

const CHUNK: usize = 32 * 1024;

/// Resolves when the container exited, or when the client's stdin ended
/// (unless `stdin_once` without a tty: then at the exit that follows).
pub async fn run(
    container_id: &str,
    socket: PathBuf,
    spec: &AttachSpec,
    stdin_once: bool,
    streams: SessionStreams,
) -> Result<(), SessionError> {
    let stream = UnixStream::connect(&socket).await.map_err(|err| {
        SessionError::Failed(format!(
            "attaching to container {container_id}: {}: {err}",
            socket.display()
        ))
    })?;
    let (mut reader, writer) = stream.into_split();
    let writer = Mutex::new(writer);
    let SessionStreams {
        stdin,
        mut stdout,
        mut stderr,
        resize,
    } = streams;
    if !spec.stdout {
        stdout = None;
    }
    if !spec.stderr || spec.tty {
        stderr = None;
    }
    // a stdin the container does not take is read and discarded, so the
    // client's writes go nowhere rather than fail on a closed stream
    let (stdin, unused_stdin) = if spec.stdin {
        (stdin, None)
    } else {
        (None, stdin)
    };

    let output = async {
        let mut decoder = Decoder::new();
        let mut buf = vec![0u8; CHUNK];
        loop {
            loop {
                let frame = decoder.next_frame().map_err(|err| {
                    SessionError::Failed(format!("attach to container {container_id}: {err}"))
                })?;
                match frame {
                    None => break,
                    Some(Frame::Stdout(data)) => deliver(&mut stdout, &data).await,
                    Some(Frame::Stderr(data)) => deliver(&mut stderr, &data).await,
                    Some(Frame::Exited(code)) => {
                        tracing::debug!(
                            container = container_id,
                            code,
                            "attached container exited"
                        );
                        return Ok(());
                    }
                    Some(_) => {}
                }
            }
            let n = reader.read(&mut buf).await.map_err(|err| {
                SessionError::Failed(format!("attach to container {container_id}: {err}"))
            })?;
            if n == 0 {
                return Err(SessionError::Failed(format!(
                    "the shim of container {container_id} closed the attach session"
                )));
            }
            decoder.push(&buf[..n]);
        }
    };
    let input = async {
        if let Some(mut stdin) = stdin {
            // declares this attacher a stdin user (for stdin_once)
            if send(&writer, &Frame::Stdin(Vec::new())).await {
                let mut buf = vec![0u8; CHUNK];
                loop {
                    let n = match stdin.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => n,
                    };
                    if !send(&writer, &Frame::Stdin(buf[..n].to_vec())).await {
                        break;
                    }
                }
                let closed = send(&writer, &Frame::StdinClose).await;
                // stdin_once without a tty: the shim closes the container's
                // stdin and the output runs on to the exit
                let until_exit = stdin_once && !spec.tty;
                if closed && !until_exit {
                    return;
                }
            }
        } else if let Some(mut unused) = unused_stdin {
            // read to EOF or an error and discard, so client writes never fail
            let _ = tokio::io::copy(&mut unused, &mut tokio::io::sink()).await;
        }
        std::future::pending::<()>().await
    };
    let resizes = async {
        if let Some(mut rx) = resize.filter(|_| spec.tty) {
            while let Some(size) = rx.recv().await {
                let frame = Frame::Resize {
                    width: size.width,
                    height: size.height,
                };
                if !send(&writer, &frame).await {
                    break;
                }
            }
        }
        std::future::pending::<()>().await
    };
    tokio::select! {
        result = output => result,
        () = input => Ok(()),
        () = resizes => unreachable!("resize forwarding never completes"),
    }
}

/// Writes one frame; false once the connection is unusable.
async fn send(writer: &Mutex<OwnedWriteHalf>, frame: &Frame) -> bool {
    let mut bytes = Vec::new();
    encode(frame, &mut bytes);
    writer.lock().await.write_all(&bytes).await.is_ok()
}

/// Output to a client stream; one that fails is dropped (the client is
/// going away and the server will drop this future).
async fn deliver(writer: &mut Option<BoxedWriter>, data: &[u8]) {
    if let Some(w) = writer.as_mut() {
        if w.write_all(data).await.is_err() || w.flush().await.is_err() {
            *writer = None;
        }
    }
}
