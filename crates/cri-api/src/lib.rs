//! The CRI v1 API (`runtime.v1`), as kubelet, crictl and critest speak it.
//!
//! Everything here is generated from `proto/api.proto` but one message,
//! `ListPodSandboxMetricsResponse` ([`metrics_answer`]), which a server may
//! send from bytes it keeps encoded.

#![forbid(unsafe_code)]
#![allow(clippy::all, missing_docs)]

/// Generated messages plus the `RuntimeService` and `ImageService` client and server.
pub mod v1 {
    tonic::include_proto!("runtime.v1");
    pub use crate::metrics_answer::ListPodSandboxMetricsResponse;
}

pub mod metrics_answer;
