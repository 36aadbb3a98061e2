//! Sandboxes as berthd knows them: in memory, and one state file each under
//! `<state_dir>/sandboxes/<id>/sandbox.json`, written atomically, so a
//! restarted berthd finds every pod again.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use base64::Engine;
use cri_api::v1::PodSandboxConfig;
use prost::Message;
use serde::{Deserialize, Serialize};

/// Where a sandbox is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum SandboxState {
    Ready,
    NotReady,
}

/// The pod's infra process, identified by pid and start time so a reused
/// pid is never mistaken for it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InfraProcess {
    pub pid: i32,
    pub start_time: u64,
}

/// Everything berthd keeps about one sandbox.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SandboxRecord {
    pub id: String,
    /// `name_namespace_uid_attempt`: reserved while the sandbox exists.
    pub name_key: String,
    pub created_at: i64,
    pub state: SandboxState,
    pub runtime_handler: String,
    /// The `PodSandboxConfig` as received, protobuf-encoded then base64.
    pub config: String,
    /// This sandbox's directory: DNS files, shm, the infra process's root.
    pub dir: PathBuf,
    /// Pinned namespace files, by kind (`net`, `ipc`, `uts`, `pid`).
    pub namespaces: HashMap<String, PathBuf>,
    pub infra: Option<InfraProcess>,
    /// The parent the sandbox was placed under, in the driver's form.
    pub cgroup_parent: String,
    /// The sandbox's own cgroup path.
    pub cgroup_path: String,
    /// Pod IPs, the first being the primary one.
    pub ips: Vec<String>,
    /// The CNI network the pod was attached to (the config list as read),
    /// and the final ADD result, both needed for DEL.
    pub network_config: Option<String>,
    pub cni_result: Option<serde_json::Value>,
    /// Whether CNI ADD succeeded and DEL has not run since.
    pub network_attached: bool,
    /// The pod's /dev/shm (a tmpfs), when it has its own IPC namespace.
    pub shm: Option<PathBuf>,
}

impl SandboxRecord {
    /// The state to report: a sandbox whose infra process died outside
    /// berth's control is no longer ready, so kubelet recreates it.
    pub fn effective_state(&self) -> SandboxState {
        match (&self.state, &self.infra) {
            (SandboxState::Ready, Some(infra)) if !super::process::is_alive(infra) => {
                SandboxState::NotReady
            }
            (state, _) => *state,
        }
    }

    pub fn decode_config(&self) -> PodSandboxConfig {
        base64::engine::general_purpose::STANDARD
            .decode(&self.config)
            .ok()
            .and_then(|bytes| PodSandboxConfig::decode(bytes.as_slice()).ok())
            .unwrap_or_default()
    }

    pub fn encode_config(config: &PodSandboxConfig) -> String {
        base64::engine::general_purpose::STANDARD.encode(config.encode_to_vec())
    }
}

/// One sandbox, locked while an RPC changes it.
pub type SandboxHandle = Arc<tokio::sync::Mutex<SandboxRecord>>;

/// All sandboxes, with name reservations.
#[derive(Debug)]
pub struct SandboxStore {
    dir: PathBuf,
    sandboxes: Mutex<HashMap<String, SandboxHandle>>,
    /// name key → sandbox id, reserved from the start of RunPodSandbox.
    names: Mutex<HashMap<String, String>>,
}

/// Errors of the store's own files.
#[derive(Debug, thiserror::Error)]
#[error("sandbox state {path}: {message}")]
pub struct StateError {
    pub path: PathBuf,
    pub message: String,
}

