//! Pods with their own user namespace (`hostUsers: false`, userns mode
//! POD): container root is an unprivileged host uid, the image's files
//! still belong to root inside, what the container writes belongs to the
//! mapped uid on the host, and the pod's files work from inside. Volumes
//! are idmapped: host root's files in them belong to root inside, and
//! what root inside writes there belongs to host root.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::time::{Duration, Instant};

use berth_tests::host::mounts_under;
use berth_tests::pods::{container_config, pod_config, Harness};
use cri_api::v1::{
    ContainerConfig, ContainerStatusRequest, ExecSyncRequest, IdMapping, Mount, NamespaceMode,
    PodSandboxConfig, RemoveContainerRequest, RunPodSandboxRequest, StatusRequest,
    StopContainerRequest, UserNamespace,
};

/// Where container ids 0..65536 land on the host: far from any real user.
const HOST_ID: u32 = 1_200_000;
const LENGTH: u32 = 65536;

fn userns(mode: NamespaceMode, mappings: Vec<IdMapping>) -> UserNamespace {
    UserNamespace {
        mode: mode as i32,
        uids: mappings.clone(),
        gids: mappings,
    }
}

fn kubelet_mapping() -> Vec<IdMapping> {
    vec![IdMapping {
        container_id: 0,
        host_id: HOST_ID,
        length: LENGTH,
    }]
}

/// The harness's pod config with `userns_options` set.
fn userns_pod(harness: &Harness, name: &str, userns: UserNamespace) -> PodSandboxConfig {
    let mut config = pod_config(
        name,
        &harness.parent(name),
        &harness.log_dir(name),
        NamespaceMode::Pod,
    );
    if let Some(options) = config
        .linux
        .as_mut()
        .and_then(|linux| linux.security_context.as_mut())
        .and_then(|context| context.namespace_options.as_mut())
    {
        options.userns_options = Some(userns);
    }
    config
}

/// A container of `pod_cfg` running `script`, in the pod's namespaces.
fn userns_container(
    harness: &Harness,
    pod_cfg: &PodSandboxConfig,
    name: &str,
    script: &str,
) -> ContainerConfig {
    let mut config = container_config(name, &harness.image, &["/bin/sh", "-c", script]);
    config.linux = Some(cri_api::v1::LinuxContainerConfig {
        security_context: Some(cri_api::v1::LinuxContainerSecurityContext {
            namespace_options: pod_cfg
                .linux
                .as_ref()
                .and_then(|linux| linux.security_context.as_ref())
                .and_then(|context| context.namespace_options.clone()),
            ..Default::default()
        }),
        ..Default::default()
    });
    config
}

/// The idmapped bind views mounted under `top` (one berthd's dirs: tests
/// run side by side).
fn idmapped_views(top: &Path) -> Vec<std::path::PathBuf> {
    mounts_under(top)
        .into_iter()
        .filter(|mount| mount.to_string_lossy().contains("/idmapped/"))
        .collect()
}

async fn run_pod(harness: &Harness, config: &PodSandboxConfig) -> Result<String, tonic::Status> {
    harness
        .client()
        .await
        .run_pod_sandbox(RunPodSandboxRequest {
            config: Some(config.clone()),
            runtime_handler: String::new(),
        })
        .await
        .map(|response| response.into_inner().pod_sandbox_id)
}

