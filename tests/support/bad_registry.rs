//! A registry that misbehaves on purpose, for the hostile-input tests: a
//! few lines of HTTP/1.1 over std threads on a free port of 127.0.0.1. It
//! serves one image's manifest and config correctly, and its layer blobs as
//! told by [`Misbehaviour`].

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::registry::{BuiltImage, MEDIA_TYPE_MANIFEST};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Misbehaviour {
    /// Accepts connections and never answers anything.
    StallEverything,
    /// Answers everything but a layer blob: for that it sends the headers
    /// and then nothing, keeping the connection open.
    StallLayers,
    /// Sends layer blobs without end (no Content-Length).
    EndlessLayers,
    /// Sends the manifest without end (no Content-Length).
    EndlessManifest,
}

pub struct BadRegistry {
    port: u16,
    stop: Arc<AtomicBool>,
}

impl BadRegistry {
    /// Serves `image` as `<repo>:<tag>` (and by manifest digest).
    pub fn start(image: &BuiltImage, repo: &str, tag: &str, how: Misbehaviour) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        let port = listener.local_addr().expect("local addr").port();
        let stop = Arc::new(AtomicBool::new(false));
        let content = Arc::new(Content {
            image: image.clone(),
            repo: repo.to_string(),
            tag: tag.to_string(),
            how,
        });
        let stopping = stop.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                if stopping.load(Ordering::Relaxed) {
                    return;
                }
                let Ok(stream) = stream else { continue };
                let content = content.clone();
                let stopping = stopping.clone();
                std::thread::spawn(move || content.serve(stream, &stopping));
            }
        });
        Self { port, stop }
    }

    /// `127.0.0.1:PORT/<name>`.
    pub fn reference(&self, name: &str) -> String {
        format!("127.0.0.1:{}/{name}", self.port)
    }
}

impl Drop for BadRegistry {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // wakes the accept loop so it sees the flag
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

struct Content {
    image: BuiltImage,
    repo: String,
    tag: String,
    how: Misbehaviour,
}

impl Content {
    fn serve(&self, stream: TcpStream, stop: &AtomicBool) {
        if self.how == Misbehaviour::StallEverything {
            hold(stop);
            return;
        }
        let mut reader = BufReader::new(stream.try_clone().expect("clone stream"));
        let mut out = stream;
        loop {
            let mut request_line = String::new();
            if reader.read_line(&mut request_line).unwrap_or(0) == 0 {
                return;
            }
            // headers, up to the empty line; requests here have no body
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 {
                    return;
                }
                if line == "\r\n" || line == "\n" {
                    break;
                }
            }
            let mut parts = request_line.split_whitespace();
            let method = parts.next().unwrap_or_default().to_string();
            let path = parts.next().unwrap_or_default().to_string();
            if !self.answer(&mut out, &method, &path, stop) {
                return;
            }
        }
    }

    /// Answers one request; false when the connection is done.
    fn answer(&self, out: &mut TcpStream, method: &str, path: &str, stop: &AtomicBool) -> bool {
        let manifests = format!("/v2/{}/manifests/", self.repo);
        let blobs = format!("/v2/{}/blobs/", self.repo);
        let (status, content_type, body): (&str, &str, Vec<u8>) = if path == "/v2/" {
            ("200 OK", "application/json", b"{}".to_vec())
        } else if let Some(reference) = path.strip_prefix(&manifests) {
            if self.how == Misbehaviour::EndlessManifest && method == "GET" {
                endless(out, MEDIA_TYPE_MANIFEST, stop);
                return false;
            }
            if reference == self.tag || reference == self.image.manifest_digest {
                ("200 OK", MEDIA_TYPE_MANIFEST, self.image.manifest.clone())
            } else {
                ("404 Not Found", "application/json", not_found())
            }
        } else if let Some(digest) = path.strip_prefix(&blobs) {
            if digest == self.image.config_digest {
                (
                    "200 OK",
                    "application/octet-stream",
                    self.image.config.clone(),
                )
            } else if let Some(layer) = self.image.layers.iter().find(|l| l.digest == digest) {
                self.bad_layer(out, layer.size, stop);
                return false;
            } else {
                ("404 Not Found", "application/json", not_found())
            }
        } else {
            ("404 Not Found", "application/json", not_found())
        };
        let mut head = format!(
            "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n",
            body.len()
        );
        if content_type == MEDIA_TYPE_MANIFEST {
            head.push_str(&format!(
                "Docker-Content-Digest: {}\r\n",
                self.image.manifest_digest
            ));
        }
        head.push_str("\r\n");
        let mut response = head.into_bytes();
        if method != "HEAD" {
            response.extend_from_slice(&body);
        }
        out.write_all(&response).is_ok()
    }

    fn bad_layer(&self, out: &mut TcpStream, size: u64, stop: &AtomicBool) {
        match self.how {
            Misbehaviour::StallLayers => {
                let head = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: {size}\r\n\r\n"
                );
                let _ = out.write_all(head.as_bytes());
                hold(stop);
            }
            Misbehaviour::EndlessLayers => endless(out, "application/octet-stream", stop),
            Misbehaviour::StallEverything | Misbehaviour::EndlessManifest => hold(stop),
        }
    }
}

/// Sends a body without a length that never ends, until the client goes
/// away or the registry is stopped.
fn endless(out: &mut TcpStream, content_type: &str, stop: &AtomicBool) {
    let head =
        format!("HTTP/1.1 200 OK\r\nContent-Type: {content_type}\r\nConnection: close\r\n\r\n");
    if out.write_all(head.as_bytes()).is_err() {
        return;
    }
    let chunk = vec![0x5a_u8; 64 << 10];
    while !stop.load(Ordering::Relaxed) && out.write_all(&chunk).is_ok() {}
}

/// Keeps the connection (owned by the caller's frame) open until stopped.
fn hold(stop: &AtomicBool) {
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn not_found() -> Vec<u8> {
    br#"{"errors":[{"code":"MANIFEST_UNKNOWN","message":"unknown"}]}"#.to_vec()
}
