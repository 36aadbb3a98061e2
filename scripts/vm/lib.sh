# shellcheck shell=bash
# The VM harness: boots the guest image of scripts/vm/image.sh under QEMU and
# runs commands in it as root, through the job runner in the image. Source
# it from a bash script (set -euo pipefail); one guest per shell.
#
#   vm_start [SHARE_DIR]  build the image if its inputs changed, then boot it
#                         (returns at once). SHARE_DIR is mounted read-only
#                         at /mnt/share in the guest (default: an empty dir).
#                         Installs an EXIT trap that calls vm_stop (an EXIT
#                         trap already set is kept and runs after it).
#   vm_wait_ready         wait until the runner answers (BERTH_VM_BOOT_TIMEOUT,
#                         default 300 s); on failure print the serial log's
#                         tail and return 1.
#   vm_run CMD [ARG...]   run CMD as root in the guest, in a scope of its own
#                         (berth-job-ID.scope), cwd /root, stdin /dev/null.
#                         Its stdout and stderr stream to ours; returns its
#                         exit status; 124 when BERTH_VM_JOB_TIMEOUT (default
#                         1800 s) or the stage's deadline (BERTH_VM_DEADLINE,
#                         epoch seconds) runs out (the job is then killed),
#                         255 when the guest died or stopped answering.
#                         After a timeout the guest is examined (QEMU's run
#                         state, a round trip, its processes and kernel log);
#                         a guest that no longer runs jobs fails every later
#                         vm_run at once, so a hang costs one timeout.
#   vm_sh 'SCRIPT'        vm_run bash -c 'SCRIPT' (pipes, redirections, &&).
#   vm_out_dir            print the host path of the guest's /mnt/control/out
#                         ($BERTH_VM_OUT in jobs): a writable dir for results
#                         and logs that the host reads back.
#   vm_serial_tail [N]    print the last N (default 40) lines of the serial log.
#   vm_stop               power the guest off (a `systemctl poweroff` job,
#                         then SIGTERM/SIGKILL of the QEMU pid we started after
#                         BERTH_VM_STOP_GRACE, default 30 s); idempotent.
#
# Example:
#   source scripts/vm/lib.sh
#   vm_start "$share"        # e.g. a dir staged by scripts/vm/share.sh
#   vm_wait_ready
#   vm_run systemctl is-system-running --wait || true
#   vm_sh 'cp /mnt/share/bin/* /usr/local/bin/ && berthd --version'
#   vm_stop                  # or leave it to the EXIT trap
#
# Jobs see HOME=/root, BERTH_VM_SHARE=/mnt/share, BERTH_VM_OUT=/mnt/control/out.
#
# Environment: BERTH_VM_MEM (default 8G), BERTH_VM_CPUS (default 2),
# BERTH_VM_ACCEL (tcg or kvm; default kvm only where kvm_intel or kvm_amd is
# loaded: /dev/kvm here is PVM, which cannot run a stock kernel),
# BERTH_VM_WORKDIR (control dir, serial log; default a temp dir removed by
# vm_stop), BERTH_VM_KEEP=1 (keep that temp dir), BERTH_VM_BOOT_TIMEOUT,
# BERTH_VM_JOB_TIMEOUT, BERTH_VM_DEADLINE, BERTH_VM_STOP_GRACE,
# BERTH_VM_MIN_FREE_GB (default 6: the free space vm_start asks of the work
# dir's filesystem, where QEMU keeps the guest's disk writes), and those of
# image.sh (BERTH_VM_CACHE, ...).

_VM_LIB_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
_VM_PID=""
_VM_DIR=""
_VM_DIR_OWNED=0
_VM_JOB_SEQ=0
_VM_IMAGE_PID=""
_VM_PREV_EXIT_TRAP=""

_vm_log() { echo "vm: $*" >&2; }

