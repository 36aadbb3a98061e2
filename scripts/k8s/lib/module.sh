#!/usr/bin/env bash
# Building Kubernetes from the Go module proxy: a scratch module requiring
# k8s.io/kubernetes, with every staging module its go.mod replaces by
# ./staging/... replaced by the published v0.<minor>.<patch> instead (the
# proxy cannot serve ./staging). Sourced by scripts/k8s/install*.sh; the
# caller sets GOTOOLCHAIN=local GOFLAGS="-buildvcs=false -mod=mod" and
# defines log and die.

# Upstream's release tags (hack/lib/golang.sh, non-debug builds).
K8S_BUILD_TAGS="selinux,notest,grpcnotrace"

# k8s_module DIR VERSION: makes the scratch module in DIR and sets
# K8S_GOMOD (the path of kubernetes' own go.mod in the module cache) and
# K8S_COMMIT (the upstream commit when the proxy names it, else empty).
k8s_module() {
  local mod="$1" version="$2" info staging_version r
  mkdir -p "$mod"
  info="$(cd "$mod" && go mod download -json "k8s.io/kubernetes@$version")"
  K8S_GOMOD="$(jq -r .GoMod <<<"$info")"
  [[ -f "$K8S_GOMOD" ]] || die "no go.mod for k8s.io/kubernetes@$version"
  K8S_COMMIT="$(jq -r '.Origin.Hash // empty' "$(jq -r .Info <<<"$info")" 2>/dev/null || true)"
  staging_version="v0.${version#v1.}"
  (
    cd "$mod"
    go mod init berth.local/k8s-build >/dev/null 2>&1
    go mod edit -go="$(go mod edit -json "$K8S_GOMOD" | jq -r .Go)"
    go mod edit -require="k8s.io/kubernetes@$version"
    while read -r r; do
      go mod edit -replace="$r=$r@$staging_version"
    done < <(go mod edit -json "$K8S_GOMOD" |
      jq -r '.Replace[] | select(.New.Path | startswith("./staging/")) | .Old.Path')
  )
  log "kubernetes $version: $(grep -c '=> k8s.io/' "$mod/go.mod") staging modules replaced by $staging_version"
}

# k8s_ldflags VERSION [COMMIT]: upstream's version ldflags
# (hack/lib/version.sh) for both version packages, stripped.
k8s_ldflags() {
  local version="$1" commit="${2:-}" ldflags="-s -w" r
  local -a kv=(
    "gitVersion=$version"
    "gitMajor=1"
    "gitMinor=$(cut -d. -f2 <<<"$version")"
    "gitTreeState=clean"
    "buildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  )
  [[ -n "$commit" ]] && kv+=("gitCommit=$commit")
  for r in "${kv[@]}"; do
    ldflags+=" -X 'k8s.io/client-go/pkg/version.$r' -X 'k8s.io/component-base/version.$r'"
  done
  printf '%s\n' "$ldflags"
}

# k8s_required VERSION_GOMOD PATH: the version kubernetes' go.mod requires
# of module PATH.
k8s_required() {
  go mod edit -json "$1" | jq -r --arg p "$2" '.Require[] | select(.Path == $p) | .Version'
}

# k8s_build MOD CMD CGO LDFLAGS OUT: builds k8s.io/kubernetes/cmd/CMD in the
# scratch module MOD with upstream's tags, CGO_ENABLED=CGO.
k8s_build() {
  (cd "$1" && CGO_ENABLED="$3" go build -trimpath -tags "$K8S_BUILD_TAGS" \
    -ldflags "$4" -o "$5" "k8s.io/kubernetes/cmd/$2")
}
