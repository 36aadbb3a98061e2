# A pod with hostUsers: false (user namespaces, GA in 1.36): kubelet picks
# its mapping from its default range (with no `kubelet` user on the host it
# needs no /etc/subuid entry) and berth runs it in a user namespace of its
# own. Its volumes are idmapped through it: the service-account token (a
# projected volume, on tmpfs) is readable, the emptyDir belongs to root
# inside and is writable, and what root writes there belongs to host root.
# Sourced by scripts/k8s/e2e.sh.

# User namespaces need idmapped overlayfs (5.19); idmapped tmpfs, which
# every token and Secret volume is on, came in 6.3: before it the pod has
# no token (automountServiceAccountToken: false), its emptyDir and berth's
# /etc files being on disk.
HOST_USERS_TOKEN=0
if ! printf '%s\n' 5.19 "$(uname -r)" | sort -V -C; then
  log "host-users left out: kernel $(uname -r) has no idmapped overlayfs (5.19 or later needed)"
else
  SCENARIOS+=("host-users scn_host_users")
  if printf '%s\n' 6.3 "$(uname -r)" | sort -V -C; then
    HOST_USERS_TOKEN=1
  else
    log "host-users runs without its token volume: kernel $(uname -r) cannot idmap tmpfs (6.3 or later needed)"
  fi
fi

SA_DIR=/var/run/secrets/kubernetes.io/serviceaccount

host_users_pod() {
  pod_header hostusers
  cat <<EOF
  hostUsers: false
  automountServiceAccountToken: false
  containers:
  - name: app
    image: $BUSYBOX
    command: [sleep, "36000"]
    volumeMounts:
    - {name: scratch, mountPath: /scratch}
EOF
  if ((HOST_USERS_TOKEN)); then
    echo "    - {name: token, mountPath: $SA_DIR, readOnly: true}"
  fi
  cat <<EOF
  volumes:
  - name: scratch
    emptyDir: {}
EOF
  # The namespace's service account mounts no token on its own (no
  # controller-manager makes kube-root-ca.crt): the pod asks for one.
  if ((HOST_USERS_TOKEN)); then
    cat <<EOF
  - name: token
    projected:
      sources:
      - serviceAccountToken: {path: token, expirationSeconds: 3600}
EOF
  fi
}

# idmapped_views: berthd's idmapped bind views still mounted.
idmapped_views() {
  findmnt -rn -o TARGET | grep -F "$WORK/berth-state/" | grep -F /idmapped/ || true
}

no_idmapped_views() { [[ -z "$(idmapped_views)" ]]; }

scn_host_users() {
  ensure_pod hostusers host_users_pod
  local map uid pid owner token probe
  read -r -a map <<<"$(kubectl exec hostusers -c app -- cat /proc/self/uid_map)"
  [[ "${map[0]:-}" == 0 && "${map[2]:-}" == 65536 && "${map[1]:-0}" =~ ^[0-9]+$ && "${map[1]}" != 0 ]] ||
    fail "uid_map is not one mapping of 0 to an unprivileged range: ${map[*]:-none}"
  uid="$(kubectl exec hostusers -c app -- id -u)"
  [[ "$uid" == 0 ]] || fail "id -u inside is $uid, not 0"
  # On the host, the container's process runs as the mapped root.
  pid="$(pgrep -x -U "${map[1]}" sleep || true)"
  [[ -n "$pid" ]] || fail "no sleep runs as host uid ${map[1]}"
  # With a terminal too, which belongs to root inside (libcontainer makes
  # it before the process joins the user namespace).
  local out status=0
  # shellcheck disable=SC2016 # typed into the container's shell
  out="$(in_pty 60 'cat /proc/self/uid_map; stat -c pty-%u $(tty); exit 3\n' \
    "${KUBECTL[@]}" exec -it hostusers -c app -- sh)" || status=$?
  ((status == 3)) || fail "tty exec: exit status $status, want 3: $(tail -c 300 <<<"$out" | tr '\n' '|')"
  grep -Eq "^ *0 +${map[1]} +65536" <<<"$out" ||
    fail "a tty exec is not in the pod's user namespace: $(tail -c 300 <<<"$out" | tr '\n' '|')"
  grep -q '^pty-0' <<<"$out" || fail "the tty exec's terminal is not root's: $(tail -c 300 <<<"$out" | tr '\n' '|')"

  if ((HOST_USERS_TOKEN)); then
    token="$(kubectl exec hostusers -c app -- cat "$SA_DIR/token" 2>&1)" ||
      fail "the service-account token is not readable: $token"
    [[ "$token" == *.*.* ]] || fail "the token is not a JWT: ${token:0:80}"
    owner="$(kubectl exec hostusers -c app -- stat -c %u:%g "$SA_DIR/token")"
    [[ "$owner" == 0:0 ]] || fail "the token belongs to $owner inside, not to root (not idmapped?)"
  fi
  # berth's files for the pod (kubelet mounts /etc/hosts itself), idmapped:
  # root's inside.
  owner="$(kubectl exec hostusers -c app -- stat -c %u:%g /etc/hostname /etc/resolv.conf | sort -u)"
  [[ "$owner" == 0:0 ]] || fail "/etc/hostname, resolv.conf belong to $owner inside, not to root (not idmapped?)"

  owner="$(kubectl exec hostusers -c app -- stat -c %u:%g /scratch)"
  [[ "$owner" == 0:0 ]] || fail "the emptyDir belongs to $owner inside, not to root (not idmapped?)"
  kubectl exec hostusers -c app -- sh -c 'echo written > /scratch/probe && cat /scratch/probe' |
    grep -qx written || fail "the emptyDir is not writable"
  probe="$WORK/kubelet/pods/$(jpath pod/hostusers '{.metadata.uid}')/volumes/kubernetes.io~empty-dir/scratch/probe"
  owner="$(stat -c %u:%g "$probe" 2>&1)" || fail "the probe is not in the emptyDir on the host: $owner"
  [[ "$owner" == 0:0 ]] || fail "root's write inside belongs to $owner on the host, not to 0:0"
  [[ -n "$(idmapped_views)" ]] || fail "no idmapped view of the pod's volumes is mounted"

  kubectl delete pod hostusers --wait=true --timeout=60s >/dev/null
  # kubelet removes a deleted pod's containers at its next container GC
  # (each minute); RemoveContainer unmounts the views.
  wait_until 150 no_idmapped_views ||
    fail "idmapped views left after the pod's deletion: $(idmapped_views | tr '\n' ' ')"
}
