//! Pod checkpoint and restore (KEP-5823, CRI `CheckpointPod` and
//! `RestorePod`): a pod's containers dumped with CRIU into one directory
//! ([`manifest`] says its layout), and a new pod made from it whose
//! containers are created to be restored when started.
//!
//! Each container goes through the container checkpoint and restore
//! (`ContainerManager::checkpoint`, and `create` from an archive); this
//! module adds what is the pod's: every check before the first side
//! effect, one manifest, and nothing left behind by a call that fails.
//! The pod layer (`crate::pod`) calls it and makes a restore's pod and
//! containers.

mod checkpoint;
mod error;
pub mod manifest;
mod restore;
#[cfg(test)]
mod tests;

pub use self::checkpoint::{checkpoint, CheckpointPod};
pub use self::error::PodCheckpointError;
pub use self::restore::{prepare as prepare_restore, RestorePlan, RestorePod, Restored};

use std::collections::HashMap;
use std::path::Path;

/// Neither call takes options yet: unknown keys are refused, not ignored
/// (the CRI asks so), naming the first.
fn refuse_options(options: &HashMap<String, String>) -> Result<(), PodCheckpointError> {
    let mut keys: Vec<&String> = options.keys().collect();
    keys.sort();
    match keys.first() {
        Some(key) => Err(PodCheckpointError::Invalid {
            field: format!("options[{key:?}]"),
            reason: "berth takes no pod checkpoint or restore options".into(),
        }),
        None => Ok(()),
    }
}

/// `path` as a directory given by absolute path: a real one (not a symlink
/// to one), or InvalidArgument naming `field`.
fn real_dir(field: &str, path: &str) -> Result<std::path::PathBuf, PodCheckpointError> {
    let invalid = |reason: String| PodCheckpointError::Invalid {
        field: field.to_string(),
        reason,
    };
    if path.is_empty() {
        return Err(invalid("is required".into()));
    }
    let dir = Path::new(path);
    if !dir.is_absolute() || path.contains('\0') {
        return Err(invalid(format!("{path:?} must be an absolute path")));
    }
    match dir.symlink_metadata() {
        Ok(meta) if meta.is_dir() => Ok(dir.to_path_buf()),
        Ok(_) => Err(invalid(format!("{path} is not a directory"))),
        Err(err) => Err(invalid(format!("{path}: {err}"))),
    }
}