# The accelerator: KVM only with a hardware hypervisor module behind /dev/kvm.
_vm_accel_args() {
  local accel="${BERTH_VM_ACCEL:-}"
  if [[ -z "$accel" ]]; then
    accel=tcg
    if [[ -w /dev/kvm ]] && [[ -d /sys/module/kvm_intel || -d /sys/module/kvm_amd ]]; then
      accel=kvm
    fi
  fi
  case "$accel" in
  kvm) echo "-accel kvm -cpu host" ;;
  tcg) echo "-accel tcg,thread=multi -cpu max" ;;
  *)
    _vm_log "BERTH_VM_ACCEL must be tcg or kvm, not $accel"
    return 1
    ;;
  esac
}

# vm_stop runs from the EXIT trap; a trap set before vm_start still runs
# after it, with the exit status the script had.
_vm_exit_trap() {
  local status=$?
  vm_stop || true
  if [[ -n "$_VM_PREV_EXIT_TRAP" ]]; then
    # It sees the script's status in $?; set -e would end this trap at the
    # `(exit N)` that sets it.
    set +e
    (exit "$status")
    eval "$_VM_PREV_EXIT_TRAP"
  fi
  exit "$status"
}

_vm_install_trap() {
  local prev
  prev="$(trap -p EXIT)"
  if [[ -n "$prev" && "$prev" != *_vm_exit_trap* ]]; then
    # `trap -p` prints: trap -- 'COMMAND' EXIT
    prev="${prev#trap -- }"
    prev="${prev% EXIT}"
    eval "_VM_PREV_EXIT_TRAP=$prev"
  fi
  trap _vm_exit_trap EXIT
  # Without a trap of their own, INT and TERM would end bash without the
  # EXIT trap in some versions: make them exit normally.
  [[ -n "$(trap -p INT)" ]] || trap 'exit 130' INT
  [[ -n "$(trap -p TERM)" ]] || trap 'exit 143' TERM
}

