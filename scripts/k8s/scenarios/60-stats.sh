# kubelet's /stats/summary: with PodAndContainerStatsFromCRI the numbers come
# from berth's CRI stats, and every running pod must have its cpu and memory
# filled in. Asked on kubelet's port with the admin token (kubelet checks it
# with the API server): the API server's node proxy refuses loopback nodes
# ("address not allowed"). Sourced by scripts/k8s/e2e.sh; runs last, so the
# other scenarios' pods count too.

SCENARIOS+=("stats-summary scn_stats_summary")

# stats_gaps: the running pods of the namespace (and their running
# containers) whose cpu or memory is missing from the summary, one per line.
stats_gaps() {
  local summary pods
  summary="$(stats_summary)" || {
    echo "no summary"
    return
  }
  pods="$(kubectl get pods -o json | jq -c '[.items[] | select(.status.phase == "Running")
    | {name: .metadata.name, containers: [(.status.containerStatuses // [])[] | select(.state.running) | .name]}]')"
  jq -r --argjson pods "$pods" --arg ns "$NS" '
    def filled: (.cpu.usageCoreNanoSeconds // 0) > 0 and (.memory.workingSetBytes // 0) > 0;
    [.pods[] | select(.podRef.namespace == $ns)] as $stats
    | $pods[] | . as $p
    | ([$stats[] | select(.podRef.name == $p.name)][0]) as $s
    | if $s == null then "\($p.name): not in the summary"
      elif ($s | filled | not) then "\($p.name): pod cpu/memory missing"
      else ($p.containers[] | . as $c
        | ([$s.containers[]? | select(.name == $c)][0]) as $cs
        | if $cs == null then "\($p.name)/\($c): container not in the summary"
          elif ($cs | filled | not) then "\($p.name)/\($c): container cpu/memory missing"
          else empty end)
      end' <<<"$summary"
}

stats_summary() {
  curl -fsSk --max-time 20 -H "Authorization: Bearer $ADMIN_TOKEN" \
    "https://127.0.0.1:$KUBELET_PORT/stats/summary"
}

scn_stats_summary() {
  ensure_pod web web_pod
  local gaps
  # kubelet samples CRI stats periodically: a new pod may lack them briefly.
  wait_until 60 eval '[[ -z "$(stats_gaps)" ]]' || {
    gaps="$(stats_gaps)"
    fail "$(wc -l <<<"$gaps") gap(s): $(head -n 5 <<<"$gaps" | tr '\n' ';')"
  }
  stats_summary |
    jq -c --arg ns "$NS" '.pods[] | select(.podRef.namespace == $ns)
      | {pod: .podRef.name, cpu: .cpu.usageCoreNanoSeconds, mem: .memory.workingSetBytes}'
}
