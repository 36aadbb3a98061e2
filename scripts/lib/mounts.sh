# Mount helpers for the test scripts. Sourced.

# state_tmpfs DIR: DIR as a tmpfs of its own (made if missing), as /run is
# on a node; berth's shims then create containers in a trimmed mount table.
state_tmpfs() {
  mkdir -p "$1"
  mountpoint -q "$1" || mount -t tmpfs -o mode=0711 tmpfs "$1"
}

# unmount_tree DIR: whatever a failed removal left mounted below DIR,
# deepest first, then DIR itself; lazily, and never failing.
unmount_tree() {
  findmnt -rn -o TARGET | awk -v d="$1" 'index($0, d "/") == 1' | sort -r |
    while IFS= read -r target; do umount -l "$target" 2>/dev/null || true; done
  umount -l "$1" 2>/dev/null || true
}
