//! berth's OCI runtime spec generation: a CRI `ContainerConfig`, plus what
//! the runtime knows about the pod, the image and the host, becomes the
//! `config.json` that berth-shim hands to its OCI runtime backend. It is a
//! standard OCI spec: a runtime with a dialect of its own is adapted to in
//! its backend, never here.
//!
//! Every conversion is a pure function in a module of its own, in the
//! order [`container_spec`] calls them: [`process`] (argv, env, working
//! dir), [`user`] (uid, gid, groups, from the image's [`passwd`] files),
//! [`security`], [`capabilities`], [`seccomp`] (with
//! [`seccomp_default`]), [`lsm`] (AppArmor, SELinux), [`system_mounts`] (with [`cgroup_mounts`]) and
//! [`mounts`], [`devices`],
//! [`namespaces`] (and the pod sysctls), [`resources`] and
//! [`annotations`]; [`signal`] resolves the stop signal. The few facts they
//! need from the host come through the [`HostLookup`] trait, so all of it
//! is unit-tested without root.
//!
//! ```
//! use std::path::Path;
//! use berth_spec::{container_spec, CgroupFeatures, CgroupView, ContainerInputs, ImageConfigView,
//!                  LsmHost, OsHost, SandboxFiles, SandboxNamespaces, V1Hierarchy};
//! use cri_api::v1::{ContainerConfig, PodSandboxConfig};
//!
//! let config = ContainerConfig { command: vec!["sleep".into(), "60".into()], ..Default::default() };
//! let sandbox_config = PodSandboxConfig { hostname: "web-0".into(), ..Default::default() };
//! let namespaces = SandboxNamespaces {
//!     network: Some("/run/berth/ns/s1/net".into()),
//!     ipc: Some("/run/berth/ns/s1/ipc".into()),
//!     uts: Some("/run/berth/ns/s1/uts".into()),
//!     ..Default::default()
//! };
//! let spec = container_spec(&ContainerInputs {
//!     container_id: "c1",
//!     sandbox_id: "s1",
//!     config: &config,
//!     sandbox_config: &sandbox_config,
//!     image: &ImageConfigView::default(),
//!     rootfs: Path::new("/var/lib/berth/containers/c1/rootfs"),
//!     namespaces: &namespaces,
//!     cgroups_path: "/kubepods/besteffort/pod1/c1",
//!     cgroup_view: CgroupView::V1(vec![V1Hierarchy {
//!         name: "memory".into(),
//!         dir: "/sys/fs/cgroup/memory/kubepods/besteffort/pod1/c1".into(),
//!     }]),
//!     etc_passwd: Some("root:x:0:0:root:/root:/bin/sh\n"),
//!     etc_group: None,
//!     sandbox_files: SandboxFiles::default(),
//!     host_oom_score_adj_floor: 0,
//!     features: CgroupFeatures::default(),
//!     lsm: &LsmHost::default(),
//!     host: &OsHost,
//! })?;
//! assert_eq!(spec.hostname().as_deref(), Some("web-0"));
//! // berth-shim's bundle gets this as config.json.
//! let json = serde_json::to_string_pretty(&spec);
//! # assert!(json.is_ok_and(|json| json.contains("\"sleep\"")));
//! # Ok::<(), berth_spec::SpecError>(())
//! ```

#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};

use cri_api::v1::{ContainerConfig, NamespaceMode, NamespaceOption, PodSandboxConfig};
use oci_spec::runtime::{Linux, Process, Root, Spec, VERSION};

pub mod annotations;
pub mod capabilities;
pub mod cdi;
pub mod cgroup_mounts;
pub mod devices;
pub mod error;
pub mod host;
pub mod image;
pub mod lsm;
pub mod mounts;
pub mod namespaces;
pub mod passwd;
pub mod process;
pub mod resources;
pub mod seccomp;
pub mod seccomp_default;
pub mod security;
pub mod signal;
pub mod system_mounts;
pub mod ulimits;
pub mod user;
pub mod userns;

#[cfg(test)]
mod fixtures;
#[cfg(test)]
mod testing;

pub use cgroup_mounts::{CgroupView, V1Hierarchy};
pub use error::SpecError;
pub use host::{HostLookup, OsHost};
pub use image::ImageConfigView;
pub use lsm::{AppArmorHost, LsmHost};
pub use namespaces::SandboxNamespaces;
pub use resources::{cpu_shares_to_weight, CgroupFeatures};
pub use signal::stop_signal;
pub use system_mounts::{SandboxFiles, Sysfs};

