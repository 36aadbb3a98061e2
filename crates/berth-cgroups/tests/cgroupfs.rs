//! Tests of `CgroupfsManager` on the host's real cgroup file systems.
//!
//! They need root and skip themselves (with a note on stderr) without it.
//! Each test works only below its own top-level cgroup,
//! `/berth-cgtest-<pid>-<n>`, which a guard removes (after killing the
//! processes the test spawned) even when the test fails.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use berth_cgroups::{CgroupError, CgroupManager, CgroupfsManager, Layout, ParentTracker};

static NEXT: AtomicUsize = AtomicUsize::new(0);

/// A test's own cgroup subtree and the processes it spawned; dropping it
/// kills those processes and removes the subtree in every hierarchy.
struct TestCgroup {
    manager: CgroupfsManager,
    root: String,
    children: Vec<Child>,
}

impl TestCgroup {
    /// `None` (test skipped) unless running as root on a host with cgroups.
    fn new() -> Option<Self> {
        if !nix::unistd::geteuid().is_root() {
            eprintln!("skipped: cgroup tests need root");
            return None;
        }
        let manager = match CgroupfsManager::new() {
            Ok(m) => m,
            Err(e) => {
                eprintln!("skipped: {e}");
                return None;
            }
        };
        let root = format!(
            "/berth-cgtest-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::SeqCst)
        );
        assert!(!manager.exists(&root), "{root} already exists");
        Some(Self {
            manager,
            root,
            children: Vec::new(),
        })
    }

    /// A cgroup path below this test's root.
    fn path(&self, rel: &str) -> String {
        format!("{}/{rel}", self.root)
    }

    /// Starts a long sleep the guard will kill.
    fn spawn_sleep(&mut self) -> i32 {
        let child = Command::new("sleep")
            .arg("1000")
            .stdin(Stdio::null())
            .spawn()
            .expect("spawn sleep");
        let pid = i32::try_from(child.id()).expect("pid fits i32");
        self.children.push(child);
        pid
    }

    /// Kills and reaps the spawned process `pid`.
    fn kill(&mut self, pid: i32) {
        if let Some(i) = self.children.iter().position(|c| c.id() as i32 == pid) {
            let mut child = self.children.remove(i);
            child.kill().expect("kill");
            child.wait().expect("wait");
        }
    }

    fn dirs(&self, path: &str) -> Vec<PathBuf> {
        self.manager.hierarchy_dirs(path).expect("hierarchy dirs")
    }
}

impl Drop for TestCgroup {
    fn drop(&mut self) {
        for mut child in self.children.drain(..) {
            let _ = child.kill();
            let _ = child.wait();
        }
        if let Err(e) = self.manager.remove(&self.root) {
            eprintln!("cleanup of {} failed: {e}", self.root);
        }
    }
}

fn procs(dir: &std::path::Path) -> Vec<i32> {
    std::fs::read_to_string(dir.join("cgroup.procs"))
        .expect("read cgroup.procs")
        .lines()
        .map(|l| l.trim().parse().expect("pid"))
        .collect()
}

#[test]
fn layout_and_hierarchies_match_the_host() {
    let Some(t) = TestCgroup::new() else { return };
    let dirs = t.dirs(&t.path("x"));
    assert!(!dirs.is_empty());
    match t.manager.layout() {
        Layout::Hybrid => {
            assert!(dirs.iter().any(|d| d.starts_with("/sys/fs/cgroup/unified")));
            assert!(dirs.iter().any(|d| d.starts_with("/sys/fs/cgroup/memory")));
        }
        Layout::Legacy => {
            assert!(dirs.iter().any(|d| d.starts_with("/sys/fs/cgroup/memory")));
        }
        Layout::Unified => assert_eq!(
            dirs,
            vec![PathBuf::from("/sys/fs/cgroup").join(&t.root[1..]).join("x")]
        ),
    }
    // Every mounted v1 controller hierarchy is covered.
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    for line in mounts.lines().filter(|l| l.contains(" - cgroup cgroup ")) {
        let mount_point = line.split(' ').nth(4).unwrap();
        assert!(
            dirs.iter().any(|d| d.starts_with(mount_point)),
            "{mount_point} not covered by {dirs:?}"
        );
    }
}

