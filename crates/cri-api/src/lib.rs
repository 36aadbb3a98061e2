//! The CRI v1 API (`runtime.v1`), as kubelet, crictl and critest speak it.
//!
//! Everything here is generated from `proto/api.proto`; no hand-written logic
//! lives in this crate.

#![forbid(unsafe_code)]
#![allow(clippy::all, missing_docs)]

/// Generated messages plus the `RuntimeService` and `ImageService` client and server.
pub mod v1 {
    tonic::include_proto!("runtime.v1");
}
