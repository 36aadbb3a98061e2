//! A shim's own log, read when its container cannot be created or
//! started: libcontainer's real reason is in its `ERROR` lines (the error
//! the shim reports is often only "failed to prepare rootfs"), so they go
//! into the error kubelet sees, and the log of a create that failed is kept
//! with its pod sandbox, as no container is left to keep it.

use std::io;
use std::path::{Path, PathBuf};

/// At most this many error lines go into an error message.
const TAIL_LINES: usize = 4;
/// And at most this many bytes of each.
const LINE_BYTES: usize = 400;
/// Failed creates' logs kept per sandbox: kubelet retries a failing create
/// with back-off for as long as the pod lives, so only the newest are kept.
const KEPT_PER_SANDBOX: usize = 10;
/// Where in the sandbox's dir they are kept.
const FAILED_DIR: &str = "failed-containers";

/// The last [`TAIL_LINES`] `ERROR` lines of a shim log that say more than
/// `reported` (the error the shim reported), each without its timestamp
/// and cut to about [`LINE_BYTES`], oldest first.
///
/// libcontainer logs one error at every level it passes through, and all
/// but the first end with the same words as the reported error ("failed to
/// prepare rootfs"); those are left out, so the cause is what remains.
pub fn error_tail(log: &str, reported: &str) -> Vec<String> {
    let errors: Vec<&str> = log
        .lines()
        .filter_map(|line| line.split_once(" ERROR ").map(|(_, rest)| rest.trim()))
        .collect();
    let last_words = reported.rsplit(": ").next().unwrap_or_default().trim();
    let telling: Vec<&str> = errors
        .iter()
        .copied()
        .filter(|line| last_words.is_empty() || !line.ends_with(last_words))
        .collect();
    let chosen = if telling.is_empty() { errors } else { telling };
    chosen[chosen.len().saturating_sub(TAIL_LINES)..]
        .iter()
        .map(|line| cut(line, LINE_BYTES))
        .collect()
}

/// `message`, followed by the error lines of the shim log at `log` (if any)
/// and, when given, where that log is kept.
pub fn with_reason(message: &str, log: &Path, kept_at: Option<&Path>) -> String {
    let tail = std::fs::read_to_string(log)
        .map(|text| error_tail(&text, message))
        .unwrap_or_default();
    let mut out = message.to_string();
    if !tail.is_empty() {
        out.push_str("; shim log: ");
        out.push_str(&tail.join(" | "));
    }
    if let Some(kept) = kept_at {
        out.push_str(&format!("; full log in {}", kept.display()));
    }
    out
}

/// Where the log of container `id`'s failed create is kept in its sandbox's
/// directory (removed with the sandbox).
pub fn kept_path(sandbox_dir: &Path, id: &str) -> PathBuf {
    sandbox_dir.join(FAILED_DIR).join(format!("{id}.shim.log"))
}

/// Copies `log` to `kept` and removes the oldest kept logs beyond
/// [`KEPT_PER_SANDBOX`].
pub fn keep(log: &Path, kept: &Path) -> io::Result<()> {
    let Some(dir) = kept.parent() else {
        return Ok(());
    };
    std::fs::create_dir_all(dir)?;
    std::fs::copy(log, kept)?;
    let mut logs: Vec<(std::time::SystemTime, PathBuf)> = std::fs::read_dir(dir)?
        .flatten()
        .filter_map(|entry| Some((entry.metadata().ok()?.modified().ok()?, entry.path())))
        .collect();
    logs.sort();
    let excess = logs.len().saturating_sub(KEPT_PER_SANDBOX);
    for (_, path) in logs.into_iter().take(excess) {
        let _ = std::fs::remove_file(path);
    }
    Ok(())
}

