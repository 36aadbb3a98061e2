//! `ListPodSandbox`.

use cri_api::v1::{ListPodSandboxRequest, ListPodSandboxResponse, PodSandbox, PodSandboxFilter};
use tonic::Status;

use super::filters::labels_match;
use super::sandbox_status::cri_state;
use super::CriService;

impl CriService {
    pub(super) async fn serve_list_pod_sandbox(
        &self,
        request: ListPodSandboxRequest,
    ) -> Result<ListPodSandboxResponse, Status> {
        Ok(ListPodSandboxResponse {
            items: self.filtered_sandboxes(request.filter).await,
        })
    }

    pub(super) async fn filtered_sandboxes(
        &self,
        filter: Option<PodSandboxFilter>,
    ) -> Vec<PodSandbox> {
        let filter = filter.unwrap_or_default();
        let mut items = Vec::new();
        // Each pod as last persisted: a list never waits for a stop in
        // progress, and copies out only what passes the filter.
        for record in self.context().sandboxes.store.published_all() {
            if !filter.id.is_empty() && !record.id.starts_with(&filter.id) {
                continue;
            }
            let state = cri_state(record.effective_state());
            if filter
                .state
                .as_ref()
                .is_some_and(|wanted| wanted.state() != state)
            {
                continue;
            }
            let config = &record.config;
            if !labels_match(&config.labels, &filter.label_selector) {
                continue;
            }
            items.push(PodSandbox {
                id: record.id.clone(),
                metadata: config.metadata.clone(),
                state: state as i32,
                created_at: record.created_at,
                labels: config.labels.clone(),
                annotations: config.annotations.clone(),
                runtime_handler: record.runtime_handler.clone(),
            });
        }
        items.sort_by_key(|item| std::cmp::Reverse(item.created_at));
        items
    }
}
