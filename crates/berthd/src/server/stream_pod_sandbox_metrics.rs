//! `StreamPodSandboxMetrics`: the `ListPodSandboxMetrics` answer in chunks.

use cri_api::v1::StreamPodSandboxMetricsResponse;
use tonic::Status;

use super::{stream_in_chunks, CriService, ResponseStream};

/// Pods per `StreamPodSandboxMetrics` message.
const PODS_PER_MESSAGE: usize = 100;

impl CriService {
    pub(super) async fn serve_stream_pod_sandbox_metrics(
        &self,
    ) -> Result<ResponseStream<StreamPodSandboxMetricsResponse>, Status> {
        let metrics = self.all_pod_metrics().await;
        Ok(stream_in_chunks(
            metrics,
            PODS_PER_MESSAGE,
            |pod_sandbox_metrics| StreamPodSandboxMetricsResponse {
                pod_sandbox_metrics,
            },
        ))
    }
}
