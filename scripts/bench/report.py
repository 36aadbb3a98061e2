#!/usr/bin/env python3
"""Prints the bench's markdown table from its JSON-lines records.

    report.py RESULTS [--note TEXT]...

Every record is {"runtime", "metric", "unit", "samples"}; samples of the same
runtime and metric (from alternating repetitions) are pooled. Each row shows
containerd, berth and berth/containerd for one statistic of one metric. Then
the issue's targets, each met or missed (and by how much): ratios to
containerd, and berth's own latency with the most other pods running against
none.
"""

import argparse
import json
import re
import statistics
import sys
from collections import defaultdict

RUNTIMES = ("containerd", "berth")

# Sections that several rules below fill.
STATS = "Stats at scale: kubelet's stats RPCs with N pods in each runtime (ms)"
STATS_ALONE = "Stats at scale, berth alone: its own pods, containerd stopped (ms)"
STALL = "A stalled shim or frozen container: the other pods polled (ms)"
EXEC = "Exec probes: ExecSync of `cat /etc/hostname`, 1 s timeout (ms)"
NODE = "A full node through kubelet, pods created at once (ms)"
IDLE = "A full node idle: the runtime's processes and kubelet"

# (metric regexp, statistics shown, section). The first match decides.
RULES = [
    (r"^critest/", ("mean", "p50", "p95"), "critest -benchmark (ms per RPC)"),
    (r"^lifecycle/", ("mean",), "Lifecycle, one CRI client, no other pods (ms per RPC)"),
    (r"^crictl/", ("mean",), "crictl lifecycle loop (ms per crictl process)"),
    (r"^concurrency/wall", ("mean",), "Concurrency"),
    (r"^concurrency/pod start", ("p50", "p95", "p99"), "Concurrency"),
    (r"^concurrency/errors", ("sum",), "Concurrency"),
    (r"^memory/helpers", (), "Memory (MiB)"),
    (r"^memory/", ("mean",), "Memory (MiB)"),
    (r"^image/", ("mean", "p95"), "Images (ms)"),
    (r"^bigpull/", ("mean",), "Cold pull of one large layer (ms)"),
    (r"^scale/", ("mean",), "Scaling: lifecycle with other pods running (ms)"),
    (r"^stats/.*/daemon cpu", ("mean",), STATS),
    (r"^stats/", ("p50", "p99"), STATS),
    (r"^stats-alone/.* client decode", ("mean",), STATS_ALONE),
    (r"^stats-alone/.* answer", ("mean",), STATS_ALONE),
    (r"^stats-alone/", ("p50", "p99"), STATS_ALONE),
    (r"^stall/.*/timeouts$", ("sum",), STALL),
    (r"^stall/.*/own ", ("mean",), STALL),
    (r"^stall/", ("p50", "p99"), STALL),
    (r"^exec/failed", ("sum",), EXEC),
    (r"^exec/", ("p50", "p99"), EXEC),
    (r"^kubelet/pod start SLI per pod", ("p50", "p99"), NODE),
    (r"^kubelet/create to running", ("p50", "p99"), NODE),
    (r"^kubelet/", ("mean",), NODE),
    (r"^idle/.*processes", ("mean",), IDLE),
    (r"^idle/", ("mean",), IDLE),
    (r"^alone/", ("mean",),
     "Scaling, berth alone: lifecycle with its own other pods, containerd stopped (ms)"),
    (r"", ("mean",), "Other"),
]

# Order of steps inside a section, where it is not the order of appearance.
STEP_ORDER = ["RunPodSandbox", "PodSandboxStatus", "CreateContainer", "StartContainer",
              "CreateContainer+StartContainer", "ContainerStatus", "StopContainer",
              "RemoveContainer", "StopPodSandbox", "RemovePodSandbox", "PullImage", "ImageStatus", "RemoveImage", "ListImages",
              "runp", "create", "start", "stop", "rm", "stopp", "rmp", "total"]