vm_start() {
  local share="${1:-}" image accel
  local -a accel_args
  if [[ -n "$_VM_PID" ]] && kill -0 "$_VM_PID" 2>/dev/null; then
    _vm_log "a guest already runs from this shell (qemu pid $_VM_PID)"
    return 1
  fi
  command -v qemu-system-x86_64 >/dev/null || {
    _vm_log "qemu-system-x86_64 not found (see scripts/install-deps.sh)"
    return 1
  }
  accel="$(_vm_accel_args)" || return 1
  read -r -a accel_args <<<"$accel"
  if [[ -n "$share" && ! -d "$share" ]]; then
    _vm_log "share dir $share does not exist"
    return 1
  fi

  if [[ -n "${BERTH_VM_WORKDIR:-}" ]]; then
    _VM_DIR="$BERTH_VM_WORKDIR"
    _VM_DIR_OWNED=0
    mkdir -p "$_VM_DIR"
  else
    _VM_DIR="$(mktemp -d /tmp/berth-vm.XXXXXX)"
    _VM_DIR_OWNED=1
  fi
  rm -rf "$_VM_DIR/control"
  mkdir -p "$_VM_DIR/control/jobs" "$_VM_DIR/control/running" \
    "$_VM_DIR/control/results" "$_VM_DIR/control/out"
  if [[ -z "$share" ]]; then
    share="$_VM_DIR/empty-share"
    mkdir -p "$share"
  fi
  share="$(cd "$share" && pwd)"
  : >"$_VM_DIR/serial.log"
  rm -f "$_VM_DIR/dead"
  # QEMU pauses a guest whose disk write hits ENOSPC (its default werror):
  # the guest would hang silently until every job timed out.
  local free_gb min_gb="${BERTH_VM_MIN_FREE_GB:-6}"
  free_gb="$(df -B1G --output=avail "$_VM_DIR" | tail -n 1 | tr -d ' ')"
  if ((free_gb < min_gb)); then
    _vm_log "only $free_gb GiB free under $_VM_DIR, where the guest's disk writes go: $min_gb GiB needed (BERTH_VM_MIN_FREE_GB)"
    return 1
  fi

  _vm_install_trap

  # A build takes minutes: in the background, so that INT and TERM are
  # handled at once (bash defers traps while a command substitution runs).
  bash "$_VM_LIB_DIR/image.sh" >"$_VM_DIR/image.path" &
  _VM_IMAGE_PID=$!
  if ! wait "$_VM_IMAGE_PID"; then
    _VM_IMAGE_PID=""
    _vm_log "the guest image could not be built"
    return 1
  fi
  _VM_IMAGE_PID=""
  image="$(cat "$_VM_DIR/image.path")"

  # snapshot=on: guest writes go to a temp overlay (in $TMPDIR, set to the
  # work dir below, whose free space vm_start checked), so every boot starts
  # from the pristine image. No NIC: the guest needs none and must reach
  # nothing. The QMP socket answers what state QEMU holds the guest in.
  # setpriv --pdeathsig: QEMU dies with this shell even if it is SIGKILLed and
  # its EXIT trap never runs.
  local -a qemu=(
    qemu-system-x86_64 -name berth-guest -nodefaults -no-user-config
    -machine q35 "${accel_args[@]}"
    -m "${BERTH_VM_MEM:-8G}" -smp "${BERTH_VM_CPUS:-2}"
    -kernel "$image/vmlinuz" -initrd "$image/initrd.img"
    -append "root=/dev/vda rw console=ttyS0 panic=-1 systemd.unified_cgroup_hierarchy=1"
    -drive "file=$image/rootfs.ext4,format=raw,if=virtio,snapshot=on,cache=unsafe"
    -nic none -display none -monitor none
    -qmp "unix:$_VM_DIR/qmp.sock,server=on,wait=off"
    -serial "file:$_VM_DIR/serial.log"
    -device virtio-rng-pci
    -virtfs "local,path=$share,mount_tag=share,security_model=passthrough,readonly=on"
    -virtfs "local,path=$_VM_DIR/control,mount_tag=control,security_model=passthrough"
    -no-reboot
  )
  _vm_log "booting ($(echo "$accel" | cut -d' ' -f2), ${BERTH_VM_MEM:-8G}, ${BERTH_VM_CPUS:-2} cpus), work dir $_VM_DIR"
  TMPDIR="$_VM_DIR" setpriv --pdeathsig KILL -- "${qemu[@]}" </dev/null >"$_VM_DIR/qemu.log" 2>&1 &
  _VM_PID=$!
  echo "$_VM_PID" >"$_VM_DIR/qemu.pid"
  _VM_BOOT_START=$SECONDS
}

_vm_alive() { [[ -n "$_VM_PID" ]] && kill -0 "$_VM_PID" 2>/dev/null; }

vm_serial_tail() {
  [[ -n "$_VM_DIR" && -f "$_VM_DIR/serial.log" ]] || return 0
  echo "---- last ${1:-40} lines of the guest's serial console ($_VM_DIR/serial.log)" >&2
  tail -n "${1:-40}" "$_VM_DIR/serial.log" | tr -d '\r' >&2
  if [[ -s "$_VM_DIR/qemu.log" ]]; then
    echo "---- qemu's output" >&2
    tail -n 20 "$_VM_DIR/qemu.log" >&2
  fi
  echo "----" >&2
}

vm_wait_ready() {
  local timeout="${BERTH_VM_BOOT_TIMEOUT:-300}" start=$SECONDS
  [[ -n "$_VM_DIR" ]] || {
    _vm_log "vm_wait_ready: no guest started (vm_start)"
    return 1
  }
  while [[ ! -s "$_VM_DIR/control/ready" ]]; do
    if ! _vm_alive; then
      _vm_log "the guest stopped while booting"
      vm_serial_tail
      return 1
    fi
    if ((SECONDS - start >= timeout)); then
      _vm_log "the guest's job runner did not answer within $timeout s"
      vm_serial_tail
      return 1
    fi
    sleep 0.5
  done
  # A round trip proves the runner, not just its start.
  if ! BERTH_VM_JOB_TIMEOUT=60 vm_run true; then
    _vm_log "the guest's job runner does not run jobs"
    vm_serial_tail
    return 1
  fi
  _vm_log "guest ready after $((SECONDS - ${_VM_BOOT_START:-start})) s"
}

