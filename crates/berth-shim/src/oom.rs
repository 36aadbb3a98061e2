//! Did the OOM killer act in the container's memory cgroup?
//!
//! The shim reads the cgroup's `oom_kill` counter when the container is
//! created and again when its init exits; a higher count means a process of
//! the container was OOM-killed (containerd reports `OOMKilled` the same way,
//! from cgroup OOM events). cgroup v1 has the counter in
//! `memory/<path>/memory.oom_control` (kernel ≥ 4.13), v2 in
//! `<path>/memory.events`. Only cgroupfs paths (`/a/b`) are understood.
//!
//! Under the systemd driver the container's cgroup is a scope, which
//! systemd removes as soon as its last process has exited: by the time the
//! shim reads the counter at exit it is usually gone. So on cgroup v2 the
//! shim also watches `memory.events` (the kernel signals every change of it
//! with inotify, at the kill, before the victim has exited) and keeps the
//! highest count it read, as containerd's shim watches it for OOM events.
//! Under load systemd can still remove the scope before the shim gets to
//! read it; the parent's (the pod slice's) `memory.events` counts its
//! children's kills too and outlives the scope, so the shim watches it as
//! well and notes the parent's count at every read of its own: a parent
//! count that grew after the container's own file vanished is its kill.

use std::fs;
use std::os::fd::{AsFd, BorrowedFd};
use std::path::{Path, PathBuf};

use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};

/// Finds the `oom_kill` counter of one cgroup.
#[derive(Debug)]
pub struct OomProbe {
    files: Vec<PathBuf>,
    /// The highest count read so far.
    seen: Option<u64>,
    /// A watch on the v2 `memory.events` and its parent's, once
    /// [`OomProbe::watch`] set it.
    watch: Option<Inotify>,
    /// The parent cgroup's v2 `memory.events`.
    parent: Option<PathBuf>,
    /// The parent's count, read just before the last successful read of
    /// the container's own counter.
    parent_seen: Option<u64>,
    /// The own counter was read once and can no longer be.
    lost: bool,
}

impl OomProbe {
    /// `cgroup_root` is normally `/sys/fs/cgroup`; `cgroups_path` is the
    /// spec's `linux.cgroupsPath`.
    pub fn new(cgroup_root: &Path, cgroups_path: &Path) -> Self {
        let rel = cgroups_path.strip_prefix("/").unwrap_or(cgroups_path);
        let files = if rel.as_os_str().is_empty() || rel.to_string_lossy().contains(':') {
            Vec::new() // the root cgroup, or a systemd slice name
        } else {
            vec![
                cgroup_root
                    .join("memory")
                    .join(rel)
                    .join("memory.oom_control"),
                cgroup_root.join(rel).join("memory.events"),
                cgroup_root.join("unified").join(rel).join("memory.events"),
            ]
        };
        Self::with_files(files)
    }

    fn with_files(files: Vec<PathBuf>) -> Self {
        Self {
            files,
            seen: None,
            watch: None,
            parent: None,
            parent_seen: None,
            lost: false,
        }
    }

    /// Finds the cgroup of a running process from its `/proc/<pid>/cgroup`
    /// text: this works whatever named the cgroup (a cgroupfs path, or a
    /// systemd scope that libcontainer made from `slice:prefix:name`).
    pub fn for_process(cgroup_root: &Path, proc_cgroup: &str) -> Self {
        let mut files = Vec::new();
        for line in proc_cgroup.lines() {
            let mut fields = line.splitn(3, ':');
            let (Some(_), Some(controllers), Some(path)) =
                (fields.next(), fields.next(), fields.next())
            else {
                continue;
            };
            let rel = path.trim_start_matches('/');
            if rel.is_empty() {
                continue; // the root cgroup: not the container's own
            }
            if controllers.is_empty() {
                files.push(cgroup_root.join(rel).join("memory.events"));
                files.push(cgroup_root.join("unified").join(rel).join("memory.events"));
            } else if controllers.split(',').any(|c| c == "memory") {
                files.insert(
                    0,
                    cgroup_root
                        .join("memory")
                        .join(rel)
                        .join("memory.oom_control"),
                );
            }
        }
        Self::with_files(files)
    }

    /// The counter now, from the first file that has one.
    pub fn oom_kills(&self) -> Option<u64> {
        self.files.iter().find_map(|file| read_oom_kill(file))
    }

