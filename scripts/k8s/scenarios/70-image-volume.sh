# A pod with an image volume (KEP-4639, GA in 1.36): kubelet pulls the
# image and berth mounts it read-only, here by a sub path. Sourced by
# scripts/k8s/e2e.sh.

SCENARIOS+=("image-volume scn_image_volume")

image_volume_pod() {
  pod_header imgvol
  cat <<EOF
  containers:
  - name: app
    image: $BUSYBOX
    command: [sleep, "36000"]
    volumeMounts: [{name: img, mountPath: /vol, subPath: bin}]
  volumes:
  - name: img
    image: {reference: $NGINX, pullPolicy: IfNotPresent}
EOF
}

scn_image_volume() {
  ensure_pod imgvol image_volume_pod
  kubectl exec imgvol -c app -- test -x /vol/sh ||
    fail "the image's /bin is not at /vol: $(kubectl exec imgvol -c app -- ls /vol 2>&1 | head -c 200)"
  local out
  out="$(kubectl exec imgvol -c app -- sh -c 'echo x > /vol/new' 2>&1)" &&
    fail "a write into the image volume succeeded"
  [[ "$out" == *"Read-only file system"* ]] || fail "write into the image volume: $out"
  kubectl delete pod imgvol --wait=true --timeout=60s >/dev/null
}
