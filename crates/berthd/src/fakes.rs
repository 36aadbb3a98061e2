//! Test doubles of the managers' seams over privileged operations, so the
//! lifecycle rules are unit-tested without root. Each fake writes what it
//! is asked to do into a shared [`Journal`], in order, and fails on demand.

use std::collections::{BTreeSet, HashMap};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use berth_network::cni::{AddResult, CniError, NetworkConfigList, PodNetwork};
use berth_shim_api::protocol::{Request, Response, RunState, StateInfo};

use crate::container::host::{Criu, CriuUnusable, RootfsMounts, Shims};
use crate::container::idmap::IdmapError;
use crate::container::idmapped_binds::IdmappedBind;
use crate::container::rootfs::{DetachedRootfs, RootfsError, RootfsPaths};
use crate::container::shim::ShimLaunch;
use crate::container::state_cache::ShimWatch;
use crate::container::ContainerError;
use crate::sandbox::host::{PodNamespaces, PodNetworks};
use crate::sandbox::namespaces::{PinRequest, Pinned};
use crate::sandbox::store::InfraProcess;
use crate::sandbox::SandboxError;

/// What the fakes were asked to do, in order, and which steps fail.
#[derive(Debug, Default)]
pub struct Journal {
    entries: Mutex<Vec<String>>,
    failing: Mutex<BTreeSet<&'static str>>,
    /// Steps that pass this many more times, then fail.
    failing_after: Mutex<HashMap<&'static str, usize>>,
    /// Steps that do their work and then never answer: berthd killed
    /// while they ran, once the test drops the call.
    hanging: Mutex<BTreeSet<&'static str>>,
    /// CNI DEL waits here while a test holds it for writing: a pod stop
    /// held in the middle.
    pub del_gate: tokio::sync::RwLock<()>,
}

impl Journal {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    pub fn entries(&self) -> Vec<String> {
        lock(&self.entries).clone()
    }

    pub fn clear(&self) {
        lock(&self.entries).clear();
    }

    /// Makes step `step` fail from now on.
    pub fn fail(&self, step: &'static str) {
        lock(&self.failing).insert(step);
    }

    /// Makes step `step` pass `passes` more times, then fail: the Nth of
    /// a kind failing.
    pub fn fail_after(&self, step: &'static str, passes: usize) {
        lock(&self.failing_after).insert(step, passes);
    }

    /// Makes step `step` (pin, cni add) do its work and never answer.
    pub fn hang(&self, step: &'static str) {
        lock(&self.hanging).insert(step);
    }

    /// Waits for ever if step `step` hangs.
    async fn maybe_hang(&self, step: &'static str) {
        if lock(&self.hanging).contains(step) {
            std::future::pending::<()>().await;
        }
    }

    pub fn heal(&self) {
        lock(&self.failing).clear();
        lock(&self.failing_after).clear();
        lock(&self.hanging).clear();
    }

    fn fails(&self, step: &'static str) -> bool {
        if lock(&self.failing).contains(step) {
            return true;
        }
        match lock(&self.failing_after).get_mut(step) {
            Some(0) => true,
            Some(left) => {
                *left -= 1;
                false
            }
            None => false,
        }
    }

    fn write(&self, entry: impl Into<String>) {
        lock(&self.entries).push(entry.into());
    }

    /// Notes the step and says whether it is to fail.
    fn step(&self, step: &'static str) -> bool {
        self.write(step);
        self.fails(step)
    }

