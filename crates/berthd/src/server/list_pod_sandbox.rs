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
        for handle in self.context().sandboxes.store.all() {
            let record = handle.lock().await.clone();
            if !filter.id.is_empty() && !record.id.starts_with(&filter.id) {
                continue;
            }
            if let Some(state) = &filter.state {
                if state.state() != cri_state(record.effective_state()) {
                    continue;
                }
            }
            let config = record.config.clone();
            if !labels_match(&config.labels, &filter.label_selector) {
                continue;
            }
            items.push(PodSandbox {
                id: record.id.clone(),
                metadata: config.metadata.clone(),
                state: cri_state(record.effective_state()) as i32,
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
