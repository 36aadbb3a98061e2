//! `ListContainers`.

use cri_api::v1::{Container, ContainerFilter, ListContainersRequest, ListContainersResponse};
use futures_util::stream::{self, StreamExt};
use tonic::Status;

use super::container_status::{cri_state, image_spec};
use super::filters::labels_match;
use super::CriService;

/// States asked of shims at once, when none is kept.
const STATES_AT_ONCE: usize = 16;

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
        // Each container as last persisted: a list never waits for a
        // removal in progress, and copies out only what passes the filter.
        let records: Vec<_> = containers
            .store
            .published_all()
            .into_iter()
            .filter(|record| {
                // A handler's sandbox container is the pod's, not one of
                // its containers.
                !record.is_sandbox_container()
                    && (filter.id.is_empty() || record.id.starts_with(&filter.id))
                    && (filter.pod_sandbox_id.is_empty()
                        || record.sandbox_id.starts_with(&filter.pod_sandbox_id))
                    && labels_match(&record.config.labels, &filter.label_selector)
            })
            .collect();
        // The states at once: a shim that does not answer costs the list
        // its bound once, not once per such shim.
        let states: Vec<_> = stream::iter(records.iter().cloned())
            .map(|record| async move { containers.state(&record).await })
            .buffered(STATES_AT_ONCE)
            .collect()
            .await;
        for (record, state) in records.iter().zip(states) {
            let state = cri_state(state.as_ref());
            if let Some(wanted) = &filter.state {
                if wanted.state() != state {
                    continue;
                }
            }
            let image = Some(image_spec(record));
            items.push(Container {
                image,
                image_ref: record.image_id.clone(),
                state: state as i32,
                created_at: record.created_at,
                metadata: record.config.metadata.clone(),
                labels: record.config.labels.clone(),
                annotations: record.config.annotations.clone(),
                image_id: record.image_id.clone(),
                id: record.id.clone(),
                pod_sandbox_id: record.sandbox_id.clone(),
            });
        }
        items.sort_by_key(|item| std::cmp::Reverse(item.created_at));
        items
    }
}
