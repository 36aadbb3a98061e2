//! Command line.

use std::path::PathBuf;

use clap::Parser;

use crate::crilog::DEFAULT_MAX_LINE;

/// berth's per-container shim. Creates the container, prints one JSON line
/// (`{"ok":true,"pid":…,"shim_pid":…}` or `{"ok":false,"error":…}`) on
/// stdout, closes stdout and keeps running in the background, serving
/// `<dir>/shim.sock`.
#[derive(Debug, Clone, Parser)]
#[command(name = "berth-shim", version)]
pub struct Args {
    /// Container id (libcontainer's: [A-Za-z0-9_+.-]+).
    #[arg(long)]
    pub id: String,
    /// OCI bundle: holds config.json and the rootfs it names.
    #[arg(long)]
    pub bundle: PathBuf,
    /// The runtime's state root (the container's state is <state-root>/<id>;
    /// a runtime binary's `--root`).
    #[arg(long)]
    pub state_root: PathBuf,
    /// Drive this OCI runtime binary (runc, crun, youki, runsc) as conmon
    /// does, instead of libcontainer in the shim's own process.
    #[arg(long, value_name = "PATH")]
    pub runtime_binary: Option<PathBuf>,
    /// The shim's own directory: pid, shim.pid, exit, shim.sock, shim.log.
    #[arg(long)]
    pub dir: PathBuf,
    /// berthd's pid: until the container is created the shim dies with
    /// it, so that a create whose berthd died stops where it is.
    #[arg(long, value_name = "PID")]
    pub parent_pid: Option<i32>,
    /// The container's CRI log file. Without it output is drained and dropped.
    #[arg(long)]
    pub log: Option<PathBuf>,
    /// The container has a terminal (process.terminal in config.json).
    #[arg(long)]
    pub tty: bool,
    /// Keep the container's stdin open for attachers (CRI `stdin`):
    /// the write end of its stdin pipe, or the pty master with `--tty`.
    /// Without it the container's stdin is /dev/null.
    #[arg(long)]
    pub stdin: bool,
    /// Close the container's stdin once the first attacher's stdin ended
    /// (CRI `stdin_once`; pipes only, a terminal stays open).
    #[arg(long, requires = "stdin")]
    pub stdin_once: bool,
    /// Restore instead of start: DIR holds an unpacked checkpoint archive
    /// (`checkpoint/` with CRIU's images). The container is created as
    /// usual, and `start` restores the dumped processes into it with CRIU
    /// in place of its init.
    #[arg(long, value_name = "DIR")]
    pub restore: Option<PathBuf>,
    /// The container's cgroup directory in one hierarchy (repeated, one per
    /// hierarchy; cgroupfs paths only). With them the shim signals and
    /// removes the cgroup itself rather than through libcontainer's cgroup
    /// manager (see `cgroup_dirs`).
    #[arg(long, value_name = "DIR")]
    pub cgroup_dir: Vec<PathBuf>,
    /// berth's state dir, a mount point of its own: the container is
    /// created from a mount namespace in which that dir holds only what the
    /// spec names (see `mount_view`). Not with `--restore`.
    #[arg(long, value_name = "DIR")]
    pub trim_mounts: Option<PathBuf>,
    /// Longest log line before it is split into partial records (0: no limit).
    #[arg(long, default_value_t = DEFAULT_MAX_LINE)]
    pub max_log_line: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_documented_flags() {
        let a = Args::try_parse_from([
            "berth-shim",
            "--id",
            "c1",
            "--bundle",
            "/b",
            "--state-root",
            "/s",
            "--dir",
            "/d",
            "--log",
            "/l/c.log",
            "--tty",
            "--stdin",
            "--stdin-once",
            "--cgroup-dir",
            "/sys/fs/cgroup/memory/berth/c1",
            "--cgroup-dir",
            "/sys/fs/cgroup/pids/berth/c1",
        ])
        .expect("parse");
        assert_eq!(a.cgroup_dir.len(), 2);
        assert_eq!(a.id, "c1");
        assert_eq!(a.bundle, PathBuf::from("/b"));
        assert_eq!(a.state_root, PathBuf::from("/s"));
        assert_eq!(a.dir, PathBuf::from("/d"));
        assert_eq!(a.log, Some(PathBuf::from("/l/c.log")));
        assert!(a.tty);
        assert!(a.stdin && a.stdin_once);
        assert_eq!(a.max_log_line, 16384);
    }

    #[test]
    fn log_and_tty_are_optional_and_the_rest_required() {
        let a = Args::try_parse_from([
            "berth-shim",
            "--id",
            "c1",
            "--bundle",
            "/b",
            "--state-root",
            "/s",
            "--dir",
            "/d",
        ])
        .expect("parse");
        assert_eq!(a.log, None);
        assert!(!a.tty);
        assert!(!a.stdin && !a.stdin_once);
        assert!(a.cgroup_dir.is_empty());
        assert!(Args::try_parse_from(["berth-shim", "--id", "c1"]).is_err());
    }
}
