//! `CreateContainer`, `StartContainer`, `StopContainer`, `RemoveContainer`.

use cri_api::v1::{
    CreateContainerRequest, CreateContainerResponse, RemoveContainerRequest,
    RemoveContainerResponse, StartContainerRequest, StartContainerResponse, StopContainerRequest,
    StopContainerResponse,
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
        let container_id = self
            .context()
            .containers
            .create(&request.pod_sandbox_id, config)
            .await?;
        Ok(CreateContainerResponse { container_id })
    }

    pub(super) async fn serve_start_container(
        &self,
        request: StartContainerRequest,
    ) -> Result<StartContainerResponse, Status> {
        require("container_id", &request.container_id)?;
        self.context()
            .containers
            .start(&request.container_id)
            .await?;
        Ok(StartContainerResponse {})
    }

    pub(super) async fn serve_stop_container(
        &self,
        request: StopContainerRequest,
    ) -> Result<StopContainerResponse, Status> {
        require("container_id", &request.container_id)?;
        self.context()
            .containers
            .stop(&request.container_id, request.timeout)
            .await?;
        Ok(StopContainerResponse {})
    }

    pub(super) async fn serve_remove_container(
        &self,
        request: RemoveContainerRequest,
    ) -> Result<RemoveContainerResponse, Status> {
        require("container_id", &request.container_id)?;
        self.context()
            .containers
            .remove(&request.container_id)
            .await?;
        Ok(RemoveContainerResponse {})
    }
}
