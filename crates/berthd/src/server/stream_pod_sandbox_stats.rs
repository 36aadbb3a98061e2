//! `StreamPodSandboxStats`: the `ListPodSandboxStats` answer in chunks.

use cri_api::v1::{StreamPodSandboxStatsRequest, StreamPodSandboxStatsResponse};
use tonic::Status;

use super::{stream_in_chunks, CriService, ResponseStream};

/// Stats per `StreamPodSandboxStats` message.
const STATS_PER_MESSAGE: usize = 100;

impl CriService {
    pub(super) async fn serve_stream_pod_sandbox_stats(
        &self,
        request: StreamPodSandboxStatsRequest,
    ) -> Result<ResponseStream<StreamPodSandboxStatsResponse>, Status> {
        let stats = self.filtered_sandbox_stats(request.filter).await;
        Ok(stream_in_chunks(
            stats,
            STATS_PER_MESSAGE,
            |pod_sandbox_stats| StreamPodSandboxStatsResponse { pod_sandbox_stats },
        ))
    }
}