# The targets: (label, metric, statistic, maximum berth/containerd).
TARGETS = [
    ("RunPodSandbox", "lifecycle/RunPodSandbox", "mean", 0.5),
    ("StopPodSandbox", "lifecycle/StopPodSandbox", "mean", 0.5),
    ("CreateContainer + StartContainer", "lifecycle/CreateContainer+StartContainer", "mean", 0.5),
    ("crictl lifecycle loop", "crictl/total", "mean", 0.5),
    ("pod start p99 (Run+Create+Start, 8 clients)", "concurrency/pod start", "p99", 0.5),
    ("cold pull", "image/PullImage cold", "mean", 0.5),
    ("large layer through the per-connection-limited proxy", "bigpull/PullImage through the proxy",
     "mean", 0.5),
    ("per-pod helper PSS (50 pods)", "memory/helper PSS per pod 50 pods", "mean", 0.25),
    ("daemon RSS with 50 pods", "memory/daemon RSS 50 pods", "mean", 0.5),
    ("kubelet pod-start SLI p99, 110 pods (per pod)", "kubelet/pod start SLI per pod 110 pods", "p99",
     0.5),
    ("idle CPU of the runtime's processes, 110 pods", "idle/runtime CPU s 110 pods", "mean", 0.25),
    ("memory (PSS) of the runtime's processes, 110 pods idle", "idle/runtime PSS 110 pods", "mean", 0.5),
]
# berth with the most other pods running against none: each lifecycle step
# within this factor.
SCALE_LIMIT = 1.25
# Stats RPCs at the most pods measured (the target is for 250): berth's p99 at most this (ms).
STATS_RPCS = ["ListPodSandboxStats", "ListContainerStats", "ListPodSandboxMetrics"]
STATS_P99_LIMIT = 10.0
# A stalled shim or frozen container: the other pods' p99 against the same
# poll without it, at most this factor; the stalled container's own status
# answered within this (ms).
STALL_RPCS = ["ContainerStatus", "ListContainers", "ListContainerStats"]
STALL_LIMIT = 1.25
OWN_STATUS_LIMIT = 2000.0
STALL_KINDS = {"shim": "one shim SIGSTOPped", "freeze": "one container frozen in its cgroup"}
STALL_NONE = {"shim": "no shim stopped", "freeze": "no container frozen"}


def stat(samples, name):
    if not samples:
        return None
    s = sorted(samples)
    if name == "mean":
        return statistics.fmean(s)
    if name == "sum":
        return sum(s)
    if name in ("p50", "p95", "p99"):
        q = {"p50": 0.5, "p95": 0.95, "p99": 0.99}[name]
        # Nearest rank.
        k = max(0, min(len(s) - 1, int(round(q * len(s) + 0.5)) - 1))
        return s[k]
    raise ValueError(name)


def fmt(v, unit):
    if v is None:
        return "–"
    if unit == "count":
        return f"{v:.0f}"
    if abs(v) >= 100:
        return f"{v:.0f}"
    if abs(v) >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"


def ratio(b, c):
    if b is None or c is None:
        return None
    if c == 0:
        return None
    return b / c


def rule_for(metric):
    for pattern, stats, section in RULES:
        if re.search(pattern, metric):
            return stats, section
    return ("mean",), "Other"


def sort_key(metric, first_seen):
    step = metric.rsplit("/", 1)[-1]
    # A stall: stall/<kind>/<phase>/<rpc>; by kind, RPC, then before/during.
    m = re.match(r"^stall/([^/]+)/([^/]+)/(.+)$", metric)
    if m:
        kinds = list(STALL_KINDS)
        kind = kinds.index(m.group(1)) if m.group(1) in kinds else len(kinds)
        rpcs = STALL_RPCS + ["timeouts", "own ContainerStatus"]
        rpc = rpcs.index(m.group(3)) if m.group(3) in rpcs else len(rpcs)
        return (kind, 2 * rpc + (m.group(2) == "stalled"), first_seen[metric])
    # Scaling metrics: scale/<pods>/<step>; order by pods, then step.
    m = re.match(r"^(?:scale|alone|stats|stats-alone)/(\d+)/", metric)
    level = int(m.group(1)) if m else 0
    order = STEP_ORDER.index(step) if step in STEP_ORDER else len(STEP_ORDER)
    return (level, order, first_seen[metric])


