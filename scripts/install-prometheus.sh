#!/usr/bin/env bash
# Installs the Prometheus server that compose's monitoring profile runs, reproducibly.
#
#   PROMETHEUS_BIN=$(scripts/install-prometheus.sh | tail -1)
#
# Builds Prometheus v3.16.0 (Apache-2.0; its Go module is
# github.com/prometheus/prometheus v0.316.0) from the Go module proxy with
# CGO_ENABLED=0, and caches the binary outside the clone at
#   ${TANDEM_CACHE:-$HOME/.cache/tandem}/prometheus-3.16.0/prometheus
# If that binary already exists and reports 3.16.0, nothing is built. The path is
# always the last line on stdout; progress goes to stderr. Needs only Go (and the
# module proxy); the first build takes several minutes on 2 cores.
#
# Prometheus's go.mod has no replace directives, so `go install pkg@version`
# builds it as its own go.mod says, outside this clone's module. Two differences
# from an official release:
#   - service discovery is only file, HTTP, Consul and DNS (build tags
#     remove_all_sd,enable_consul_sd,enable_dns_sd): the others pull in the
#     cloud SDKs and take most of the build time, and tandem is found in Consul;
#   - no web UI: its assets are built with npm and are not in the Go module (the
#     builtinassets tag would not compile), so the UI's pages answer 500, while
#     the HTTP API (/api/v1/...), /metrics and /-/ready work as in a release.
set -euo pipefail

PROMETHEUS_VERSION=3.16.0
PROMETHEUS_MODULE=github.com/prometheus/prometheus
PROMETHEUS_MODULE_VERSION=v0.316.0
TAGS=netgo,remove_all_sd,enable_consul_sd,enable_dns_sd

cache_root=${TANDEM_CACHE:-$HOME/.cache/tandem}
dest_dir=$cache_root/prometheus-$PROMETHEUS_VERSION
dest=$dest_dir/prometheus

log() { printf 'install-prometheus: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

# installed BIN: BIN exists and says it is the wanted version.
installed() {
  [ -x "$1" ] || return 1
  local out
  out=$("$1" --version 2>&1) || return 1
  [[ "${out%%$'\n'*}" == "prometheus, version $PROMETHEUS_VERSION "* ]]
}

if installed "$dest"; then
  echo "$dest"
  exit 0
fi

command -v go >/dev/null 2>&1 || die "go is not on PATH"
mkdir -p "$dest_dir"

# One builder at a time; the others wait, then find the binary already there.
if command -v flock >/dev/null 2>&1; then
  exec 9>"$dest_dir/.lock"
  if ! flock -n 9; then
    log "another install is running; waiting for $dest_dir/.lock"
    flock 9
  fi
  if installed "$dest"; then
    echo "$dest"
    exit 0
  fi
  rm -rf "$dest_dir"/.build.*
else
  log "flock not found; building without a lock (the final mv is still atomic)"
fi

# Module mode outside any module, no workspace, host platform (the binary is run
# below to check it), no cgo; -mod=... from the caller's GOFLAGS is dropped.
export GO111MODULE=on GOWORK=off CGO_ENABLED=0
export GOTOOLCHAIN=${GOTOOLCHAIN:-local}
unset GOOS GOARCH
goflags=""
for f in ${GOFLAGS:-}; do
  case $f in
    -mod=*) ;;
    *) goflags="$goflags $f" ;;
  esac
done
export GOFLAGS="${goflags# }"

# The new binary lives next to the destination: same filesystem, so the final mv
# is atomic. The build runs in the empty directory so no go.mod around applies.
work=$(mktemp -d "$dest_dir/.build.XXXXXX")
trap 'rm -rf "$work"' EXIT
cd "$work"

start=$(date +%s)
log "building Prometheus $PROMETHEUS_VERSION ($PROMETHEUS_MODULE@$PROMETHEUS_MODULE_VERSION) into $dest (first build takes minutes)"

# What Prometheus's release build (.promu.yml) stamps into common/version.
v=github.com/prometheus/common/version
ldflags="-s -w -X $v.Version=$PROMETHEUS_VERSION -X $v.Branch=HEAD -X $v.BuildUser=tandem-install-prometheus"
ldflags="$ldflags -X $v.Revision=module-$PROMETHEUS_MODULE_VERSION -X $v.BuildDate=$(date -u +%Y%m%d-%H:%M:%S)"

log "go install -tags $TAGS (CGO_ENABLED=0 -trimpath)"
GOBIN="$work" go install -trimpath -tags "$TAGS" -ldflags "$ldflags" \
  "$PROMETHEUS_MODULE/cmd/prometheus@$PROMETHEUS_MODULE_VERSION"

installed "$work/prometheus" || die "the built binary does not report $PROMETHEUS_VERSION: $("$work/prometheus" --version 2>&1 || true)"
mv -f "$work/prometheus" "$dest"
log "built $dest in $(( $(date +%s) - start ))s ($(du -h "$dest" | cut -f1))"
echo "$dest"
