//! Processes, open files and sockets of a container, counted in `/proc`
//! for the pids of its cgroup, as cadvisor's process metrics count them.

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
}

/// Counts under `proc_root` (`/proc`) for `pids`. A process that exits
/// meanwhile is not counted; one whose fds cannot be read counts with none.
pub fn count(proc_root: &Path, pids: &[u32]) -> ProcessCounts {
    let mut counts = ProcessCounts::default();
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
        let before = count(Path::new("/proc"), &[std::process::id()]);
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        let after = count(Path::new("/proc"), &[std::process::id()]);
        assert_eq!(after.processes, 1);
        // Other tests open and close files meanwhile: only ours are sure.
        assert!(after.sockets >= 3, "{after:?}");
        assert!(after.file_descriptors >= after.sockets, "{after:?}");
        assert!(before.processes == 1);
        drop((listener, a, b));
    }

    #[test]
    fn a_gone_process_is_not_counted() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(count(dir.path(), &[42]), ProcessCounts::default());
    }

    #[test]
    fn socket_links_are_told_from_files() {
        assert!(is_socket_target(Path::new("socket:[12345]")));
        assert!(!is_socket_target(Path::new("/dev/null")));
        assert!(!is_socket_target(Path::new("pipe:[9]")));
    }
}