/// Everything [`container_spec`] needs: the CRI request and what the
/// runtime knows about the pod, the image and the host.
pub struct ContainerInputs<'a> {
    /// The new container's id. The spec does not carry it (the bundle is
    /// named after it); it is here so callers build one value per container.
    pub container_id: &'a str,
    pub sandbox_id: &'a str,
    pub config: &'a ContainerConfig,
    pub sandbox_config: &'a PodSandboxConfig,
    /// The image's runtime defaults (see [`ImageConfigView::from`]).
    pub image: &'a ImageConfigView,
    /// The container's root filesystem, already mounted.
    pub rootfs: &'a Path,
    /// The sandbox's pinned namespaces, and the target's pid for PID TARGET.
    pub namespaces: &'a SandboxNamespaces,
    /// The container's cgroup, as the cgroup driver named it.
    pub cgroups_path: &'a str,
    /// The host's cgroup version, and on v1 the container's cgroup
    /// directories to mount (see [`cgroup_mounts`]).
    pub cgroup_view: CgroupView,
    /// The image's `/etc/passwd` and `/etc/group`, when it has them.
    pub etc_passwd: Option<&'a str>,
    pub etc_group: Option<&'a str>,
    /// The pod's hostname, hosts, resolv.conf and `/dev/shm`.
    pub sandbox_files: SandboxFiles,
    /// berthd's own `oom_score_adj`: containers never get a lower one.
    pub host_oom_score_adj_floor: i32,
    pub features: CgroupFeatures,
    /// The host's AppArmor and SELinux, as berthd found them at start-up.
    pub lsm: &'a LsmHost,
    pub host: &'a dyn HostLookup,
}