def scaling_targets(samples, base, loaded, title):
    """The scaling target lines: berth's mean per step at `loaded` over
    its mean at `base` (metric prefixes), each at most SCALE_LIMIT."""
    out = ["", f"Scaling targets ({title}, each ≤ {SCALE_LIMIT:.2f}):", ""]
    for step in STEP_ORDER:
        b0 = stat(samples.get((f"{base}/{step}", "berth")), "mean")
        b1 = stat(samples.get((f"{loaded}/{step}", "berth")), "mean")
        rr = ratio(b1, b0)
        if rr is None:
            continue
        if rr <= SCALE_LIMIT:
            out.append(f"- {step}: {rr:.2f} ≤ {SCALE_LIMIT:.2f}: met")
        else:
            out.append(f"- {step}: {rr:.2f} > {SCALE_LIMIT:.2f}: missed, "
                       f"{rr / SCALE_LIMIT:.2f}× the target")
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("results")
    ap.add_argument("--note", action="append", default=[])
    args = ap.parse_args()

    samples = defaultdict(list)
    reported = {}
    units = {}
    first_seen = {}
    with open(args.results, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            r = json.loads(line)
            samples[(r["metric"], r["runtime"])].extend(r["samples"])
            units[r["metric"]] = r["unit"]
            if "reported" in r:
                reported[(r["metric"], r["runtime"])] = r["reported"]
            first_seen.setdefault(r["metric"], len(first_seen))

    sections = defaultdict(list)
    section_order = []
    for metric in first_seen:
        stats, section = rule_for(metric)
        if section not in section_order:
            section_order.append(section)
        sections[section].append((metric, stats))
    section_order.sort(key=lambda s: [r[2] for r in RULES].index(s))

    out = []
    for note in args.note:
        out.append(note)
    if args.note:
        out.append("")
    out.append("| Metric | containerd | berth | berth/containerd |")
    out.append("|---|---:|---:|---:|")
    for section in section_order:
        out.append(f"| **{section}** | | | |")
        rows = sorted(sections[section], key=lambda ms: sort_key(ms[0], first_seen))
        for metric, stats in rows:
            name = metric.split("/", 1)[1] if "/" in metric else metric
            name = name.replace("/", " ")
            if metric.startswith(("scale/", "alone/")):
                name = f"{name.split(' ', 1)[1]}, {name.split(' ', 1)[0]} other pods"
            if metric.startswith(("stats/", "stats-alone/")):
                name = f"{name.split(' ', 1)[1]}, {name.split(' ', 1)[0]} pods"
            if metric.startswith("stall/"):
                kind, phase, rpc = metric.split("/", 3)[1:]
                name = f"{rpc}, {(STALL_KINDS if phase == 'stalled' else STALL_NONE).get(kind, kind)}"
                said = [reported.get((metric, rt)) for rt in RUNTIMES]
                if any(said):
                    name += " (reported: " + " / ".join(x or "–" for x in said) + ")"
            for st in stats:
                c = stat(samples.get((metric, "containerd")), st)
                b = stat(samples.get((metric, "berth")), st)
                rr = ratio(b, c)
                label = name if len(stats) == 1 and st in ("mean", "sum") else f"{name} ({st})"
                out.append(f"| {label} | {fmt(c, units[metric])} | {fmt(b, units[metric])} | "
                           f"{'–' if rr is None else f'{rr:.2f}'} |")

    out.append("")
    out.append("Targets (berth/containerd):")
    out.append("")
    # A target of a part that did not run (scripts/bench/density.sh and
    # scripts/bench.sh each measure their own) is left out.
    parts = {m.split("/", 1)[0] for m, _ in samples}
    for label, metric, st, limit in TARGETS:
        if metric.split("/", 1)[0] not in parts:
            continue
        c = stat(samples.get((metric, "containerd")), st)
        b = stat(samples.get((metric, "berth")), st)
        rr = ratio(b, c)
        if rr is None:
            out.append(f"- {label}: not measured")
        elif rr <= limit:
            out.append(f"- {label}: {rr:.2f} ≤ {limit:.2f}: met")
        else:
            out.append(f"- {label}: {rr:.2f} > {limit:.2f}: missed, {rr / limit:.2f}× the target")
    errors = stat(samples.get(("concurrency/errors", "berth")), "sum")
    if errors is not None:
        verdict = "met" if errors == 0 else "missed"
        out.append(f"- errors in berth's concurrency runs: {errors:.0f}: {verdict}")
    levels = sorted({int(m.split("/")[1]) for m, _ in samples if re.match(r"^scale/\d+/", m)})
    alone = sorted({int(m.split("/")[1]) for m, _ in samples if re.match(r"^alone/\d+/", m)})
    if len(levels) >= 2:
        lo, hi = levels[0], levels[-1]
        out.extend(scaling_targets(samples, f"scale/{lo}", f"scale/{hi}",
                                   f"berth with {hi} other pods, containerd's {hi} too, "
                                   f"/ berth with {lo}"))
        if alone:
            out.extend(scaling_targets(samples, f"scale/{lo}", f"alone/{alone[-1]}",
                                       f"berth alone with {alone[-1]} other pods "
                                       f"/ berth with {lo}"))
    out.extend(stats_targets(samples))
    out.extend(stall_targets(samples))
    print("\n".join(out))
    return 0


def stats_targets(samples):
    """berth's p99 of each stats RPC at the most pods measured: with both
    runtimes' pods on the host, and (where measured) berth alone."""
    out = []
    for prefix, title in (("stats", "both runtimes' pods on the host"),
                          ("stats-alone", "berth alone, containerd stopped")):
        out.extend(stats_target_lines(samples, prefix, title))
    return out


def stats_target_lines(samples, prefix, title):
    levels = sorted({int(m.split("/")[1]) for m, _ in samples
                     if re.match(rf"^{prefix}/\d+/", m)})
    if not levels:
        return []
    top = levels[-1]
    out = ["", f"Stats targets ({title}; berth's p99 with {top} pods, each ≤ "
               f"{STATS_P99_LIMIT:.0f} ms; the issue's target is at 250):", ""]
    for rpc in STATS_RPCS:
        b = stat(samples.get((f"{prefix}/{top}/{rpc}", "berth")), "p99")
        c = stat(samples.get((f"{prefix}/{top}/{rpc}", "containerd")), "p99")
        if b is None:
            out.append(f"- {rpc}: not measured")
            continue
        vs = "" if c is None else f" (containerd {c:.2f} ms)"
        if b <= STATS_P99_LIMIT:
            out.append(f"- {rpc}: {b:.2f} ms ≤ {STATS_P99_LIMIT:.0f} ms{vs}: met")
        else:
            out.append(f"- {rpc}: {b:.2f} ms > {STATS_P99_LIMIT:.0f} ms{vs}: missed, "
                       f"{b / STATS_P99_LIMIT:.2f}× the target")
    return out


def stall_targets(samples):
    """berth's other-pod p99 with a stall over without, and its own status."""
    out = []
    for kind, title in STALL_KINDS.items():
        if not any(m.startswith(f"stall/{kind}/") for m, _ in samples):
            continue
        out.extend(["", f"Stall targets ({title}; berth's p99 of every other pod's RPC "
                        f"over the same polls without it, each ≤ {STALL_LIMIT:.2f}; "
                        f"its own status ≤ {OWN_STATUS_LIMIT / 1000:.0f} s):", ""])
        for rpc in STALL_RPCS:
            ratios = {}
            for rt in RUNTIMES:
                b0 = stat(samples.get((f"stall/{kind}/none/{rpc}", rt)), "p99")
                b1 = stat(samples.get((f"stall/{kind}/stalled/{rpc}", rt)), "p99")
                ratios[rt] = ratio(b1, b0)
            rr = ratios["berth"]
            vs = "" if ratios["containerd"] is None else f" (containerd {ratios['containerd']:.2f})"
            if rr is None:
                out.append(f"- {rpc}: not measured")
            elif rr <= STALL_LIMIT:
                out.append(f"- {rpc}: {rr:.2f} ≤ {STALL_LIMIT:.2f}{vs}: met")
            else:
                out.append(f"- {rpc}: {rr:.2f} > {STALL_LIMIT:.2f}{vs}: missed, "
                           f"{rr / STALL_LIMIT:.2f}× the target")
        own = {rt: stat(samples.get((f"stall/{kind}/stalled/own ContainerStatus", rt)), "mean")
               for rt in RUNTIMES}
        b = own["berth"]
        vs = "" if own["containerd"] is None else f" (containerd {own['containerd']:.0f} ms)"
        if b is None:
            out.append("- the stalled container's own ContainerStatus: not measured")
        elif b <= OWN_STATUS_LIMIT:
            out.append(f"- the stalled container's own ContainerStatus: {b:.0f} ms ≤ "
                       f"{OWN_STATUS_LIMIT:.0f} ms{vs}: met")
        else:
            out.append(f"- the stalled container's own ContainerStatus: {b:.0f} ms > "
                       f"{OWN_STATUS_LIMIT:.0f} ms{vs}: missed, {b / OWN_STATUS_LIMIT:.2f}× the target")
        timeouts = stat(samples.get((f"stall/{kind}/stalled/timeouts", "berth")), "sum")
        if timeouts:
            out.append(f"- berth's polled RPCs that timed out (10 s): {timeouts:.0f}: missed")
    return out


if __name__ == "__main__":
    sys.exit(main())
