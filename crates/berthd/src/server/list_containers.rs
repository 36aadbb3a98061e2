//! `ListContainers`.

use cri_api::v1::{Container, ContainerFilter, ListContainersRequest, ListContainersResponse};
use tonic::Status;

use super::container_status::{cri_state, image_spec};
use super::filters::labels_match;
use super::CriService;

impl CriService {
    pub(super) async fn serve_list_containers(
        &self,
        request: ListContainersRequest,
    ) -> Result<ListContainersResponse, Status> {
        Ok(ListContainersResponse {
            containers: self.filtered_containers(request.filter).await,
        })
    }

    pub(super) async fn filtered_containers(
        &self,
        filter: Option<ContainerFilter>,
    ) -> Vec<Container> {
        let filter = filter.unwrap_or_default();
        let containers = &self.context().containers;
        let mut items = Vec::new();
        for handle in containers.store.all() {
            let record = handle.lock().await.clone();
            if !filter.id.is_empty() && !record.id.starts_with(&filter.id) {
                continue;
            }
            if !filter.pod_sandbox_id.is_empty()
                && !record.sandbox_id.starts_with(&filter.pod_sandbox_id)
            {
                continue;
            }
            let config = record.config.clone();
            if !labels_match(&config.labels, &filter.label_selector) {
                continue;
            }
            let state = cri_state(containers.state(&record).await.as_ref());
            if let Some(wanted) = &filter.state {
                if wanted.state() != state {
                    continue;
                }
            }
            items.push(Container {
                id: record.id.clone(),
                pod_sandbox_id: record.sandbox_id.clone(),
                metadata: config.metadata.clone(),
                image: Some(image_spec(&record)),
                image_ref: record.image_id.clone(),
                state: state as i32,
                created_at: record.created_at,
                labels: config.labels.clone(),
                annotations: config.annotations.clone(),
                image_id: record.image_id.clone(),
            });
        }
        items.sort_by_key(|item| std::cmp::Reverse(item.created_at));
        items
    }
}
