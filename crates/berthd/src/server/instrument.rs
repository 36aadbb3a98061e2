//! One span per RPC: method, duration and gRPC code, logged and counted
//! (in [`crate::metrics`]) in one place instead of in every handler. A
//! failed call is logged with its message, at a level shown by default, so
//! an operator sees why kubelet's call failed without raising the level.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use tower::{Layer, Service};
use tracing::Instrument;

use crate::metrics::Metrics;

/// Wraps the gRPC router so every call is traced (and counted, when
/// given metrics).
#[derive(Clone, Default)]
pub struct RpcTraceLayer {
    metrics: Option<Arc<Metrics>>,
}

impl RpcTraceLayer {
    pub fn new(metrics: Option<Arc<Metrics>>) -> Self {
        Self { metrics }
    }
}

impl<S> Layer<S> for RpcTraceLayer {
    type Service = RpcTrace<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RpcTrace {
            inner,
            metrics: self.metrics.clone(),
        }
    }
}

/// The service produced by [`RpcTraceLayer`].
#[derive(Clone)]
pub struct RpcTrace<S> {
    inner: S,
    metrics: Option<Arc<Metrics>>,
}

impl<S, ReqBody, ResBody> Service<http::Request<ReqBody>> for RpcTrace<S>
where
    S: Service<http::Request<ReqBody>, Response = http::Response<ResBody>>,
    S::Future: Send + 'static,
    ResBody: Default + Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<ReqBody>) -> Self::Future {
        let method = rpc_name(request.uri().path()).to_string();
        let span = tracing::info_span!(
            "rpc",
            method = %method,
            code = tracing::field::Empty,
            duration_ms = tracing::field::Empty
        );
        let deadline = request
            .headers()
            .get("grpc-timeout")
            .and_then(|value| value.to_str().ok())
            .and_then(parse_grpc_timeout);
        let call = self.inner.call(request).instrument(span.clone());
        let metrics = self.metrics.clone();
        Box::pin(async move {
            let started = Instant::now();
            let mut result = match deadline {
                // tonic's own deadline, outside this layer, answers
                // CANCELLED; a call past its deadline is DEADLINE_EXCEEDED
                // in gRPC (as grpc-go servers answer, and critest checks
                // when its 1 ms pull answer outruns its client's timer).
                // This one ends a tick earlier, so it is the one seen.
                Some(deadline) => {
                    let early = deadline.saturating_sub(std::time::Duration::from_millis(1));
                    match tokio::time::timeout(early, call).await {
                        Ok(result) => result,
                        Err(_) => Ok(tonic::Status::deadline_exceeded(
                            "the call's deadline passed before it finished",
                        )
                        .into_http()),
                    }
                }
                None => call.await,
            };
            if let Ok(response) = &mut result {
                bound_message(response.headers_mut());
            }
            let (code, message) = match &result {
                Ok(response) => (
                    grpc_code(response.headers()),
                    grpc_message(response.headers()),
                ),
                Err(_) => ("transport error".to_string(), String::new()),
            };
            let elapsed = started.elapsed().as_secs_f64();
            if let Some(metrics) = &metrics {
                metrics.observe_rpc(&method, &code, elapsed);
            }
            let elapsed_ms = elapsed * 1000.0;
            span.record("code", code.as_str());
            span.record("duration_ms", elapsed_ms);
            span.in_scope(|| {
                // kubelet polls some RPCs every second: successes stay at
                // debug, and the failures it expects (NotFound of a container
                // just removed) at info.
                if code == "Ok" {
                    tracing::debug!("rpc done");
                } else if is_server_fault(&code) {
                    tracing::warn!(%message, "rpc failed");
                } else {
                    tracing::info!(%message, "rpc failed");
                }
            });
            result
        })
    }
}

/// gRPC's `grpc-timeout` header: at most 8 digits and a unit (`H`, `M`,
/// `S`, `m`, `u`, `n`).
fn parse_grpc_timeout(text: &str) -> Option<std::time::Duration> {
    use std::time::Duration;
    let split = text.len().checked_sub(1)?;
    let (digits, unit) = text.split_at(split);
    if digits.is_empty() || digits.len() > 8 {
        return None;
    }
    let value: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(value * 3600),
        "M" => Duration::from_secs(value * 60),
        "S" => Duration::from_secs(value),
        "m" => Duration::from_millis(value),
        "u" => Duration::from_micros(value),
        "n" => Duration::from_nanos(value),
        _ => return None,
    })
}

