//! Routes each `RuntimeService` RPC to `serve_<rpc>` in the file named
//! after it. RPCs not built yet answer `UNIMPLEMENTED` naming themselves.

use cri_api::v1::runtime_service_server::RuntimeService;
use cri_api::v1::*;
use tonic::{Request, Response, Status};

use super::{create_to_completion, to_completion, CriService, ResponseStream};

#[tonic::async_trait]
impl RuntimeService for CriService {
    type StreamPodSandboxesStream = ResponseStream<StreamPodSandboxesResponse>;
    type StreamContainersStream = ResponseStream<StreamContainersResponse>;
    type StreamContainerStatsStream = ResponseStream<StreamContainerStatsResponse>;
    type StreamPodSandboxStatsStream = ResponseStream<StreamPodSandboxStatsResponse>;
    type GetContainerEventsStream = ResponseStream<ContainerEventResponse>;
    type StreamPodSandboxMetricsStream = ResponseStream<StreamPodSandboxMetricsResponse>;

    async fn version(
        &self,
        request: Request<VersionRequest>,
    ) -> Result<Response<VersionResponse>, Status> {
        Ok(Response::new(self.serve_version(request.into_inner())))
    }

    async fn run_pod_sandbox(
        &self,
        request: Request<RunPodSandboxRequest>,
    ) -> Result<Response<RunPodSandboxResponse>, Status> {
        let service = self.clone();
        let sandboxes = self.context().sandboxes.clone();
        create_to_completion(
            async move { service.serve_run_pod_sandbox(request.into_inner()).await },
            |made: &RunPodSandboxResponse| {
                let id = made.pod_sandbox_id.clone();
                async move {
                    if let Err(err) = sandboxes.remove(&id).await {
                        tracing::warn!(sandbox = %id, error = %err, "removing an abandoned sandbox");
                    }
                }
            },
        )
        .await
        .map(Response::new)
    }

    async fn stop_pod_sandbox(
        &self,
        request: Request<StopPodSandboxRequest>,
    ) -> Result<Response<StopPodSandboxResponse>, Status> {
        let service = self.clone();
        to_completion(async move { service.serve_stop_pod_sandbox(request.into_inner()).await })
            .await
            .map(Response::new)
    }

    async fn remove_pod_sandbox(
        &self,
        request: Request<RemovePodSandboxRequest>,
    ) -> Result<Response<RemovePodSandboxResponse>, Status> {
        let service = self.clone();
        to_completion(async move { service.serve_remove_pod_sandbox(request.into_inner()).await })
            .await
            .map(Response::new)
    }

    async fn pod_sandbox_status(
        &self,
        request: Request<PodSandboxStatusRequest>,
    ) -> Result<Response<PodSandboxStatusResponse>, Status> {
        self.serve_pod_sandbox_status(request.into_inner())
            .await
            .map(Response::new)
    }

    async fn list_pod_sandbox(
        &self,
        request: Request<ListPodSandboxRequest>,
    ) -> Result<Response<ListPodSandboxResponse>, Status> {
        self.serve_list_pod_sandbox(request.into_inner())
            .await
            .map(Response::new)
    }

    async fn stream_pod_sandboxes(
        &self,
        request: Request<StreamPodSandboxesRequest>,
    ) -> Result<Response<Self::StreamPodSandboxesStream>, Status> {
        self.serve_stream_pod_sandboxes(request.into_inner())
            .await
            .map(Response::new)
    }

    async fn create_container(
        &self,
        request: Request<CreateContainerRequest>,
    ) -> Result<Response<CreateContainerResponse>, Status> {
        let service = self.clone();
        let containers = self.context().containers.clone();
        create_to_completion(
            async move { service.serve_create_container(request.into_inner()).await },
            |made: &CreateContainerResponse| {
                let id = made.container_id.clone();
                async move {
                    if let Err(err) = containers.remove(&id).await {
                        tracing::warn!(container = %id, error = %err, "removing an abandoned container");
                    }
                }
            },
        )
        .await
        .map(Response::new)
    }