    /// Notes the step and what it acts on (`<step> <what>`), and says
    /// whether the step is to fail.
    fn step_on(&self, step: &'static str, what: &str) -> bool {
        self.write(format!("{step} {what}"));
        self.fails(step)
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn name_of(path: &Path) -> String {
    path.file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// berth-pinns and the mounts, pretended: pins are empty files.
pub struct FakeNamespaces {
    pub journal: Arc<Journal>,
    /// Where the killed infra process leaves, as a real one would.
    pub cgroups: Arc<berth_cgroups::fake::FakeManager>,
    /// What is live now: infra processes and /dev/shm mounts.
    pub live: FakeLive,
}

/// Processes and mounts the fake namespaces made and nothing undid yet.
#[derive(Debug, Default)]
pub struct FakeLive {
    /// Infra processes by pid, with the pin dir of the berth-pinns that
    /// forked them.
    infra: Mutex<HashMap<i32, PathBuf>>,
    mounts: Mutex<BTreeSet<PathBuf>>,
    next_pid: AtomicI32,
}

impl FakeLive {
    /// Pids of infra processes still running, sorted.
    pub fn processes(&self) -> Vec<i32> {
        let mut pids: Vec<i32> = lock(&self.infra).keys().copied().collect();
        pids.sort();
        pids
    }

    /// /dev/shm mounts still mounted.
    pub fn mounts(&self) -> Vec<PathBuf> {
        lock(&self.mounts).iter().cloned().collect()
    }
}

#[async_trait]
impl PodNamespaces for FakeNamespaces {
    async fn pin(&self, request: &PinRequest) -> Result<Pinned, SandboxError> {
        if self.journal.step("pin") {
            return Err(SandboxError::PinFailed {
                stderr: "injected".into(),
            });
        }
        let mut pinned = Pinned::default();
        for (asked, kind) in [
            (request.userns.is_some(), "user"),
            (request.net, "net"),
            (request.ipc, "ipc"),
            (request.uts, "uts"),
            (request.pid, "pid"),
        ] {
            if asked {
                let path = request.dir.join(kind);
                std::fs::write(&path, b"").map_err(|err| SandboxError::io("fake pin", err))?;
                pinned.namespaces.insert(kind.to_string(), path);
            }
        }
        if request.pid {
            let pid = 4242 + self.live.next_pid.fetch_add(1, Ordering::SeqCst);
            lock(&self.live.infra).insert(pid, request.dir.clone());
            pinned.infra_pid = Some(pid);
        }
        self.journal.maybe_hang("pin").await;
        Ok(pinned)
    }

    fn identify(&self, pid: i32) -> Option<InfraProcess> {
        if self.journal.step("identify") {
            // It vanished, as the real one does when identify fails.
            lock(&self.live.infra).remove(&pid);
            return None;
        }
        Some(InfraProcess { pid, start_time: 1 })
    }

    fn clamp_oom_score_adj(&self, _pid: i32, _wanted: i32) {
        self.journal.write("clamp");
    }

    async fn kill_and_wait(&self, infra: &InfraProcess) {
        self.journal.write("kill infra");
        lock(&self.live.infra).remove(&infra.pid);
        self.cgroups.exit_process(infra.pid);
    }

    async fn kill_unrecorded(&self, ns_dir: &Path, _infra_root: &Path) {
        self.journal.write(format!(
            "kill unrecorded pinns and infra of {}",
            name_of(ns_dir)
        ));
        lock(&self.live.infra).retain(|pid, dir| {
            let found = dir == ns_dir;
            if found {
                self.cgroups.exit_process(*pid);
            }
            !found
        });
    }

    fn mount_shm(&self, path: &Path, _size: &str) -> Result<(), SandboxError> {
        if self.journal.step("mount shm") {
            return Err(SandboxError::ShmMount {
                path: path.to_path_buf(),
                source: nix::Error::EPERM,
            });
        }
        std::fs::create_dir_all(path).map_err(|err| SandboxError::io("fake shm", err))?;
        lock(&self.live.mounts).insert(path.to_path_buf());
        Ok(())
    }

    fn unmount(&self, path: &Path) -> Result<(), SandboxError> {
        if self.journal.step_on("unmount", &name_of(path)) {
            return Err(SandboxError::Unmount {
                path: path.to_path_buf(),
                source: io::Error::from_raw_os_error(nix::libc::EBUSY),
            });
        }
        lock(&self.live.mounts).remove(path);
        let _ = std::fs::remove_file(path).or_else(|_| std::fs::remove_dir(path));
        Ok(())
    }
}

/// CNI, pretended: one config file in `conf_dir`, fixed addresses.
pub struct FakeNetwork {
    pub journal: Arc<Journal>,
    pub conf_dir: PathBuf,
    /// The sandboxes holding an IP lease (and a veth): ADD made, no DEL
    /// succeeded since.
    leases: Mutex<BTreeSet<String>>,
}

impl FakeNetwork {
    pub fn new(journal: Arc<Journal>, conf_dir: PathBuf) -> Self {
        std::fs::create_dir_all(&conf_dir).expect("conf dir");
        std::fs::write(
            conf_dir.join("10-fake.conflist"),
            r#"{"cniVersion":"1.0.0","name":"fake","plugins":[{"type":"bridge"}]}"#,
        )
        .expect("conflist");
        Self {
            journal,
            conf_dir,
            leases: Mutex::new(BTreeSet::new()),
        }
    }

    /// The sandboxes holding a lease, sorted.
    pub fn leases(&self) -> Vec<String> {
        lock(&self.leases).iter().cloned().collect()
    }

    fn failure(&self, what: &str) -> CniError {
        CniError::InvalidConfig {
            path: self.conf_dir.clone(),
            reason: format!("injected {what} failure"),
        }
    }
}

#[async_trait]
impl PodNetworks for FakeNetwork {
    fn conf_dir(&self) -> &Path {
        &self.conf_dir
    }

    async fn add(
        &self,
        _network: &NetworkConfigList,
        pod: &PodNetwork,
    ) -> Result<AddResult, CniError> {
        // A failing ADD may have allocated its IP already: only DEL frees it.
        lock(&self.leases).insert(pod.sandbox_id.clone());
        if self.journal.step("cni add") {
            return Err(self.failure("ADD"));
        }
        self.journal.maybe_hang("cni add").await;
        Ok(AddResult {
            raw: serde_json::json!({"ips": [{"address": "10.88.0.2/16"}]}),
            ips: vec!["10.88.0.2".parse().expect("ip")],
        })
    }

    async fn del(
        &self,
        _network: &NetworkConfigList,
        pod: &PodNetwork,
        _prev_result: Option<&serde_json::Value>,
    ) -> Result<(), CniError> {
        if self.journal.step("cni del") {
            return Err(self.failure("DEL"));
        }
        let _open = self.journal.del_gate.read().await;
        lock(&self.leases).remove(&pod.sandbox_id);
        Ok(())
    }
}

/// Overlay mounts, pretended: the merged dir is made, nothing is mounted.
pub struct FakeMounts {
    pub journal: Arc<Journal>,
}

impl RootfsMounts for FakeMounts {
    fn mount(&self, _layers: &[PathBuf], paths: &RootfsPaths) -> Result<(), RootfsError> {
        if self.journal.step("mount rootfs") {
            return Err(RootfsError::NoLayers);
        }
        std::fs::create_dir_all(&paths.merged).map_err(|source| RootfsError::Io {
            what: "fake merged dir",
            path: paths.merged.clone(),
            source,
        })
    }

    fn mount_image_volume(
        &self,
        _layers: &[PathBuf],
        paths: &RootfsPaths,
        index: usize,
    ) -> Result<PathBuf, RootfsError> {
        if self.journal.step("mount image volume") {
            return Err(RootfsError::NoLayers);
        }
        let target = paths.image_volume(index);
        std::fs::create_dir_all(&target).map_err(|source| RootfsError::Io {
            what: "fake image volume dir",
            path: target.clone(),
            source,
        })?;
        Ok(target)
    }

    fn unmount(&self, paths: &RootfsPaths) -> Result<DetachedRootfs, RootfsError> {
        if self.journal.step("unmount rootfs") {
            return Err(RootfsError::Mount {
                path: paths.merged.clone(),
                source: nix::Error::EBUSY,
            });
        }
        Ok(DetachedRootfs::default())
    }

    fn mount_idmapped(
        &self,
        layers: &[PathBuf],
        paths: &RootfsPaths,
        _userns: &Path,
        _owner: (u32, u32),
    ) -> Result<(), RootfsError> {
        self.mount(layers, paths)
    }

    fn attach_idmapped_bind(&self, bind: &IdmappedBind, _userns: &Path) -> Result<(), IdmapError> {
        if self.journal.step_on("idmap bind", &bind.container_path) {
            return Err(IdmapError::Syscall {
                step: "mount_setattr",
                path: bind.source.clone(),
                source: nix::Error::EINVAL,
            });
        }
        Ok(())
    }
}

/// Shims, pretended: each container's state lives here, by shim dir.
pub struct FakeShims {
    pub journal: Arc<Journal>,
    states: Mutex<HashMap<PathBuf, StateInfo>>,
    /// Exit files berthd wrote for shims that were gone.
    exits: Mutex<HashMap<PathBuf, StateInfo>>,
    /// Per shim dir, how many signs a watch would see (an exit file
    /// written, the shim ended); a start gives none, as a real one.
    signs: Arc<Mutex<HashMap<PathBuf, u64>>>,
    next_pid: AtomicI32,
    /// Each launch: the container, its runtime binary and state root.
    pub launches: Mutex<Vec<LaunchSeen>>,
    /// Shims that take calls and never answer (SIGSTOPped, hung).
    stalled: Mutex<BTreeSet<PathBuf>>,
}

/// What a shim was launched with, of what picks the runtime.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaunchSeen {
    pub id: String,
    pub runtime_binary: Option<PathBuf>,
    pub state_root: PathBuf,
}

/// What a shim reports of container `id` just created with init `pid`.
pub fn created_state(id: &str, pid: i32) -> StateInfo {
    StateInfo {
        id: id.to_string(),
        status: RunState::Created,
        pid,
        created_at: String::new(),
        started_at: None,
        exit_code: None,
        exited_at: None,
        oom_killed: false,
        unknown: false,
    }
}

/// A pretended shim watch: moved once its dir got a sign since.
struct FakeWatch {
    signs: Arc<Mutex<HashMap<PathBuf, u64>>>,
    dir: PathBuf,
    seen: u64,
}

impl ShimWatch for FakeWatch {
    fn moved(&self) -> bool {
        lock(&self.signs).get(&self.dir).copied().unwrap_or(0) != self.seen
    }
}

impl FakeShims {
    pub fn new(journal: Arc<Journal>) -> Self {
        Self {
            journal,
            states: Mutex::new(HashMap::new()),
            exits: Mutex::new(HashMap::new()),
            signs: Arc::default(),
            next_pid: AtomicI32::new(1000),
            launches: Mutex::new(Vec::new()),
            stalled: Mutex::default(),
        }
    }

    /// The shim of `dir` stops answering its state, as a SIGSTOPped one.
    pub fn stall(&self, dir: &Path) {
        lock(&self.stalled).insert(dir.to_path_buf());
    }

    /// The container of the stalled shim of `dir` exited with `code`: its
    /// shim wrote the exit file, then stopped answering.
    pub fn exit_while_stalled(&self, dir: &Path, code: i32) {
        let exited = StateInfo {
            status: RunState::Stopped,
            exit_code: Some(code),
            exited_at: Some("2026-11-26T14:00:01Z".into()),
            ..created_state("", 0)
        };
        lock(&self.exits).insert(dir.to_path_buf(), exited);
        self.sign(dir);
    }

    /// A sign the shim of `dir` gives: an exit file, or its end.
    fn sign(&self, dir: &Path) {
        *lock(&self.signs).entry(dir.to_path_buf()).or_default() += 1;
    }

    fn set(&self, dir: &Path, change: impl FnOnce(&mut StateInfo)) -> bool {
        match lock(&self.states).get_mut(dir) {
            Some(state) => {
                change(state);
                true
            }
            None => false,
        }
    }
}

#[async_trait]
impl Shims for FakeShims {
    async fn launch(&self, launch: &ShimLaunch<'_>) -> Result<i32, ContainerError> {
        lock(&self.launches).push(LaunchSeen {
            id: launch.id.to_string(),
            runtime_binary: launch.runtime_binary.map(Path::to_path_buf),
            state_root: launch.state_root.to_path_buf(),
        });
        if self.journal.step("launch shim") {
            return Err(ContainerError::CreateFailed {
                id: launch.id.to_string(),
                message: format!("creating container {}: injected", launch.id),
            });
        }
        let pid = self.next_pid.fetch_add(1, Ordering::SeqCst);
        lock(&self.states).insert(launch.dir.to_path_buf(), created_state(launch.id, pid));
        Ok(pid)
    }

    async fn call(&self, dir: &Path, request: Request, _extra: Duration) -> io::Result<Response> {
        let gone = || io::Error::new(io::ErrorKind::NotFound, "no shim");
        let answer = match request {
            Request::Start => {
                self.journal.write("start");
                self.set(dir, |state| state.status = RunState::Running)
                    .then_some(Response::Ok)
            }
            Request::Kill { signal, all } => {
                self.journal.write(format!("kill {signal:?} all={all}"));
                let killed = self.set(dir, |state| {
                    if state.status == RunState::Running {
                        state.status = RunState::Stopped;
                        state.exit_code = Some(137);
                    }
                });
                self.sign(dir);
                killed.then_some(Response::Ok)
            }
            Request::Shutdown => {
                // A shim that never answers: it lives on, its container too.
                // Noted only when it hangs: a shutdown that answers is
                // "shutdown shim" alone.
                if self.journal.fails("shim hangs at shutdown") {
                    self.journal.write("shim hangs at shutdown");
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "injected: no answer",
                    ));
                }
                self.journal.write("shutdown shim");
                self.sign(dir);
                lock(&self.states).remove(dir).map(|_| Response::Ok)
            }
            Request::State => lock(&self.states).get(dir).cloned().map(Response::State),
            Request::Checkpoint(c) => Some(if self.journal.step("criu dump") {
                let _ = std::fs::write(c.work_dir.join("dump.log"), "Error (criu/cr-dump.c:1)");
                Response::error(
                    berth_shim_api::protocol::ErrorCode::Failed,
                    "criu dump: injected: Error (criu/cr-dump.c:1): injected",
                )
            } else {
                let written = std::fs::create_dir_all(&c.images_dir)
                    .and_then(|()| std::fs::write(c.images_dir.join("inventory.img"), "img"))
                    .and_then(|()| std::fs::write(c.work_dir.join("dump.log"), "log"));
                match written {
                    Ok(()) => Response::Ok,
                    Err(err) => Response::error(
                        berth_shim_api::protocol::ErrorCode::Failed,
                        err.to_string(),
                    ),
                }
            }),
            other => Some(Response::error(
                berth_shim_api::protocol::ErrorCode::BadRequest,
                format!("the fake does not serve {other:?}"),
            )),
        };
        answer.ok_or_else(gone)
    }

