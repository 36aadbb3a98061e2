//! Processes berth started but is not the parent of (the infra process is
//! re-parented when berth-pinns exits): identified by pid and start time,
//! signalled by pid only after checking both.

use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use super::store::InfraProcess;

/// The process's start time (clock ticks since boot, field 22 of
/// /proc/<pid>/stat), or None when it does not exist or is a zombie.
pub fn start_time(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may hold spaces: split after it.
    let after = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = after.split_whitespace().collect();
    if fields.first() == Some(&"Z") {
        return None;
    }
    fields.get(19)?.parse().ok()
}

/// Identifies a live process.
pub fn identify(pid: i32) -> Option<InfraProcess> {
    start_time(pid).map(|start_time| InfraProcess { pid, start_time })
}

/// Whether the recorded process still runs (the same one, not a reused
/// pid): from a kept pidfd where there is one ([`super::infra_watch`]).
pub fn is_alive(process: &InfraProcess) -> bool {
    super::infra_watch::WATCHES.is_alive(process, |process| {
        start_time(process.pid) == Some(process.start_time)
    })
}

/// SIGKILLs the process if it is still the recorded one, and waits until it
/// is gone (or a zombie its new parent will reap).
pub async fn kill_and_wait(process: &InfraProcess) {
    kill_all_and_wait(std::slice::from_ref(process)).await
}

/// SIGKILLs each process that is still the recorded one, and waits up to
/// 5 s until all of them are gone (or zombies their new parents will reap).
pub async fn kill_all_and_wait(processes: &[InfraProcess]) {
    let mut killed = Vec::new();
    for process in processes.iter().filter(|process| is_alive(process)) {
        match kill(Pid::from_raw(process.pid), Signal::SIGKILL) {
            Ok(()) => killed.push(process),
            Err(err) => tracing::warn!(pid = process.pid, error = %err, "kill process"),
        }
    }
    for _ in 0..500 {
        if !killed.iter().any(|process| is_alive(process)) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let pids: Vec<i32> = killed.iter().map(|process| process.pid).collect();
    tracing::warn!(?pids, "processes still alive 5 s after SIGKILL");
}

/// Sets a process's oom_score_adj, raised to berthd's own when the host
/// would refuse a lower one (root here lacks CAP_SYS_RESOURCE), as
/// containerd's restrict_oom_score_adj does.
pub fn clamp_oom_score_adj(pid: i32, wanted: i32) {
    let value = clamp(wanted, own_oom_score_adj());
    if let Err(err) = std::fs::write(format!("/proc/{pid}/oom_score_adj"), value.to_string()) {
        tracing::warn!(pid, value, error = %err, "set oom_score_adj");
    }
}

/// berthd's own oom_score_adj: the lowest this host lets it give others.
pub fn own_oom_score_adj() -> i32 {
    std::fs::read_to_string("/proc/self/oom_score_adj")
        .ok()
        .and_then(|text| text.trim().parse().ok())
        .unwrap_or(0)
}

/// Never below berthd's own score: lowering it needs CAP_SYS_RESOURCE.
pub fn clamp(wanted: i32, own: i32) -> i32 {
    wanted.max(own).min(1000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oom_score_adj_never_goes_below_our_own() {
        assert_eq!(clamp(-998, 0), 0);
        assert_eq!(clamp(-998, -999), -998);
        assert_eq!(clamp(500, 0), 500);
        assert_eq!(clamp(2000, 0), 1000);
    }

    #[test]
    fn own_process_has_a_start_time_and_pid_reuse_is_detected() {
        let me = identify(std::process::id() as i32).unwrap();
        assert!(is_alive(&me));
        let wrong = InfraProcess {
            pid: me.pid,
            start_time: me.start_time + 1,
        };
        assert!(!is_alive(&wrong));
    }
}
