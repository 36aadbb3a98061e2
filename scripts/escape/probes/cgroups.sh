# cgroups: a container sits in a cgroup of its own in every hierarchy,
# named ones (v1 `name=systemd`) and the hybrid layout's unified one
# included. In a hierarchy's root its processes would share the root's
# release_agent (CVE-2022-0492), which only the kernel's fix closes.

# root_lines PID: the lines of /proc/PID/cgroup whose path is the root.
root_lines() {
  awk -F: '$3 == "/" {printf "%s ", $0}' "/proc/$1/cgroup" 2>/dev/null
}

# procs_file PID: cgroup.procs of PID's cgroup (v1 pids hierarchy, or v2).
procs_file() {
  local line
  if line="$(grep -E '^[0-9]+:pids:' "/proc/$1/cgroup")"; then
    echo "/sys/fs/cgroup/pids${line#*:pids:}/cgroup.procs"
  elif line="$(grep -E '^0::' "/proc/$1/cgroup")"; then
    echo "/sys/fs/cgroup${line#0::}/cgroup.procs"
  fi
}

probe_cgroup_hierarchies() {
  local ctr pid procs p checked=0 roots=""
  ctr="$(ctr_start default cgroups)" || {
    fail cgroups "cannot start a default container"
    return
  }
  pid="$(cri inspect -o go-template --template '{{.info.pid}}' "$ctr" 2>/dev/null)"
  if ! [[ "$pid" =~ ^[0-9]+$ ]] || [[ ! -r "/proc/$pid/cgroup" ]]; then
    fail "cgroup: container's init pid" "got '$pid'"
    return
  fi
  check "cgroup: default container is in no hierarchy's root" "" "$(root_lines "$pid")"
  # An exec'd process (left running in the background) joins them too.
  in_ctr "$ctr" sh -c 'sleep 60 >/dev/null 2>&1 &' >/dev/null
  procs="$(procs_file "$pid")"
  for p in $(cat "$procs" 2>/dev/null); do
    [[ "$p" == "$pid" ]] && continue
    checked=$((checked + 1))
    roots+="$(root_lines "$p")"
  done
  if [[ "$checked" == 0 ]]; then
    fail "cgroup: an exec'd process is in no hierarchy's root" "no exec'd process in $procs"
  else
    check "cgroup: an exec'd process is in no hierarchy's root" "" "$roots"
  fi
}
