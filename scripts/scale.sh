#!/usr/bin/env bash
# Runs tandem up with many simulated workers in one process, sends requests
# through it with tandem bench, and prints what the process holds (open file
# descriptors, threads, goroutines, memory) when ready, at the peak of the run
# and after a minute idle, and the router's decision latency as its
# tandem_router_route_seconds histogram saw it (p50 and p99, interpolated within
# buckets as Prometheus' histogram_quantile does).
#
#   scripts/scale.sh PREFILL DECODE [tandem bench flags...]
#   scripts/scale.sh 100 900 --workload mixed --mix 0.8:64/16,0.2:2048/16 --concurrency 8 --requests 2000
#
# Environment: TANDEM_BIN (default bin/tandem), SCALE_ADDR (default
# 127.0.0.1:18432), SCALE_IDLE (seconds to wait idle afterwards; default 70, past
# the peers' one-minute idle close; 0 skips it). The workers run the sim engine
# with --sim-time-scale 0: no compute and no modelled waiting, so what remains is
# tandem's own overhead. Wrap it in flock /tmp/tandem-bench.lock on a shared machine.
set -euo pipefail

prefill=${1:?usage: scripts/scale.sh PREFILL DECODE [tandem bench flags...]}
decode=${2:?usage: scripts/scale.sh PREFILL DECODE [tandem bench flags...]}
shift 2
bin=${TANDEM_BIN:-bin/tandem}
addr=${SCALE_ADDR:-127.0.0.1:18432}
idle=${SCALE_IDLE:-70}
out=$(mktemp -d)
trap 'kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; rm -rf "$out"' EXIT

: >"$out/up.out"
start=$(date +%s.%N)
"$bin" up --http-addr "$addr" --engine sim --sim-time-scale 0 --prefill "$prefill" --decode "$decode" \
  --log-level warn >"$out/up.out" 2>"$out/up.err" &
pid=$!
until grep -q '^ready:' "$out/up.out"; do
  if ! kill -0 "$pid" 2>/dev/null; then
    echo "tandem up exited:" >&2; tail -5 "$out/up.err" >&2; exit 1
  fi
  sleep 0.2
done
ready=$(date +%s.%N)
router=$(sed -n 's/^router \([^,]*\),.*/\1/p' "$out/up.out")

metric() { curl -s "http://$router/metrics" | awk -v m="$1" '$1 == m { print $2 }'; }
snapshot() {
  local fds rss threads
  fds=$(ls "/proc/$pid/fd" | wc -l)
  rss=$(awk '/^VmRSS/ { printf "%.0f", $2 / 1024 }' "/proc/$pid/status")
  threads=$(awk '/^Threads/ { print $2 }' "/proc/$pid/status")
  printf '%-22s fds %6d  threads %3d  goroutines %7.0f  RSS %5d MB  Go heap in use %5.0f MB\n' "$1" "$fds" "$threads" \
    "$(metric go_goroutines)" "$rss" "$(echo "$(metric go_memstats_heap_inuse_bytes)" | awk '{ print $1 / 1048576 }')"
}

echo "tandem up: $prefill prefill + $decode decode sim workers, ready after $(echo "$ready - $start" | bc) s"
echo "open file limit of the process: $(awk '/^Max open files/ { print $4 " soft, " $5 " hard" }' "/proc/$pid/limits")"
snapshot "ready"

# The peak of descriptors while the benchmark runs, sampled every 100 ms.
( peak=0; while kill -0 "$pid" 2>/dev/null && [ ! -e "$out/done" ]; do
    n=$(ls "/proc/$pid/fd" 2>/dev/null | wc -l); [ "$n" -gt "$peak" ] && peak=$n; echo "$peak" >"$out/peak"; sleep 0.1
  done ) &
sampler=$!
"$bin" bench --url "http://$addr" "$@"
touch "$out/done"; wait "$sampler"
snapshot "after the run"
echo "peak fds during the run: $(cat "$out/peak")"

curl -s "http://$router/metrics" | awk '
  /^tandem_router_route_seconds_bucket/ {
    match($0, /le="[^"]*"/); le = substr($0, RSTART + 4, RLENGTH - 5)
    n++; bound[n] = (le == "+Inf") ? -1 : le + 0; count[n] = $2 + 0
  }
  END {
    total = count[n]
    for (qi = 1; qi <= 2; qi++) {
      q = (qi == 1) ? 0.5 : 0.99; rank = q * total; lo = 0; prev = 0
      for (i = 1; i <= n; i++) {
        if (count[i] >= rank) {
          if (bound[i] < 0) { v = lo } else { v = lo + (bound[i] - lo) * (rank - prev) / (count[i] - prev) }
          printf "router Route p%g: %.1f us (bucket up to %s us)\n", q * 100, v * 1e6, bound[i] < 0 ? "+Inf" : sprintf("%.1f", bound[i] * 1e6)
          break
        }
        lo = bound[i]; prev = count[i]
      }
    }
    printf "routing decisions: %d\n", total
  }'

if [ "$idle" -gt 0 ]; then
  sleep "$idle"
  snapshot "after ${idle}s idle"
fi