    /// Starts watching the v2 `memory.events` (the first one that exists);
    /// without one (cgroup v1, where the cgroup stays until berthd removes
    /// it) or when inotify fails, the counter is only read when asked.
    pub fn watch(&mut self) {
        let Some(file) = self
            .files
            .iter()
            .find(|f| f.ends_with("memory.events") && f.exists())
        else {
            return;
        };
        let parent = file
            .parent()
            .and_then(Path::parent)
            .map(|dir| dir.join("memory.events"))
            .filter(|parent| parent.exists());
        let Ok(inotify) = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC) else {
            return;
        };
        if inotify.add_watch(file, AddWatchFlags::IN_MODIFY).is_ok() {
            if let Some(parent) = &parent {
                if inotify.add_watch(parent, AddWatchFlags::IN_MODIFY).is_ok() {
                    self.parent = Some(parent.clone());
                }
            }
            self.watch = Some(inotify);
        }
        self.refresh();
    }

    fn read_parent(&self) -> Option<u64> {
        read_oom_kill(self.parent.as_ref()?)
    }

    /// The watch's fd, readable when the counter file changed.
    pub fn watch_fd(&self) -> Option<BorrowedFd<'_>> {
        self.watch.as_ref().map(|w| w.as_fd())
    }

    /// Drains the watch's events and reads the counter into the highest
    /// count seen, noting the parent's count just before.
    pub fn refresh(&mut self) {
        if let Some(watch) = &self.watch {
            while let Ok(events) = watch.read_events() {
                if events.is_empty() {
                    break;
                }
            }
        }
        // The parent first: a kill between the two reads then shows in
        // the container's own count, never only in the parent's.
        let parent = self.read_parent();
        match self.oom_kills() {
            Some(now) => {
                self.seen = Some(self.seen.map_or(now, |seen| seen.max(now)));
                self.parent_seen = parent;
            }
            None => self.lost |= self.seen.is_some(),
        }
    }

    /// The highest count read, reading once more first.
    pub fn counted(&mut self) -> Option<u64> {
        self.refresh();
        self.seen
    }

    /// Whether the container was OOM-killed since its count was `baseline`:
    /// its own count grew, or, its cgroup gone, its parent's did after the
    /// last read of its own.
    pub fn killed_since(&mut self, baseline: u64) -> bool {
        if self.counted().is_some_and(|n| n > baseline) {
            return true;
        }
        self.lost
            && matches!((self.parent_seen, self.read_parent()), (Some(then), Some(now)) if now > then)
    }
}

/// The `oom_kill` counter in `file`; none if it cannot be read or has none.
fn read_oom_kill(file: &Path) -> Option<u64> {
    parse_oom_kill(&fs::read_to_string(file).ok()?)
}

