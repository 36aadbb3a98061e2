#!/usr/bin/env bash
# Builds the guest disk image of the VM harness: Debian 12 with systemd as
# PID 1 on cgroup v2, the job runner, a node's modules and sysctls, and the
# kernel and initramfs to boot it with. Kept in a cache outside the clone and
# rebuilt only when its inputs change.
#
#   scripts/vm/image.sh          build if needed, then print the image's dir
#
# Each image has a dir of its own in the cache, named by the hash of its
# inputs (this script, packages.txt, guest/* and the disk size): CACHE/HASH/
# holds rootfs.ext4, vmlinuz and initrd.img. Worktrees or branches with other
# inputs then each keep theirs instead of rebuilding in turn. Images unused
# for BERTH_VM_CACHE_DAYS (default 3) are removed.
#
# Environment: BERTH_VM_CACHE (default ${XDG_CACHE_HOME:-$HOME/.cache}/berth/vm),
# BERTH_VM_DISK_SIZE (ext4 size, default 8G; sparse on the host),
# BERTH_VM_SOURCES (apt sources file, default the host's own),
# BERTH_VM_REBUILD=1 (build even when the image exists).
#
# Needs: mmdebstrap, e2fsprogs (mkfs.ext4 -d: no loop mount), root.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache="${BERTH_VM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/berth/vm}"
disk_size="${BERTH_VM_DISK_SIZE:-8G}"

log() { echo "vm-image: $*" >&2; }
die() {
  echo "vm-image: error: $*" >&2
  exit 1
}

for tool in mmdebstrap mkfs.ext4 sha256sum; do
  command -v "$tool" >/dev/null || die "$tool not found (see scripts/install-deps.sh)"
done
((EUID == 0)) || die "must run as root (mmdebstrap --mode=root)"

# The host's own Debian sources: the mirror every machine here can reach.
sources="${BERTH_VM_SOURCES:-}"
if [[ -z "$sources" ]]; then
  for f in /etc/apt/sources.list.d/debian.sources /etc/apt/sources.list; do
    if [[ -s "$f" ]] && grep -Eq '^[[:space:]]*(deb|Types:)' "$f"; then
      sources="$f"
      break
    fi
  done
fi
[[ -n "$sources" && -r "$sources" ]] || die "no apt sources file found; set BERTH_VM_SOURCES"

# Everything that shapes the image goes into the stamp.
inputs_hash() {
  {
    sha256sum "$here/image.sh" "$here/packages.txt"
    find "$here/guest" -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum
    echo "disk_size=$disk_size"
  } | sed "s|$here/||" | sha256sum | cut -c1-16
}
want="$(inputs_hash)"

image="$cache/$want"
mkdir -p "$cache"
# One builder per image; a second caller waits, then finds it built.
exec {lock}>"$cache/.lock-$want"
flock "$lock"

# Images (and builds killed half-way) nobody used for days. A guest still
# running from a removed image keeps its open files.
prune() {
  local d
  # The first layout kept one image at the top of the cache.
  rm -f "$cache/rootfs.ext4" "$cache/vmlinuz" "$cache/initrd.img" "$cache/stamp" "$cache/.lock"
  for d in "$cache"/*/; do
    d="${d%/}"
    [[ "$d" != "$image" ]] || continue
    if [[ -n "$(find "$d" -maxdepth 0 -mtime "+${BERTH_VM_CACHE_DAYS:-3}")" ]]; then
      log "removing $d (unused for ${BERTH_VM_CACHE_DAYS:-3} days)"
      rm -rf "$d" "$cache/.lock-${d##*/}"
    fi
  done
}

if [[ "${BERTH_VM_REBUILD:-0}" != 1 && -s "$image/rootfs.ext4" ]]; then
  touch "$image"
  prune
  echo "$image"
  exit 0
fi

