//! remotecommand over WebSocket: every message starts with its channel
//! (0 stdin, 1 stdout, 2 stderr, 3 error, 4 resize). The base64 protocols
//! send text messages: the channel as an ASCII digit, then the data in
//! base64. `v5.channel.k8s.io` adds the close signal: a message on channel
//! 255 whose one byte names a channel the sender will not write again.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine;
use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot};
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

use super::resize::ResizeDecoder;
use super::{run, Target};
use crate::{SessionStreams, StreamRuntime};

pub const STDIN: u8 = 0;
pub const STDOUT: u8 = 1;
pub const STDERR: u8 = 2;
pub const ERROR: u8 = 3;
pub const RESIZE: u8 = 4;
/// v5: "I will send nothing more on the channel in the payload".
pub const CLOSE_SIGNAL: u8 = 255;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    V5,
    V4Binary,
    V4Base64,
    /// `channel.k8s.io`, also what a client that names no protocol gets.
    Binary,
    Base64,
}

/// Subprotocol names we accept, in no particular order: the client's
/// preference decides.
pub const PROTOCOLS: [(&str, Protocol); 5] = [
    ("v5.channel.k8s.io", Protocol::V5),
    ("v4.channel.k8s.io", Protocol::V4Binary),
    ("v4.base64.channel.k8s.io", Protocol::V4Base64),
    ("channel.k8s.io", Protocol::Binary),
    ("base64.channel.k8s.io", Protocol::Base64),
];

pub fn protocol_of(name: &str) -> Option<Protocol> {
    PROTOCOLS.iter().find(|(n, _)| *n == name).map(|(_, p)| *p)
}

impl Protocol {
    fn base64(self) -> bool {
        matches!(self, Protocol::V4Base64 | Protocol::Base64)
    }

    fn json_status(self) -> bool {
        matches!(self, Protocol::V5 | Protocol::V4Binary | Protocol::V4Base64)
    }

    /// One outgoing message on `channel`.
    pub fn encode(self, channel: u8, data: &[u8]) -> Message {
        if self.base64() {
            let mut text = String::with_capacity(1 + data.len() * 4 / 3 + 4);
            text.push(char::from(b'0' + channel));
            base64::engine::general_purpose::STANDARD.encode_string(data, &mut text);
            Message::Text(text.into())
        } else {
            let mut bin = Vec::with_capacity(1 + data.len());
            bin.push(channel);
            bin.extend_from_slice(data);
            Message::Binary(bin.into())
        }
    }

    /// Channel and payload of an incoming message; `None` for messages
    /// that carry none (control frames, empty or undecodable ones).
    pub fn decode(self, message: &Message) -> Option<(u8, Vec<u8>)> {
        let raw: &[u8] = match message {
            Message::Binary(b) => b,
            Message::Text(t) => t.as_bytes(),
            _ => return None,
        };
        let (&first, rest) = raw.split_first()?;
        if self.base64() {
            let data = base64::engine::general_purpose::STANDARD
                .decode(rest)
                .ok()?;
            Some((first.wrapping_sub(b'0'), data))
        } else {
            Some((first, rest.to_vec()))
        }
    }
}

/// Copies what the runtime writes on one output channel into messages.
async fn pump_output(
    mut pipe: impl AsyncRead + Unpin,
    channel: u8,
    protocol: Protocol,
    out: mpsc::Sender<Message>,
) {
    let mut buf = vec![0u8; 32 * 1024];
    loop {
        match pipe.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                if out.send(protocol.encode(channel, &buf[..n])).await.is_err() {
                    return;
                }
            }
        }
    }
}