# _vm_submit CMD [ARG...]: drops a job for the runner, sets _VM_LAST_JOB.
# The id names the job's scope, so it is unique even across the subshells of
# $(vm_run ...), where $$ and a counter alone would repeat.
_vm_submit() {
  local ctl="$_VM_DIR/control"
  local id="${EPOCHREALTIME/[.,]/}-$BASHPID-$((++_VM_JOB_SEQ))"
  # Output files exist before the job does: the guest appends to them, and
  # tail follows them from the first byte.
  : >"$ctl/results/$id.out"
  : >"$ctl/results/$id.err"
  {
    echo 'cd /root 2>/dev/null || cd /'
    printf 'exec'
    printf ' %q' "$@"
    echo
  } >"$ctl/jobs/.$id.tmp"
  mv "$ctl/jobs/.$id.tmp" "$ctl/jobs/$id.job"
  _VM_LAST_JOB="$id"
}

vm_run() {
  (($#)) || {
    _vm_log "usage: vm_run CMD [ARG...]"
    return 2
  }
  _vm_alive || {
    _vm_log "vm_run: no guest running"
    return 255
  }
  if [[ -e "$_VM_DIR/dead" ]]; then
    _vm_log "skipped, the guest stopped answering ($(cat "$_VM_DIR/dead")): $*"
    return 255
  fi
  local timeout="${BERTH_VM_JOB_TIMEOUT:-1800}" ctl="$_VM_DIR/control" id
  if [[ -n "${BERTH_VM_DEADLINE:-}" ]]; then
    local left=$((BERTH_VM_DEADLINE - EPOCHSECONDS))
    if ((left <= 0)); then
      _vm_log "skipped, the stage's deadline has passed: $*"
      return 124
    fi
    ((left < timeout)) && timeout=$left
  fi
  _vm_submit "$@"
  id="$_VM_LAST_JOB"
  local out="$ctl/results/$id.out" err="$ctl/results/$id.err" rc_file="$ctl/results/$id.rc"

  # The job's output streams through tail until the status file appears;
  # the sentinel's death tells both tails to read the rest and exit.
  local sentinel t_out t_err status=""
  sleep "$((timeout + 60))" &
  sentinel=$!
  tail -n +1 -s 0.1 -f --pid="$sentinel" "$out" &
  t_out=$!
  tail -n +1 -s 0.1 -f --pid="$sentinel" "$err" >&2 &
  t_err=$!

  local start=$SECONDS
  while [[ ! -s "$rc_file" ]]; do
    if ! _vm_alive; then
      status=255
      break
    fi
    if ((SECONDS - start >= timeout)); then
      # The runner kills the job's scope; its status then follows.
      : >"$ctl/jobs/$id.cancel"
      local i
      for ((i = 0; i < 100; i++)); do
        [[ -s "$rc_file" ]] && break
        sleep 0.1
      done
      status=124
      break
    fi
    sleep 0.05
  done
  [[ -n "$status" ]] || status="$(cat "$rc_file")"
  kill "$sentinel" 2>/dev/null || true
  wait "$sentinel" "$t_out" "$t_err" 2>/dev/null || true
  rm -f "$out" "$err" "$rc_file"
  case "$status" in
  124)
    _vm_log "job timed out after $timeout s: $*"
    _vm_examine
    ;;
  255) if ! _vm_alive; then
    _vm_log "the guest died during: $*"
    vm_serial_tail
  fi ;;
  esac
  return "$status"
}

vm_sh() { vm_run bash -c "$1"; }

# QEMU's run state of the guest (running, paused, io-error, ...) from its QMP
# socket; empty when QEMU does not answer.
_vm_qemu_status() {
  python3 - "$_VM_DIR/qmp.sock" <<'PY' 2>/dev/null
import json, socket, sys
s = socket.socket(socket.AF_UNIX)
s.settimeout(5)
s.connect(sys.argv[1])
f = s.makefile("rw")
f.readline()  # the greeting
for cmd in ("qmp_capabilities", "query-status"):
    f.write(json.dumps({"execute": cmd}) + "\n")
    f.flush()
    while True:
        reply = json.loads(f.readline())
        if "return" in reply or "error" in reply:
            break
print(reply.get("return", {}).get("status", ""))
PY
}

