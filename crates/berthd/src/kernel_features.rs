//! What the running kernel can do, probed once at start-up, for the
//! features berthd advertises to kubelet.

/// Kernel features berthd advertises only when present.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelFeatures {
    /// `mount_setattr(2)` with `AT_RECURSIVE` (Linux 5.12): what
    /// recursive read-only mounts are made with.
    pub recursive_read_only: bool,
    /// Pods may have a user namespace: the kernel allows user namespaces
    /// and can idmap overlayfs layers (see
    /// `berth_spec::userns::kernel_supports_userns`).
    pub user_namespaces: bool,
}

impl KernelFeatures {
    pub fn probe() -> Self {
        let features = Self {
            recursive_read_only: has_mount_setattr(),
            user_namespaces: host_supports_userns(),
        };
        tracing::info!(?features, "kernel features");
        features
    }
}

/// Whether pods may have a user namespace here, from the kernel's release
/// and user namespace limit. Read, not probed: making one would need a
/// fork, which berthd never does.
fn host_supports_userns() -> bool {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let limit = std::fs::read_to_string("/proc/sys/user/max_user_namespaces").ok();
    berth_spec::userns::kernel_supports_userns(release.trim(), limit.as_deref())
}

/// Calls `mount_setattr` with a bad fd: a kernel that has the syscall
/// answers EBADF (or EINVAL), one without it ENOSYS. Nothing is changed.
fn has_mount_setattr() -> bool {
    // SAFETY: the path is a valid empty C string and the attr pointer is
    // null with size 0; the kernel rejects the bad fd before reading.
    let result = unsafe {
        nix::libc::syscall(
            nix::libc::SYS_mount_setattr,
            -1,
            c"".as_ptr(),
            0,
            std::ptr::null::<u8>(),
            0,
        )
    };
    result == 0 || nix::errno::Errno::last() != nix::errno::Errno::ENOSYS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_probe_matches_the_kernel_version() {
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").expect("osrelease");
        let mut numbers = release
            .split(|c: char| !c.is_ascii_digit())
            .filter_map(|part| part.parse::<u32>().ok());
        let version = (numbers.next().unwrap_or(0), numbers.next().unwrap_or(0));
        assert_eq!(
            KernelFeatures::probe().recursive_read_only,
            version >= (5, 12),
            "kernel {release}"
        );
    }
}
