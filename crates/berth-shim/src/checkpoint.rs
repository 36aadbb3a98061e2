//! Checkpoints with CRIU: the dump goes through libcontainer
//! (`Container::checkpoint`, which drives `criu swrk`).

use std::path::Path;

use libcontainer::container::{CheckpointOptions, Container};

use crate::server::error_chain;

/// Dumps the container's processes into `images_dir` and leaves them
/// running (kubelet's checkpoint is a copy, not a migration). CRIU writes
/// `dump.log` and `stats-dump` into `work_dir`.
pub fn dump(container: &mut Container, images_dir: &Path, work_dir: &Path) -> Result<(), String> {
    let opts = CheckpointOptions {
        ext_unix_sk: false,
        file_locks: false,
        image_path: images_dir.to_path_buf(),
        leave_running: true,
        shell_job: false,
        tcp_established: false,
        work_path: Some(work_dir.to_path_buf()),
        // CRIU's own default for a dump: cgroup properties are saved, and
        // restore makes only the cgroups that are missing.
        manage_cgroups_mode: rust_criu::CgMode::SOFT,
        link_remap: false,
    };
    container.checkpoint(&opts).map_err(|err| {
        let mut message = format!("criu dump: {}", error_chain(&err));
        let log = work_dir.join("dump.log");
        if let Some(reason) = criu_errors(&log) {
            message.push_str(&format!(": {reason} (CRIU's log: {})", log.display()));
        }
        message
    })
}

/// CRIU's last error lines in `log` (at most three), joined: its own
/// account of why it failed, which libcontainer's error does not carry.
pub fn criu_errors(log: &Path) -> Option<String> {
    let text = std::fs::read_to_string(log).ok()?;
    last_errors(&text)
}

fn last_errors(text: &str) -> Option<String> {
    let errors: Vec<&str> = text
        .lines()
        .filter(|line| line.contains("Error (") || line.starts_with("Error"))
        .map(str::trim)
        .collect();
    let tail = &errors[errors.len().saturating_sub(3)..];
    (!tail.is_empty()).then(|| tail.join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_three_error_lines_are_kept() {
        let log = "(00.001) Version: 3.17.1\n\
                   (00.002) Error (criu/a.c:1): one\n\
                   (00.003) Error (criu/b.c:2): two\n\
                   (00.004) plain line\n\
                   (00.005) Error (criu/c.c:3): three\n\
                   (00.006) Error (criu/d.c:4): four\n";
        assert_eq!(
            last_errors(log).as_deref(),
            Some("(00.003) Error (criu/b.c:2): two; (00.005) Error (criu/c.c:3): three; (00.006) Error (criu/d.c:4): four")
        );
        assert_eq!(last_errors("(00.001) all fine\n"), None);
    }
}
