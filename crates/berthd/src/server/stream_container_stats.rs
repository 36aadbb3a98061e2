//! `StreamContainerStats`: the `ListContainerStats` answer in chunks.

use cri_api::v1::{StreamContainerStatsRequest, StreamContainerStatsResponse};
use tonic::Status;

use super::{stream_in_chunks, CriService, ResponseStream};

/// Stats per `StreamContainerStats` message.
const STATS_PER_MESSAGE: usize = 200;

impl CriService {
    pub(super) async fn serve_stream_container_stats(
        &self,
        request: StreamContainerStatsRequest,
    ) -> Result<ResponseStream<StreamContainerStatsResponse>, Status> {
        let stats = self.filtered_container_stats(request.filter).await;
        Ok(stream_in_chunks(
            stats,
            STATS_PER_MESSAGE,
            |container_stats| StreamContainerStatsResponse { container_stats },
        ))
    }
}