    async fn start_container(
        &self,
        request: Request<StartContainerRequest>,
    ) -> Result<Response<StartContainerResponse>, Status> {
        let service = self.clone();
        to_completion(async move { service.serve_start_container(request.into_inner()).await })
            .await
            .map(Response::new)
    }

    async fn stop_container(
        &self,
        request: Request<StopContainerRequest>,
    ) -> Result<Response<StopContainerResponse>, Status> {
        let service = self.clone();
        to_completion(async move { service.serve_stop_container(request.into_inner()).await })
            .await
            .map(Response::new)
    }

    async fn remove_container(
        &self,
        request: Request<RemoveContainerRequest>,
    ) -> Result<Response<RemoveContainerResponse>, Status> {
        let service = self.clone();
        to_completion(async move { service.serve_remove_container(request.into_inner()).await })
            .await
            .map(Response::new)
    }

    async fn list_containers(
        &self,
        request: Request<ListContainersRequest>,
    ) -> Result<Response<ListContainersResponse>, Status> {
        self.serve_list_containers(request.into_inner())
            .await
            .map(Response::new)
    }

    async fn stream_containers(
        &self,
        request: Request<StreamContainersRequest>,
    ) -> Result<Response<Self::StreamContainersStream>, Status> {
        self.serve_stream_containers(request.into_inner())
            .await
            .map(Response::new)
    }

    async fn container_status(
        &self,
        request: Request<ContainerStatusRequest>,
    ) -> Result<Response<ContainerStatusResponse>, Status> {
        self.serve_container_status(request.into_inner())
            .await
            .map(Response::new)
    }

    async fn update_container_resources(
        &self,
        request: Request<UpdateContainerResourcesRequest>,
    ) -> Result<Response<UpdateContainerResourcesResponse>, Status> {
        let service = self.clone();
        to_completion(async move {
            service
                .serve_update_container_resources(request.into_inner())
                .await
        })
        .await
        .map(Response::new)
    }

    async fn reopen_container_log(
        &self,
        request: Request<ReopenContainerLogRequest>,
    ) -> Result<Response<ReopenContainerLogResponse>, Status> {
        self.serve_reopen_container_log(request.into_inner())
            .await
            .map(Response::new)
    }

    async fn exec_sync(
        &self,
        request: Request<ExecSyncRequest>,
    ) -> Result<Response<ExecSyncResponse>, Status> {
        self.serve_exec_sync(request.into_inner())
            .await
            .map(Response::new)
    }

    async fn exec(&self, request: Request<ExecRequest>) -> Result<Response<ExecResponse>, Status> {
        self.serve_exec(request.into_inner())
            .await
            .map(Response::new)
    }

    async fn attach(
        &self,
        request: Request<AttachRequest>,
    ) -> Result<Response<AttachResponse>, Status> {
        self.serve_attach(request.into_inner())
            .await
            .map(Response::new)
    }

    async fn port_forward(
        &self,
        request: Request<PortForwardRequest>,
    ) -> Result<Response<PortForwardResponse>, Status> {
        self.serve_port_forward(request.into_inner())
            .await
            .map(Response::new)
    }

    async fn container_stats(
        &self,
        request: Request<ContainerStatsRequest>,
    ) -> Result<Response<ContainerStatsResponse>, Status> {
        self.serve_container_stats(request.into_inner())
            .await
            .map(Response::new)
    }

    async fn list_container_stats(
        &self,
        request: Request<ListContainerStatsRequest>,
    ) -> Result<Response<ListContainerStatsResponse>, Status> {
        self.serve_list_container_stats(request.into_inner())
            .await
            .map(Response::new)
    }

    async fn stream_container_stats(
        &self,
        request: Request<StreamContainerStatsRequest>,
    ) -> Result<Response<Self::StreamContainerStatsStream>, Status> {
        self.serve_stream_container_stats(request.into_inner())
            .await
            .map(Response::new)
    }

