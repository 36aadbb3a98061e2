//! Intents: what a RunPodSandbox or CreateContainer is about to make,
//! written into the object's directory before its first side effect. A
//! directory with an intent and no record is a create that never finished;
//! recovery undoes it from the intent. Every step of that undo is idempotent,
//! so an intent may name things that were never made.
//!
//! RunPodSandbox and CreateContainer write journals instead
//! (`crate::sandbox::journal`, `crate::container::journal`): intents are
//! only read, from older berthds, and converted.

use std::path::{Path, PathBuf};

use cri_api::v1::PodSandboxConfig;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// The file's name in the sandbox's or container's state directory.
pub const FILE: &str = "intent.json";

/// The format this berthd writes. A file of a later format is left alone
/// (a newer berthd wrote it, and this one cannot know what it means).
pub const FORMAT: u32 = 1;

/// What RunPodSandbox of an older berthd may have made for sandbox `id`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SandboxIntent {
    pub format: u32,
    pub id: String,
    /// The sandbox's cgroup (a scope under systemd).
    pub cgroup_path: String,
    /// The sandbox's directory; its infra process's root is `<dir>/root`,
    /// its /dev/shm `<dir>/shm`.
    pub dir: PathBuf,
    /// Where its namespaces are pinned.
    pub ns_dir: PathBuf,
    /// The CNI config list as read, when the pod gets a network: DEL needs
    /// it even if ADD never finished (it may have allocated an IP).
    pub network_config: Option<String>,
    /// The request's config, for the pod's CNI arguments at DEL.
    #[serde(with = "crate::state_store::proto_base64")]
    pub config: PodSandboxConfig,
}

/// What CreateContainer of an older berthd may have made for container `id`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ContainerIntent {
    pub format: u32,
    pub id: String,
    /// The bundle (this file's directory) with the mounted rootfs.
    pub bundle: PathBuf,
    /// The rootfs's upper and work dirs.
    pub layer_dir: PathBuf,
    /// The shim's directory: its pid files name the shim to kill.
    pub shim_dir: PathBuf,
    /// The container's cgroup, as the runtime makes it.
    pub cgroup_path: String,
    /// Its pod's runtime handler (`""`: the default): which runtime's
    /// state root may hold its state.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub runtime_handler: String,
}

/// Errors of intent files.
#[derive(Debug, thiserror::Error)]
pub enum IntentError {
    #[error("writing intent {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("intent {path}: {message}")]
    Unreadable { path: PathBuf, message: String },
    #[error("intent {path} has format {format}, newer than this berthd's {FORMAT}")]
    Newer { path: PathBuf, format: u32 },
}

/// Writes an intent into `dir` (which must exist), atomically and durably:
/// it must be on disk before the side effects it announces.
pub fn write<I: Serialize>(dir: &Path, intent: &I) -> Result<(), IntentError> {
    let path = dir.join(FILE);
    let bytes = serde_json::to_vec(intent).map_err(|err| IntentError::Write {
        path: path.clone(),
        source: std::io::Error::other(err),
    })?;
    berth_atomic_file::write_atomic(&path, &bytes, 0o600)
        .map_err(|source| IntentError::Write { path, source })
}

/// The intent in `dir`; `Ok(None)` when there is none.
pub fn read<I: DeserializeOwned + Versioned>(dir: &Path) -> Result<Option<I>, IntentError> {
    let path = dir.join(FILE);
    let bytes = match std::fs::read(&path) {
        Ok(bytes) => bytes,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(err) => {
            return Err(IntentError::Unreadable {
                path,
                message: err.to_string(),
            })
        }
    };
    let intent: I = serde_json::from_slice(&bytes).map_err(|err| IntentError::Unreadable {
        path: path.clone(),
        message: err.to_string(),
    })?;
    if intent.format() > FORMAT {
        return Err(IntentError::Newer {
            path,
            format: intent.format(),
        });
    }
    Ok(Some(intent))
}

/// An intent's format number.
pub trait Versioned {
    fn format(&self) -> u32;
}

impl Versioned for SandboxIntent {
    fn format(&self) -> u32 {
        self.format
    }
}

impl Versioned for ContainerIntent {
    fn format(&self) -> u32 {
        self.format
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn container_intent() -> ContainerIntent {
        ContainerIntent {
            format: FORMAT,
            id: "c1".into(),
            bundle: "/run/berth/containers/c1".into(),
            layer_dir: "/var/lib/berth/containers/c1".into(),
            shim_dir: "/run/berth/shims/c1".into(),
            cgroup_path: "/berth/c1".into(),
            runtime_handler: "runc".into(),
        }
    }

    #[test]
    fn an_intent_reads_back_as_written() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), &container_intent()).unwrap();
        let back: ContainerIntent = read(dir.path()).unwrap().unwrap();
        assert_eq!(back.cgroup_path, "/berth/c1");
        assert_eq!(back.runtime_handler, "runc");
        assert_eq!(back.shim_dir, Path::new("/run/berth/shims/c1"));
    }

    #[test]
    fn no_intent_is_none_and_a_newer_format_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        assert!(read::<ContainerIntent>(dir.path()).unwrap().is_none());
        let mut newer = container_intent();
        newer.format = FORMAT + 1;
        write(dir.path(), &newer).unwrap();
        assert!(matches!(
            read::<ContainerIntent>(dir.path()),
            Err(IntentError::Newer { .. })
        ));
    }

    #[test]
    fn a_torn_intent_is_an_error_not_a_default() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(FILE), b"{\"format\":1,").unwrap();
        assert!(matches!(
            read::<ContainerIntent>(dir.path()),
            Err(IntentError::Unreadable { .. })
        ));
    }
}