/// `line` cut to about `max` bytes: its start and its end (where errno
/// and error values are), on character boundaries.
fn cut(line: &str, max: usize) -> String {
    if line.len() <= max {
        return line.to_string();
    }
    let mut head = max / 3;
    while !line.is_char_boundary(head) {
        head -= 1;
    }
    let mut tail = line.len() - (max - head);
    while !line.is_char_boundary(tail) {
        tail += 1;
    }
    format!("{} … {}", &line[..head], &line[tail..])
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOG: &str = "\
2026-11-23T15:57:30.1Z  INFO berth_shim: berth-shim starting id=c1
2026-11-23T15:57:30.2Z ERROR libcontainer::rootfs::mount: failed to mount cgroup v1: procfs failed
2026-11-23T15:57:30.3Z ERROR libcontainer::process::init: failed to prepare rootfs err=Mount(Procfs(NotFound(Some(\"/proc/378\"))))
2026-11-23T15:57:30.4Z ERROR berth_shim: creating the container failed msg=failed to prepare rootfs
";

    const REPORTED: &str = "creating the container: failed to create container: exec process failed with error error in executing process : failed to prepare rootfs";

    #[test]
    fn the_tail_is_the_causes_without_time() {
        assert_eq!(
            error_tail(LOG, REPORTED),
            [
                "libcontainer::rootfs::mount: failed to mount cgroup v1: procfs failed",
                "libcontainer::process::init: failed to prepare rootfs err=Mount(Procfs(NotFound(Some(\"/proc/378\"))))",
            ]
        );
        assert!(error_tail("2026 INFO fine\n", REPORTED).is_empty());
    }

    #[test]
    fn only_repeats_fall_back_to_all_errors() {
        let log =
            "t ERROR berth_shim: creating the container failed msg=x: failed to prepare rootfs\n";
        assert_eq!(
            error_tail(log, REPORTED),
            ["berth_shim: creating the container failed msg=x: failed to prepare rootfs"]
        );
    }

    #[test]
    fn the_tail_keeps_the_last_lines_cut_short() {
        let long = format!("t ERROR {}end\n", "é".repeat(LINE_BYTES));
        let log = format!("t ERROR first\n{}", long.repeat(TAIL_LINES));
        let tail = error_tail(&log, "");
        assert_eq!(tail.len(), TAIL_LINES);
        assert!(
            tail.iter().all(|line| line.len() <= LINE_BYTES + 8),
            "{tail:?}"
        );
        assert!(tail.iter().all(|line| line.ends_with("end")), "{tail:?}");
        assert!(!tail.iter().any(|line| line.contains("first")));
    }

    #[test]
    fn the_reason_names_the_errors_and_the_kept_log() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("shim.log");
        std::fs::write(&log, LOG).unwrap();
        let kept = kept_path(&dir.path().join("sandbox"), "c1");
        let message = with_reason("creating container c1: x", &log, Some(&kept));
        assert!(message.starts_with("creating container c1: x; shim log: "));
        assert!(
            message.contains("NotFound(Some(\"/proc/378\"))"),
            "{message}"
        );
        assert!(message.ends_with(&format!("; full log in {}", kept.display())));
        let missing = with_reason("m", &dir.path().join("none"), None);
        assert_eq!(missing, "m");
    }

    #[test]
    fn only_the_newest_logs_are_kept() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("shim.log");
        std::fs::write(&log, LOG).unwrap();
        let sandbox = dir.path().join("sandbox");
        for n in 0..KEPT_PER_SANDBOX + 2 {
            let kept = kept_path(&sandbox, &format!("c{n:02}"));
            keep(&log, &kept).unwrap();
            let old = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(n as u64);
            std::fs::File::options()
                .write(true)
                .open(&kept)
                .unwrap()
                .set_modified(old)
                .unwrap();
        }
        let mut names: Vec<_> = std::fs::read_dir(sandbox.join(FAILED_DIR))
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names.len(), KEPT_PER_SANDBOX);
        assert_eq!(names[0], "c02.shim.log");
    }
}
