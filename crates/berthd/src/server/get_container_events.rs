//! `GetContainerEvents`: every lifecycle event from subscription on (see
//! `lifecycle_events.rs` for where they come from).

use cri_api::v1::ContainerEventResponse;
use tokio::sync::broadcast::error::RecvError;
use tonic::Status;

use super::{CriService, ResponseStream};

impl CriService {
    pub(super) async fn serve_get_container_events(
        &self,
    ) -> Result<ResponseStream<ContainerEventResponse>, Status> {
        let receiver = self.context().events.subscribe();
        let stream = futures_util::stream::unfold(Some(receiver), |receiver| async move {
            let mut receiver = receiver?;
            match receiver.recv().await {
                Ok(event) => Some((Ok(event), Some(receiver))),
                // A subscriber that fell behind is told, and its stream
                // ends: it must resync (kubelet relists), as events it
                // missed are gone.
                Err(RecvError::Lagged(missed)) => Some((
                    Err(Status::aborted(format!(
                        "event subscriber fell behind: {missed} events dropped; subscribe again"
                    ))),
                    None,
                )),
                Err(RecvError::Closed) => None,
            }
        });
        Ok(Box::pin(stream))
    }
}
