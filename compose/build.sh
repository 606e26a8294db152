#!/usr/bin/env bash
# Builds the image that compose/compose.yaml and compose/multihost.yaml run,
# tandem:local, FROM scratch:
#
#   compose/build.sh            # then: docker-compose -f compose/compose.yaml up
#
# 1. builds a static tandem (CGO_ENABLED=0) on this host with its Go toolchain
#    (no builder image: nothing is pulled from a registry);
# 2. takes the static Consul agent from scripts/install-consul.sh (built once and
#    cached outside the clone), or from TANDEM_CONSUL_BIN when that is set;
# 3. puts both in the build context compose/.build and runs docker build.
#
# Environment: TANDEM_IMAGE (default tandem:local) names the image; GOARCH may
# be set to build for another architecture (the Consul binary must match it).
# Running it again rebuilds only what changed (go build's and docker's caches).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
image=${TANDEM_IMAGE:-tandem:local}
ctx=$here/.build

log() { printf 'compose/build.sh: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

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
