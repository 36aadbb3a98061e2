//! `Version`: who we are and which CRI version we speak.

use cri_api::v1::{VersionRequest, VersionResponse};

use super::CriService;

/// The runtime name kubelet and crictl show.
pub const RUNTIME_NAME: &str = "berth";
/// The CRI version served.
pub const RUNTIME_API_VERSION: &str = "v1";
/// The version of the kubelet-runtime API itself, fixed by CRI at "0.1.0".
const KUBELET_API_VERSION: &str = "0.1.0";

impl CriService {
    pub(super) fn serve_version(&self, _request: VersionRequest) -> VersionResponse {
        VersionResponse {
            version: KUBELET_API_VERSION.to_string(),
            runtime_name: RUNTIME_NAME.to_string(),
            runtime_version: env!("CARGO_PKG_VERSION").to_string(),
            runtime_api_version: RUNTIME_API_VERSION.to_string(),
        }
    }
}
