//! Looking at the host from tests: mounts, cgroups, processes, logs.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::Berthd;

/// The mount points in /proc/self/mountinfo, unescaped.
pub fn mount_points() -> Vec<PathBuf> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
    text.lines()
        .filter_map(|line| line.split(' ').nth(4))
        .map(|field| PathBuf::from(unescape_mount(field)))
        .collect()
}

pub fn unescape_mount(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\' && i + 4 <= bytes.len() {
            if let Ok(code) = u8::from_str_radix(&field[i + 1..i + 4], 8) {
                out.push(code);
                i += 4;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Mounts at or below `dir`.
pub fn mounts_under(dir: &Path) -> Vec<PathBuf> {
    mount_points()
        .into_iter()
        .filter(|mount| mount.starts_with(dir))
        .collect()
}

/// Every cgroup hierarchy mounted under /sys/fs/cgroup (v1 and unified).
/// Pids of processes whose root directory lies under `dir`: pods' infra
/// processes (chrooted into their sandbox dir), which show as `/pause`.
pub fn pids_rooted_under(dir: &Path) -> Vec<i32> {
    let own = std::process::id() as i32;
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| entry.file_name().to_string_lossy().parse::<i32>().ok())
        .filter(|pid| *pid != own)
        .filter(|pid| {
            std::fs::read_link(format!("/proc/{pid}/root")).is_ok_and(|root| root.starts_with(dir))
        })
        .collect()
}

pub fn cgroup_hierarchies() -> Vec<PathBuf> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
    let mut dirs = Vec::new();
    for line in text.lines() {
        let Some((left, right)) = line.split_once(" - ") else {
            continue;
        };
        let fstype = right.split(' ').next().unwrap_or_default();
        let Some(mount) = left.split(' ').nth(4) else {
            continue;
        };
        let mount = PathBuf::from(unescape_mount(mount));
        if (fstype == "cgroup" || fstype == "cgroup2") && mount.starts_with("/sys/fs/cgroup") {
            dirs.push(mount);
        }
    }
    assert!(!dirs.is_empty(), "no cgroup hierarchy mounted");
    dirs
}

/// `dir` and every cgroup below it, deepest first.
pub fn cgroup_subtree(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|kind| kind.is_dir()) {
                out.extend(cgroup_subtree(&entry.path()));
            }
        }
    }
    if dir.is_dir() {
        out.push(dir.to_path_buf());
    }
    out
}

pub fn read_procs(dir: &Path) -> Vec<i32> {
    std::fs::read_to_string(dir.join("cgroup.procs"))
        .unwrap_or_default()
        .lines()
        .filter_map(|line| line.trim().parse().ok())
        .collect()
}

pub fn log_tail(berthd: &Berthd) -> String {
    let log = berthd.log_text();
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(60)..].join("\n")
}

/// Processes whose command line has every one of `needles` (arguments
/// joined by spaces); zombies have none.
pub fn processes_with(needles: &[&str]) -> Vec<i32> {
    let own = std::process::id() as i32;
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let text = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if pid != own && needles.iter().all(|needle| text.contains(needle)) {
            pids.push(pid);
        }
    }
    pids
}

/// SIGKILL to `pid`, ignoring a process already gone.
pub fn sigkill(pid: i32) {
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    );
}

/// Waits (up to 10 s) until a process runs whose command line has every
/// one of `needles`.
pub async fn wait_for_process(needles: &[&str]) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while processes_with(needles).is_empty() {
        assert!(Instant::now() < deadline, "nothing ran {needles:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// SIGKILL to the one shim of container `id`; returns once it is gone
/// (within 10 s).
pub async fn kill_shim_of(id: &str) {
    let shims = processes_with(&["berth-shim", id]);
    assert_eq!(shims.len(), 1, "{shims:?}");
    sigkill(shims[0]);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !processes_with(&["berth-shim", id]).is_empty() {
        assert!(Instant::now() < deadline, "the shim did not die");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Kills every process in cgroup `path` and below it, in every hierarchy,
/// then removes those cgroups, deepest first. For a test's own cgroup
/// root only: whatever runs there was started for the test.
pub fn clear_cgroup_tree(path: &str) {
    let relative = path.trim_start_matches('/');
    for hierarchy in cgroup_hierarchies() {
        for cgroup in cgroup_subtree(&hierarchy.join(relative)) {
            read_procs(&cgroup).into_iter().for_each(sigkill);
        }
    }
    for hierarchy in cgroup_hierarchies() {
        for cgroup in cgroup_subtree(&hierarchy.join(relative)) {
            // A killed process leaves its cgroup a moment after SIGKILL.
            for _ in 0..50 {
                if std::fs::remove_dir(&cgroup).is_ok() || !cgroup.exists() {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
        }
    }
}

/// Lazily unmounts every mount at or below `dir`, deepest first.
pub fn unmount_all_under(dir: &Path) {
    let mut mounts = mounts_under(dir);
    mounts.sort_by_key(|mount| std::cmp::Reverse(mount.components().count()));
    for mount in mounts {
        let _ = nix::mount::umount2(&mount, nix::mount::MntFlags::MNT_DETACH);
    }
}

/// Deletes network link `name` (a CNI bridge a test created), if present.
pub fn delete_link(name: &str) {
    let _ = std::process::Command::new("ip")
        .args(["link", "del", name])
        .stderr(std::process::Stdio::null())
        .status();
}
