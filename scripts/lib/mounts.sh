# Mount helpers for the test scripts. Sourced.

# state_tmpfs DIR: DIR as a tmpfs of its own (made if missing), as /run is
# on a node; berth's shims then create containers in a trimmed mount table.
state_tmpfs() {
  mkdir -p "$1"
  mountpoint -q "$1" || mount -t tmpfs -o mode=0711 tmpfs "$1"
}

# unmount_tree DIR: everything mounted at or under DIR (what a failed
# removal left, then DIR itself), deepest first; lazily when busy, named on
# stderr when it cannot be unmounted at all, never failing (cleanups call it).
unmount_tree() {
  local target
  while IFS= read -r target; do
    umount "$target" 2>/dev/null || umount -l "$target" 2>/dev/null ||
      echo "cannot unmount $target" >&2
  done < <(findmnt -rn -o TARGET | awk -v d="$1" '$0 == d || index($0, d "/") == 1' | sort -r)
  return 0
}

# finish_work_dir DIR KEEP: keeps DIR when KEEP is 1 (saying so), else
# removes it; never through a mount left under it (a hostPath could be /),
# which is named and fails (status 1).
finish_work_dir() {
  local dir="$1" keep="$2"
  if [[ "$keep" == 1 ]]; then
    log "work dir kept: $dir"
  elif findmnt -rn -o TARGET | grep -q "^$dir/"; then
    log "mounts remain under $dir; not removing it"
    return 1
  else
    rm -rf --one-file-system "$dir"
  fi
}
