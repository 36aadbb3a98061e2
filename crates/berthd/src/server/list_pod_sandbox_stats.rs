//! `ListPodSandboxStats`.

use cri_api::v1::{
    ListPodSandboxStatsRequest, ListPodSandboxStatsResponse, PodSandboxStats, PodSandboxStatsFilter,
};
use futures_util::stream::{self, StreamExt};
use tonic::Status;

use super::container_stats::READS_AT_ONCE;
use super::filters::labels_match;
use super::CriService;

impl CriService {
    pub(super) async fn serve_list_pod_sandbox_stats(
        &self,
        request: ListPodSandboxStatsRequest,
    ) -> Result<ListPodSandboxStatsResponse, Status> {
        Ok(ListPodSandboxStatsResponse {
            stats: self.filtered_sandbox_stats(request.filter).await,
        })
    }

    pub(super) async fn filtered_sandbox_stats(
        &self,
        filter: Option<PodSandboxStatsFilter>,
    ) -> Vec<PodSandboxStats> {
        let filter = filter.unwrap_or_default();
        let mut records = Vec::new();
        for record in self.context().sandboxes.store.published_all() {
            if record.id.starts_with(&filter.id)
                && labels_match(&record.config.labels, &filter.label_selector)
            {
                records.push(record);
            }
        }
        stream::iter(records)
            .map(|record| async move { self.pod_sandbox_stats(&record).await })
            .buffered(READS_AT_ONCE)
            .collect()
            .await
    }
}
