//! `CreateContainer`.

use cri_api::v1::{
    ContainerConfig, ContainerEventType, CreateContainerRequest, CreateContainerResponse,
};
use tonic::Status;

use super::{require, CriService};

impl CriService {
    pub(super) async fn serve_create_container(
        &self,
        request: CreateContainerRequest,
    ) -> Result<CreateContainerResponse, Status> {
        require("pod_sandbox_id", &request.pod_sandbox_id)?;
        let config = request
            .config
            .ok_or_else(|| Status::invalid_argument("config is required"))?;
        check_config(&config)?;
        if let Some(sandbox_config) = &request.sandbox_config {
            super::sandbox_run::check_log_directory(
                "sandbox_config.log_directory",
                &sandbox_config.log_directory,
            )?;
        }
        let container_id = self
            .context()
            .containers
            .create(&request.pod_sandbox_id, config, request.sandbox_config)
            .await?;
        if let Ok(record) = self.context().containers.get(&container_id).await {
            self.emit_container_event(
                &record.id,
                &record.sandbox_id,
                ContainerEventType::ContainerCreatedEvent,
            )
            .await;
        }
        Ok(CreateContainerResponse { container_id })
    }
}

/// What the manager relies on: the container and its image are named.
fn check_config(config: &ContainerConfig) -> Result<(), Status> {
    let metadata = config
        .metadata
        .as_ref()
        .ok_or_else(|| Status::invalid_argument("config.metadata is required"))?;
    require("config.metadata.name", &metadata.name)?;
    let image = config.image.as_ref().map(|image| image.image.as_str());
    require("config.image.image", image.unwrap_or_default())
}
