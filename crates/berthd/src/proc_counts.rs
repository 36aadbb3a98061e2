//! Processes, open files and sockets of a container, counted in `/proc`
//! for the pids of its cgroup, and its init process's limit on open files,
//! as cadvisor's process metrics have them.

use std::path::Path;

/// What a cgroup's processes hold open.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProcessCounts {
    /// Processes in the cgroup itself (threads are not processes).
    pub processes: u64,
    /// Open file descriptors of those processes.
    pub file_descriptors: u64,
    /// Those of the descriptors that are sockets.
    pub sockets: u64,
    /// The init process's soft limit on open files; `None` when unlimited
    /// or the process is not among the pids.
    pub open_files_limit: Option<u64>,
}

/// Counts under `proc_root` (`/proc`) for `pids`, whose init process is
/// `init`. A process that exits meanwhile is not counted; one whose fds
/// cannot be read counts with none.
pub fn count(proc_root: &Path, pids: &[u32], init: Option<u32>) -> ProcessCounts {
    let mut counts = ProcessCounts {
        open_files_limit: init
            .filter(|init| pids.contains(init))
            .and_then(|init| std::fs::read_to_string(proc_root.join(format!("{init}/limits"))).ok())
            .and_then(|limits| open_files_soft_limit(&limits)),
        ..ProcessCounts::default()
    };
    for pid in pids {
        let fd_dir = proc_root.join(pid.to_string()).join("fd");
        let entries = match std::fs::read_dir(&fd_dir) {
            Ok(entries) => entries,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => continue,
            Err(_) => {
                counts.processes += 1;
                continue;
            }
        };
        counts.processes += 1;
        for entry in entries.flatten() {
            counts.file_descriptors += 1;
            let is_socket =
                std::fs::read_link(entry.path()).is_ok_and(|target| is_socket_target(&target));
            counts.sockets += u64::from(is_socket);
        }
    }
    counts
}

/// The soft limit of the `Max open files` line of `/proc/<pid>/limits`;
/// `None` when `unlimited` or absent.
pub fn open_files_soft_limit(limits: &str) -> Option<u64> {
    limits
        .lines()
        .find_map(|line| line.strip_prefix("Max open files"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|soft| soft.parse().ok())
}

/// A `/proc/<pid>/fd` link's target names a socket as `socket:[inode]`.
fn is_socket_target(target: &Path) -> bool {
    target
        .as_os_str()
        .as_encoded_bytes()
        .starts_with(b"socket:[")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_this_process_and_its_sockets() {
        let me = std::process::id();
        let before = count(Path::new("/proc"), &[me], None);
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        let after = count(Path::new("/proc"), &[me], Some(me));
        assert_eq!(after.processes, 1);
        // Other tests open and close files meanwhile: only ours are sure.
        assert!(after.sockets >= 3, "{after:?}");
        assert!(after.file_descriptors >= after.sockets, "{after:?}");
        assert!(before.processes == 1);
        assert_eq!(before.open_files_limit, None, "no init given");
        let (soft, _) =
            nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE).unwrap();
        let expected = (soft != nix::sys::resource::RLIM_INFINITY).then_some(soft);
        assert_eq!(after.open_files_limit, expected);
        drop((listener, a, b));
    }

    #[test]
    fn a_gone_process_is_not_counted() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(count(dir.path(), &[42], Some(42)), ProcessCounts::default());
        assert_eq!(
            count(Path::new("/proc"), &[], Some(std::process::id())).open_files_limit,
            None,
            "an init outside the cgroup is not the container's"
        );
    }

    #[test]
    fn open_files_soft_limit_from_limits() {
        let limits = "\
Limit                     Soft Limit           Hard Limit           Units
Max processes             96365                96365                processes
Max open files            1024                 524288               files
";
        assert_eq!(open_files_soft_limit(limits), Some(1024));
        let unlimited = limits.replace("1024     ", "unlimited");
        assert_eq!(open_files_soft_limit(&unlimited), None);
        assert_eq!(open_files_soft_limit("Max processes 1 1\n"), None);
    }

    #[test]
    fn socket_links_are_told_from_files() {
        assert!(is_socket_target(Path::new("socket:[12345]")));
        assert!(!is_socket_target(Path::new("/dev/null")));
        assert!(!is_socket_target(Path::new("pipe:[9]")));
    }
}