#[test]
fn nested_cgroup_takes_a_process_and_is_removed_only_once_empty() {
    let Some(mut t) = TestCgroup::new() else {
        return;
    };
    let path = t.path("a/b");
    t.manager.create(&path).unwrap();
    assert!(t.manager.exists(&path));
    for dir in t.dirs(&path) {
        assert!(dir.is_dir(), "{} missing", dir.display());
    }
    if t.manager.layout() != Layout::Unified {
        let cpus = t
            .dirs(&path)
            .into_iter()
            .find(|d| d.join("cpuset.cpus").exists())
            .map(|d| std::fs::read_to_string(d.join("cpuset.cpus")).unwrap());
        if let Some(cpus) = cpus {
            assert!(!cpus.trim().is_empty(), "cpuset.cpus not initialized");
        }
    }

    let pid = t.spawn_sleep();
    t.manager.add_process(&path, pid).unwrap();
    for dir in t.dirs(&path) {
        assert_eq!(procs(&dir), vec![pid], "in {}", dir.display());
    }
    assert_eq!(t.manager.pids(&path).unwrap(), vec![pid]);
    assert!(t.manager.pids(&t.path("a")).unwrap().is_empty());
    assert_eq!(t.manager.subtree_pids(&t.root).unwrap(), vec![pid]);

    // Removal is refused while the process is inside, and removes nothing.
    for target in [path.clone(), t.root.clone()] {
        match t.manager.remove(&target) {
            Err(CgroupError::Busy { pids, .. }) => assert_eq!(pids, vec![pid]),
            other => panic!("remove {target}: expected Busy, got {other:?}"),
        }
    }
    for dir in t.dirs(&path) {
        assert!(dir.is_dir(), "{} removed too early", dir.display());
    }
    assert!(!t.manager.remove_if_empty(&path).unwrap());

    t.kill(pid);
    assert!(t.manager.pids(&path).unwrap().is_empty());
    t.manager.remove(&path).unwrap();
    for dir in t.dirs(&path) {
        assert!(!dir.exists(), "{} still exists", dir.display());
    }
    assert!(!t.manager.exists(&path));
    // Idempotent.
    t.manager.remove(&path).unwrap();

    // Removing a subtree goes deepest first in every hierarchy.
    t.manager.create(&t.path("c/d/e")).unwrap();
    t.manager.remove(&t.root).unwrap();
    for dir in t.dirs(&t.root) {
        assert!(!dir.exists(), "{} still exists", dir.display());
    }
}

#[test]
fn ensure_parent_and_remove_if_empty() {
    let Some(mut t) = TestCgroup::new() else {
        return;
    };
    let parent = t.path("parent");
    assert!(t.manager.ensure_parent(&parent).unwrap());
    assert!(!t.manager.ensure_parent(&parent).unwrap());
    // The test root was created as an ancestor, so it existed now.
    assert!(!t.manager.ensure_parent(&t.root).unwrap());
    assert!(!t.manager.ensure_parent("/").unwrap());

    // A child cgroup keeps the parent.
    let child = format!("{parent}/child");
    t.manager.create(&child).unwrap();
    assert!(!t.manager.remove_if_empty(&parent).unwrap());
    assert!(!t.manager.remove_if_empty(&t.root).unwrap());
    t.manager.remove(&child).unwrap();

    // A process directly in the parent keeps it too.
    let pid = t.spawn_sleep();
    t.manager.add_process(&parent, pid).unwrap();
    assert!(!t.manager.remove_if_empty(&parent).unwrap());
    assert!(t.manager.exists(&parent));
    t.kill(pid);

    assert!(t.manager.remove_if_empty(&parent).unwrap());
    assert!(!t.manager.exists(&parent));
    for dir in t.dirs(&parent) {
        assert!(!dir.exists(), "{} still exists", dir.display());
    }
    assert!(!t.manager.remove_if_empty(&parent).unwrap());
    assert!(t.manager.remove_if_empty(&t.root).unwrap());
    assert!(!t.manager.exists(&t.root));
}

#[test]
fn add_process_needs_an_existing_cgroup_and_a_valid_pid() {
    let Some(t) = TestCgroup::new() else { return };
    let path = t.path("missing");
    assert!(matches!(
        t.manager.add_process(&path, std::process::id() as i32),
        Err(CgroupError::NotFound { .. })
    ));
    assert!(!t.manager.exists(&path));
    t.manager.create(&path).unwrap();
    assert!(matches!(
        t.manager.add_process(&path, 0),
        Err(CgroupError::InvalidPid(0))
    ));
    assert!(matches!(
        t.manager.add_process(&path, -1),
        Err(CgroupError::InvalidPid(-1))
    ));
    // A pid that does not exist is refused by the kernel.
    assert!(t.manager.add_process(&path, i32::MAX).is_err());
    assert!(t.manager.remove("/").is_err());
    assert!(t.manager.create("/a/../b").is_err());
}

#[test]
fn parent_tracker_on_the_real_cgroupfs() {
    let Some(t) = TestCgroup::new() else { return };
    let state = tempfile::tempdir().unwrap();
    let manager: Arc<dyn CgroupManager> = Arc::new(CgroupfsManager::new().unwrap());
    let tracker = ParentTracker::open(manager.clone(), state.path().join("parents.json")).unwrap();

    let parent = t.path("berth/x");
    assert_eq!(
        tracker.ensure(&parent).unwrap(),
        vec![t.root.clone(), t.path("berth"), parent.clone()]
    );
    manager.create(&format!("{parent}/sandbox")).unwrap();
    assert!(tracker.remove_unused_parents().unwrap().is_empty());
    manager.remove(&format!("{parent}/sandbox")).unwrap();
    assert_eq!(
        tracker.remove_unused_parents().unwrap(),
        vec![parent.clone(), t.path("berth"), t.root.clone()]
    );
    for dir in t.dirs(&t.root) {
        assert!(!dir.exists(), "{} still exists", dir.display());
    }
}

