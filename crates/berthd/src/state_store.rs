//! Records berthd keeps per object (sandbox, container): in memory, locked
//! per object while an RPC changes it, and one state file each under
//! `<dir>/<id>/<file>`, written atomically, so a restarted berthd finds
//! every object again. Names are reserved from the start of a create.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use serde::de::DeserializeOwned;
use serde::Serialize;

/// What a store keeps.
pub trait Record: Serialize + DeserializeOwned + Send + 'static {
    /// `sandbox` or `container`, for messages.
    const KIND: &'static str;
    /// The state file's name in the record's directory.
    const FILE: &'static str;
    fn id(&self) -> &str;
    /// The name reserved while the record exists.
    fn name_key(&self) -> &str;
    /// The format the record was written in.
    fn format(&self) -> u32;
}

/// The format of the records this berthd writes. Records from before
/// formats were numbered are format 1; a record of a later format is
/// skipped at load (a newer berthd wrote it), never misread.
pub const RECORD_FORMAT: u32 = 1;

/// The format of a record that names none.
pub fn first_format() -> u32 {
    1
}

/// Errors of the store's own files.
#[derive(Debug, thiserror::Error)]
#[error("state {path}: {message}")]
pub struct StateError {
    pub path: PathBuf,
    pub message: String,
}

/// The lookup found more than one record for an id prefix.
#[derive(Debug, thiserror::Error)]
#[error("{kind} id prefix {prefix:?} is ambiguous")]
pub struct AmbiguousId {
    pub kind: &'static str,
    pub prefix: String,
}

