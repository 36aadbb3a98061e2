//! `RestorePod` (KEP-5823): a new pod from a pod checkpoint
//! (`crate::pod`, `crate::pod_checkpoint`), its containers created;
//! StartContainer restores each one's processes.

use cri_api::v1::{RestorePodRequest, RestorePodResponse, RestoredContainer};
use tonic::Status;

use super::{require, to_completion, CriService};
use crate::pod_checkpoint::RestorePod;

impl CriService {
    pub(super) async fn serve_restore_pod(
        &self,
        request: RestorePodRequest,
    ) -> Result<RestorePodResponse, Status> {
        require("checkpoint_path", &request.checkpoint_path)?;
        let config = request
            .config
            .clone()
            .ok_or_else(|| Status::invalid_argument("config is required"))?;
        super::sandbox_run::check_config(&config)?;
        for (i, container) in request.container_configs.iter().enumerate() {
            super::container_create::check_config(container).map_err(|status| {
                Status::invalid_argument(format!("container_configs[{i}]: {}", status.message()))
            })?;
        }
        let pods = self.pods();
        // The pod layer emits the pod's and its containers' events.
        let restored = to_completion(async move {
            pods.restore(RestorePod {
                checkpoint_path: &request.checkpoint_path,
                config: &config,
                runtime_handler: &request.runtime_handler,
                options: &request.options,
                container_configs: &request.container_configs,
            })
            .await
            .map_err(Status::from)
        })
        .await?;
        Ok(RestorePodResponse {
            pod_sandbox_id: restored.pod_sandbox_id,
            restored_containers: restored
                .containers
                .into_iter()
                .map(|(name, container_id)| RestoredContainer { name, container_id })
                .collect(),
        })
    }
}
