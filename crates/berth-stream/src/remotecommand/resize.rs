//! The resize stream/channel: consecutive JSON objects
//! `{"Width":80,"Height":24}` (client-go's TerminalSize, no JSON tags).

use serde::Deserialize;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::sync::mpsc;

use crate::TerminalSize;

#[derive(Deserialize)]
struct Wire {
    // Go's decoder matches keys case-insensitively; accept both spellings.
    #[serde(alias = "width")]
    #[serde(rename = "Width")]
    width: u16,
    #[serde(alias = "height")]
    #[serde(rename = "Height")]
    height: u16,
}

/// Splits a byte stream into resize events; objects may arrive in pieces.
#[derive(Default)]
pub struct ResizeDecoder {
    buf: Vec<u8>,
}

impl ResizeDecoder {
    /// Adds bytes and returns every complete event they finish. `Err` on
    /// bytes that can never become an event (Go's decoder stops there too).
    pub fn feed(&mut self, bytes: &[u8]) -> Result<Vec<TerminalSize>, serde_json::Error> {
        self.buf.extend_from_slice(bytes);
        let mut sizes = Vec::new();
        let mut consumed = 0;
        let mut iter = serde_json::Deserializer::from_slice(&self.buf).into_iter::<Wire>();
        loop {
            match iter.next() {
                Some(Ok(w)) => {
                    consumed = iter.byte_offset();
                    sizes.push(TerminalSize {
                        width: w.width,
                        height: w.height,
                    });
                }
                Some(Err(e)) if e.is_eof() => break,
                Some(Err(e)) => return Err(e),
                None => break,
            }
        }
        self.buf.drain(..consumed);
        Ok(sizes)
    }
}

/// Reads resize events from `stream` into `tx` until either ends.
pub async fn forward(mut stream: impl AsyncRead + Unpin, tx: mpsc::Sender<TerminalSize>) {
    let mut decoder = ResizeDecoder::default();
    let mut buf = [0u8; 1024];
    loop {
        let n = match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        let Ok(sizes) = decoder.feed(&buf[..n]) else {
            return;
        };
        for size in sizes {
            if tx.send(size).await.is_err() {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_events_split_across_reads() {
        let mut d = ResizeDecoder::default();
        assert!(d.feed(br#"{"Width":80,"#).unwrap().is_empty());
        let sizes = d
            .feed(br#""Height":24}{"Width":100,"Height":40}{"Wi"#)
            .unwrap();
        assert_eq!(
            sizes,
            vec![
                TerminalSize {
                    width: 80,
                    height: 24
                },
                TerminalSize {
                    width: 100,
                    height: 40
                }
            ]
        );
        let sizes = d.feed(br#"dth":1,"Height":2}"#).unwrap();
        assert_eq!(
            sizes,
            vec![TerminalSize {
                width: 1,
                height: 2
            }]
        );
    }

    #[test]
    fn rejects_garbage() {
        assert!(ResizeDecoder::default().feed(b"]").is_err());
    }
}