    async fn pod_sandbox_stats(
        &self,
        request: Request<PodSandboxStatsRequest>,
    ) -> Result<Response<PodSandboxStatsResponse>, Status> {
        self.serve_pod_sandbox_stats(request.into_inner())
            .await
            .map(Response::new)
    }

    async fn list_pod_sandbox_stats(
        &self,
        request: Request<ListPodSandboxStatsRequest>,
    ) -> Result<Response<ListPodSandboxStatsResponse>, Status> {
        self.serve_list_pod_sandbox_stats(request.into_inner())
            .await
            .map(Response::new)
    }

    async fn stream_pod_sandbox_stats(
        &self,
        request: Request<StreamPodSandboxStatsRequest>,
    ) -> Result<Response<Self::StreamPodSandboxStatsStream>, Status> {
        self.serve_stream_pod_sandbox_stats(request.into_inner())
            .await
            .map(Response::new)
    }

    async fn update_runtime_config(
        &self,
        request: Request<UpdateRuntimeConfigRequest>,
    ) -> Result<Response<UpdateRuntimeConfigResponse>, Status> {
        self.serve_update_runtime_config(request.into_inner())
            .await
            .map(Response::new)
    }

    async fn status(
        &self,
        request: Request<StatusRequest>,
    ) -> Result<Response<StatusResponse>, Status> {
        Ok(Response::new(self.serve_status(request.into_inner())))
    }

    async fn checkpoint_container(
        &self,
        request: Request<CheckpointContainerRequest>,
    ) -> Result<Response<CheckpointContainerResponse>, Status> {
        self.serve_checkpoint_container(request.into_inner())
            .await
            .map(Response::new)
    }

    async fn checkpoint_pod(
        &self,
        request: Request<CheckpointPodRequest>,
    ) -> Result<Response<CheckpointPodResponse>, Status> {
        self.serve_checkpoint_pod(request.into_inner())
            .await
            .map(Response::new)
    }

    async fn restore_pod(
        &self,
        request: Request<RestorePodRequest>,
    ) -> Result<Response<RestorePodResponse>, Status> {
        self.serve_restore_pod(request.into_inner())
            .await
            .map(Response::new)
    }

    async fn get_container_events(
        &self,
        _request: Request<GetEventsRequest>,
    ) -> Result<Response<Self::GetContainerEventsStream>, Status> {
        self.serve_get_container_events().await.map(Response::new)
    }

    async fn list_metric_descriptors(
        &self,
        _request: Request<ListMetricDescriptorsRequest>,
    ) -> Result<Response<ListMetricDescriptorsResponse>, Status> {
        Ok(Response::new(self.serve_list_metric_descriptors()))
    }

    async fn list_pod_sandbox_metrics(
        &self,
        _request: Request<ListPodSandboxMetricsRequest>,
    ) -> Result<Response<ListPodSandboxMetricsResponse>, Status> {
        self.serve_list_pod_sandbox_metrics()
            .await
            .map(Response::new)
    }

    async fn stream_pod_sandbox_metrics(
        &self,
        _request: Request<StreamPodSandboxMetricsRequest>,
    ) -> Result<Response<Self::StreamPodSandboxMetricsStream>, Status> {
        self.serve_stream_pod_sandbox_metrics()
            .await
            .map(Response::new)
    }

    async fn runtime_config(
        &self,
        request: Request<RuntimeConfigRequest>,
    ) -> Result<Response<RuntimeConfigResponse>, Status> {
        Ok(Response::new(
            self.serve_runtime_config(request.into_inner()),
        ))
    }

    async fn update_pod_sandbox_resources(
        &self,
        request: Request<UpdatePodSandboxResourcesRequest>,
    ) -> Result<Response<UpdatePodSandboxResourcesResponse>, Status> {
        self.serve_update_pod_sandbox_resources(request.into_inner())
            .await
            .map(Response::new)
    }
}
