# Device access: the cgroup device filter (v1 devices controller, v2 eBPF
# program, systemd's DevicePolicy/DeviceAllow) is what stops a container
# that holds CAP_MKNOD from making a node for the host's disk and reading
# it. A default container may make nodes but open none but its own set
# (null, zero, full, random, urandom, tty, ptmx, pts, tun); a privileged
# container and a container given a device through the CRI may open them.

# The host's first disk, "MAJOR MINOR" (virtual and loop devices skipped).
host_disk() {
  local dev name
  for dev in /sys/block/*; do
    name="${dev##*/}"
    case "$name" in loop* | ram* | zram* | nbd* | dm-* | md* | sr*) continue ;; esac
    tr ':' ' ' <"$dev/dev"
    return 0
  done
  return 1
}

host_disk_path() {
  local dev
  for dev in /sys/block/*; do
    case "${dev##*/}" in loop* | ram* | zram* | nbd* | dm-* | md* | sr*) continue ;; esac
    echo "/dev/${dev##*/}"
    return 0
  done
  return 1
}

# denied NAME CONTAINER TYPE MAJOR MINOR MODE: mknod may work, open must not.
mknod_denied() {
  local out
  out="$(in_ctr "$2" escape-probe mknod-open "$3" "$4" "$5" "$6")"
  if [[ "$(probe_line "$out" open)" == ok ]]; then
    fail "$1" "opened $3 $4:$5 ($6): $(tr '\n' ' ' <<<"$out")"
  else
    pass "$1"
  fi
}

# allowed NAME CONTAINER TYPE MAJOR MINOR MODE: mknod and open must work.
mknod_allowed() {
  local out
  out="$(in_ctr "$2" escape-probe mknod-open "$3" "$4" "$5" "$6")"
  check "$1" ok "$(probe_line "$out" open)"
}

probe_devices() {
  local disk ctr
  read -r -a disk < <(host_disk) || {
    fail devices "no disk in /sys/block"
    return
  }
  ctr="$(ctr_start default devices)" || {
    fail devices "cannot start a default container"
    return
  }
  mknod_denied "device: default container cannot open the host's disk (b ${disk[0]}:${disk[1]})" \
    "$ctr" b "${disk[0]}" "${disk[1]}" r
  mknod_denied "device: default container cannot open /dev/console (c 5:1)" "$ctr" c 5 1 r
  mknod_denied "device: default container cannot open /dev/kmsg (c 1:11)" "$ctr" c 1 11 r
  mknod_denied "device: default container cannot open /dev/mem (c 1:1)" "$ctr" c 1 1 r
  mknod_allowed "device: default container can open a /dev/null it makes (c 1:3)" "$ctr" c 1 3 rw
  check "device: default container can write /dev/null" ok \
    "$(probe_line "$(in_ctr "$ctr" escape-probe open /dev/null w)" open)"
}

probe_devices_granted() {
  local disk path ctr
  read -r -a disk < <(host_disk) || return
  path="$(host_disk_path)"
  pod_start privileged '{"security_context": {"privileged": true}}' >/dev/null || {
    fail devices-granted "cannot start a privileged pod"
    return
  }
  ctr="$(ctr_start privileged devices-privileged '{"linux": {"security_context": {"privileged": true}}}')" || {
    fail devices-granted "cannot start a privileged container"
    return
  }
  mknod_allowed "device: privileged container can open the host's disk (b ${disk[0]}:${disk[1]})" \
    "$ctr" b "${disk[0]}" "${disk[1]}" r
  ctr="$(ctr_start default devices-cri "{\"devices\": [{\"host_path\": \"$path\", \"container_path\": \"/dev/escape-disk\", \"permissions\": \"r\"}]}")" || {
    fail devices-granted "cannot start a container given $path"
    return
  }
  check "device: container given $path through the CRI can open it" ok \
    "$(probe_line "$(in_ctr "$ctr" escape-probe open /dev/escape-disk r)" open)"
  check "device: container given $path read-only cannot open it for writing" no \
    "$( [[ "$(probe_line "$(in_ctr "$ctr" escape-probe open /dev/escape-disk w)" open)" == ok ]] && echo yes || echo no)"
}