/// Serves one upgraded WebSocket connection.
pub async fn serve<R, T>(
    ws: WebSocketStream<T>,
    protocol: Protocol,
    target: Target,
    runtime: Arc<R>,
    idle: Duration,
    grace: Duration,
) where
    R: StreamRuntime,
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let opts = target.options();
    let (mut sink, mut source) = ws.split();
    let (out_tx, mut out_rx) = mpsc::channel::<Message>(16);
    // Traffic either way keeps the session from idling out.
    let last_activity = Arc::new(Mutex::new(Instant::now()));

    // One writer owns the sink; closing the channel sends a normal close.
    let written = last_activity.clone();
    let writer = tokio::spawn(async move {
        while let Some(message) = out_rx.recv().await {
            if sink.send(message).await.is_err() {
                return;
            }
            *written.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
        }
        let _ = sink
            .send(Message::Close(Some(CloseFrame {
                code: CloseCode::Normal,
                reason: "".into(),
            })))
            .await;
    });

    // Kubelet announces the session with an empty message on the lowest
    // channel it will write; clients wait for it.
    let first = if opts.stdout {
        STDOUT
    } else if opts.stderr {
        STDERR
    } else {
        ERROR
    };
    let _ = out_tx.send(protocol.encode(first, &[])).await;

    let mut pumps = Vec::new();
    let mut output = |wanted: bool, channel: u8| {
        wanted.then(|| {
            let (reader, writer) = tokio::io::duplex(32 * 1024);
            pumps.push(tokio::spawn(pump_output(
                reader,
                channel,
                protocol,
                out_tx.clone(),
            )));
            writer
        })
    };
    let stdout = output(opts.stdout, STDOUT);
    let stderr = output(opts.stderr, STDERR);

    let (stdin_reader, stdin_writer) = tokio::io::duplex(64 * 1024);
    let (resize_tx, resize_rx) = mpsc::channel(16);
    let (gone_tx, gone_rx) = oneshot::channel::<()>();

    // The reader demultiplexes the client's messages until it goes away.
    let reader = tokio::spawn(async move {
        let mut stdin = opts.stdin.then_some(stdin_writer);
        let mut resize = opts.tty.then_some((ResizeDecoder::default(), resize_tx));
        loop {
            let since = last_activity
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .elapsed();
            let message =
                match tokio::time::timeout(idle.saturating_sub(since), source.next()).await {
                    Ok(Some(Ok(m))) => m,
                    Ok(_) => break,
                    Err(_) => {
                        let since = last_activity
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .elapsed();
                        if since >= idle {
                            tracing::debug!("WebSocket session idle, closing");
                            break;
                        }
                        continue;
                    }
                };
            *last_activity.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
            if let Message::Close(_) = message {
                break;
            }
            let Some((channel, data)) = protocol.decode(&message) else {
                continue;
            };
            match channel {
                STDIN => {
                    if let Some(w) = stdin.as_mut() {
                        if w.write_all(&data).await.is_err() {
                            stdin = None;
                        }
                    }
                }
                RESIZE => {
                    if let Some((decoder, tx)) = resize.as_mut() {
                        match decoder.feed(&data) {
                            Ok(sizes) => {
                                for size in sizes {
                                    let _ = tx.send(size).await;
                                }
                            }
                            Err(_) => resize = None,
                        }
                    }
                }
                CLOSE_SIGNAL if protocol == Protocol::V5 => match data.first() {
                    // Dropping the pipe's writer is end of file for the
                    // runtime reading stdin.
                    Some(&STDIN) => stdin = None,
                    Some(&RESIZE) => resize = None,
                    _ => {}
                },
                _ => {}
            }
        }
        let _ = gone_tx.send(());
    });

    let streams = SessionStreams {
        stdin: opts.stdin.then(|| Box::new(stdin_reader) as _),
        stdout: stdout.map(|w| Box::new(w) as _),
        stderr: stderr.map(|w| Box::new(w) as _),
        resize: opts.tty.then_some(resize_rx),
    };
    let gone = async {
        let _ = gone_rx.await;
    };
    let outcome = run(&*runtime, &target, streams, gone).await;
    let Some(outcome) = outcome else {
        reader.abort();
        writer.abort();
        return;
    };
    // Output first, then the status, then a normal close.
    for pump in pumps {
        let _ = pump.await;
    }
    let payload = if protocol.json_status() {
        Some(outcome.v4_json())
    } else {
        outcome.v1_text()
    };
    if let Some(payload) = payload {
        let _ = out_tx
            .send(protocol.encode(ERROR, payload.as_bytes()))
            .await;
    }
    drop(out_tx);
    let _ = tokio::time::timeout(grace, writer).await;
    // Let the client answer the close before the connection drops.
    let _ = tokio::time::timeout(grace, reader).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v5_close_signal_for_stdin_is_two_bytes() {
        let message = Protocol::V5.encode(CLOSE_SIGNAL, &[STDIN]);
        assert_eq!(message, Message::Binary(vec![255, 0].into()));
        assert_eq!(
            Protocol::V5.decode(&message),
            Some((CLOSE_SIGNAL, vec![STDIN]))
        );
    }

    #[test]
    fn binary_messages_lead_with_the_channel() {
        assert_eq!(
            Protocol::V4Binary.encode(STDOUT, b"hi\n"),
            Message::Binary(vec![1, b'h', b'i', b'\n'].into())
        );
        assert_eq!(
            Protocol::Binary.encode(STDOUT, b""),
            Message::Binary(vec![1].into())
        );
    }

    #[test]
    fn base64_messages_are_text_with_a_digit() {
        // The example from apimachinery's wsstream documentation.
        assert_eq!(
            Protocol::Base64.encode(STDOUT, b"\n"),
            Message::Text("1Cg==".into())
        );
        assert_eq!(
            Protocol::V4Base64.decode(&Message::Text("0Zm9vCg==".into())),
            Some((STDIN, b"foo\n".to_vec()))
        );
    }
}
