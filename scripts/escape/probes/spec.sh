# What berth refuses to build, and the RuntimeDefault seccomp profile.

# A volume over /proc/sys would hide its read-only mount (and any file
# below /proc could fake what the kernel says): refused at create, as
# runc's proc-safety check does; lxcfs' files stay allowed.
probe_proc_safety() {
  local dir out
  dir="$(mktemp -d "$work/planted.XXXXXX")"
  out="$(ctr_start default proc-sys "{\"mounts\": [{\"host_path\": \"$dir\", \"container_path\": \"/proc/sys\"}]}" 2>&1)"
  if [[ "$out" == *"inside /proc"* ]]; then
    pass "spec: a volume over /proc/sys is refused, naming it"
  else
    fail "spec: a volume over /proc/sys is refused, naming it" "$(tail -n 1 <<<"$out")"
  fi
  : >"$dir/meminfo"
  if ctr_start default proc-meminfo "{\"mounts\": [{\"host_path\": \"$dir/meminfo\", \"container_path\": \"/proc/meminfo\"}]}" >/dev/null 2>&1; then
    pass "spec: an lxcfs-style file over /proc/meminfo is allowed"
  else
    fail "spec: an lxcfs-style file over /proc/meminfo is allowed" "create or start failed"
  fi
}

# RuntimeDefault refuses socket(AF_VSOCK) (the hypervisor's and other
# VMs' vsock services), as containerd's profile does.
probe_seccomp_vsock() {
  local ctr out
  ctr="$(ctr_start default seccomp '{"linux": {"security_context": {"seccomp": {"profile_type": 0}}}}')" || {
    fail "seccomp: RuntimeDefault" "cannot start a container"
    return
  }
  out="$(in_ctr "$ctr" escape-probe socket 40)"
  check "seccomp: RuntimeDefault refuses socket(AF_VSOCK) with EPERM" EPERM "$(printed "$out" socket)"
  out="$(in_ctr "$ctr" escape-probe socket 1)"
  check "seccomp: RuntimeDefault allows socket(AF_UNIX)" ok "$(printed "$out" socket)"
}
