# Device access: the cgroup device filter (v1 devices controller, v2 eBPF
# program, systemd's DevicePolicy/DeviceAllow) is what stops a container
# that holds CAP_MKNOD from making a node for the host's disk and reading
# it. A default container may make nodes but open none but its own set
# (null, zero, full, random, urandom, tty, ptmx, pts, tun); a privileged
# container and a container given a device through the CRI may open them.

# A block device the host itself can open (a disk first, else a loop
# device): a container's refusal to open it is then the filter's doing, not
# the node's (some hosts refuse even root their disk). Prints "PATH MAJOR
# MINOR".
host_block_device() {
  local dev name kind
  for kind in disk loop; do
    for dev in /sys/block/*; do
      name="${dev##*/}"
      case "$name" in ram* | zram* | nbd* | dm-* | md* | sr*) continue ;; esac
      if [[ "$kind" == disk && "$name" == loop* ]] || [[ "$kind" == loop && "$name" != loop* ]]; then
        continue
      fi
      [[ -b "/dev/$name" ]] && (exec 3<"/dev/$name") 2>/dev/null || continue
      echo "/dev/$name $(tr ':' ' ' <"$dev/dev")"
      return 0
    done
  done
  return 1
}

# host_opens PATH: the host's root can open PATH for reading.
host_opens() { (exec 3<"$1") 2>/dev/null; }

# denied NAME CONTAINER TYPE MAJOR MINOR MODE: mknod may work, open must not.
mknod_denied() {
  local out
  out="$(in_ctr "$2" escape-probe mknod-open "$3" "$4" "$5" "$6")"
  if [[ "$(printed "$out" open)" == ok ]]; then
    fail "$1" "opened $3 $4:$5 ($6): $(tr '\n' ' ' <<<"$out")"
  else
    pass "$1"
  fi
}

# mknod_allowed NAME CONTAINER TYPE MAJOR MINOR MODE: mknod and open must work.
mknod_allowed() {
  expect_open "$1" "$(in_ctr "$2" escape-probe mknod-open "$3" "$4" "$5" "$6")"
}

# open_allowed NAME CONTAINER PATH MODE: opening PATH must work.
open_allowed() {
  expect_open "$1" "$(in_ctr "$2" escape-probe open "$3" "$4")"
}

# expect_open NAME OUTPUT: escape-probe's OUTPUT says it opened.
expect_open() {
  if [[ "$(printed "$2" open)" == ok ]]; then
    pass "$1"
  else
    fail "$1" "$(tr '\n' ' ' <<<"$2")"
  fi
}

probe_devices() {
  local disk ctr
  read -r -a disk < <(host_block_device) || {
    fail devices "no block device the host can open in /sys/block"
    return
  }
  ctr="$(ctr_start default devices)" || {
    fail devices "cannot start a default container"
    return
  }
  mknod_denied "device: default container cannot open the host's ${disk[0]} (b ${disk[1]}:${disk[2]})" \
    "$ctr" b "${disk[1]}" "${disk[2]}" r
  local node name major minor
  for node in "console 5 1" "kmsg 1 11" "mem 1 1"; do
    read -r name major minor <<<"$node"
    if host_opens "/dev/$name"; then
      mknod_denied "device: default container cannot open /dev/$name (c $major:$minor)" \
        "$ctr" c "$major" "$minor" r
    else
      echo "SKIP device: /dev/$name (the host cannot open it either)"
    fi
  done
  mknod_allowed "device: default container can open a /dev/null it makes (c 1:3)" "$ctr" c 1 3 rw
  open_allowed "device: default container can write /dev/null" "$ctr" /dev/null w
}

probe_devices_granted() {
  local disk ctr out
  read -r -a disk < <(host_block_device) || return
  pod_start privileged '{"security_context": {"privileged": true}}' >/dev/null || {
    fail devices-granted "cannot start a privileged pod"
    return
  }
  ctr="$(ctr_start privileged devices-privileged '{"linux": {"security_context": {"privileged": true}}}')" || {
    fail devices-granted "cannot start a privileged container"
    return
  }
  mknod_allowed "device: privileged container can open the host's ${disk[0]} (b ${disk[1]}:${disk[2]})" \
    "$ctr" b "${disk[1]}" "${disk[2]}" r
  ctr="$(ctr_start default devices-cri "{\"devices\": [{\"host_path\": \"${disk[0]}\", \"container_path\": \"/dev/escape-disk\", \"permissions\": \"r\"}]}")" || {
    fail devices-granted "cannot start a container given ${disk[0]}"
    return
  }
  open_allowed "device: container given ${disk[0]} through the CRI can open it" "$ctr" /dev/escape-disk r
  out="$(in_ctr "$ctr" escape-probe open /dev/escape-disk w)"
  if [[ "$(printed "$out" open)" == ok ]]; then
    fail "device: container given ${disk[0]} read-only cannot open it for writing" "it opened"
  else
    pass "device: container given ${disk[0]} read-only cannot open it for writing"
  fi
}

# A running container's filter must hold after what rewrites cgroups: an
# UpdateContainerResources (systemd unit properties or cgroup files), and
# under systemd a daemon-reload (systemd re-applies every unit's
# properties and its own device programs).
probe_devices_kept() {
  local disk ctr
  read -r -a disk < <(host_block_device) || return
  ctr="$(ctr_start default devices-kept)" || {
    fail devices-kept "cannot start a default container"
    return
  }
  cri update --memory $((256 << 20)) --cpu-share 512 "$ctr" >/dev/null || {
    fail devices-kept "crictl update failed"
    return
  }
  mknod_denied "device: after crictl update, default container cannot open the host's ${disk[0]}" \
    "$ctr" b "${disk[1]}" "${disk[2]}" r
  if host_opens /dev/console; then
    mknod_denied "device: after crictl update, default container cannot open /dev/console" \
      "$ctr" c 5 1 r
  fi
  [[ "${ESCAPE_DRIVER:-}" == systemd ]] || return 0
  systemctl daemon-reload || {
    fail devices-kept "systemctl daemon-reload failed"
    return
  }
  mknod_denied "device: after daemon-reload, default container cannot open the host's ${disk[0]}" \
    "$ctr" b "${disk[1]}" "${disk[2]}" r
  if host_opens /dev/console; then
    mknod_denied "device: after daemon-reload, default container cannot open /dev/console" \
      "$ctr" c 5 1 r
  fi
  mknod_allowed "device: after daemon-reload, default container can open a /dev/null it makes" \
    "$ctr" c 1 3 rw
}
