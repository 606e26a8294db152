#!/usr/bin/env bash
# Installs the Consul agent used by tests and compose images, reproducibly.
#
#   CONSUL_BIN=$(scripts/install-consul.sh | tail -1)
#
# Builds Consul v1.14.11 (the last MPL-2.0 release line) from the Go module proxy
# with CGO_ENABLED=0, and caches the binary outside the clone at
#   ${TANDEM_CACHE:-$HOME/.cache/tandem}/consul-1.14.11/consul
# If that binary already exists and reports v1.14.11, nothing is built. The path is
# always the last line on stdout; progress goes to stderr. Needs only Go (and the
# module proxy); the first build takes several minutes on 2 cores.
#
# `go install github.com/hashicorp/consul@v1.14.11` refuses because consul's go.mod
# has replace directives, so the build goes through a throwaway module in a temp
# dir that requires consul and copies the replaces it needs:
#   - launchpad.net/gocheck => github.com/go-check/check (a bzr host otherwise);
#   - consul's ./api, ./sdk, ./proto-public directory replaces cannot be mirrored
#     (those directories are separate modules, not in consul's module zip), so the
#     versions consul's go.mod requires for them are pinned instead.
set -euo pipefail

CONSUL_VERSION=1.14.11
CONSUL_MODULE=github.com/hashicorp/consul

cache_root=${TANDEM_CACHE:-$HOME/.cache/tandem}
dest_dir=$cache_root/consul-$CONSUL_VERSION
dest=$dest_dir/consul

log() { printf 'install-consul: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

# installed BIN: BIN exists and says it is the wanted version.
installed() {
  [ -x "$1" ] || return 1
  local out
  # Not `| head -n 1`: with pipefail, consul's SIGPIPE would fail the check.
  out=$("$1" version 2>/dev/null) || return 1
  [ "${out%%$'\n'*}" = "Consul v$CONSUL_VERSION" ]
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
  # Leftovers of builds that were killed; we hold the lock, so none is running.
  rm -rf "$dest_dir"/.build.*
else
  log "flock not found; building without a lock (the final mv is still atomic)"
fi

# The Go environment for the build: module mode, no workspace, host platform (the
# binary is run below to check it), no cgo. -mod=... from the caller's GOFLAGS is
# dropped (the throwaway module has no vendor dir); everything else in GOFLAGS,
# e.g. -buildvcs=false, is kept.
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

# The throwaway module and the new binary live next to the destination: same
# filesystem, so the final mv is atomic.
work=$(mktemp -d "$dest_dir/.build.XXXXXX")
tmp_bin="$work/consul"
trap 'rm -rf "$work"' EXIT

start=$(date +%s)
log "building Consul v$CONSUL_VERSION into $dest (first build takes minutes)"

cd "$work"
out=$(go mod init consulbuild 2>&1) || die "go mod init: $out"

log "downloading $CONSUL_MODULE@v$CONSUL_VERSION"
info=$(go mod download -json "$CONSUL_MODULE@v$CONSUL_VERSION") \
  || die "go mod download $CONSUL_MODULE@v$CONSUL_VERSION failed"
json_field() { printf '%s\n' "$info" | sed -n "s/^[[:space:]]*\"$1\": \"\(.*\)\",\{0,1\}\$/\1/p" | head -n 1; }
consul_gomod=$(json_field GoMod)
consul_info=$(json_field Info)
[ -f "$consul_gomod" ] || die "no go.mod for consul in the module cache ($consul_gomod)"

# Consul's replace directives, one "old new [version]" line each (single-line and
# block forms).
replaces=$(awk '
  /^replace[ \t]*\($/ { block = 1; next }
  block && /^\)/      { block = 0; next }
  /^replace[ \t]/     { sub(/^replace[ \t]+/, ""); print_replace($0); next }
  block               { print_replace($0) }
  function print_replace(s,   parts, n) {
    sub(/\/\/.*/, "", s); gsub(/=>/, " ", s)
    n = split(s, parts, /[ \t]+/)
    out = ""
    for (i = 1; i <= n; i++) if (parts[i] != "") out = out (out == "" ? "" : " ") parts[i]
    if (out != "") print out
  }' "$consul_gomod")

# The version consul's go.mod requires for MODULE.
required_version() {
  awk -v m="$1" '
    /^require[ \t]*\($/ { block = 1; next }
    block && /^\)/      { block = 0; next }
    block && $1 == m    { print $2; exit }
    /^require[ \t]/ && $2 == m { print $3; exit }' "$consul_gomod"
}

pins=()
while read -r old new ver; do
  [ -n "$old" ] || continue
  case $new in
    ./* | ../*)
      v=$(required_version "$old")
      [ -n "$v" ] || die "consul replaces $old with $new but does not require a version of it"
      log "pin $old@$v (consul replaces it with its $new directory)"
      pins+=("$old@$v")
      ;;
    *)
      if [ -n "${ver:-}" ]; then
        log "replace $old => $new $ver"
        go mod edit -replace "$old=$new@$ver"
      else
        log "replace $old => $new"
        go mod edit -replace "$old=$new"
      fi
      ;;
  esac
done <<<"$replaces"

log "resolving dependencies"
go get "$CONSUL_MODULE@v$CONSUL_VERSION" ${pins[@]+"${pins[@]}"} >&2

# The pins must have survived MVS (nothing else may require newer ones).
for p in ${pins[@]+"${pins[@]}"}; do
  got=$(go list -m -f '{{.Path}}@{{.Version}}' "${p%@*}")
  [ "$got" = "$p" ] || die "wanted $p, the build selected $got"
done

# consul's GNUmakefile sets version.GitCommit and version.BuildDate; the commit is
# not known from the module proxy, the release time is.
build_date=$(sed -n 's/.*"Time":"\([^"]*\)".*/\1/p' "$consul_info" 2>/dev/null || true)
ldflags="-s -w"
if [ -n "$build_date" ]; then
  ldflags="$ldflags -X $CONSUL_MODULE/version.BuildDate=$build_date"
fi

log "go build (CGO_ENABLED=0 -trimpath -ldflags \"$ldflags\")"
go build -trimpath -ldflags "$ldflags" -o "$tmp_bin" "$CONSUL_MODULE"

installed "$tmp_bin" || die "the built binary does not report Consul v$CONSUL_VERSION: $("$tmp_bin" version 2>&1 || true)"
mv -f "$tmp_bin" "$dest"
log "built $dest in $(( $(date +%s) - start ))s ($(du -h "$dest" | cut -f1))"
echo "$dest"
