//! `PortForward`: check the pod, then hand out a single-use URL on the
//! streaming server, which forwards into the pod's network namespace.

use cri_api::v1::{PortForwardRequest, PortForwardResponse};
use tonic::Status;

use super::streaming::url_error;
use super::{require, CriService};
use crate::sandbox::store::SandboxState;

impl CriService {
    pub(super) async fn serve_port_forward(
        &self,
        request: PortForwardRequest,
    ) -> Result<PortForwardResponse, Status> {
        let id = &request.pod_sandbox_id;
        require("pod_sandbox_id", id)?;
        let handle = self.context().sandboxes.get(id)?;
        let record = handle.lock().await.clone();
        if record.effective_state() != SandboxState::Ready {
            return Err(Status::failed_precondition(format!(
                "pod sandbox {id:?} is not ready"
            )));
        }
        // The full id: the request may have named the sandbox by a prefix.
        let url = self
            .context()
            .streams
            .port_forward_url(&record.id)
            .map_err(url_error)?;
        Ok(PortForwardResponse { url })
    }
}