    async fn state(&self, dir: &Path) -> Option<StateInfo> {
        if lock(&self.stalled).contains(dir) {
            std::future::pending::<()>().await;
        }
        let live = lock(&self.states).get(dir).cloned();
        live.or_else(|| lock(&self.exits).get(dir).cloned())
    }

    fn exited(&self, dir: &Path) -> Option<StateInfo> {
        lock(&self.exits).get(dir).cloned()
    }

    fn watch(&self, dir: &Path) -> Option<Box<dyn ShimWatch>> {
        let seen = lock(&self.signs).get(dir).copied().unwrap_or(0);
        Some(Box::new(FakeWatch {
            signs: self.signs.clone(),
            dir: dir.to_path_buf(),
            seen,
        }))
    }

    fn is_alive(&self, dir: &Path) -> bool {
        lock(&self.states).contains_key(dir)
    }

    async fn kill_unrecorded(&self, dir: &Path) {
        self.journal.write("kill unrecorded shim");
        self.sign(dir);
        lock(&self.states).remove(dir);
    }

    fn record_unknown_exit(&self, dir: &Path) -> io::Result<()> {
        // As the real one, which writes the exit file into the dir.
        if !dir.is_dir() {
            return Err(io::Error::new(io::ErrorKind::NotFound, "no shim dir"));
        }
        self.journal.write("record unknown exit");
        let state = StateInfo {
            id: String::new(),
            status: RunState::Stopped,
            pid: 0,
            created_at: String::new(),
            started_at: None,
            exit_code: Some(255),
            exited_at: None,
            oom_killed: false,
            unknown: true,
        };
        lock(&self.exits).insert(dir.to_path_buf(), state);
        self.sign(dir);
        Ok(())
    }
}

/// CRIU, pretended: `criu check` passes unless the step "criu check" fails.
pub struct FakeCriu {
    pub journal: Arc<Journal>,
}

#[async_trait]
impl Criu for FakeCriu {
    async fn check(&self) -> Result<(), CriuUnusable> {
        if self.journal.step("criu check slow") {
            return Err(CriuUnusable::TimedOut(120));
        }
        if self.journal.step("criu check") {
            return Err(CriuUnusable::CheckFailed {
                status: "exit status: 1".into(),
                reason: "Error (criu/vdso.c:381): vdso: injected".into(),
            });
        }
        Ok(())
    }
}
