//! Finding and killing processes berthd started but never recorded: a shim
//! or berth-pinns whose berthd died before it wrote their pid down, and an
//! infra process that berth-pinns forked for a pod that was never recorded.
//! They are found by what berthd gave them (their arguments, their root
//! directory), which no other process on the node has, and killed by pid
//! after checking their start time, so a reused pid is never hit.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use crate::sandbox::process::{identify, kill_all_and_wait};
use crate::sandbox::store::InfraProcess;

/// Live processes running `binary` (the file name of argv[0]) with the
/// argument `flag` directly followed by `value`.
pub fn with_argument(binary: &str, flag: &str, value: &Path) -> Vec<i32> {
    live_pids()
        .into_iter()
        .filter(|pid| {
            let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
                return false;
            };
            let args: Vec<&[u8]> = cmdline.split(|byte| *byte == 0).collect();
            let named = args.first().is_some_and(|arg0| {
                Path::new(OsStr::from_bytes(arg0)).file_name() == Some(OsStr::new(binary))
            });
            named
                && args.windows(2).any(|pair| {
                    pair[0] == flag.as_bytes() && pair[1] == value.as_os_str().as_bytes()
                })
        })
        .collect()
}

/// Live processes whose root directory is `root` (chrooted there).
pub fn rooted_at(root: &Path) -> Vec<i32> {
    live_pids()
        .into_iter()
        .filter(|pid| {
            std::fs::read_link(format!("/proc/{pid}/root")).is_ok_and(|link| link == root)
        })
        .collect()
}

/// SIGKILLs each process (if it is still the one found) and waits up to
/// 5 s for all of them to be gone.
pub async fn kill_and_wait(pids: &[i32]) {
    let found: Vec<InfraProcess> = pids.iter().filter_map(|pid| identify(*pid)).collect();
    kill_all_and_wait(&found).await
}

fn live_pids() -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| *pid != std::process::id() as i32)
        .collect()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn finds_a_process_by_its_arguments_and_kills_it() {
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("marker");
        nix::unistd::mkfifo(&marker, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        // A process named berth-test-proc with `--dir <marker>` among its
        // arguments. It waits in bash's own `read` on the fifo: a forked
        // sleep would match too until it exec'd, and be found beside it.
        let mut child = crate::test_child::TestChild::spawn(
            std::process::Command::new("bash")
                .arg("-c")
                .arg("exec -a berth-test-proc bash -c 'read -t 30 <> \"$1\"' --dir \"$0\"")
                .arg(&marker),
        );
        let pid = child.id() as i32;
        let mut found = Vec::new();
        for _ in 0..200 {
            found = with_argument("berth-test-proc", "--dir", &marker);
            if !found.is_empty() {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(found, vec![pid]);
        assert!(with_argument("berth-test-proc", "--dir", &dir.path().join("other")).is_empty());
        kill_and_wait(&found).await;
        let status = child.wait().unwrap();
        assert!(!status.success());
    }

    #[test]
    fn nothing_is_rooted_in_an_empty_dir() {
        let dir = tempfile::tempdir().unwrap();
        assert!(rooted_at(dir.path()).is_empty());
    }
}
