//! The pod's hostname, hosts and resolv.conf files.

use cri_api::v1::PodSandboxConfig;

use super::SandboxError;

/// The hostname a pod gets: the config's, else the node's, as containerd
/// does (kubelet always sends one; a pod name may be too long for one).
pub(super) fn pod_hostname(config: &PodSandboxConfig) -> String {
    if !config.hostname.is_empty() {
        return config.hostname.clone();
    }
    nix::unistd::gethostname()
        .ok()
        .and_then(|name| name.into_string().ok())
        .unwrap_or_else(|| "localhost".to_string())
}

/// The pod's hostname, hosts and resolv.conf files, which containers mount.
pub(super) fn write_dns_files(
    dir: &std::path::Path,
    config: &PodSandboxConfig,
    hostname: &str,
    ips: &[String],
) -> Result<(), SandboxError> {
    use berth_network::dns;
    let parsed_ips: Vec<std::net::IpAddr> = ips.iter().filter_map(|ip| ip.parse().ok()).collect();
    let resolv = match &config.dns_config {
        Some(dns_config)
            if !(dns_config.servers.is_empty()
                && dns_config.searches.is_empty()
                && dns_config.options.is_empty()) =>
        {
            dns::resolv_conf(
                &dns_config.servers,
                &dns_config.searches,
                &dns_config.options,
            )
        }
        // The host's, as kubelet's dnsPolicy Default means. A host without
        // one gives an empty file; any other failure is the pod's error.
        _ => match dns::host_resolv_conf() {
            Ok(text) => text,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(err) => return Err(SandboxError::io("reading the host's resolv.conf", err)),
        },
    };
    for (name, contents) in [
        ("hostname", dns::hostname_file(hostname)),
        ("hosts", dns::hosts_file(hostname, &parsed_ips)),
        ("resolv.conf", resolv),
    ] {
        berth_atomic_file::write_atomic(&dir.join(name), contents.as_bytes(), 0o644)
            .map_err(|err| SandboxError::io(format!("pod {name} file"), err))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostname_falls_back_to_the_nodes() {
        let mut config = PodSandboxConfig::default();
        let node = nix::unistd::gethostname().unwrap().into_string().unwrap();
        assert_eq!(pod_hostname(&config), node);
        config.hostname = "web-0".into();
        assert_eq!(pod_hostname(&config), "web-0");
    }
}
