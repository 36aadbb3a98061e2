//! Network counters of a pod, read inside its network namespace.
//!
//! `setns` changes the namespace of the calling thread only, and a tokio
//! worker must never be left in a pod's namespace: each read runs on a
//! short-lived std thread of its own, which enters the namespace, reads
//! `/proc/thread-self/net/dev` and `net/route`, and ends.

use std::path::{Path, PathBuf};

use nix::sched::{setns, CloneFlags};

/// Cumulative counters of one interface.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InterfaceCounters {
    pub name: String,
    pub rx_bytes: u64,
    pub rx_packets: u64,
    pub rx_errors: u64,
    pub rx_dropped: u64,
    pub tx_bytes: u64,
    pub tx_packets: u64,
    pub tx_errors: u64,
    pub tx_dropped: u64,
}

/// The interfaces of a namespace (loopback left out: it is not pod
/// traffic) and the one holding the default route.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NetCounters {
    pub interfaces: Vec<InterfaceCounters>,
    pub default_interface: Option<String>,
}

/// Reads the counters of the network namespace pinned at `netns`.
pub async fn read(netns: &Path) -> std::io::Result<NetCounters> {
    let netns: PathBuf = netns.to_path_buf();
    let (sender, receiver) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("netns-stats".into())
        .spawn(move || {
            let _ = sender.send(read_in(&netns));
        })?;
    receiver
        .await
        .map_err(|_| std::io::Error::other("netns stats thread ended without an answer"))?
}

/// Runs on its own thread, which ends in the pod's namespace.
fn read_in(netns: &Path) -> std::io::Result<NetCounters> {
    let file = std::fs::File::open(netns)?;
    setns(&file, CloneFlags::CLONE_NEWNET).map_err(std::io::Error::from)?;
    let dev = std::fs::read_to_string("/proc/thread-self/net/dev")?;
    let route = std::fs::read_to_string("/proc/thread-self/net/route").unwrap_or_default();
    Ok(NetCounters {
        interfaces: parse_net_dev(&dev),
        default_interface: default_route_interface(&route),
    })
}

/// Parses `/proc/net/dev`: two header lines, then `name: ` and 16 counters
/// (8 receive, 8 transmit; each half starts bytes, packets, errors, drops).
pub fn parse_net_dev(text: &str) -> Vec<InterfaceCounters> {
    text.lines()
        .skip(2)
        .filter_map(|line| {
            let (name, counters) = line.split_once(':')?;
            let name = name.trim();
            let values: Vec<u64> = counters
                .split_whitespace()
                .map(|value| value.parse().ok())
                .collect::<Option<_>>()?;
            if name == "lo" || values.len() < 16 {
                return None;
            }
            Some(InterfaceCounters {
                name: name.to_string(),
                rx_bytes: values[0],
                rx_packets: values[1],
                rx_errors: values[2],
                rx_dropped: values[3],
                tx_bytes: values[8],
                tx_packets: values[9],
                tx_errors: values[10],
                tx_dropped: values[11],
            })
        })
        .collect()
}

/// The interface of the IPv4 default route (destination 0, mask 0) in
/// `/proc/net/route`.
pub fn default_route_interface(text: &str) -> Option<String> {
    text.lines().skip(1).find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let is_default = fields.len() > 7 && fields[1] == "00000000" && fields[7] == "00000000";
        is_default.then(|| fields[0].to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const NET_DEV: &str = "\
Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo:     120       2    0    0    0     0          0         0      120       2    0    0    0     0       0          0
  eth0:    1296      16    3    2    0     0          0         0      936      12    1    4    0     0       0          0
";

    const ROUTE: &str = "\
Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT
eth0\t00005A0A\t00000000\t0001\t0\t0\t0\t0000FFFF\t0\t0\t0
eth0\t00000000\t01005A0A\t0003\t0\t0\t0\t00000000\t0\t0\t0
";

    #[test]
    fn net_dev_counters_without_loopback() {
        assert_eq!(
            parse_net_dev(NET_DEV),
            vec![InterfaceCounters {
                name: "eth0".into(),
                rx_bytes: 1296,
                rx_packets: 16,
                rx_errors: 3,
                rx_dropped: 2,
                tx_bytes: 936,
                tx_packets: 12,
                tx_errors: 1,
                tx_dropped: 4,
            }]
        );
    }

    #[test]
    fn default_route_names_its_interface() {
        assert_eq!(default_route_interface(ROUTE).as_deref(), Some("eth0"));
        assert_eq!(
            default_route_interface(
                ROUTE
                    .lines()
                    .take(2)
                    .collect::<Vec<_>>()
                    .join("\n")
                    .as_str()
            ),
            None
        );
    }

    #[tokio::test]
    async fn reads_the_own_namespace_from_a_thread() {
        if !nix::unistd::geteuid().is_root() {
            eprintln!("skipped: setns needs root");
            return;
        }
        let counters = read(Path::new("/proc/self/ns/net")).await.unwrap();
        assert!(counters.interfaces.iter().all(|iface| iface.name != "lo"));
    }
}