/// The log's message lines once one of them is `wanted`.
async fn wait_for_line(path: &Path, wanted: &str) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let lines: Vec<String> = std::fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .map(|line| line.splitn(4, ' ').nth(3).unwrap_or_default().to_string())
            .collect();
        if lines.iter().any(|line| line == wanted) {
            return lines;
        }
        assert!(
            Instant::now() < deadline,
            "{wanted:?} not in {}: {lines:?}",
            path.display()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The host uid of `pid`'s real user, from `/proc/<pid>/status`.
fn host_uid(pid: u64) -> u32 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    status
        .lines()
        .find_map(|line| line.strip_prefix("Uid:"))
        .and_then(|ids| ids.split_whitespace().next())
        .and_then(|uid| uid.parse().ok())
        .unwrap_or_else(|| panic!("no Uid line in {status}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn container_root_is_an_unprivileged_host_uid() {
    let harness = Harness::start().await;
    // libcontainer mounts the rootfs from inside the user namespace: the
    // state dir's parents must be searchable by the mapped root.
    let top = harness.berthd.sandbox.dir.path();
    std::fs::set_permissions(top, std::fs::Permissions::from_mode(0o711)).expect("chmod");

    let status = harness
        .client()
        .await
        .status(StatusRequest { verbose: false })
        .await
        .expect("Status")
        .into_inner();
    assert!(
        status
            .runtime_handlers
            .iter()
            .all(|handler| handler.features.as_ref().is_some_and(|f| f.user_namespaces)),
        "user namespaces not reported: {status:?}"
    );

    let pod_cfg = userns_pod(
        &harness,
        "userns",
        userns(NamespaceMode::Pod, kubelet_mapping()),
    );
    let pod = run_pod(&harness, &pod_cfg).await.expect("RunPodSandbox");
    let script = "cat /proc/self/uid_map; \
        /bin/busybox stat -c 'passwd-owner %u:%g' /etc/passwd; \
        /bin/busybox stat -c 'root-owner %u:%g' /; \
        echo from-container > /tmp/created && echo created; \
        cat /etc/hostname; \
        echo shm > /dev/shm/probe && echo shm-ok; \
        echo ready; exec /bin/sleep 1000";
    let config = userns_container(&harness, &pod_cfg, "app", script);
    let id = harness.run_container(&pod, &pod_cfg, config).await;
    let log = Path::new(&pod_cfg.log_directory).join("app.log");
    let lines = wait_for_line(&log, "ready").await;

    // Inside: uid 0 is mapped to HOST_ID, and the image's files (and the
    // container's `/`) belong to root.
    let map: Vec<&str> = lines[0].split_whitespace().collect();
    assert_eq!(
        map,
        ["0", &HOST_ID.to_string(), &LENGTH.to_string()],
        "{lines:?}"
    );
    for wanted in [
        "passwd-owner 0:0",
        "root-owner 0:0",
        "created",
        "userns",
        "shm-ok",
    ] {
        assert!(
            lines.iter().any(|line| line == wanted),
            "{wanted:?} missing: {lines:?}"
        );
    }

    // Outside: the container's process runs as HOST_ID, and its new file
    // in the upper dir belongs to HOST_ID.
    let verbose = harness
        .client()
        .await
        .container_status(ContainerStatusRequest {
            container_id: id.clone(),
            verbose: true,
        })
        .await
        .expect("ContainerStatus")
        .into_inner();
    let info: serde_json::Value =
        serde_json::from_str(&verbose.info["info"]).expect("verbose info");
    let pid = info["pid"].as_u64().expect("pid");
    assert_eq!(host_uid(pid), HOST_ID);
    let created = harness
        .berthd
        .sandbox
        .root()
        .join("containers")
        .join(&id)
        .join("upper/tmp/created");
    let meta = std::fs::metadata(&created).expect("the container's file in its upper dir");
    assert_eq!((meta.uid(), meta.gid()), (HOST_ID, HOST_ID));

    // An exec'd process joins the pod's user namespace too: root inside,
    // an unprivileged uid outside. A container's non-root user is that
    // user inside, without capabilities.
    let (stdout, stderr) = exec_ok(
        &harness,
        &id,
        "cat /proc/self/uid_map; /bin/busybox id -u; \
         /bin/busybox grep -E '^Cap(Eff|Bnd)' /proc/self/status",
    )
    .await;
    let lines: Vec<&str> = stdout.lines().collect();
    // Its capabilities are the container's, not all those entering the
    // namespace grants.
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("init status");
    let init_caps: Vec<&str> = status
        .lines()
        .filter(|line| line.starts_with("CapEff") || line.starts_with("CapBnd"))
        .collect();
    let exec_caps: Vec<&str> = lines.iter().skip(2).copied().collect();
    assert_eq!(exec_caps, init_caps, "{stdout} {stderr}");
    let map: Vec<&str> = lines
        .first()
        .copied()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(
        map,
        ["0", &HOST_ID.to_string(), &LENGTH.to_string()],
        "{stdout} {stderr}"
    );
    assert_eq!(lines.get(1).copied(), Some("0"), "{stdout} {stderr}");
    let mut config = userns_container(&harness, &pod_cfg, "user", "exec /bin/sleep 1000");
    if let Some(context) = config
        .linux
        .as_mut()
        .and_then(|linux| linux.security_context.as_mut())
    {
        context.run_as_user = Some(cri_api::v1::Int64Value { value: 1000 });
    }
    let user = harness.run_container(&pod, &pod_cfg, config).await;
    let (stdout, stderr) = exec_ok(
        &harness,
        &user,
        "/bin/busybox id -u; cat /proc/self/uid_map; /bin/busybox grep CapEff /proc/self/status; \
         echo home=$HOME",
    )
    .await;
    let lines: Vec<Vec<&str>> = stdout
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        lines,
        [
            vec!["1000"],
            vec!["0", &HOST_ID.to_string(), &LENGTH.to_string()],
            vec!["CapEff:", "0000000000000000"],
            // No passwd entry for 1000: no HOME, never root's.
            vec!["home="],
        ],
        "{stdout} {stderr}"
    );

    harness.remove_pod(&pod).await;
    let left = mounts_under(top);
    assert!(left.is_empty(), "mounts left behind: {left:?}");
}

/// ExecSync of `script` in container `id`: its stdout and stderr; exit 0.
async fn exec_ok(harness: &Harness, id: &str, script: &str) -> (String, String) {
    let exec = harness
        .client()
        .await
        .exec_sync(ExecSyncRequest {
            container_id: id.to_string(),
            cmd: vec!["/bin/sh".into(), "-c".into(), script.into()],
            timeout: 10,
        })
        .await
        .unwrap_or_else(|status| panic!("ExecSync {script:?}: {status:?}"))
        .into_inner();
    let out = (
        String::from_utf8_lossy(&exec.stdout).into_owned(),
        String::from_utf8_lossy(&exec.stderr).into_owned(),
    );
    assert_eq!(exec.exit_code, 0, "{script:?}: {out:?}");
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn unsupported_user_namespace_requests_are_invalid_arguments() {
    let harness = Harness::start().await;
    let two = vec![
        IdMapping {
            container_id: 0,
            host_id: HOST_ID,
            length: LENGTH,
        },
        IdMapping {
            container_id: 0,
            host_id: HOST_ID * 2,
            length: LENGTH,
        },
    ];
    let cases = [
        (
            "container",
            userns(NamespaceMode::Container, vec![]),
            "mode",
        ),
        ("target", userns(NamespaceMode::Target, vec![]), "mode"),
        (
            "node-mapped",
            userns(NamespaceMode::Node, kubelet_mapping()),
            "uids and gids",
        ),
        ("no-mapping", userns(NamespaceMode::Pod, vec![]), "uids"),
        ("two-mappings", userns(NamespaceMode::Pod, two), "uids"),
    ];
    for (name, options, field) in cases {
        let config = userns_pod(&harness, name, options);
        let status = run_pod(&harness, &config)
            .await
            .expect_err("RunPodSandbox must refuse");
        assert_eq!(
            status.code(),
            tonic::Code::InvalidArgument,
            "{name}: {status:?}"
        );
        assert!(
            status.message().contains("userns_options") && status.message().contains(field),
            "{name}: {status:?}"
        );
    }
    // A pod on the host's IPC or PID namespace cannot have a user
    // namespace (one on the host's network can: see below).
    for (kind, set) in [
        (
            "ipc",
            (|o: &mut cri_api::v1::NamespaceOption| o.ipc = NamespaceMode::Node as i32)
                as fn(&mut cri_api::v1::NamespaceOption),
        ),
        ("pid", |o| o.pid = NamespaceMode::Node as i32),
    ] {
        let mut config = userns_pod(
            &harness,
            &format!("host-{kind}"),
            userns(NamespaceMode::Pod, kubelet_mapping()),
        );
        if let Some(options) = namespace_options(&mut config) {
            set(options);
        }
        let status = run_pod(&harness, &config)
            .await
            .expect_err("a host namespace");
        assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
        assert!(
            status
                .message()
                .contains(&format!("namespace_options.{kind}")),
            "{status:?}"
        );
    }
}

fn namespace_options(config: &mut PodSandboxConfig) -> Option<&mut cri_api::v1::NamespaceOption> {
    config
        .linux
        .as_mut()
        .and_then(|linux| linux.security_context.as_mut())
        .and_then(|context| context.namespace_options.as_mut())
}

/// A link and an address the container tries to add to the host's network:
/// a dummy link no one else makes, and a documentation address (RFC 5737).
const PROBE_LINK: &str = "berthun0";
const PROBE_ADDRESS: &str = "192.0.2.77/32";

/// Whether the probe link or address is on the host; removes whichever is,
/// so a failing run leaves the host as it found it.
fn host_network_changed() -> Vec<String> {
    let mut changed = Vec::new();
    if Path::new("/sys/class/net").join(PROBE_LINK).exists() {
        changed.push(format!("link {PROBE_LINK}"));
        let _ = std::process::Command::new("ip")
            .args(["link", "del", PROBE_LINK])
            .status();
    }
    let addresses = std::process::Command::new("ip")
        .args(["-o", "addr", "show", "dev", "lo"])
        .output()
        .expect("ip addr show");
    if String::from_utf8_lossy(&addresses.stdout).contains(PROBE_ADDRESS) {
        changed.push(format!("address {PROBE_ADDRESS} on lo"));
        let _ = std::process::Command::new("ip")
            .args(["addr", "del", PROBE_ADDRESS, "dev", "lo"])
            .status();
    }
    changed
}

/// The host's network interfaces, as its sysfs lists them.
fn host_interfaces() -> std::collections::BTreeSet<String> {
    std::fs::read_dir("/sys/class/net")
        .expect("/sys/class/net")
        .filter_map(|entry| entry.ok())
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pod_on_the_hosts_network_gets_a_user_namespace_without_its_capabilities() {
    // KEP-5607: hostNetwork: true with hostUsers: false.
    let harness = Harness::start().await;
    let top = harness.berthd.sandbox.dir.path();
    std::fs::set_permissions(top, std::fs::Permissions::from_mode(0o711)).expect("chmod");
    let status = harness
        .client()
        .await
        .status(StatusRequest { verbose: false })
        .await
        .expect("Status")
        .into_inner();
    assert!(
        status
            .features
            .is_some_and(|features| features.user_namespaces_host_network),
        "user_namespaces_host_network not advertised"
    );

    // With a shared PID namespace, so its infra process runs too.
    let mut pod_cfg = userns_pod(
        &harness,
        "userns-hostnet",
        userns(NamespaceMode::Pod, kubelet_mapping()),
    );
    if let Some(options) = namespace_options(&mut pod_cfg) {
        options.network = NamespaceMode::Node as i32;
    }
    let before = host_interfaces();
    let pod = run_pod(&harness, &pod_cfg).await.expect("RunPodSandbox");
    let script = format!(
        "cat /proc/self/uid_map; \
         echo netns $(/bin/busybox readlink /proc/self/ns/net); \
         /bin/busybox ip link add {PROBE_LINK} type dummy 2>&1; echo link-add $?; \
         /bin/busybox ip addr add {PROBE_ADDRESS} dev lo 2>&1; echo addr-add $?; \
         echo interfaces $(/bin/busybox ls /sys/class/net); \
         /bin/busybox touch /sys/kernel/probe 2>&1; echo sys-write $?; \
         echo firmware $(/bin/busybox ls -A /sys/firmware | /bin/busybox wc -l); \
         /bin/busybox grep -q ' /sys/fs/cgroup ' /proc/self/mountinfo && echo cgroup-mounted; \
         echo ready; exec /bin/sleep 1000"
    );
    let mut config = userns_container(&harness, &pod_cfg, "app", &script);
    // Masked as kubelet asks for a container that is not privileged.
    if let Some(context) = config
        .linux
        .as_mut()
        .and_then(|linux| linux.security_context.as_mut())
    {
        context.masked_paths = vec!["/sys/firmware".into(), "/proc/kcore".into()];
    }
    let id = harness.run_container(&pod, &pod_cfg, config).await;
    let log = Path::new(&pod_cfg.log_directory).join("app.log");
    let lines = wait_for_line(&log, "ready").await;
    let changed = host_network_changed();
    assert!(
        changed.is_empty(),
        "the container changed the host's network ({changed:?}): {lines:?}"
    );
    let after = host_interfaces();

    let line = |prefix: &str| -> String {
        lines
            .iter()
            .find_map(|line| line.strip_prefix(prefix))
            .unwrap_or_else(|| panic!("no {prefix:?} line: {lines:?}"))
            .trim()
            .to_string()
    };
    // In the pod's user namespace...
    let map: Vec<&str> = lines[0].split_whitespace().collect();
    assert_eq!(
        map,
        ["0", &HOST_ID.to_string(), &LENGTH.to_string()],
        "{lines:?}"
    );
    // ...and in the host's network namespace, whose configuration its
    // capabilities (the user namespace's) do not reach.
    let host_netns = std::fs::read_link("/proc/self/ns/net").expect("own netns");
    assert_eq!(
        line("netns "),
        host_netns.display().to_string(),
        "{lines:?}"
    );
    for (step, wanted) in [("link-add ", "link add"), ("addr-add ", "addr add")] {
        assert_ne!(line(step), "0", "ip {wanted} succeeded: {lines:?}");
    }
    let refusals = lines
        .iter()
        .filter(|line| line.contains("Operation not permitted"))
        .count();
    assert_eq!(refusals, 2, "ip must fail with EPERM twice: {lines:?}");
    // Its /sys is the host's (its interfaces), read-only, still masked.
    let inside: std::collections::BTreeSet<String> = line("interfaces ")
        .split_whitespace()
        .map(String::from)
        .collect();
    let steady: Vec<&String> = before.intersection(&after).collect();
    assert!(
        steady.iter().all(|name| inside.contains(*name)),
        "the host's interfaces {steady:?} not all in the container's /sys: {inside:?}"
    );
    assert_ne!(line("sys-write "), "0", "/sys is writable: {lines:?}");
    assert!(
        lines.iter().any(|l| l.contains("Read-only file system")),
        "/sys is not read-only: {lines:?}"
    );
    assert_eq!(
        line("firmware "),
        "0",
        "/sys/firmware is not masked: {lines:?}"
    );
    assert!(lines.iter().any(|l| l == "cgroup-mounted"), "{lines:?}");

    // From the host: the same network namespace, another user namespace,
    // an unprivileged uid.
    let verbose = harness
        .client()
        .await
        .container_status(ContainerStatusRequest {
            container_id: id.clone(),
            verbose: true,
        })
        .await
        .expect("ContainerStatus")
        .into_inner();
    let info: serde_json::Value =
        serde_json::from_str(&verbose.info["info"]).expect("verbose info");
    let pid = info["pid"].as_u64().expect("pid");
    let ns = |pid: &str, kind: &str| std::fs::read_link(format!("/proc/{pid}/ns/{kind}")).unwrap();
    let pid_text = pid.to_string();
    assert_eq!(ns(&pid_text, "net"), ns("self", "net"));
    assert_ne!(ns(&pid_text, "user"), ns("self", "user"));
    assert_eq!(host_uid(pid), HOST_ID);

    // An exec is no more capable.
    let exec = harness
        .client()
        .await
        .exec_sync(ExecSyncRequest {
            container_id: id.clone(),
            cmd: vec![
                "/bin/busybox".into(),
                "ip".into(),
                "link".into(),
                "add".into(),
                PROBE_LINK.into(),
                "type".into(),
                "dummy".into(),
            ],
            timeout: 10,
        })
        .await
        .expect("ExecSync")
        .into_inner();
    let changed = host_network_changed();
    assert!(
        changed.is_empty(),
        "an exec changed the host's network: {changed:?}"
    );
    assert_ne!(exec.exit_code, 0, "{exec:?}");
    assert!(
        String::from_utf8_lossy(&exec.stderr).contains("Operation not permitted"),
        "{exec:?}"
    );

    harness.remove_pod(&pod).await;
    let left = mounts_under(top);
    assert!(left.is_empty(), "mounts left behind: {left:?}");
}

/// A volume as kubelet makes them: root's, closed to others (0750), in a
/// dir closed to others too. Its files: root's (0640), a host user's
/// inside the mapping's length, and one's past it.
fn root_only_volume(dir: &Path) -> std::path::PathBuf {
    use std::os::unix::fs::chown;
    let volume = dir.join("pods/uid/volumes/data");
    std::fs::create_dir_all(&volume).expect("volume");
    for path in [dir.join("pods"), volume.clone()] {
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o750)).expect("chmod");
    }
    for (name, owner, mode) in [
        ("secret", 0, 0o640),
        ("user", 1000, 0o600),
        ("far", 70_000, 0o600),
    ] {
        let path = volume.join(name);
        std::fs::write(&path, format!("{name}-content\n")).expect("file");
        chown(&path, Some(owner), Some(owner)).expect("chown");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).expect("chmod");
    }
    volume
}

