//! `RuntimeConfig` (KEP-4033): the cgroup driver kubelet must use.

use cri_api::v1::{LinuxRuntimeConfiguration, RuntimeConfigRequest, RuntimeConfigResponse};

use super::CriService;

impl CriService {
    pub(super) fn serve_runtime_config(
        &self,
        _request: RuntimeConfigRequest,
    ) -> RuntimeConfigResponse {
        RuntimeConfigResponse {
            linux: Some(LinuxRuntimeConfiguration {
                cgroup_driver: self.context().cgroup_driver.to_cri() as i32,
            }),
        }
    }
}