# After a job timed out: why. A guest QEMU paused, or one whose runner no
# longer runs a trivial job, is marked dead (every later vm_run fails at
# once); a live one shows its processes and kernel log, to tell a hung job
# from a hung guest.
_vm_examine() {
  [[ -z "${_VM_EXAMINING:-}" ]] || return 0
  local _VM_EXAMINING=1 state why=""
  state="$(_vm_qemu_status)"
  _vm_log "QEMU holds the guest ${state:-in an unknown state (no answer on QMP)}"
  case "$state" in
  running) ;;
  io-error) why="QEMU paused it on a disk I/O error ($(df -h --output=avail "$_VM_DIR" | tail -n 1 | tr -d ' ') free under $_VM_DIR)" ;;
  *) why="QEMU holds it ${state:-unanswering}" ;;
  esac
  if [[ -z "$why" ]] && ! BERTH_VM_JOB_TIMEOUT=60 BERTH_VM_DEADLINE="" vm_run true; then
    why="its job runner did not run a trivial job in 60 s"
  fi
  if [[ -n "$why" ]]; then
    echo "$why" >"$_VM_DIR/dead"
    _vm_log "the guest stopped answering: $why; the stage's remaining guest jobs are skipped"
    vm_serial_tail
    return 0
  fi
  _vm_log "the guest answers; its processes and kernel log:"
  BERTH_VM_JOB_TIMEOUT=120 BERTH_VM_DEADLINE="" vm_sh 'ps -N --ppid 2 -p 2 -o pid,ppid,stat,etime,wchan:24,args --forest | cut -c1-200 | tail -n 80; dmesg | tail -n 20' >&2 || true
}

vm_out_dir() { echo "$_VM_DIR/control/out"; }

vm_stop() {
  local grace="${BERTH_VM_STOP_GRACE:-30}" i
  # An image build is left to finish: mmdebstrap, stopped half-way, would
  # leave its chroot's mounts behind. The next vm_start finds the image.
  if [[ -n "$_VM_IMAGE_PID" ]] && kill -0 "$_VM_IMAGE_PID" 2>/dev/null; then
    _vm_log "the image build (pid $_VM_IMAGE_PID) finishes in the background"
  fi
  _VM_IMAGE_PID=""
  if _vm_alive; then
    # A clean poweroff when the runner listens; the disk is a throwaway
    # snapshot, so otherwise (still booting) QEMU is simply killed.
    if [[ -s "$_VM_DIR/control/ready" ]]; then
      _vm_submit systemctl poweroff
    else
      grace=0
    fi
    for ((i = 0; i < grace * 10; i++)); do
      _vm_alive || break
      sleep 0.1
    done
    if _vm_alive; then
      if ((grace)); then
        _vm_log "guest still up $grace s after poweroff; killing qemu (pid $_VM_PID)"
      else
        _vm_log "guest not up yet; killing qemu (pid $_VM_PID)"
      fi
      kill -TERM "$_VM_PID" 2>/dev/null || true
      for ((i = 0; i < 50; i++)); do
        _vm_alive || break
        sleep 0.1
      done
      _vm_alive && kill -KILL "$_VM_PID" 2>/dev/null
    fi
    wait "$_VM_PID" 2>/dev/null || true
    _vm_log "guest stopped"
  fi
  _VM_PID=""
  if [[ "$_VM_DIR_OWNED" == 1 && -n "$_VM_DIR" ]]; then
    if [[ "${BERTH_VM_KEEP:-0}" == 1 ]]; then
      _vm_log "work dir kept: $_VM_DIR"
    else
      rm -rf "$_VM_DIR"
    fi
    _VM_DIR=""
    _VM_DIR_OWNED=0
  fi
  return 0
}
