# Security modules: an AppArmor profile a container asks for is applied, or
# its create fails with an error naming it; it is never dropped. Where the kernel has AppArmor, a RuntimeDefault container and
# its execs run confined by berth-default, and a Localhost profile the
# probe loads denies a write to a file the probe planted in a directory it
# made (bind-mounted into the container). Where it has none, an explicit
# profile is refused. An SELinux label is refused where SELinux runs (berth
# applies none) and means nothing where it does not.

LSM_DENY_PROFILE=berth-escape-deny-write

apparmor_enabled() {
  [[ "$(cat /sys/module/apparmor/parameters/enabled 2>/dev/null)" == Y* ]] &&
    [[ -d /sys/kernel/security/apparmor ]]
}

# create_refused NAME POD CTR EXTRA_JSON WANT...: creating container CTR
# with EXTRA_JSON in pod POD fails, with an error holding every WANT.
create_refused() {
  local name="$1" pod="$2" ctr="$3" extra="$4" out want
  shift 4
  if out="$(ctr_start "$pod" "$ctr" "$extra" 2>&1)"; then
    fail "$name" "created and started: $out"
    return
  fi
  for want in "$@"; do
    if [[ "$out" != *"$want"* ]]; then
      fail "$name" "the error does not say '$want': $(tr '\n' ' ' <<<"$out")"
      return
    fi
  done
  pass "$name"
}

# go-selinux's test, as berthd's: selinuxfs mounted, or securityfs lists it.
selinux_enabled() {
  [[ -e /sys/fs/selinux/enforce ]] ||
    tr ',' '\n' </sys/kernel/security/lsm 2>/dev/null | grep -qx selinux
}

probe_lsm_selinux() {
  local label='{"linux": {"security_context": {"selinux_options": {"type": "spc_t", "level": "s0:c1,c2"}}}}'
  pod_start lsm-selinux >/dev/null || {
    fail lsm-selinux "cannot start a pod"
    return
  }
  if selinux_enabled; then
    create_refused "lsm: an SELinux label request is refused, naming the field" lsm-selinux \
      lsm-selinux "$label" selinux_options spc_t
  elif ctr_start lsm-selinux lsm-selinux "$label" >/dev/null; then
    # Nothing carries a label on such a kernel: containerd and CRI-O run it too.
    pass "lsm (kernel without SELinux): a container with an SELinux label runs"
  else
    fail lsm-selinux "a container with an SELinux label does not start on a kernel without SELinux"
  fi
}

probe_lsm_apparmor() {
  local localhost='{"linux": {"security_context": {"apparmor": {"profile_type": 2, "localhost_ref": "'$LSM_DENY_PROFILE'"}}}}'
  local runtime_default='{"linux": {"security_context": {"apparmor": {"profile_type": 0}}}}'
  pod_start lsm >/dev/null || {
    fail lsm-apparmor "cannot start a pod"
    return
  }
  if ! apparmor_enabled; then
    create_refused "apparmor (kernel without AppArmor): a Localhost profile is refused, naming it" \
      lsm lsm-localhost "$localhost" "$LSM_DENY_PROFILE" "AppArmor is not enabled"
    create_refused "apparmor (kernel without AppArmor): localhost/ in apparmor_profile is refused, naming it" \
      lsm lsm-legacy '{"linux": {"security_context": {"apparmor_profile": "localhost/'$LSM_DENY_PROFILE'"}}}' \
      "$LSM_DENY_PROFILE" "AppArmor is not enabled"
    create_refused "apparmor (kernel without AppArmor): an explicit RuntimeDefault is refused" \
      lsm lsm-runtime-default "$runtime_default" runtime/default "AppArmor is not enabled"
    if ctr_start lsm lsm-unset >/dev/null; then
      pass "apparmor (kernel without AppArmor): a container that asks for no profile runs"
    else
      fail lsm-apparmor "a container that asks for no profile does not start"
    fi
    return
  fi

  local ctr dir
  ctr="$(ctr_start lsm lsm-default "$runtime_default")" || {
    fail lsm-apparmor "cannot start a RuntimeDefault container"
    return
  }
  check "apparmor: a RuntimeDefault container's process runs as berth-default" "berth-default (enforce)" \
    "$(ctr_says "$ctr" sh -c 'cat /proc/$(pidof sleep)/attr/current' | tr -d '\0')"
  check "apparmor: an exec in it runs as berth-default too" "berth-default (enforce)" \
    "$(ctr_says "$ctr" cat /proc/self/attr/current | tr -d '\0')"
  create_refused "apparmor: a Localhost profile that is not loaded is refused, naming it" \
    lsm lsm-missing '{"linux": {"security_context": {"apparmor": {"profile_type": 2, "localhost_ref": "berth-escape-not-loaded"}}}}' \
    berth-escape-not-loaded

  # A directory the probe made, with a file it planted, bound into the
  # containers at /tmp/escape.
  dir="$work/lsm-planted"
  mkdir -p "$dir" && : >"$dir/planted" && chmod 0777 "$dir" && chmod 0666 "$dir/planted"
  printf '%s\n' "profile $LSM_DENY_PROFILE flags=(attach_disconnected) {" \
    "  file," "  capability," "  network," "  signal," "  deny /tmp/escape/** w," "}" \
    >"$work/$LSM_DENY_PROFILE.apparmor"
  apparmor_parser -K -r "$work/$LSM_DENY_PROFILE.apparmor" || {
    fail lsm-apparmor "apparmor_parser cannot load $LSM_DENY_PROFILE"
    return
  }
  local mount='"mounts": [{"host_path": "'$dir'", "container_path": "/tmp/escape"}]'
  ctr="$(ctr_start lsm lsm-planted-default "{$mount}")" || {
    fail lsm-apparmor "cannot start a container with the planted dir"
    return
  }
  check "apparmor: a default container may write the planted file" ok \
    "$(printed "$(in_ctr "$ctr" escape-probe open /tmp/escape/planted w)" open)"
  ctr="$(ctr_start lsm lsm-deny "{$mount, \"linux\": {\"security_context\": {\"apparmor\": {\"profile_type\": 2, \"localhost_ref\": \"$LSM_DENY_PROFILE\"}}}}")" || {
    fail lsm-apparmor "cannot start a container with Localhost profile $LSM_DENY_PROFILE"
    return
  }
  local out
  out="$(in_ctr "$ctr" escape-probe open /tmp/escape/planted w)"
  if [[ "$(printed "$out" open)" == EACCES ]]; then
    pass "apparmor: a Localhost profile denies the write it names"
  else
    fail "apparmor: a Localhost profile denies the write it names" \
      "want 'open: EACCES', got: $(tr '\n' ' ' <<<"$out")"
  fi
  check "apparmor: the Localhost container runs as $LSM_DENY_PROFILE" "$LSM_DENY_PROFILE (enforce)" \
    "$(ctr_says "$ctr" cat /proc/self/attr/current | tr -d '\0')"
}