#[tokio::test(flavor = "multi_thread")]
async fn volumes_are_idmapped_into_the_pods_user_namespace() {
    let harness = Harness::start().await;
    let top = harness.berthd.sandbox.dir.path();
    std::fs::set_permissions(top, std::fs::Permissions::from_mode(0o711)).expect("chmod");
    let host = tempfile::tempdir().expect("volume dir");
    let volume = root_only_volume(host.path());

    let pod_cfg = userns_pod(
        &harness,
        "uvol",
        userns(NamespaceMode::Pod, kubelet_mapping()),
    );
    let pod = run_pod(&harness, &pod_cfg).await.expect("RunPodSandbox");
    let script = "cat /data/secret; \
        /bin/busybox stat -c 'dir %u:%g %a' /data; \
        /bin/busybox stat -c 'secret %u:%g %a' /data/secret; \
        /bin/busybox stat -c 'user %u:%g' /data/user; \
        /bin/busybox stat -c 'far %u:%g' /data/far; \
        echo made > /data/made && echo made-ok; \
        /bin/busybox stat -c 'hosts %u:%g' /etc/hosts; \
        echo ready; exec /bin/sleep 1000";
    let mut config = userns_container(&harness, &pod_cfg, "app", script);
    // With the pod's mappings on the mount, as kubelet sends it.
    config.mounts.push(Mount {
        container_path: "/data".into(),
        host_path: volume.display().to_string(),
        uid_mappings: kubelet_mapping(),
        gid_mappings: kubelet_mapping(),
        ..Default::default()
    });
    let id = harness.create_ok(&pod, &pod_cfg, config).await;
    harness.start_container(&id).await;
    let log = Path::new(&pod_cfg.log_directory).join("app.log");
    let lines = wait_for_line(&log, "ready").await;

    // Inside: host root's files are root's and readable through the 0750
    // dir; a host user's keep their id; ids past the mapping are nobody's.
    for wanted in [
        "secret-content",
        "dir 0:0 750",
        "secret 0:0 640",
        "user 1000:1000",
        "far 65534:65534",
        "made-ok",
        "hosts 0:0",
    ] {
        assert!(
            lines.iter().any(|line| line == wanted),
            "{wanted:?} missing: {lines:?}"
        );
    }
    // Outside: what container root wrote belongs to host root.
    let made = std::fs::metadata(volume.join("made")).expect("the container's file");
    assert_eq!((made.uid(), made.gid()), (0, 0));
    assert!(!idmapped_views(top).is_empty(), "the views are mounted");

    let mut client = harness.client().await;
    client
        .stop_container(StopContainerRequest {
            container_id: id.clone(),
            timeout: 0,
        })
        .await
        .expect("StopContainer");
    client
        .remove_container(RemoveContainerRequest {
            container_id: id.clone(),
        })
        .await
        .expect("RemoveContainer");
    let left = idmapped_views(top);
    assert!(
        left.is_empty(),
        "views left after RemoveContainer: {left:?}"
    );
    assert_eq!(
        std::fs::read_to_string(volume.join("secret")).expect("the volume survives"),
        "secret-content\n"
    );
    harness.remove_pod(&pod).await;
    let left = mounts_under(top);
    assert!(left.is_empty(), "mounts left behind: {left:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_volume_that_cannot_be_idmapped_fails_the_create_naming_it() {
    let harness = Harness::start().await;
    let top = harness.berthd.sandbox.dir.path();
    std::fs::set_permissions(top, std::fs::Permissions::from_mode(0o711)).expect("chmod");
    // ramfs has no idmapped mounts on any kernel.
    let host = tempfile::tempdir().expect("volume dir");
    let ramfs = host.path().join("ramfs");
    std::fs::create_dir(&ramfs).expect("mount point");
    nix::mount::mount(
        Some("ramfs"),
        &ramfs,
        Some("ramfs"),
        nix::mount::MsFlags::empty(),
        None::<&str>,
    )
    .expect("mount ramfs");

    let pod_cfg = userns_pod(
        &harness,
        "uvol-ramfs",
        userns(NamespaceMode::Pod, kubelet_mapping()),
    );
    let pod = run_pod(&harness, &pod_cfg).await.expect("RunPodSandbox");
    let mut config = userns_container(&harness, &pod_cfg, "app", "exec /bin/sleep 1000");
    config.mounts.push(Mount {
        container_path: "/ram".into(),
        host_path: ramfs.display().to_string(),
        ..Default::default()
    });
    let result = harness.create(&pod, &pod_cfg, config).await;
    let views = idmapped_views(top);
    harness.remove_pod(&pod).await;
    let left = mounts_under(top);
    nix::mount::umount2(&ramfs, nix::mount::MntFlags::MNT_DETACH).expect("umount ramfs");

    let status = result.expect_err("a ramfs volume cannot be idmapped");
    assert_eq!(status.code(), tonic::Code::FailedPrecondition, "{status:?}");
    let message = status.message();
    for wanted in [
        "\"/ram\"".to_string(),
        format!("{:?}", ramfs.display().to_string()),
        "EINVAL".to_string(),
    ] {
        assert!(message.contains(&wanted), "{wanted} not in {message:?}");
    }
    assert!(
        views.is_empty(),
        "views left by the failed create: {views:?}"
    );
    assert!(left.is_empty(), "mounts left behind: {left:?}");
}
