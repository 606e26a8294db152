#!/usr/bin/env bash
# The project's test command (README: "make test"). It needs only Go: buf and the
# protoc plugins are go.mod tools, built on first use.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n== %s\n' "$*"; }

step "gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go' | grep -v -E '\.pb\.go$|\.connect\.go$') || true)
if [ -n "$unformatted" ]; then
  echo "gofmt would change:"; echo "$unformatted"; exit 1
fi

step "go vet"
go vet ./...

step "buf lint"
go tool buf lint

step "buf generate reproduces the committed code"
go tool buf generate
if ! git diff --quiet -- proto || [ -n "$(git status --porcelain -- proto)" ]; then
  echo "generated code differs from what is committed:"
  git status --porcelain -- proto
  git diff --stat -- proto
  exit 1
fi

step "Consul agent for the integration tests (built once, cached outside the clone)"
TANDEM_CONSUL_BIN=$(./scripts/install-consul.sh | tail -n 1)
export TANDEM_CONSUL_BIN
"$TANDEM_CONSUL_BIN" version | head -n 1 || true

step "Chromium for the console's browser tests (installed once with apt-get when missing)"
TANDEM_CHROMIUM=$(./scripts/install-chromium.sh | tail -n 1)
export TANDEM_ARTIFACTS="${TANDEM_ARTIFACTS:-${TMPDIR:-/tmp}/tandem-artifacts}"
if [ -n "$TANDEM_CHROMIUM" ]; then
  export TANDEM_CHROMIUM
  "$TANDEM_CHROMIUM" --version 2>/dev/null || true
  echo "the browser tests run; their screenshots go to $TANDEM_ARTIFACTS"
else
  # Like the compose test's, this skip is silent inside go test ./...: say it here.
  echo "SKIPPED: the browser tests (TestConsoleInBrowser*): no Chromium, and apt-get could not install one"
fi

step "go test"
# The compose tests (integration/TestComposeSmoke, TestMultihostFaults) need a
# Docker engine and docker compose; without them they skip, and a skip inside
# `go test ./...` is silent, so say it here.
if ! docker info >/dev/null 2>&1; then
  echo "SKIPPED: the compose tests (TestComposeSmoke, TestComposeMonitoring, TestMultihostFaults): no Docker engine (docker info failed)"
elif ! docker compose version >/dev/null 2>&1 && ! command -v docker-compose >/dev/null 2>&1; then
  echo "SKIPPED: the compose tests (TestComposeSmoke, TestComposeMonitoring, TestMultihostFaults): neither docker compose nor docker-compose is installed"
else
  echo "the compose tests run: $(docker compose version 2>/dev/null || docker-compose version --short)"
  # Built here, outside go test's timeout: the first build takes minutes.
  step "Prometheus for the compose monitoring test (built once, cached outside the clone)"
  TANDEM_PROMETHEUS_BIN=$(./scripts/install-prometheus.sh | tail -n 1)
  export TANDEM_PROMETHEUS_BIN
  "$TANDEM_PROMETHEUS_BIN" --version | head -n 1 || true
fi
# 30m: the integration package holds the multi-host fault test (about 6 of them).
go test -race -count=1 -timeout 30m ./...

step "the dashboard's and alert rules' PromQL, parsed by Prometheus (a module of its own)"
(cd deploy/monitoring/promcheck && go vet ./... && go test -count=1 ./...)

step "the Helm chart: helm lint and template over each values file, every object decoded strictly, every command checked by tandem --check-config (deploy/, a module of its own)"
# Like the compose tests', this skip is silent inside go test: say it here.
if [ -z "${KUBECONFIG:-}" ]; then
  echo "SKIPPED: installing the chart into a cluster (deploy/helmcheck TestInstallIntoCluster): KUBECONFIG is not set"
fi
if [ "$(id -u)" != 0 ]; then
  echo "SKIPPED: running the chart's pods in network namespaces (deploy/helmcheck TestPodsServe): not root"
fi
(cd deploy && go vet ./... && go test -count=1 -timeout 20m ./...)

# go test above replays every fuzz target's seeds and committed corpus
# (testdata/fuzz/); here each target also explores for a few seconds. -fuzz takes
# one target per run. A failure writes its input under the package's testdata/fuzz/.
# The budget is a count of executions, not a duration: with a duration, Go 1.26's
# fuzz coordinator can report "context deadline exceeded" as a failure when the
# time runs out while a worker is busy (golang/go#75804, fixed in Go 1.27); it did
# so in this project's CI on a loaded machine. 8000 executions take 1 to 8 s a
# target here.
step "fuzz (${TANDEM_FUZZTIME:=8000x} per target)"
fuzz() { go test -run '^$' -fuzz "^$2\$" -fuzztime "$TANDEM_FUZZTIME" "$1"; }
# Every target in the repository, found rather than listed, so a new one cannot be
# left out.
git grep -n -E '^func Fuzz[A-Za-z0-9_]*\(' -- '*_test.go' | while IFS=: read -r file _ decl; do
  name=${decl#func }
  fuzz "./$(dirname "$file")" "${name%%(*}" || exit 1
done
