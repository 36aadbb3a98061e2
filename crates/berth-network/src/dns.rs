//! The pod's `resolv.conf`, `hosts` and `hostname` files.
//!
//! The contents are built by pure functions; berthd puts them on disk with
//! `berth_atomic_file::write_atomic`, so a container never sees a
//! half-written file.

use std::fmt::Write as _;
use std::fs;
use std::io;
use std::net::IpAddr;

/// The host's resolver configuration.
pub const HOST_RESOLV_CONF: &str = "/etc/resolv.conf";

/// A `resolv.conf` from the CRI `DNSConfig`.
///
/// One `nameserver` line per server, then one `search` line and one `options`
/// line; a section with no entries is left out, so all-empty input gives an
/// empty file (in that case kubelet expects the host's file instead: see
/// [`host_resolv_conf`]).
pub fn resolv_conf(servers: &[String], searches: &[String], options: &[String]) -> String {
    let mut out = String::new();
    for server in servers {
        let _ = writeln!(out, "nameserver {server}");
    }
    if !searches.is_empty() {
        let _ = writeln!(out, "search {}", searches.join(" "));
    }
    if !options.is_empty() {
        let _ = writeln!(out, "options {}", options.join(" "));
    }
    out
}

/// A `hosts` file like kubelet's managed one: the loopback and IPv6
/// well-known entries, then `<ip>\t<hostname>` for each pod IP.
pub fn hosts_file(hostname: &str, ips: &[IpAddr]) -> String {
    let mut out = String::from(
        "# Kubernetes-managed hosts file.\n\
         127.0.0.1\tlocalhost\n\
         ::1\tlocalhost ip6-localhost ip6-loopback\n\
         fe00::0\tip6-localnet\n\
         ff00::0\tip6-mcastprefix\n\
         ff02::1\tip6-allnodes\n\
         ff02::2\tip6-allrouters\n",
    );
    for ip in ips {
        let _ = writeln!(out, "{ip}\t{hostname}");
    }
    out
}

/// The `hostname` file: the name and a newline.
pub fn hostname_file(hostname: &str) -> String {
    format!("{hostname}\n")
}

/// The host's `/etc/resolv.conf`, which a pod gets when its `DNSConfig` is
/// empty (kubelet's `dnsPolicy: Default` with no servers).
pub fn host_resolv_conf() -> io::Result<String> {
    fs::read_to_string(HOST_RESOLV_CONF)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn resolv_conf_full() {
        let out = resolv_conf(
            &strings(&["10.96.0.10", "fd00::10"]),
            &strings(&[
                "default.svc.cluster.local",
                "svc.cluster.local",
                "cluster.local",
            ]),
            &strings(&["ndots:5", "edns0"]),
        );
        assert_eq!(
            out,
            "nameserver 10.96.0.10\n\
             nameserver fd00::10\n\
             search default.svc.cluster.local svc.cluster.local cluster.local\n\
             options ndots:5 edns0\n"
        );
    }

    #[test]
    fn resolv_conf_omits_empty_sections() {
        assert_eq!(
            resolv_conf(&strings(&["1.1.1.1"]), &[], &[]),
            "nameserver 1.1.1.1\n"
        );
        assert_eq!(
            resolv_conf(&[], &strings(&["example.com"]), &[]),
            "search example.com\n"
        );
        assert_eq!(
            resolv_conf(&[], &[], &strings(&["ndots:2"])),
            "options ndots:2\n"
        );
        assert_eq!(resolv_conf(&[], &[], &[]), "");
    }

    #[test]
    fn hosts_file_lists_pod_ips_after_the_well_known_entries() {
        let ips: Vec<IpAddr> = vec!["10.244.1.7".parse().unwrap(), "fd00::7".parse().unwrap()];
        let out = hosts_file("web-0", &ips);
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(
            lines,
            [
                "# Kubernetes-managed hosts file.",
                "127.0.0.1\tlocalhost",
                "::1\tlocalhost ip6-localhost ip6-loopback",
                "fe00::0\tip6-localnet",
                "ff00::0\tip6-mcastprefix",
                "ff02::1\tip6-allnodes",
                "ff02::2\tip6-allrouters",
                "10.244.1.7\tweb-0",
                "fd00::7\tweb-0",
            ]
        );
        assert!(out.ends_with('\n'));
        assert!(!hosts_file("x", &[]).contains("\tx"));
    }

    #[test]
    fn hostname_file_ends_in_newline() {
        assert_eq!(hostname_file("pod-a"), "pod-a\n");
    }

    #[test]
    fn host_resolv_conf_reads_the_host_file() {
        match (host_resolv_conf(), fs::read_to_string(HOST_RESOLV_CONF)) {
            (Ok(ours), Ok(theirs)) => assert_eq!(ours, theirs),
            (Err(ours), Err(theirs)) => assert_eq!(ours.kind(), theirs.kind()),
            (ours, theirs) => panic!("{ours:?} vs {theirs:?}"),
        }
    }
}
