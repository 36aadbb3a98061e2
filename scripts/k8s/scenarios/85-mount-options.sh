# A volume mounted with bindMountOptions: [noexec, nosuid, nodev]
# (KEP-5855, alpha in 1.37, gate VolumeBindMountOptions): kubelet passes
# them as the CRI mount's mount_options, which berth advertises and adds to
# the bind. The same emptyDir mounted plainly beside it runs a binary
# copied there; through the noexec mount the same file cannot run.
# Sourced by scripts/k8s/e2e.sh.

if ((K8S_MINOR >= 37)); then
  SCENARIOS+=("mount-options scn_mount_options")
else
  log "mount-options left out: kubelet 1.$K8S_MINOR has no bindMountOptions (1.37 or later)"
fi

mount_options_pod() {
  pod_header mountopts
  cat <<EOF
  containers:
  - name: app
    image: $BUSYBOX
    command: [sh, -c, 'cp /bin/busybox /plain/busybox && sleep 36000']
    volumeMounts:
    - {name: scratch, mountPath: /plain}
    - {name: scratch, mountPath: /locked, bindMountOptions: [noexec, nosuid, nodev]}
  volumes:
  - name: scratch
    emptyDir: {}
EOF
}

scn_mount_options() {
  ensure_pod mountopts mount_options_pod
  local flags out option status=0
  flags="$(kubectl exec mountopts -c app -- awk '$2 == "/locked" {print $4}' /proc/mounts)"
  for option in noexec nosuid nodev; do
    [[ ",$flags," == *",$option,"* ]] || fail "/locked is mounted with \"$flags\", without $option"
  done
  out="$(kubectl exec mountopts -c app -- /plain/busybox echo ran 2>&1)" ||
    fail "the binary does not run from the plain mount: $out"
  [[ "$out" == ran ]] || fail "the binary on the plain mount printed: $out"
  # Through the image's shell, so the refusal is the kernel's (exit 126).
  out="$(kubectl exec mountopts -c app -- sh -c '/locked/busybox echo ran' 2>&1)" || status=$?
  ((status != 0)) || fail "the binary ran from the noexec mount: $out"
  grep -qi 'permission denied' <<<"$out" || fail "running from the noexec mount failed otherwise: $out"
  kubectl delete pod mountopts --wait=true --timeout=60s >/dev/null
}
