//! Records berthd keeps per object (sandbox, container): in memory, locked
//! per object while an RPC changes it, and one state file each under
//! `<dir>/<id>/<file>`, written atomically, so a restarted berthd finds
//! every object again. Names are reserved from the start of a create.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use serde::de::DeserializeOwned;
use serde::Serialize;

/// What a store keeps.
pub trait Record: Serialize + DeserializeOwned + Clone + Send + Sync + 'static {
    /// `sandbox` or `container`, for messages.
    const KIND: &'static str;
    /// The state file's name in the record's directory.
    const FILE: &'static str;
    fn id(&self) -> &str;
    /// The name reserved while the record exists.
    fn name_key(&self) -> &str;
    /// The format the record was written in.
    fn format(&self) -> u32;
    /// The id of the record this one belongs to (a container's sandbox),
    /// never changed after the record is made. The store indexes it, so
    /// one sandbox's containers are found without visiting every
    /// container on the node.
    fn owner(&self) -> Option<&str> {
        None
    }
}

/// The format of the records this berthd writes. Records from before
/// formats were numbered are format 1. A record of a later format was
/// written by a newer berthd: this one refuses to start rather than
/// misread it or hide its pod from kubelet (docs/operating.md, "Upgrade and
/// downgrade").
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
    records: Mutex<Records<R>>,
    /// name key → id.
    names: Mutex<HashMap<String, String>>,
}

/// The records by id, and the ids by owner ([`Record::owner`]), changed
/// together under one lock.
#[derive(Debug)]
struct Records<R> {
    by_id: HashMap<String, Entry<R>>,
    /// owner id → the ids of its records (sorted, so listings are stable).
    by_owner: HashMap<String, BTreeSet<String>>,
}

/// A record, and its owner kept beside it for removal (the record itself
/// is behind its own async lock).
#[derive(Debug)]
struct Entry<R> {
    handle: Arc<tokio::sync::Mutex<R>>,
    owner: Option<String>,
    /// The record as last inserted or persisted: what the calls that only
    /// report read, so they never wait for a change in progress (a pod
    /// stop holds its record through CNI DEL).
    published: Arc<R>,
}

impl<R> Default for Records<R> {
    fn default() -> Self {
        Self {
            by_id: HashMap::new(),
            by_owner: HashMap::new(),
        }
    }
}

impl<R: Record> Records<R> {
    fn insert(&mut self, record: R) -> Arc<tokio::sync::Mutex<R>> {
        let id = record.id().to_string();
        let owner = record.owner().map(str::to_string);
        if let Some(owner) = &owner {
            self.by_owner
                .entry(owner.clone())
                .or_default()
                .insert(id.clone());
        }
        let published = Arc::new(record.clone());
        let handle = Arc::new(tokio::sync::Mutex::new(record));
        self.by_id.insert(
            id,
            Entry {
                handle: handle.clone(),
                owner,
                published,
            },
        );
        handle
    }

    /// What `pick` takes of each record `owner` owns, in id order.
    fn owned_by<T>(&self, owner: &str, pick: impl Fn(&Entry<R>) -> T) -> Vec<T> {
        let Some(ids) = self.by_owner.get(owner) else {
            return Vec::new();
        };
        ids.iter()
            .filter_map(|id| self.by_id.get(id).map(&pick))
            .collect()
    }

    /// The entry whose id is `id` or starts with it (a unique prefix).
    fn lookup(&self, id: &str) -> Result<Option<&Entry<R>>, AmbiguousId> {
        if id.is_empty() {
            return Ok(None);
        }
        if let Some(entry) = self.by_id.get(id) {
            return Ok(Some(entry));
        }
        let mut matches = self
            .by_id
            .iter()
            .filter(|(candidate, _)| candidate.starts_with(id));
        match (matches.next(), matches.next()) {
            (Some((_, entry)), None) => Ok(Some(entry)),
            (None, _) => Ok(None),
            (Some(_), Some(_)) => Err(AmbiguousId {
                kind: R::KIND,
                prefix: id.to_string(),
            }),
        }
    }

