//! `StreamPodSandboxes`: the `ListPodSandbox` answer in chunks.

use cri_api::v1::{StreamPodSandboxesRequest, StreamPodSandboxesResponse};
use tonic::Status;

use super::{stream_in_chunks, CriService, ResponseStream};

/// Sandboxes per `StreamPodSandboxes` message.
const SANDBOXES_PER_MESSAGE: usize = 500;

impl CriService {
    pub(super) async fn serve_stream_pod_sandboxes(
        &self,
        request: StreamPodSandboxesRequest,
    ) -> Result<ResponseStream<StreamPodSandboxesResponse>, Status> {
        let items = self.filtered_sandboxes(request.filter).await;
        Ok(stream_in_chunks(
            items,
            SANDBOXES_PER_MESSAGE,
            |pod_sandboxes| StreamPodSandboxesResponse { pod_sandboxes },
        ))
    }
}
