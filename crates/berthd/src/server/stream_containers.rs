//! `StreamContainers`: the `ListContainers` answer in chunks.

use cri_api::v1::{StreamContainersRequest, StreamContainersResponse};
use tonic::Status;

use super::{stream_in_chunks, CriService, ResponseStream};

/// Containers per `StreamContainers` message.
const CONTAINERS_PER_MESSAGE: usize = 500;

impl CriService {
    pub(super) async fn serve_stream_containers(
        &self,
        request: StreamContainersRequest,
    ) -> Result<ResponseStream<StreamContainersResponse>, Status> {
        let containers = self.filtered_containers(request.filter).await;
        Ok(stream_in_chunks(
            containers,
            CONTAINERS_PER_MESSAGE,
            |containers| StreamContainersResponse { containers },
        ))
    }
}
