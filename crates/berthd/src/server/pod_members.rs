//! The pod layer (`crate::pod`) as the handlers call it: over the
//! context's managers, its events emitted as CRI events.

use std::sync::Arc;

use super::CriService;
use crate::pod::Pods;

impl CriService {
    /// The pod layer, telling this service's event bus.
    pub(super) fn pods(&self) -> Pods {
        let context = self.context();
        Pods::new(
            context.sandboxes.clone(),
            context.containers.clone(),
            Arc::new(self.clone()),
        )
    }
}
