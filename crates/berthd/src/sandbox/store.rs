//! Sandboxes as berthd knows them: in memory, and one state file each under
//! `<state_dir>/sandboxes/<id>/sandbox.json`, written atomically, so a
//! restarted berthd finds every pod again.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use cri_api::v1::PodSandboxConfig;
use serde::{Deserialize, Serialize};

pub use crate::state_store::{AmbiguousId, Record, RecordStore, StateError};

/// Where a sandbox is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum SandboxState {
    Ready,
    NotReady,
}

/// The pod's infra process, identified by pid and start time so a reused
/// pid is never mistaken for it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct InfraProcess {
    pub pid: i32,
    pub start_time: u64,
}

/// Everything berthd keeps about one sandbox.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SandboxRecord {
    /// The record's format ([`crate::state_store::RECORD_FORMAT`]).
    #[serde(default = "crate::state_store::first_format")]
    pub format: u32,
    pub id: String,
    /// `name_namespace_uid_attempt`: reserved while the sandbox exists.
    pub name_key: String,
    pub created_at: i64,
    pub state: SandboxState,
    pub runtime_handler: String,
    /// The `PodSandboxConfig` as received (on disk: protobuf, then base64).
    #[serde(with = "crate::state_store::proto_base64")]
    pub config: PodSandboxConfig,
    /// This sandbox's directory: shm, the infra process's root (and the
    /// pod's files, for a pod an older berthd ran: see `files_dir`).
    pub dir: PathBuf,
    /// Where the pod's hostname, hosts and resolv.conf are: its dir under
    /// the root dir (`<root_dir>/pods/<id>`); `None` in a record an older
    /// berthd wrote, whose files are in `dir`.
    #[serde(default)]
    pub files_dir: Option<PathBuf>,
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

    /// The directory of the pod's hostname, hosts and resolv.conf.
    pub fn files_dir(&self) -> &std::path::Path {
        self.files_dir.as_deref().unwrap_or(&self.dir)
    }
}

/// One sandbox, locked while an RPC changes it.
pub type SandboxHandle = Arc<tokio::sync::Mutex<SandboxRecord>>;

/// All sandboxes, with name reservations.
pub type SandboxStore = RecordStore<SandboxRecord>;

impl Record for SandboxRecord {
    const KIND: &'static str = "sandbox";
    const FILE: &'static str = "sandbox.json";

    fn id(&self) -> &str {
        &self.id
    }

    fn name_key(&self) -> &str {
        &self.name_key
    }

    fn format(&self) -> u32 {
        self.format
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(id: &str, name: &str) -> SandboxRecord {
        SandboxRecord {
            format: 1,
            id: id.into(),
            name_key: name.into(),
            created_at: 1,
            state: SandboxState::Ready,
            runtime_handler: String::new(),
            config: PodSandboxConfig {
                hostname: "h".into(),
                ..Default::default()
            },
            dir: PathBuf::new(),
            files_dir: None,
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
            std::fs::create_dir_all(store.record_dir("abc")).unwrap();
            store.persist(&record("abc", "pod_ns_uid_0")).unwrap();
        }
        std::fs::create_dir_all(dir.path().join("junk")).unwrap();
        let store = SandboxStore::open(dir.path()).unwrap();
        let handle = store.find("abc").unwrap().unwrap();
        let record = handle.try_lock().unwrap().clone();
        assert_eq!(record.config.hostname, "h");
        assert_eq!(store.reserve_name("pod_ns_uid_0", "z").unwrap_err(), "abc");
    }

    #[test]
    fn a_config_that_does_not_decode_fails_the_record_not_into_a_default() {
        let mut json = serde_json::to_value(record("abc", "x")).unwrap();
        assert!(serde_json::from_value::<SandboxRecord>(json.clone()).is_ok());
        json["config"] = "not base64!".into();
        let err = serde_json::from_value::<SandboxRecord>(json.clone()).unwrap_err();
        assert!(
            err.to_string().contains("base64") || err.to_string().contains("symbol"),
            "{err}"
        );
        json["config"] = "AAEC".into();
        assert!(serde_json::from_value::<SandboxRecord>(json).is_err());
    }
}