/// `/runtime.v1.RuntimeService/Version` → `RuntimeService/Version`.
fn rpc_name(path: &str) -> &str {
    path.trim_start_matches('/')
        .strip_prefix("runtime.v1.")
        .unwrap_or(path)
}

/// A failed unary call carries `grpc-status` in its headers (a trailers-only
/// response); a call that succeeded sends it later, in the trailers.
fn grpc_code(headers: &http::HeaderMap) -> String {
    let status = headers
        .get("grpc-status")
        .and_then(|value| value.to_str().ok())
        .and_then(|text| text.parse::<i32>().ok());
    match status {
        Some(code) => format!("{:?}", tonic::Code::from(code)),
        None => "Ok".to_string(),
    }
}

/// The message of a failed unary call: `grpc-message`, percent-decoded
/// (gRPC encodes every byte outside printable ASCII, and `%`, as `%XX`).
fn grpc_message(headers: &http::HeaderMap) -> String {
    headers
        .get("grpc-message")
        .map(|value| percent_decode(value.as_bytes()))
        .unwrap_or_default()
}

/// `a%20b%C3%A9` → `a bé`; a malformed escape is kept as it is.
fn percent_decode(bytes: &[u8]) -> String {
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let escaped = (bytes[i] == b'%')
            .then(|| bytes.get(i + 1..i + 3))
            .flatten()
            .and_then(|hex| std::str::from_utf8(hex).ok())
            .and_then(|hex| u8::from_str_radix(hex, 16).ok());
        match escaped {
            Some(byte) => {
                out.push(byte);
                i += 3;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The longest status message sent, in bytes. Messages quote the
/// request's ids and paths, and a message is a header: one quoting a 64 KiB
/// id exceeded the client's header list limit (16 KiB in hyper and
/// grpc-go), which failed that call and reset the whole connection.
const MAX_MESSAGE_BYTES: usize = 2048;

/// Shortens `grpc-message` to [`MAX_MESSAGE_BYTES`] (before encoding),
/// saying how long it was.
fn bound_message(headers: &mut http::HeaderMap) {
    let Some(value) = headers.get("grpc-message") else {
        return;
    };
    // Encoding only lengthens: a short header holds a short message.
    if value.len() <= MAX_MESSAGE_BYTES {
        return;
    }
    let message = percent_decode(value.as_bytes());
    if message.len() <= MAX_MESSAGE_BYTES {
        return;
    }
    let mut end = MAX_MESSAGE_BYTES;
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    let short = format!("{}... ({} bytes)", &message[..end], message.len());
    if let Ok(value) = http::HeaderValue::from_str(&percent_encode(&short)) {
        headers.insert("grpc-message", value);
    }
}

/// gRPC's message encoding: bytes outside printable ASCII, and `%`, as `%XX`.
fn percent_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if (0x20..=0x7e).contains(&byte) && byte != b'%' {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// Codes that mean berth (or the host) failed, not the caller.
fn is_server_fault(code: &str) -> bool {
    matches!(
        code,
        "Unknown" | "Internal" | "DataLoss" | "Unavailable" | "transport error"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_timeouts_parse_in_every_unit() {
        use std::time::Duration;
        assert_eq!(parse_grpc_timeout("1m"), Some(Duration::from_millis(1)));
        assert_eq!(parse_grpc_timeout("999u"), Some(Duration::from_micros(999)));
        assert_eq!(parse_grpc_timeout("2S"), Some(Duration::from_secs(2)));
        assert_eq!(parse_grpc_timeout("3M"), Some(Duration::from_secs(180)));
        assert_eq!(parse_grpc_timeout("1H"), Some(Duration::from_secs(3600)));
        assert_eq!(parse_grpc_timeout("5n"), Some(Duration::from_nanos(5)));
        for bad in ["", "m", "5", "5x", "123456789S", "-1S"] {
            assert_eq!(parse_grpc_timeout(bad), None, "{bad}");
        }
    }

    /// A call still running at its deadline is answered DEADLINE_EXCEEDED
    /// (code 4), not left to tonic's CANCELLED.
    #[tokio::test]
    async fn a_call_past_its_deadline_is_deadline_exceeded() {
        let never = tower::service_fn(|_: http::Request<()>| {
            std::future::pending::<Result<http::Response<String>, std::convert::Infallible>>()
        });
        let mut service = RpcTraceLayer::new(None).layer(never);
        let request = http::Request::builder()
            .uri("/runtime.v1.ImageService/PullImage")
            .header("grpc-timeout", "20m")
            .body(())
            .unwrap();
        let response = service.call(request).await.unwrap();
        assert_eq!(grpc_code(response.headers()), "DeadlineExceeded");
    }

    #[test]
    fn rpc_names_drop_the_package() {
        assert_eq!(
            rpc_name("/runtime.v1.RuntimeService/Version"),
            "RuntimeService/Version"
        );
        assert_eq!(rpc_name("/other/Call"), "/other/Call");
    }

    #[test]
    fn code_comes_from_trailers_only_headers() {
        let mut headers = http::HeaderMap::new();
        assert_eq!(grpc_code(&headers), "Ok");
        headers.insert("grpc-status", http::HeaderValue::from_static("12"));
        assert_eq!(grpc_code(&headers), "Unimplemented");
    }

    #[test]
    fn message_is_percent_decoded() {
        let mut headers = http::HeaderMap::new();
        assert_eq!(grpc_message(&headers), "");
        headers.insert(
            "grpc-message",
            http::HeaderValue::from_static("creating%20c1:%20%22x%22%C3%A9 100%"),
        );
        assert_eq!(grpc_message(&headers), "creating c1: \"x\"é 100%");
        assert_eq!(percent_decode(b"%zz%4"), "%zz%4");
    }

    #[test]
    fn long_messages_are_cut_to_fit_in_a_header() {
        let id = format!("{}é", "x".repeat(64 * 1024));
        let status = tonic::Status::not_found(format!("container {id:?} not found"));
        let mut headers = status.into_http::<()>().headers().clone();
        bound_message(&mut headers);
        let message = grpc_message(&headers);
        assert!(message.starts_with("container \"xxx"), "{message}");
        assert!(message.ends_with(&format!("... ({} bytes)", id.len() + 22)));
        assert!(headers["grpc-message"].len() < 3 * 1024);
        assert_eq!(
            percent_decode(percent_encode("a b%é\n").as_bytes()),
            "a b%é\n"
        );
        // Short ones are left as they are.
        let mut headers = tonic::Status::not_found("c1")
            .into_http::<()>()
            .headers()
            .clone();
        bound_message(&mut headers);
        assert_eq!(grpc_message(&headers), "c1");
    }

    #[test]
    fn failed_calls_are_logged_with_their_message() {
        use std::sync::{Arc, Mutex};

        #[derive(Clone, Default)]
        struct Sink(Arc<Mutex<Vec<u8>>>);
        impl std::io::Write for Sink {
            fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
                self.0
                    .lock()
                    .map_err(|_| std::io::ErrorKind::Other)?
                    .extend_from_slice(buf);
                Ok(buf.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let sink = Sink::default();
        let writer = sink.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::INFO)
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish();
        let service = tower::service_fn(|_: http::Request<()>| async {
            let status = tonic::Status::failed_precondition("cannot create c1: rootfs");
            Ok::<_, std::convert::Infallible>(status.into_http::<()>())
        });
        let mut traced = RpcTraceLayer::default().layer(service);
        let request = http::Request::builder()
            .uri("/runtime.v1.RuntimeService/CreateContainer")
            .body(())
            .unwrap();
        let _guard = tracing::subscriber::set_default(subscriber);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        runtime.block_on(traced.call(request)).unwrap();
        let text = String::from_utf8(sink.0.lock().unwrap().clone()).unwrap();
        assert!(text.contains("INFO"), "{text}");
        assert!(text.contains("FailedPrecondition"), "{text}");
        assert!(text.contains("cannot create c1: rootfs"), "{text}");
    }
}
