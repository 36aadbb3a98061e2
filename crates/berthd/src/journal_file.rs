//! A journal's file, for the pod's (`sandbox/journal.rs`) and the
//! container's (`container/journal.rs`): written whole, atomically and
//! durably, at every change; read back refusing a format newer than the
//! one this berthd writes (a later berthd's journal is left alone).

use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde::Serialize;

#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    #[error("writing journal {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("journal {path}: {message}")]
    Unreadable { path: PathBuf, message: String },
    #[error("journal {path} has format {format}, newer than this berthd's {supported}")]
    Newer {
        path: PathBuf,
        format: u32,
        supported: u32,
    },
}

/// Writes `journal` to `path`, replacing it whole, durably.
pub fn save<T: Serialize>(path: &Path, journal: &T) -> Result<(), JournalError> {
    let bytes = serde_json::to_vec(journal).map_err(|err| JournalError::Write {
        path: path.to_path_buf(),
        source: std::io::Error::other(err),
    })?;
    berth_atomic_file::write_atomic(path, &bytes, 0o600).map_err(|source| JournalError::Write {
        path: path.to_path_buf(),
        source,
    })
}

/// The journal at `path`; `Ok(None)` when there is none. `format_of` reads
/// its format, which may be at most `supported`.
pub fn load<T: DeserializeOwned>(
    path: &Path,
    supported: u32,
    format_of: impl FnOnce(&T) -> u32,
) -> Result<Option<T>, JournalError> {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(err) => {
            return Err(JournalError::Unreadable {
                path: path.to_path_buf(),
                message: err.to_string(),
            })
        }
    };
    let journal: T = serde_json::from_slice(&bytes).map_err(|err| JournalError::Unreadable {
        path: path.to_path_buf(),
        message: err.to_string(),
    })?;
    let format = format_of(&journal);
    if format > supported {
        return Err(JournalError::Newer {
            path: path.to_path_buf(),
            format,
            supported,
        });
    }
    Ok(Some(journal))
}
