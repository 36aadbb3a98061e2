# Host files: nothing berth keeps for pods and containers (bundles with
# their env, exec specs, logs, /dev/shm, state, image layers) may be read
# or written by an unprivileged host user, here `nobody`; only the pod's
# DNS and host files (hosts, hostname, resolv.conf), which every container
# of the pod reads through a bind mount, may be readable.

probe_files_private() {
  local ctr list found
  [[ -n "${ESCAPE_STATE_DIRS:-}" ]] || {
    fail "files: private to root" "ESCAPE_STATE_DIRS not set"
    return
  }
  ctr="$(ctr_start default files)" || {
    fail "files: private to root" "cannot start a default container"
    return
  }
  # Something to find: a file in the pod's /dev/shm and the container's log.
  in_ctr "$ctr" sh -c 'echo secret >/dev/shm/escape-planted; echo secret' >/dev/null
  list="$work/files.list"
  # shellcheck disable=SC2086
  find $ESCAPE_STATE_DIRS -mindepth 1 2>/dev/null >"$list"
  # access(2) as nobody checks every directory on the way, as an open would.
  found="$(setpriv --reuid=65534 --regid=65534 --clear-groups -- sh -c '
    while IFS= read -r p; do
      case "${p##*/}" in hosts | hostname | resolv.conf) continue ;; esac
      if [ -r "$p" ] || [ -w "$p" ]; then echo "$p"; fi
    done' <"$list")"
  printf '%s\n' "$found" >"$work/files.open"
  if [[ -z "$found" ]]; then
    pass "files: nothing under berth's root and state dirs is open to nobody ($(wc -l <"$list") paths)"
  else
    fail "files: nothing under berth's root and state dirs is open to nobody" \
      "$(wc -l <<<"$found") open (all in $work/files.open): $(head -n 20 <<<"$found" | tr '\n' ' ')"
  fi
}
