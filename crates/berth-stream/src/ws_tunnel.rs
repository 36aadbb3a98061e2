//! A WebSocket connection as a plain byte stream: client-go's tunneling
//! dialer (subprotocol `SPDY/3.1+portforward.k8s.io`) sends the SPDY
//! connection's bytes as binary messages, in both directions.

use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::{Buf, Bytes};
use futures_util::{Sink, Stream};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_tungstenite::tungstenite::{self, Message};
use tokio_tungstenite::WebSocketStream;

/// The subprotocol prefix client-go puts before the tunnelled protocol.
pub const TUNNEL_PREFIX: &str = "SPDY/3.1+";

pub struct WsTunnel<T> {
    ws: WebSocketStream<T>,
    pending: Bytes,
}

impl<T> WsTunnel<T> {
    pub fn new(ws: WebSocketStream<T>) -> Self {
        Self {
            ws,
            pending: Bytes::new(),
        }
    }
}

fn io_error(e: tungstenite::Error) -> io::Error {
    match e {
        tungstenite::Error::Io(e) => e,
        tungstenite::Error::ConnectionClosed | tungstenite::Error::AlreadyClosed => {
            io::Error::new(io::ErrorKind::BrokenPipe, "websocket closed")
        }
        other => io::Error::other(other),
    }
}

impl<T: AsyncRead + AsyncWrite + Unpin> AsyncRead for WsTunnel<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        while this.pending.is_empty() {
            match ready!(Pin::new(&mut this.ws).poll_next(cx)) {
                None | Some(Ok(Message::Close(_))) => return Poll::Ready(Ok(())),
                Some(Ok(Message::Binary(data))) => this.pending = data,
                // Pings are answered by tungstenite itself.
                Some(Ok(Message::Ping(_) | Message::Pong(_) | Message::Frame(_))) => {}
                Some(Ok(Message::Text(_))) => {
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        "text message on a tunnelled stream",
                    )))
                }
                Some(Err(e)) => return Poll::Ready(Err(io_error(e))),
            }
        }
        let n = this.pending.len().min(buf.remaining());
        buf.put_slice(&this.pending[..n]);
        this.pending.advance(n);
        Poll::Ready(Ok(()))
    }
}

impl<T: AsyncRead + AsyncWrite + Unpin> AsyncWrite for WsTunnel<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let ws = Pin::new(&mut self.ws);
        ready!(ws.poll_ready(cx)).map_err(io_error)?;
        Pin::new(&mut self.ws)
            .start_send(Message::Binary(Bytes::copy_from_slice(buf)))
            .map_err(io_error)?;
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.ws).poll_flush(cx).map_err(io_error)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match ready!(Pin::new(&mut self.ws).poll_close(cx)) {
            Ok(()) | Err(tungstenite::Error::ConnectionClosed) => Poll::Ready(Ok(())),
            Err(e) => Poll::Ready(Err(io_error(e))),
        }
    }
}