/// All records of one kind, with name reservations.
#[derive(Debug)]
pub struct RecordStore<R> {
    dir: PathBuf,
    records: Mutex<HashMap<String, Arc<tokio::sync::Mutex<R>>>>,
    /// name key → id.
    names: Mutex<HashMap<String, String>>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl<R: Record> RecordStore<R> {
    /// Loads every state file under `dir`. A file that cannot be read is
    /// reported and skipped, never fatal: the other objects still matter.
    pub fn open(dir: &Path) -> Result<Self, StateError> {
        let state_error = |message: String| StateError {
            path: dir.to_path_buf(),
            message,
        };
        std::fs::create_dir_all(dir).map_err(|err| state_error(err.to_string()))?;
        let store = Self {
            dir: dir.to_path_buf(),
            records: Mutex::default(),
            names: Mutex::default(),
        };
        let entries = std::fs::read_dir(dir).map_err(|err| state_error(err.to_string()))?;
        for entry in entries.flatten() {
            let path = entry.path().join(R::FILE);
            let record = std::fs::read(&path)
                .map_err(|err| err.to_string())
                .and_then(|bytes| {
                    serde_json::from_slice::<R>(&bytes).map_err(|err| err.to_string())
                });
            let record = record.and_then(|record| {
                if record.format() > RECORD_FORMAT {
                    Err(format!(
                        "format {} is newer than this berthd's {RECORD_FORMAT}",
                        record.format()
                    ))
                } else {
                    Ok(record)
                }
            });
            match record {
                Ok(record) => {
                    lock(&store.names)
                        .insert(record.name_key().to_string(), record.id().to_string());
                    lock(&store.records).insert(
                        record.id().to_string(),
                        Arc::new(tokio::sync::Mutex::new(record)),
                    );
                }
                Err(message) => {
                    tracing::warn!(kind = R::KIND, path = %path.display(), %message, "skipping unreadable state");
                }
            }
        }
        Ok(store)
    }

    /// The ids of directories under the store's dir that hold no record
    /// file: creates that never finished, removals cut short. A record that
    /// exists but did not load is not among them: it is reported at load
    /// and its objects are left alone. Read at start-up, before any create
    /// can be under way.
    pub fn unrecorded(&self) -> Vec<String> {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        let mut ids: Vec<String> = entries
            .flatten()
            .filter(|entry| entry.file_type().is_ok_and(|kind| kind.is_dir()))
            .filter(|entry| !entry.path().join(R::FILE).exists())
            .filter_map(|entry| entry.file_name().to_str().map(str::to_string))
            .collect();
        ids.sort();
        ids
    }

    /// The directory for a record's files.
    pub fn record_dir(&self, id: &str) -> PathBuf {
        self.dir.join(id)
    }

    /// Reserves `name_key` for `id`; on conflict returns the holder's id.
    pub fn reserve_name(&self, name_key: &str, id: &str) -> Result<(), String> {
        let mut names = lock(&self.names);
        if let Some(existing) = names.get(name_key) {
            return Err(existing.clone());
        }
        names.insert(name_key.to_string(), id.to_string());
        Ok(())
    }

    /// Frees `name_key` if `id` holds it.
    pub fn release_name(&self, name_key: &str, id: &str) {
        let mut names = lock(&self.names);
        if names.get(name_key).is_some_and(|holder| holder == id) {
            names.remove(name_key);
        }
    }

    /// Adds a record whose creation finished.
    pub fn insert(&self, record: R) -> Arc<tokio::sync::Mutex<R>> {
        let id = record.id().to_string();
        let handle = Arc::new(tokio::sync::Mutex::new(record));
        lock(&self.records).insert(id, handle.clone());
        handle
    }

    pub fn remove(&self, id: &str) {
        lock(&self.records).remove(id);
    }

    /// Whether `id` (a full id) is still known.
    pub fn contains(&self, id: &str) -> bool {
        lock(&self.records).contains_key(id)
    }

    /// The record whose id is `id` or starts with it (a unique prefix).
    pub fn find(&self, id: &str) -> Result<Option<Arc<tokio::sync::Mutex<R>>>, AmbiguousId> {
        if id.is_empty() {
            return Ok(None);
        }
        let records = lock(&self.records);
        if let Some(handle) = records.get(id) {
            return Ok(Some(handle.clone()));
        }
        let mut matches = records
            .iter()
            .filter(|(candidate, _)| candidate.starts_with(id));
        match (matches.next(), matches.next()) {
            (Some((_, handle)), None) => Ok(Some(handle.clone())),
            (None, _) => Ok(None),
            (Some(_), Some(_)) => Err(AmbiguousId {
                kind: R::KIND,
                prefix: id.to_string(),
            }),
        }
    }

    /// Every record.
    pub fn all(&self) -> Vec<Arc<tokio::sync::Mutex<R>>> {
        lock(&self.records).values().cloned().collect()
    }

    /// Writes a record's state file atomically.
    pub fn persist(&self, record: &R) -> Result<(), StateError> {
        let path = self.record_dir(record.id()).join(R::FILE);
        let state_error = |message: String| StateError {
            path: path.clone(),
            message,
        };
        let bytes =
            serde_json::to_string_pretty(record).map_err(|err| state_error(err.to_string()))?;
        berth_atomic_file::write_atomic(&path, bytes.as_bytes(), 0o600)
            .map_err(|err| state_error(err.to_string()))
    }
}

/// Serde for a protobuf message kept in a record: protobuf-encoded, then
/// base64, as a JSON string. A value that does not decode fails the load of
/// its record (reported by [`RecordStore::open`]), never becomes a default.
pub mod proto_base64 {
    use base64::Engine;
    use prost::Message;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<M: Message, S: Serializer>(message: &M, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&base64::engine::general_purpose::STANDARD.encode(message.encode_to_vec()))
    }

    pub fn deserialize<'de, M: Message + Default, D: Deserializer<'de>>(
        d: D,
    ) -> Result<M, D::Error> {
        let text = String::deserialize(d)?;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(text)
            .map_err(serde::de::Error::custom)?;
        M::decode(bytes.as_slice()).map_err(serde::de::Error::custom)
    }
}