/// The OCI spec of a container (see the crate docs for the pieces).
pub fn container_spec(inputs: &ContainerInputs) -> Result<Spec, SpecError> {
    let config = inputs.config;
    let linux_config = config.linux.as_ref();
    let security = linux_config.and_then(|linux| linux.security_context.as_ref());
    let resources = linux_config.and_then(|linux| linux.resources.as_ref());

    let settings = security::security_settings(security, inputs.sandbox_config)?;
    let capability_set = capabilities::capability_set(security, inputs.host.capability_mask())?;
    let seccomp = seccomp::container_seccomp(security, &capability_set, inputs.host)?;
    let apparmor_profile =
        lsm::container_apparmor_profile(security, &inputs.lsm.apparmor, inputs.host)?;
    lsm::check_selinux_options(
        security.and_then(|security| security.selinux_options.as_ref()),
        "selinux_options",
        inputs.lsm.selinux,
    )?;
    let hostname = pod_hostname(inputs);

    let mut process = Process::default();
    process
        .set_terminal(Some(config.tty))
        .set_console_size(None)
        .set_user(user::process_user(
            security,
            inputs.image,
            inputs.etc_passwd,
            inputs.etc_group,
        )?)
        .set_args(Some(process::process_args(config, inputs.image)?))
        .set_command_line(None)
        .set_env(Some(process::process_env(config, inputs.image, &hostname)))
        .set_cwd(process::working_dir(config, inputs.image)?)
        .set_capabilities(Some(capabilities::process_capabilities(
            security,
            inputs.host.capability_mask(),
        )?))
        // No rlimits: the container inherits the shim's, as with containerd.
        .set_rlimits(None)
        .set_no_new_privileges(settings.no_new_privileges)
        .set_apparmor_profile(apparmor_profile)
        .set_oom_score_adj(Some(resources::oom_score_adj(
            resources,
            inputs.host_oom_score_adj_floor,
        )))
        .set_selinux_label(None)
        .set_io_priority(None)
        .set_scheduler(None)
        .set_exec_cpu_affinity(None);

    let host_ipc = inputs.namespaces.ipc.is_none();
    let extra =
        system_mounts::sandbox_mounts(&inputs.sandbox_files, host_ipc, settings.readonly_rootfs);
    let pod_userns = userns::pod_user_namespace(sandbox_namespace_options(inputs.sandbox_config))?;
    let sysfs = system_mounts::Sysfs::for_container(
        pod_userns.is_some(),
        inputs.namespaces.network.is_none(),
    );
    let defaults = system_mounts::default_mounts(settings.privileged, sysfs, &inputs.cgroup_view);
    mounts::check_mount_idmaps(&config.mounts, pod_userns.as_ref())?;
    let mount_plan = mounts::container_mounts(defaults, &config.mounts, &extra, inputs.host)?;
    let device_plan =
        devices::container_devices(&config.devices, settings.privileged, inputs.host)?;

    let namespace_options = security.and_then(|s| s.namespace_options.as_ref());
    if pod_userns.is_some() != inputs.namespaces.user.is_some() {
        return Err(SpecError::UserNamespaceNotPinned);
    }
    let new_cgroup_namespace = inputs.features.v2 && !settings.privileged;
    let namespaces = namespaces::container_namespaces(
        namespace_options,
        sandbox_pid_mode(inputs.sandbox_config),
        inputs.namespaces,
        new_cgroup_namespace,
    )?;
    let mut linux_resources = resources::container_resources(resources, inputs.features)?;
    linux_resources.set_devices(Some(device_plan.cgroup_rules));
    let sysctls = namespaces::container_sysctls(inputs.sandbox_config, inputs.namespaces);
    let mut readonly_paths = settings.readonly_paths;
    readonly_paths.extend(cgroup_mounts::readonly_paths(
        &inputs.cgroup_view,
        settings.privileged,
    ));

    let mut linux = Linux::default();
    linux
        .set_net_devices(None)
        // Informational: the user namespace is joined, never made, so
        // the runtime writes no maps; the pod's pinned one has these.
        .set_uid_mappings(pod_userns.map(|userns| vec![userns.uids.to_oci()]))
        .set_gid_mappings(pod_userns.map(|userns| vec![userns.gids.to_oci()]))
        .set_sysctl((!sysctls.is_empty()).then_some(sysctls))
        .set_resources(Some(linux_resources))
        .set_cgroups_path(Some(PathBuf::from(inputs.cgroups_path)))
        .set_namespaces(Some(namespaces))
        .set_devices(Some(device_plan.devices))
        .set_seccomp(seccomp)
        .set_rootfs_propagation(mount_plan.rootfs_propagation)
        .set_masked_paths(Some(settings.masked_paths))
        .set_readonly_paths(Some(readonly_paths))
        .set_mount_label(None)
        .set_intel_rdt(None)
        .set_memory_policy(None)
        .set_personality(None)
        .set_time_offsets(None);

    let mut root = Root::default();
    root.set_path(inputs.rootfs.to_path_buf())
        .set_readonly(Some(settings.readonly_rootfs));

    let mut spec = Spec::default();
    spec.set_version(VERSION.to_string())
        .set_root(Some(root))
        .set_mounts(Some(mount_plan.mounts))
        .set_process(Some(process))
        // Informational when the UTS namespace is joined: runtimes set a
        // hostname only in a new one, and the pod's already has it.
        .set_hostname(inputs.namespaces.uts.is_some().then_some(hostname))
        .set_domainname(None)
        .set_hooks(None)
        .set_annotations(Some(annotations::container_annotations(
            inputs.container_id,
            inputs.sandbox_id,
            config,
            inputs.sandbox_config,
        )))
        .set_linux(Some(linux))
        .set_solaris(None)
        .set_windows(None)
        .set_vm(None)
        .set_zos(None);
    Ok(spec)
}

/// The pod's hostname: the sandbox config's, else the node's (the pod is
/// then on the host's network, or the sandbox fell back to it the same way).
fn pod_hostname(inputs: &ContainerInputs) -> String {
    if !inputs.sandbox_config.hostname.is_empty() {
        return inputs.sandbox_config.hostname.clone();
    }
    inputs.host.hostname().unwrap_or_default()
}

/// The pod's own PID namespace mode.
fn sandbox_pid_mode(sandbox_config: &PodSandboxConfig) -> NamespaceMode {
    sandbox_namespace_options(sandbox_config).map_or(NamespaceMode::Pod, |options| options.pid())
}

/// The pod's namespace options, if it sent any.
fn sandbox_namespace_options(sandbox_config: &PodSandboxConfig) -> Option<&NamespaceOption> {
    sandbox_config
        .linux
        .as_ref()
        .and_then(|linux| linux.security_context.as_ref())
        .and_then(|context| context.namespace_options.as_ref())
}

#[cfg(test)]
#[path = "lib_tests.rs"]
mod tests;
