# The CNI network the scripts give berthd (and containerd, for the bench):
# a bridge with NAT and hairpin, host-local addresses, portmap for host ports.

# write_bridge_network FILE NAME BRIDGE SUBNET [IPAM_DATA_DIR]: writes the
# conflist. IPAM_DATA_DIR keeps host-local's address records out of the
# host-wide /var/lib/cni (a run that cleans up after itself removes it).
write_bridge_network() {
  local file="$1" name="$2" bridge="$3" subnet="$4" data_dir="${5:-}" data_line=""
  if [[ -n "$data_dir" ]]; then
    data_line=",
        \"dataDir\": \"$data_dir\""
  fi
  cat >"$file" <<CNI
{
  "cniVersion": "1.0.0",
  "name": "$name",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$bridge",
      "isGateway": true,
      "ipMasq": true,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{ "subnet": "$subnet" }]],
        "routes": [{ "dst": "0.0.0.0/0" }]$data_line
      }
    },
    { "type": "portmap", "capabilities": { "portMappings": true } }
  ]
}
CNI
}
