//! `ListContainerStats`.

use cri_api::v1::{
    ContainerStats, ContainerStatsFilter, ListContainerStatsRequest, ListContainerStatsResponse,
};
use futures_util::stream::{self, StreamExt};
use tonic::Status;

use super::container_stats::READS_AT_ONCE;
use super::filters::labels_match;
use super::CriService;

impl CriService {
    pub(super) async fn serve_list_container_stats(
        &self,
        request: ListContainerStatsRequest,
    ) -> Result<ListContainerStatsResponse, Status> {
        Ok(ListContainerStatsResponse {
            stats: self.filtered_container_stats(request.filter).await,
        })
    }

    pub(super) async fn filtered_container_stats(
        &self,
        filter: Option<ContainerStatsFilter>,
    ) -> Vec<ContainerStats> {
        let filter = filter.unwrap_or_default();
        let containers = &self.context().containers;
        let mut records = Vec::new();
        for record in containers.store.published_all() {
            let matches = !record.is_sandbox_container()
                && record.id.starts_with(&filter.id)
                && record.sandbox_id.starts_with(&filter.pod_sandbox_id)
                && labels_match(&record.config.labels, &filter.label_selector);
            if matches {
                records.push(record);
            }
        }
        stream::iter(records)
            .map(|record| async move { self.container_stats(&record).await })
            .buffered(READS_AT_ONCE)
            .collect()
            .await
    }
}