    fn remove(&mut self, id: &str) {
        let Some(Entry {
            owner: Some(owner), ..
        }) = self.by_id.remove(id)
        else {
            return;
        };
        if let Some(ids) = self.by_owner.get_mut(&owner) {
            ids.remove(id);
            if ids.is_empty() {
                self.by_owner.remove(&owner);
            }
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl<R: Record> RecordStore<R> {
    /// Loads every state file under `dir`. A file that cannot be read is
    /// reported and skipped, never fatal: the other objects still matter.
    /// A record a newer berthd wrote is an error: skipping it would leave
    /// its pod running where kubelet cannot see or stop it.
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
            if let Ok(record) = &record {
                if record.format() > RECORD_FORMAT {
                    return Err(StateError {
                        path,
                        message: format!(
                            "{} {} was written by a newer berthd (record format {}; this \
                             berthd reads up to {RECORD_FORMAT}): start the newer berthd, or \
                             remove the node's pods with it before downgrading",
                            R::KIND,
                            record.id(),
                            record.format()
                        ),
                    });
                }
            }
            match record {
                Ok(record) => {
                    lock(&store.names)
                        .insert(record.name_key().to_string(), record.id().to_string());
                    lock(&store.records).insert(record);
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
        lock(&self.records).insert(record)
    }

    pub fn remove(&self, id: &str) {
        lock(&self.records).remove(id);
    }

    /// Whether `id` (a full id) is still known.
    pub fn contains(&self, id: &str) -> bool {
        lock(&self.records).by_id.contains_key(id)
    }

    /// The record whose id is `id` or starts with it (a unique prefix).
    pub fn find(&self, id: &str) -> Result<Option<Arc<tokio::sync::Mutex<R>>>, AmbiguousId> {
        Ok(lock(&self.records)
            .lookup(id)?
            .map(|entry| entry.handle.clone()))
    }

    /// The record `id` names (full id or unique prefix) as last inserted or
    /// persisted, without waiting for a change in progress.
    pub fn published(&self, id: &str) -> Result<Option<Arc<R>>, AmbiguousId> {
        Ok(lock(&self.records)
            .lookup(id)?
            .map(|entry| entry.published.clone()))
    }

    /// Every record as last inserted or persisted.
    pub fn published_all(&self) -> Vec<Arc<R>> {
        lock(&self.records)
            .by_id
            .values()
            .map(|entry| entry.published.clone())
            .collect()
    }

    /// Every record.
    pub fn all(&self) -> Vec<Arc<tokio::sync::Mutex<R>>> {
        lock(&self.records)
            .by_id
            .values()
            .map(|entry| entry.handle.clone())
            .collect()
    }

    /// The records whose [`Record::owner`] is `owner` (a full id), in id
    /// order: as many lookups as it has records, whatever the store holds.
    pub fn owned_by(&self, owner: &str) -> Vec<Arc<tokio::sync::Mutex<R>>> {
        lock(&self.records).owned_by(owner, |entry| entry.handle.clone())
    }

    /// [`Self::owned_by`], as last inserted or persisted.
    pub fn published_owned_by(&self, owner: &str) -> Vec<Arc<R>> {
        lock(&self.records).owned_by(owner, |entry| entry.published.clone())
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
            .map_err(|err| state_error(err.to_string()))?;
        // Published once durable (a record not inserted yet is published
        // by its insert).
        if let Some(entry) = lock(&self.records).by_id.get_mut(record.id()) {
            entry.published = Arc::new(record.clone());
        }
        Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Clone, Serialize, Deserialize)]
    struct Member {
        id: String,
        group: String,
        #[serde(default)]
        note: String,
        #[serde(default = "first_format")]
        format: u32,
    }

    impl Record for Member {
        const KIND: &'static str = "member";
        const FILE: &'static str = "member.json";
        fn id(&self) -> &str {
            &self.id
        }
        fn name_key(&self) -> &str {
            &self.id
        }
        fn format(&self) -> u32 {
            self.format
        }
        fn owner(&self) -> Option<&str> {
            Some(&self.group)
        }
    }

    fn member(id: &str, group: &str) -> Member {
        Member {
            id: id.to_string(),
            group: group.to_string(),
            note: String::new(),
            format: RECORD_FORMAT,
        }
    }

    async fn ids(handles: Vec<Arc<tokio::sync::Mutex<Member>>>) -> Vec<String> {
        let mut ids = Vec::new();
        for handle in handles {
            ids.push(handle.lock().await.id.clone());
        }
        ids
    }

    /// What reporting calls read: the record as last persisted, even while
    /// a change holds its lock, and never a change that was not persisted.
    #[tokio::test]
    async fn the_published_record_follows_persists_without_waiting_for_changes() {
        let dir = tempfile::tempdir().unwrap();
        let store = RecordStore::<Member>::open(dir.path()).unwrap();
        std::fs::create_dir_all(store.record_dir("c1")).unwrap();
        let handle = store.insert(member("c1", "pod-a"));
        let mut changing = handle.lock().await;
        changing.note = "changed".into();
        let seen = store.published("c").unwrap().unwrap();
        assert_eq!(seen.note, "", "a change in progress is not seen");
        store.persist(&changing).unwrap();
        drop(changing);
        assert_eq!(store.published("c1").unwrap().unwrap().note, "changed");
        assert_eq!(store.published_all().len(), 1);
        let owned = store.published_owned_by("pod-a");
        assert_eq!(owned.len(), 1);
        assert_eq!(owned[0].note, "changed");
        assert!(store.published_owned_by("pod").is_empty());
        store.insert(member("c2", "pod-a"));
        assert!(store.published("c").is_err(), "an ambiguous prefix");
        store.remove("c1");
        assert!(store.published("c1").unwrap().is_none());
    }

    #[tokio::test]
    async fn a_record_from_a_newer_berthd_stops_the_load_and_a_torn_one_is_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let store = RecordStore::<Member>::open(dir.path()).unwrap();
        std::fs::create_dir_all(store.record_dir("kept")).unwrap();
        let handle = store.insert(member("kept", "pod-a"));
        store.persist(&*handle.lock().await).unwrap();
        let torn = dir.path().join("torn");
        std::fs::create_dir_all(&torn).unwrap();
        std::fs::write(torn.join(Member::FILE), b"{\"id\": \"torn\"").unwrap();
        let reopened = RecordStore::<Member>::open(dir.path()).unwrap();
        assert_eq!(
            reopened.published_all().len(),
            1,
            "the torn file is skipped"
        );

        let mut newer = member("newer", "pod-b");
        newer.format = RECORD_FORMAT + 1;
        std::fs::create_dir_all(dir.path().join("newer")).unwrap();
        std::fs::write(
            dir.path().join("newer").join(Member::FILE),
            serde_json::to_vec(&newer).unwrap(),
        )
        .unwrap();
        let err = RecordStore::<Member>::open(dir.path()).unwrap_err();
        let message = err.to_string();
        assert!(message.contains("member newer"), "{message}");
        assert!(message.contains("newer berthd"), "{message}");
        assert!(
            message.contains(&format!("format {}", RECORD_FORMAT + 1)),
            "{message}"
        );
    }

    #[tokio::test]
    async fn owned_by_follows_inserts_and_removals() {
        let dir = tempfile::tempdir().unwrap();
        let store = RecordStore::<Member>::open(dir.path()).unwrap();
        store.insert(member("c2", "pod-a"));
        store.insert(member("c1", "pod-a"));
        store.insert(member("c3", "pod-b"));

        assert_eq!(ids(store.owned_by("pod-a")).await, ["c1", "c2"]);
        assert_eq!(ids(store.owned_by("pod-b")).await, ["c3"]);
        // Owners are full ids: a prefix names nothing.
        assert!(store.owned_by("pod").is_empty());

        store.remove("c2");
        assert_eq!(ids(store.owned_by("pod-a")).await, ["c1"]);
        store.remove("c1");
        assert!(store.owned_by("pod-a").is_empty());
        assert!(!lock(&store.records).by_owner.contains_key("pod-a"));
        // Removing twice, or an unknown id, changes nothing.
        store.remove("c1");
        store.remove("nope");
        assert_eq!(ids(store.owned_by("pod-b")).await, ["c3"]);
    }

    #[tokio::test]
    async fn owned_by_indexes_records_loaded_at_open() {
        let dir = tempfile::tempdir().unwrap();
        let first = RecordStore::<Member>::open(dir.path()).unwrap();
        for record in [member("c1", "pod-a"), member("c2", "pod-b")] {
            std::fs::create_dir_all(first.record_dir(&record.id)).unwrap();
            first.persist(&record).unwrap();
        }
        let reopened = RecordStore::<Member>::open(dir.path()).unwrap();
        assert_eq!(ids(reopened.owned_by("pod-a")).await, ["c1"]);
        assert_eq!(ids(reopened.owned_by("pod-b")).await, ["c2"]);
    }
}
