//! What a pod stop or remove fails on: the first failing container's or
//! the sandbox's own error, unchanged (`server/errors.rs` keeps their
//! codes and messages).

use crate::container::ContainerError;
use crate::sandbox::SandboxError;

#[derive(Debug, thiserror::Error)]
pub enum PodError {
    #[error(transparent)]
    Container(#[from] ContainerError),
    #[error(transparent)]
    Sandbox(#[from] SandboxError),
}