mapfile -t packages < <(sed -e 's/#.*//' -e '/^[[:space:]]*$/d' "$here/packages.txt" | tr -d ' \t')
((${#packages[@]})) || die "no packages in $here/packages.txt"
log "building the guest image $image, packages from $sources"
start=$SECONDS

build="$(mktemp -d "$cache/build.XXXXXX")"
# --one-file-system: never into a chroot mount an interrupted mmdebstrap
# might have left behind.
trap 'rm -rf --one-file-system "$build"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
root="$build/root"
mkdir -p "$root"

# Put the guest's files in place, after all packages are installed ($1 is
# the root directory; hooks run as root on the host, mode=root).
customize="$build/customize.sh"
cat >"$customize" <<EOF
set -euo pipefail
r="\$1"
g="$here/guest"
echo berth-guest >"\$r/etc/hostname"
printf '127.0.0.1\tlocalhost\n127.0.1.1\tberth-guest\n::1\tlocalhost ip6-localhost ip6-loopback\n' >"\$r/etc/hosts"
install -m 0644 "\$g/fstab" "\$r/etc/fstab"
mkdir -p "\$r/mnt/share" "\$r/mnt/control"
install -m 0644 "\$g/node.conf.modules" "\$r/etc/modules-load.d/berth-node.conf"
install -m 0644 "\$g/node.conf.sysctl" "\$r/etc/sysctl.d/90-berth-node.conf"
install -m 0644 "\$g/registry.yml" "\$r/etc/docker/registry/config.yml"
install -m 0755 "\$g/berth-vm-runner" "\$r/usr/local/sbin/berth-vm-runner"
install -m 0644 "\$g/berth-vm-runner.service" "\$r/etc/systemd/system/berth-vm-runner.service"
# A fixed machine id: without one, the first boot runs 'preset-all', which
# would enable docker-registry again (the test stage starts it).
chroot "\$r" systemd-machine-id-setup
chroot "\$r" systemctl enable berth-vm-runner.service
chroot "\$r" systemctl disable docker-registry.service
# Timers that only make work (or want a network) in a throwaway guest.
for t in apt-daily.timer apt-daily-upgrade.timer e2scrub_all.timer fstrim.timer; do
  chroot "\$r" systemctl mask "\$t"
done
# The initramfs must load the virtio disk and 9p drivers, and only those.
cat "\$g/initramfs-modules" >>"\$r/etc/initramfs-tools/modules"
sed -i 's/^MODULES=.*/MODULES=list/' "\$r/etc/initramfs-tools/initramfs.conf"
install -m 0644 "\$g/modprobe-blacklist.conf" "\$r/etc/modprobe.d/berth-guest.conf"
chroot "\$r" update-initramfs -u -k all
EOF

mmdebstrap --mode=root --variant=minbase --format=directory \
  --include="$(IFS=,; echo "${packages[*]}")" \
  --aptopt='Acquire::Check-Valid-Until "false"' \
  --customize-hook="bash $customize \"\$1\"" \
  bookworm "$root" "$sources" >"$build/mmdebstrap.log" 2>&1 || {
  tail -n 40 "$build/mmdebstrap.log" >&2
  die "mmdebstrap failed"
}
log "rootfs done after $((SECONDS - start)) s ($(du -sh "$root" | cut -f1))"

# The kernel and initramfs boot the guest with -kernel/-initrd.
kernel="$(find "$root/boot" -maxdepth 1 -name 'vmlinuz-*' | sort -V | tail -n1)"
initrd="$(find "$root/boot" -maxdepth 1 -name 'initrd.img-*' | sort -V | tail -n1)"
[[ -n "$kernel" && -n "$initrd" ]] || die "no kernel or initramfs in $root/boot"
cp "$kernel" "$build/vmlinuz"
cp "$initrd" "$build/initrd.img"

# Inode tables and journal written now, not by the guest's ext4lazyinit
# thread at every (slow, emulated) boot.
mkfs.ext4 -q -F -L berth-root -d "$root" -E lazy_itable_init=0,lazy_journal_init=0 \
  "$build/rootfs.ext4" "$disk_size" >&2

# The image appears all at once: its dir is renamed into place complete.
mkdir "$build/image"
mv "$build/rootfs.ext4" "$build/vmlinuz" "$build/initrd.img" "$build/image/"
rm -rf "$image"
mv "$build/image" "$image"
log "image ready after $((SECONDS - start)) s: $image ($(basename "$kernel"))"
prune
echo "$image"