/// The lookup found more than one sandbox for an id prefix.
#[derive(Debug, thiserror::Error)]
#[error("sandbox id prefix {0:?} is ambiguous")]
pub struct AmbiguousId(pub String);

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl SandboxStore {
    /// Loads every sandbox state file under `dir`. A file that cannot be read
    /// is reported and skipped, never fatal: the other pods still matter.
    pub fn open(dir: &Path) -> Result<Self, StateError> {
        let state_error = |message: String| StateError {
            path: dir.to_path_buf(),
            message,
        };
        std::fs::create_dir_all(dir).map_err(|err| state_error(err.to_string()))?;
        let store = Self {
            dir: dir.to_path_buf(),
            sandboxes: Mutex::default(),
            names: Mutex::default(),
        };
        let entries = std::fs::read_dir(dir).map_err(|err| state_error(err.to_string()))?;
        for entry in entries.flatten() {
            let path = entry.path().join("sandbox.json");
            let record = std::fs::read(&path)
                .map_err(|err| err.to_string())
                .and_then(|bytes| {
                    serde_json::from_slice::<SandboxRecord>(&bytes).map_err(|err| err.to_string())
                });
            match record {
                Ok(record) => {
                    lock(&store.names).insert(record.name_key.clone(), record.id.clone());
                    lock(&store.sandboxes)
                        .insert(record.id.clone(), Arc::new(tokio::sync::Mutex::new(record)));
                }
                Err(message) => {
                    tracing::warn!(path = %path.display(), %message, "skipping unreadable sandbox state");
                }
            }
        }
        Ok(store)
    }

    /// The directory for a sandbox's files.
    pub fn sandbox_dir(&self, id: &str) -> PathBuf {
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

    pub fn release_name(&self, name_key: &str, id: &str) {
        let mut names = lock(&self.names);
        if names.get(name_key).is_some_and(|holder| holder == id) {
            names.remove(name_key);
        }
    }

    /// Adds a sandbox that RunPodSandbox finished setting up.
    pub fn insert(&self, record: SandboxRecord) -> SandboxHandle {
        let id = record.id.clone();
        let handle = Arc::new(tokio::sync::Mutex::new(record));
        lock(&self.sandboxes).insert(id, handle.clone());
        handle
    }

    pub fn remove(&self, id: &str) {
        lock(&self.sandboxes).remove(id);
    }

    /// The sandbox whose id is `id` or starts with it (a unique prefix).
    pub fn find(&self, id: &str) -> Result<Option<SandboxHandle>, AmbiguousId> {
        if id.is_empty() {
            return Ok(None);
        }
        let sandboxes = lock(&self.sandboxes);
        if let Some(handle) = sandboxes.get(id) {
            return Ok(Some(handle.clone()));
        }
        let mut matches = sandboxes
            .iter()
            .filter(|(candidate, _)| candidate.starts_with(id));
        match (matches.next(), matches.next()) {
            (Some((_, handle)), None) => Ok(Some(handle.clone())),
            (None, _) => Ok(None),
            (Some(_), Some(_)) => Err(AmbiguousId(id.to_string())),
        }
    }

    /// Whether the sandbox `id` (a full id) is still known.
    pub fn contains(&self, id: &str) -> bool {
        lock(&self.sandboxes).contains_key(id)
    }

    /// Every sandbox.
    pub fn all(&self) -> Vec<SandboxHandle> {
        lock(&self.sandboxes).values().cloned().collect()
    }

    /// Writes a record's state file atomically.
    pub fn persist(&self, record: &SandboxRecord) -> Result<(), StateError> {
        let path = self.sandbox_dir(&record.id).join("sandbox.json");
        let state_error = |message: String| StateError {
            path: path.clone(),
            message,
        };
        let bytes =
            serde_json::to_string_pretty(record).map_err(|err| state_error(err.to_string()))?;
        berth_network::dns::write_atomic(&path, &bytes, 0o600)
            .map_err(|err| state_error(err.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(id: &str, name: &str) -> SandboxRecord {
        SandboxRecord {
            id: id.into(),
            name_key: name.into(),
            created_at: 1,
            state: SandboxState::Ready,
            runtime_handler: String::new(),
            config: SandboxRecord::encode_config(&PodSandboxConfig {
                hostname: "h".into(),
                ..Default::default()
            }),
            dir: PathBuf::new(),
            namespaces: HashMap::new(),
            infra: None,
            cgroup_parent: "/berth".into(),
            cgroup_path: format!("/berth/{id}"),
            ips: vec![],
            network_config: None,
            cni_result: None,
            network_attached: false,
            shm: None,
        }
    }

    #[test]
    fn names_are_reserved_once() {
        let dir = tempfile::tempdir().unwrap();
        let store = SandboxStore::open(dir.path()).unwrap();
        store.reserve_name("pod_ns_uid_0", "a").unwrap();
        assert_eq!(store.reserve_name("pod_ns_uid_0", "b").unwrap_err(), "a");
        store.release_name("pod_ns_uid_0", "b");
        assert!(
            store.reserve_name("pod_ns_uid_0", "c").is_err(),
            "only the holder releases"
        );
        store.release_name("pod_ns_uid_0", "a");
        store.reserve_name("pod_ns_uid_0", "c").unwrap();
    }

    #[test]
    fn find_by_unique_prefix() {
        let dir = tempfile::tempdir().unwrap();
        let store = SandboxStore::open(dir.path()).unwrap();
        store.insert(record("abc123", "x"));
        store.insert(record("abd456", "y"));
        assert!(store.find("abc").unwrap().is_some());
        assert!(store.find("ab").is_err());
        assert!(store.find("zz").unwrap().is_none());
        assert!(store.find("").unwrap().is_none());
    }

    #[test]
    fn persisted_records_come_back_with_their_names() {
        let dir = tempfile::tempdir().unwrap();
        {
            let store = SandboxStore::open(dir.path()).unwrap();
            std::fs::create_dir_all(store.sandbox_dir("abc")).unwrap();
            store.persist(&record("abc", "pod_ns_uid_0")).unwrap();
        }
        std::fs::create_dir_all(dir.path().join("junk")).unwrap();
        let store = SandboxStore::open(dir.path()).unwrap();
        let handle = store.find("abc").unwrap().unwrap();
        let record = handle.try_lock().unwrap().clone();
        assert_eq!(record.decode_config().hostname, "h");
        assert_eq!(store.reserve_name("pod_ns_uid_0", "z").unwrap_err(), "abc");
    }
}
