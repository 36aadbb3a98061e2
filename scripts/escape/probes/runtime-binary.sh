# The runtime binary (CVE-2019-5736 class): a container process that
# executes `#!/proc/self/exe` while berth's shim is still the process (an
# exec's process is forked from berth-shim and runs it until its execve)
# runs the host's berth-shim inside the container, and any process of the
# container may take a handle on it through /proc/PID/exe. The handle must
# never name the host's binary through a writable mount: once every shim
# running the binary exits (no more ETXTBSY), such a handle opens for
# writing and replaces what every later container runs. The same holds for
# berth-pinns, the infra process of a pod that shares its PID namespace.
#
# Needs ESCAPE_BIN_DIR, the dir of the berthd binary under test (its
# helpers are beside it): the probe compares the handles' device and inode
# with the host files'.

# exe_handles_judge NAME BINARY OUTPUT: FAILs when a handle in OUTPUT (from
# escape-probe exe-watch) is BINARY's file through a writable mount and its
# write open is refused only because the binary is running (or not at all);
# PASSes when handles were caught and none is.
exe_handles_judge() {
  local name="$1" binary="$2" out="$3" host line writable=() caught
  host="$(stat -Lc 'dev=%d ino=%i' "$binary")" || {
    fail "$name" "cannot stat $binary"
    return
  }
  caught="$(printed "$out" handles)"
  if [[ -z "$caught" || "$caught" == 0 ]]; then
    fail "$name" "caught no process running a binary from outside the container: $(tr '\n' ' ' <<<"$out")"
    return
  fi
  while read -r line; do
    [[ "$line" == *" $host "* ]] || continue
    case "$line" in
      *"mount=rw open-w=ok"* | *"mount=rw open-w=ETXTBSY"*) writable+=("$line") ;;
    esac
  done < <(grep '^handle: ' <<<"$out")
  if [[ "${#writable[@]}" -gt 0 ]]; then
    fail "$name" "a handle names the host's $binary ($host) through a writable mount: ${writable[*]}"
  else
    pass "$name"
    # The evidence: what the handles were and what they answered.
    grep -E '^(handle|denied): ' <<<"$out" | sed 's/^/  /'
  fi
}

probe_runtime_binary() {
  local name="runtime binary: a #!/proc/self/exe exec gives no writable handle on the host's berth-shim"
  local shim ctr out
  if [[ -z "${ESCAPE_BIN_DIR:-}" ]]; then
    fail "$name" "ESCAPE_BIN_DIR (the dir of berthd and its helpers) is not set"
    return
  fi
  shim="$ESCAPE_BIN_DIR/berth-shim"
  pod_start runtime-binary >/dev/null || {
    fail "$name" "cannot start a pod"
    return
  }
  ctr="$(ctr_start runtime-binary exe-watch '{"command": ["sh", "-c", "escape-probe exe-watch 60 30 >/tmp/exe-watch.out 2>&1; touch /tmp/exe-watch.done; sleep 3600"]}')" || {
    fail "$name" "cannot start the watching container"
    return
  }
  # Replace a binary of the image, as an attacker who owns the image would:
  # the next `exec true` makes the shim's forked process run /proc/self/exe.
  # (A plant that failed shows as "caught no process" below.)
  in_ctr "$ctr" sh -c 'rm -f /bin/true && printf "#!/proc/self/exe\n" >/bin/true && chmod 0755 /bin/true' >/dev/null
  for _ in 1 2 3 4 5 6 7 8; do
    cri exec -s "$ctr" true >/dev/null 2>&1
    sleep 0.2
  done
  in_ctr "$ctr" touch /tmp/exe-watch.stop >/dev/null
  for _ in $(seq 60); do
    ctr_ok "$ctr" test -e /tmp/exe-watch.done && break
    sleep 1
  done
  out="$(in_ctr "$ctr" cat /tmp/exe-watch.out)"
  exe_handles_judge "$name" "$shim" "$out"
}

probe_runtime_binary_pinns() {
  local name="runtime binary: a shared-PID pod's infra process gives no writable handle on the host's berth-pinns"
  local ctr out
  if [[ -z "${ESCAPE_BIN_DIR:-}" ]]; then
    fail "$name" "ESCAPE_BIN_DIR (the dir of berthd and its helpers) is not set"
    return
  fi
  pod_start runtime-binary-pid '{"security_context": {"namespace_options": {"pid": 0}}}' >/dev/null || {
    fail "$name" "cannot start a pod sharing its PID namespace"
    return
  }
  # CAP_SYS_PTRACE, which an unprivileged container may be given, passes
  # the kernel's check on /proc/1/exe of the infra process (it holds every
  # capability; without it the handle is refused with EACCES).
  ctr="$(ctr_start runtime-binary-pid exe-watch-pid '{"command": ["sh", "-c", "escape-probe exe-watch 3 1 >/tmp/exe-watch.out 2>&1; touch /tmp/exe-watch.done; sleep 3600"],
    "linux": {"security_context": {"capabilities": {"add_capabilities": ["SYS_PTRACE"]}}}}')" || {
    fail "$name" "cannot start a container in the pod"
    return
  }
  for _ in $(seq 30); do
    ctr_ok "$ctr" test -e /tmp/exe-watch.done && break
    sleep 1
  done
  out="$(in_ctr "$ctr" cat /tmp/exe-watch.out)"
  # An LSM that mediates ptrace (AppArmor's berth-default) may refuse the
  # handle on the infra process outright: then there is nothing to replace.
  if [[ "$(printed "$out" handles)" == 0 ]] && grep -q '^denied: pid=1 ' <<<"$out"; then
    pass "$name"
    echo "  $(grep '^denied: pid=1 ' <<<"$out") (the infra process: no handle at all)"
    return
  fi
  exe_handles_judge "$name" "$ESCAPE_BIN_DIR/berth-pinns" "$out"
}
