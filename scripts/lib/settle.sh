# shellcheck shell=bash
# settle: flushes the disk and waits until the machine is quiet (at least
# 90% idle over two one-second samples in a row; BENCH_SETTLE_SECONDS,
# 120 s by default, at most), so that what a burst of pod starts or
# removals left to the kernel and the disk (writeback, snapshot deletion,
# network namespace teardown) does not load the measurement that follows
# it. Logs through the caller's `log`.
settle() {
  sync
  local quiet=0 i idle=100 limit="${BENCH_SETTLE_SECONDS:-120}"
  for ((i = 0; i < limit && quiet < 2; i++)); do
    idle="$( (
      head -n 1 /proc/stat
      sleep 1
      head -n 1 /proc/stat
    ) | awk '{ t = 0; for (f = 2; f <= 9; f++) t += $f; idle[NR] = $5 + $6; total[NR] = t }
          END { printf "%d", 100 * (idle[2] - idle[1]) / (total[2] - total[1]) }')"
    if ((idle >= 90)); then quiet=$((quiet + 1)); else quiet=0; fi
  done
  ((quiet >= 2)) || log "warning: the machine did not settle (last second ${idle}% idle)"
}
