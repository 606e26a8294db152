#!/usr/bin/env bash
# Builds the image that compose/compose.yaml and compose/multihost.yaml run,
# tandem:local, FROM scratch:
#
#   compose/build.sh               # then: docker-compose -f compose/compose.yaml up
#   compose/build.sh --monitoring  # also tandem-prometheus:local, for --profile monitoring
#
# 1. builds a static tandem (CGO_ENABLED=0) on this host with its Go toolchain
#    (no builder image: nothing is pulled from a registry);
# 2. takes the static Consul agent from scripts/install-consul.sh (built once and
#    cached outside the clone), or from TANDEM_CONSUL_BIN when that is set;
# 3. puts both in the build context compose/.build and runs docker build;
# 4. with --monitoring, builds the image of the monitoring profile's Prometheus
#    server (compose/Dockerfile.prometheus) around the static binary of
#    scripts/install-prometheus.sh (built once and cached outside the clone, the
#    first time in several minutes), or TANDEM_PROMETHEUS_BIN when that is set.
#
# Environment: TANDEM_IMAGE (default tandem:local) and TANDEM_PROMETHEUS_IMAGE
# (default tandem-prometheus:local) name the images; GOARCH may be set to build
# for another architecture (the Consul and Prometheus binaries must match it).
# Running it again rebuilds only what changed (go build's and docker's caches).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
image=${TANDEM_IMAGE:-tandem:local}
prom_image=${TANDEM_PROMETHEUS_IMAGE:-tandem-prometheus:local}
ctx=$here/.build

log() { printf 'compose/build.sh: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

monitoring=false
for arg in "$@"; do
  case $arg in
    --monitoring) monitoring=true ;;
    *) die "unknown argument '$arg' (the only one is --monitoring)" ;;
  esac
done

command -v go >/dev/null 2>&1 || die "go is not on PATH"
command -v docker >/dev/null 2>&1 || die "docker is not on PATH"

mkdir -p "$ctx/tmp"
chmod 1777 "$ctx/tmp"
# An empty directory is not always copied; a file keeps /tmp in the image.
: >"$ctx/tmp/.keep"
# Mount points of compose/multihost.yaml's volumes, owned by nobody in the image
# so that Docker gives a new volume that owner: Consul's data, and the secrets
# tandem-consul-init makes (one directory per volume).
for d in data secrets/ca secrets/server secrets/client secrets/token-frontend secrets/token-router \
  secrets/token-prefill secrets/token-decode secrets/token-operator; do
  mkdir -p "$ctx/$d"
  : >"$ctx/$d/.keep"
done

log "building a static tandem"
(cd "$root" && CGO_ENABLED=0 GOOS=linux go build -trimpath -ldflags='-s -w' -o "$ctx/tandem.new" ./cmd/tandem)
mv -f "$ctx/tandem.new" "$ctx/tandem"
log "building a static tandem-consul-init (compose/multihost.yaml's setup)"
(cd "$root" && CGO_ENABLED=0 GOOS=linux go build -trimpath -ldflags='-s -w' -o "$ctx/tandem-consul-init.new" ./cmd/tandem-consul-init)
mv -f "$ctx/tandem-consul-init.new" "$ctx/tandem-consul-init"

consul=${TANDEM_CONSUL_BIN:-}
if [ -z "$consul" ]; then
  log "finding the Consul agent (scripts/install-consul.sh)"
  consul=$("$root/scripts/install-consul.sh" | tail -n 1)
fi
[ -x "$consul" ] || die "no Consul binary at '$consul'"
# Copy only when it differs, so the image's consul layer stays cached.
if ! cmp -s "$consul" "$ctx/consul"; then
  cp -f "$consul" "$ctx/consul.new"
  mv -f "$ctx/consul.new" "$ctx/consul"
fi

log "docker build -t $image"
docker build -t "$image" -f "$here/Dockerfile" "$ctx"
log "built $image"

$monitoring || exit 0
prom=${TANDEM_PROMETHEUS_BIN:-}
if [ -z "$prom" ]; then
  log "finding the Prometheus server (scripts/install-prometheus.sh)"
  prom=$("$root/scripts/install-prometheus.sh" | tail -n 1)
fi
[ -x "$prom" ] || die "no Prometheus binary at '$prom'"
pctx=$here/.build-prometheus
mkdir -p "$pctx/data"
: >"$pctx/data/.keep"
if ! cmp -s "$prom" "$pctx/prometheus"; then
  cp -f "$prom" "$pctx/prometheus.new"
  mv -f "$pctx/prometheus.new" "$pctx/prometheus"
fi
log "docker build -t $prom_image"
docker build -t "$prom_image" -f "$here/Dockerfile.prometheus" "$pctx"
log "built $prom_image"
