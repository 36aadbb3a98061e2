//! `UpdateRuntimeConfig`: kubelet hands over the node's pod CIDR.

use cri_api::v1::{UpdateRuntimeConfigRequest, UpdateRuntimeConfigResponse};
use tonic::Status;

use super::CriService;

impl CriService {
    /// Keeps the pod CIDR and passes it to CNI plugins that declare the
    /// `ipRanges` capability (host-local then allocates from it), the
    /// template-free form of what containerd does with it.
    pub(super) async fn serve_update_runtime_config(
        &self,
        request: UpdateRuntimeConfigRequest,
    ) -> Result<UpdateRuntimeConfigResponse, Status> {
        let cidr = request
            .runtime_config
            .and_then(|config| config.network_config)
            .map(|network| network.pod_cidr)
            .unwrap_or_default();
        if cidr.is_empty() {
            return Ok(UpdateRuntimeConfigResponse {});
        }
        if !is_cidr(&cidr) {
            return Err(Status::invalid_argument(format!(
                "runtime_config.network_config.pod_cidr {cidr:?} is not a CIDR"
            )));
        }
        let sandboxes = &self.context().sandboxes;
        let mut current = sandboxes
            .pod_cidr
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if current.as_deref() != Some(cidr.as_str()) {
            tracing::info!(pod_cidr = %cidr, "pod CIDR updated");
            *current = Some(cidr);
        }
        Ok(UpdateRuntimeConfigResponse {})
    }
}

/// `10.244.0.0/24` or `fd00::/64`; several may be comma-separated.
fn is_cidr(text: &str) -> bool {
    text.split(',').all(|part| {
        part.trim().split_once('/').is_some_and(|(ip, bits)| {
            let max = if ip.contains(':') { 128 } else { 32 };
            ip.parse::<std::net::IpAddr>().is_ok()
                && bits.parse::<u8>().is_ok_and(|bits| bits <= max)
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cidrs() {
        assert!(is_cidr("10.244.0.0/24"));
        assert!(is_cidr("10.244.0.0/24,fd00::/64"));
        assert!(!is_cidr("10.244.0.0"));
        assert!(!is_cidr("10.244.0.0/33"));
        assert!(!is_cidr("nope/8"));
    }
}
