//! One span per RPC: method, duration and gRPC code, logged and counted
//! (in [`crate::metrics`]) in one place instead of in every handler.

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
        let call = self.inner.call(request).instrument(span.clone());
        let metrics = self.metrics.clone();
        Box::pin(async move {
            let started = Instant::now();
            let result = call.await;
            let code = match &result {
                Ok(response) => grpc_code(response.headers()),
                Err(_) => "transport error".to_string(),
            };
            let elapsed = started.elapsed().as_secs_f64();
            if let Some(metrics) = &metrics {
                metrics.observe_rpc(&method, &code, elapsed);
            }
            let elapsed_ms = elapsed * 1000.0;
            span.record("code", code.as_str());
            span.record("duration_ms", elapsed_ms);
            span.in_scope(|| {
                // kubelet polls some RPCs every second: successes stay at debug.
                if code == "Ok" {
                    tracing::debug!("rpc done");
                } else {
                    tracing::info!("rpc failed");
                }
            });
            result
        })
    }
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