#[test]
fn guard_cleans_up_after_a_failing_test() {
    if TestCgroup::new().is_none() {
        return;
    }
    let seen: std::sync::Mutex<Vec<PathBuf>> = std::sync::Mutex::new(Vec::new());
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut t = TestCgroup::new().unwrap();
        let path = t.path("busy");
        t.manager.create(&path).unwrap();
        let pid = t.spawn_sleep();
        t.manager.add_process(&path, pid).unwrap();
        *seen.lock().unwrap() = t.dirs(&t.root);
        panic!("intentional failure: the guard must still clean up");
    }));
    assert!(result.is_err());
    let dirs = seen.into_inner().unwrap();
    assert!(!dirs.is_empty());
    for dir in dirs {
        assert!(!dir.exists(), "{} left behind", dir.display());
    }
}

#[test]
fn stats_of_a_real_cgroup_count_its_process() {
    use std::io::Write;
    let Some(mut t) = TestCgroup::new() else {
        return;
    };
    let path = t.path("stats");
    t.manager.create(&path).unwrap();
    // The shell waits for a line, so all it does after that (a busy loop
    // touching fresh memory) is charged to the cgroup it was moved into.
    let mut child = Command::new("sh")
        .args([
            "-c",
            "read go; s=; i=0; while [ $i -lt 20000 ]; do i=$((i+1)); s=\"$s.\"; done; exec sleep 1000",
        ])
        .stdin(Stdio::piped())
        .spawn()
        .expect("spawn sh");
    let pid = i32::try_from(child.id()).expect("pid fits i32");
    let mut stdin = child.stdin.take().expect("stdin");
    t.children.push(child);
    t.manager.add_process(&path, pid).unwrap();
    stdin.write_all(b"go\n").unwrap();
    drop(stdin);

    let dirs = t.manager.stats_dirs(&path).unwrap();
    if t.manager.layout() != Layout::Unified {
        assert!(
            matches!(&dirs, berth_cgroups::stats::StatsDirs::V1 { memory: Some(dir), .. } if dir.starts_with("/sys/fs/cgroup/memory")),
            "{dirs:?}"
        );
    }
    // Wait (without a time bound worth asserting) until the loop is done.
    let mut stats = berth_cgroups::stats::read(&dirs).unwrap();
    for _ in 0..600 {
        let exec_done = std::fs::read_to_string(format!("/proc/{pid}/comm"))
            .is_ok_and(|comm| comm.trim() == "sleep");
        stats = berth_cgroups::stats::read(&dirs).unwrap();
        if exec_done {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let cpu = stats.cpu.expect("cpu stats");
    assert!(cpu.usage_ns > 0, "{stats:?}");
    if let Some(memory) = stats.memory {
        assert!(memory.usage_bytes > 0, "{stats:?}");
        assert!(memory.working_set_bytes <= memory.usage_bytes, "{stats:?}");
        assert!(memory.page_faults > 0, "{stats:?}");
        assert_eq!(memory.limit_bytes, None, "no limit was set: {stats:?}");
    }
    if let Some(pids) = stats.pids {
        assert_eq!(pids.current, 1, "{stats:?}");
        assert_eq!(stats.pids_limit, Some(None), "no limit was set: {stats:?}");
    }
    // What cadvisor's metrics add: the cpu split, the memory counters, the
    // cpu settings (v1 always has the cpu controller; a v2 subtree may not),
    // and the process itself in cgroup.procs.
    let split = stats.cpu_split.expect("cpu split");
    assert!(split.user_ns + split.system_ns > 0, "{stats:?}");
    if let Some(memory) = stats.memory {
        let counters = stats.memory_counters.expect("memory counters");
        assert!(counters.own_page_faults <= memory.page_faults, "{stats:?}");
        assert_eq!(counters.failcnt, 0, "{stats:?}");
    }
    if t.manager.layout() != Layout::Unified {
        let limits = stats.cpu_limits.expect("cpu settings");
        assert!(limits.period_us > 0 && limits.shares > 0, "{stats:?}");
        assert_eq!(limits.quota_us, None, "no quota was set: {stats:?}");
        assert!(stats.throttling.is_some(), "{stats:?}");
    }
    assert_eq!(
        berth_cgroups::stats::procs(&dirs).unwrap(),
        [u32::try_from(pid).unwrap()]
    );
    t.kill(pid);

    let gone = t.path("never-created");
    assert!(berth_cgroups::stats::read(&t.manager.stats_dirs(&gone).unwrap()).is_err());
}
