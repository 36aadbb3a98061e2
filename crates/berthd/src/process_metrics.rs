//! berthd's own process figures, read at each scrape: the CPU it burned,
//! its open file descriptors against their limit, and its threads. They are
//! what an operator alerts on when a runtime leaks descriptors or spins.

use nix::sys::resource::{getrlimit, getrusage, Resource, UsageWho};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

/// The collector registered with berthd's metrics.
#[derive(Debug)]
pub struct OwnProcess;

impl Collector for OwnProcess {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        if let Some(seconds) = cpu_seconds() {
            let counter = ConstCounter::new(seconds);
            let metric = encoder.encode_descriptor(
                "process_cpu_seconds",
                "User and system CPU time berthd used",
                None,
                counter.metric_type(),
            )?;
            counter.encode(metric)?;
        }
        let gauges = [
            (
                "process_open_fds",
                "File descriptors berthd holds open",
                open_fds(),
            ),
            (
                "process_max_fds",
                "berthd's soft limit on open file descriptors",
                max_fds(),
            ),
            ("process_threads", "Threads of berthd", threads()),
        ];
        for (name, help, value) in gauges {
            let Some(value) = value else { continue };
            let gauge = ConstGauge::new(value);
            let metric = encoder.encode_descriptor(name, help, None, gauge.metric_type())?;
            gauge.encode(metric)?;
        }
        Ok(())
    }
}

fn cpu_seconds() -> Option<f64> {
    let usage = getrusage(UsageWho::RUSAGE_SELF).ok()?;
    let seconds = |time: nix::sys::time::TimeVal| {
        time.tv_sec() as f64 + f64::from(i32::try_from(time.tv_usec()).unwrap_or(0)) / 1e6
    };
    Some(seconds(usage.user_time()) + seconds(usage.system_time()))
}

fn open_fds() -> Option<i64> {
    let entries = std::fs::read_dir("/proc/self/fd").ok()?;
    // The directory's own descriptor, open while it is read, is not one
    // berthd holds.
    i64::try_from(entries.count()).ok().map(|count| count - 1)
}

fn max_fds() -> Option<i64> {
    let (soft, _) = getrlimit(Resource::RLIMIT_NOFILE).ok()?;
    Some(i64::try_from(soft).unwrap_or(i64::MAX))
}

fn threads() -> Option<i64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    parse_threads(&status)
}

/// The `Threads:` line of `/proc/<pid>/status`.
fn parse_threads(status: &str) -> Option<i64> {
    let line = status.lines().find(|line| line.starts_with("Threads:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threads_are_read_from_status() {
        assert_eq!(parse_threads("Name:\tberthd\nThreads:\t7\n"), Some(7));
        assert_eq!(parse_threads("Name:\tberthd\n"), None);
    }

    #[test]
    fn own_figures_are_plausible() {
        // This test process runs at least one thread, holds stdio and has
        // used some CPU to get here.
        assert!(threads().is_some_and(|threads| threads >= 1));
        assert!(open_fds().is_some_and(|fds| fds >= 3));
        assert!(max_fds().is_some_and(|max| max >= 3));
        assert!(cpu_seconds().is_some_and(|seconds| seconds > 0.0));
    }
}