/// The value of the `oom_kill` line of `memory.oom_control` or
/// `memory.events`.
pub fn parse_oom_kill(text: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let mut parts = line.split_whitespace();
        match (parts.next(), parts.next()) {
            (Some("oom_kill"), Some(n)) => n.parse().ok(),
            _ => None,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_v1_and_v2_formats() {
        let v1 = "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n";
        assert_eq!(parse_oom_kill(v1), Some(2));
        let v2 = "low 0\nhigh 0\nmax 4\noom 1\noom_kill 1\noom_group_kill 0\n";
        assert_eq!(parse_oom_kill(v2), Some(1));
        assert_eq!(parse_oom_kill("oom_kill_disable 0\nunder_oom 0\n"), None);
    }

    #[test]
    fn reads_v1_then_v2_locations() {
        let root = tempfile::tempdir().expect("tempdir");
        let probe = OomProbe::new(root.path(), Path::new("/pod/c1"));
        assert_eq!(probe.oom_kills(), None);

        let v2 = root.path().join("pod/c1");
        fs::create_dir_all(&v2).expect("mkdir");
        fs::write(v2.join("memory.events"), "oom 0\noom_kill 5\n").expect("write");
        assert_eq!(probe.oom_kills(), Some(5));

        let v1 = root.path().join("memory/pod/c1");
        fs::create_dir_all(&v1).expect("mkdir");
        fs::write(v1.join("memory.oom_control"), "under_oom 0\noom_kill 1\n").expect("write");
        assert_eq!(probe.oom_kills(), Some(1));
    }

    #[test]
    fn the_count_outlives_the_cgroup() {
        let root = tempfile::tempdir().expect("tempdir");
        let dir = root.path().join("a.slice/berth-c1.scope");
        fs::create_dir_all(&dir).expect("mkdir");
        let events = dir.join("memory.events");
        fs::write(&events, "oom 0\noom_kill 0\n").expect("write");
        let mut probe = OomProbe::for_process(root.path(), "0::/a.slice/berth-c1.scope\n");
        probe.watch();
        assert!(probe.watch_fd().is_some(), "v2 files are watched");
        assert_eq!(probe.counted(), Some(0));
        fs::write(&events, "oom 1\noom_kill 1\n").expect("write");
        probe.refresh();
        // systemd removes the scope once its last process is gone.
        fs::remove_dir_all(&dir).expect("rm");
        assert_eq!(probe.oom_kills(), None);
        assert_eq!(probe.counted(), Some(1));
        assert!(probe.killed_since(0));
    }

    /// A pod slice with one container scope in it, watched.
    fn slice_with_scope() -> (tempfile::TempDir, PathBuf, PathBuf, OomProbe) {
        let root = tempfile::tempdir().expect("tempdir");
        let slice = root.path().join("pod.slice");
        let scope = slice.join("berth-c1.scope");
        fs::create_dir_all(&scope).expect("mkdir");
        fs::write(slice.join("memory.events"), "oom_kill 3\n").expect("write");
        fs::write(scope.join("memory.events"), "oom_kill 0\n").expect("write");
        let mut probe = OomProbe::for_process(root.path(), "0::/pod.slice/berth-c1.scope\n");
        probe.watch();
        (root, slice, scope, probe)
    }

    #[test]
    fn a_kill_seen_only_in_the_parent_after_the_scope_went_counts() {
        let (_root, slice, scope, mut probe) = slice_with_scope();
        let baseline = probe.counted().unwrap_or(0);
        // Killed, and the scope removed before the shim read it.
        fs::write(slice.join("memory.events"), "oom_kill 4\n").expect("write");
        fs::remove_dir_all(&scope).expect("rm");
        assert!(probe.killed_since(baseline));
    }

    #[test]
    fn a_siblings_kill_seen_while_the_scope_lived_does_not_count() {
        let (_root, slice, scope, mut probe) = slice_with_scope();
        let baseline = probe.counted().unwrap_or(0);
        fs::write(slice.join("memory.events"), "oom_kill 4\n").expect("write");
        probe.refresh();
        // The container then ends otherwise; its scope goes.
        fs::remove_dir_all(&scope).expect("rm");
        assert!(!probe.killed_since(baseline));
    }

    #[test]
    fn v1_is_read_when_asked() {
        let root = tempfile::tempdir().expect("tempdir");
        let mut probe = OomProbe::for_process(root.path(), "4:memory:/pod/c1\n");
        probe.watch();
        assert!(probe.watch_fd().is_none());
        assert_eq!(probe.counted(), None);
    }

    #[test]
    fn a_process_cgroup_file_names_the_files() {
        let root = Path::new("/sys/fs/cgroup");
        let v2 = OomProbe::for_process(root, "0::/a.slice/berth-c1.scope\n");
        assert_eq!(
            v2.files[0],
            Path::new("/sys/fs/cgroup/a.slice/berth-c1.scope/memory.events")
        );
        let v1 = OomProbe::for_process(
            root,
            "12:pids:/pod/c1\n4:memory:/pod/c1\n1:name=systemd:/pod/c1\n0::/pod/c1\n",
        );
        assert_eq!(
            v1.files[0],
            Path::new("/sys/fs/cgroup/memory/pod/c1/memory.oom_control")
        );
        assert_eq!(v1.files.len(), 3);
        assert!(OomProbe::for_process(root, "0::/\n").files.is_empty());
    }

    #[test]
    fn systemd_and_root_paths_are_not_probed() {
        let root = Path::new("/sys/fs/cgroup");
        assert_eq!(
            OomProbe::new(root, Path::new("system.slice:berth:c1"))
                .files
                .len(),
            0
        );
        assert_eq!(OomProbe::new(root, Path::new("/")).files.len(), 0);
    }
}
