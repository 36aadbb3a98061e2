//! Where the pod layer tells of lifecycle moves. The server builds CRI
//! events from them (with the pod's and containers' statuses); tests
//! record them to check their order.

use async_trait::async_trait;

/// A move of a container, or of the pod itself (its id standing in the
/// container's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lifecycle {
    Created,
    Started,
    /// Stopped, if it had started (one that never ran has no STOPPED).
    Stopped,
    /// STOPPED if still due, then DELETED.
    Removed,
}

#[async_trait]
pub trait PodEvents: Send + Sync {
    /// `id` (a container of pod `sandbox_id`, or `sandbox_id` itself) made
    /// move `what`.
    async fn emit(&self, id: &str, sandbox_id: &str, what: Lifecycle);
}
