#!/usr/bin/env bash
# Runs llama.cpp's llama-bench and tandem's `tandem bench engine` on the same GGUF
# files in one run, alternating the two programs cell by cell (which goes first
# alternates too, so drift in the machine's load falls on both), at each thread
# count, and prints every cell (ppN and tgN per thread count) as tandem's rate,
# llama.cpp's and their ratio, with both commits, the date and the machine.
#
#   scripts/llamacpp-compare.sh LLAMA_CPP_BUILD_DIR FILE...
#   scripts/llamacpp-compare.sh ~/llama.cpp/build runs/smollm2-q8_0.gguf runs/smollm2-f32.gguf
#
# llama.cpp is not a dependency of tandem: build it separately, on the CPU only,
#   git clone https://github.com/ggml-org/llama.cpp && cd llama.cpp
#   cmake -B build -DGGML_NATIVE=ON -DLLAMA_CURL=OFF && cmake --build build -j --target llama-bench
# and pass its build directory (or the bin directory under it). Random-weight files
# of SmolLM2-135M's shape come from `tandem bench make-model` (docs/BENCHMARKS.md).
#
# With COMPARE_BATCH=B (default 8; 0 leaves it out) tandem also runs tgN xB, B sequences
# generating together, and its row is set against llama.cpp's one-sequence tgN: the
# issue's aggregate-throughput goal, not a like-for-like cell.
#
# Environment: COMPARE_PROMPT (default 512), COMPARE_GEN (128), COMPARE_REPS (3),
# COMPARE_THREADS (1,2), TANDEM_BIN (default bin/tandem, built into a temporary
# directory when missing), LLAMA_CPP_COMMIT (when the build says "unknown" and is not
# in a git checkout). Run it on a quiet machine, wrapped in flock
# /tmp/tandem-bench.lock on a shared one: the figures mean nothing under load.
set -euo pipefail

usage="usage: scripts/llamacpp-compare.sh LLAMA_CPP_BUILD_DIR FILE..."
build=${1:?$usage}
shift
if [ $# -eq 0 ]; then
	echo "$usage" >&2
	exit 2
fi
prompt=${COMPARE_PROMPT:-512}
gen=${COMPARE_GEN:-128}
reps=${COMPARE_REPS:-3}
batch=${COMPARE_BATCH:-8}
threads=${COMPARE_THREADS:-1,2}
if ! [[ $batch =~ ^[0-9]+$ ]]; then
	echo "COMPARE_BATCH must be a non-negative integer, got $batch" >&2
	exit 2
fi
for v in "$prompt" "$gen" "$reps"; do
	if ! [[ $v =~ ^[0-9]+$ ]] || [ "$v" -lt 1 ]; then
		echo "COMPARE_PROMPT, COMPARE_GEN and COMPARE_REPS must be positive integers, got $prompt, $gen, $reps" >&2
		exit 2
	fi
done
if ! [[ $threads =~ ^[1-9][0-9]*(,[1-9][0-9]*)*$ ]]; then
	echo "COMPARE_THREADS must be comma-separated positive integers, got $threads" >&2
	exit 2
fi

lbench=
for d in "$build" "$build/bin"; do
	if [ -x "$d/llama-bench" ]; then
		lbench=$d/llama-bench
		break
	fi
done
if [ -z "$lbench" ]; then
	echo "no llama-bench in $build or $build/bin: build llama.cpp's llama-bench target (see the top of this script)" >&2
	exit 2
fi
lbdir=$(cd "$(dirname "$lbench")" && pwd)
export LD_LIBRARY_PATH=$lbdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

files=()
for f in "$@"; do
	if [ ! -r "$f" ]; then
		echo "model file $f is not readable" >&2
		exit 2
	fi
	files+=("$(cd "$(dirname "$f")" && pwd)/$(basename "$f")")
done

root=$(cd "$(dirname "$0")/.." && pwd)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
bin=${TANDEM_BIN:-$root/bin/tandem}
if [ ! -x "$bin" ]; then
	echo "building tandem into $out (no $bin)" >&2
	(cd "$root" && go build -o "$out/tandem" ./cmd/tandem)
	bin=$out/tandem
fi

tcommit=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)
if [ "$tcommit" != unknown ] && ! git -C "$root" diff --quiet HEAD 2>/dev/null; then
	tcommit="$tcommit (with uncommitted changes)"
fi
lcommit=${LLAMA_CPP_COMMIT:-$(git -C "$lbdir" rev-parse --short HEAD 2>/dev/null || true)}

# rates TABLE: prints "test rate" for each ppN and tgN row of a markdown table whose
# header names the columns "test" and "t/s" (llama-bench's -o md and tandem's own).
rates() {
	awk -F'|' '
		/^\|/ && tcol == 0 { for (i = 1; i <= NF; i++) { h = $i; gsub(/ /, "", h); if (h == "test") tcol = i; if (h == "t/s") rcol = i }; next }
		/^\|/ && tcol > 0 { t = $tcol; gsub(/ /, "", t); if (t ~ /^(pp|tg)[0-9]+(x[0-9]+)?$/) { split($rcol, r, "±"); gsub(/ /, "", r[1]); print t, r[1] } }
	' "$1"
}

run_tandem() { # FILE THREADS
	"$bin" bench engine --model "$1" --threads "$2" --prompt "$prompt" --gen "$gen" --batch "$batch" --reps "$reps" >"$out/tandem.md"
	rates "$out/tandem.md" | while read -r test rate; do printf '%s\t%s\t%s\ttandem\t%s\n' "$1" "$2" "$test" "$rate"; done >>"$out/cells"
}

run_llama() { # FILE THREADS
	"$lbench" -m "$1" -p "$prompt" -n "$gen" -r "$reps" -t "$2" -o md >"$out/llama.md" 2>"$out/llama.err" || {
		echo "llama-bench failed on $1:" >&2
		tail -5 "$out/llama.err" >&2
		exit 1
	}
	rates "$out/llama.md" | while read -r test rate; do printf '%s\t%s\t%s\tllama\t%s\n' "$1" "$2" "$test" "$rate"; done >>"$out/cells"
	if [ -z "$lcommit" ]; then
		lcommit=$(sed -n 's/^build: \([^ ]*\).*/\1/p' "$out/llama.md" | head -1)
	fi
}

: >"$out/cells"
cell=0
for f in "${files[@]}"; do
	for t in ${threads//,/ }; do
		echo "$(basename "$f"), $t thread(s)..." >&2
		if [ $((cell % 2)) -eq 0 ]; then
			run_tandem "$f" "$t"
			run_llama "$f" "$t"
		else
			run_llama "$f" "$t"
			run_tandem "$f" "$t"
		fi
		cell=$((cell + 1))
	done
done

echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "tandem: $tcommit"
echo "llama.cpp: ${lcommit:-unknown}"
echo "machine: $(nproc) cores, $(sed -n 's/^model name\s*: //p' /proc/cpuinfo 2>/dev/null | head -1), load $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null)"
echo "settings: -p $prompt -n $gen -r $reps, threads $threads, tandem batch $batch; tokens/s, mean of the repetitions"
echo "(a tgNxB row is tandem's B sequences together, set against llama.cpp's one-sequence tgN)"
echo
echo "| file | threads | test | tandem | llama.cpp | tandem / llama.cpp |"
echo "| --- | ---: | --- | ---: | ---: | ---: |"
awk -F'\t' '
	{ key = $1 SUBSEP $2 SUBSEP $3; if (!(key in seen)) { seen[key] = 1; order[n++] = key }; rate[key, $4] = $5 }
	END {
		for (i = 0; i < n; i++) {
			split(order[i], k, SUBSEP)
			f = k[1]; sub(/.*\//, "", f)
			tr = rate[order[i], "tandem"]; lr = rate[order[i], "llama"]
			base = k[3]; sub(/x[0-9]+$/, "", base)
			if (base != k[3]) lr = rate[k[1] SUBSEP k[2] SUBSEP base, "llama"]
			ratio = (tr != "" && lr != "" && lr > 0) ? sprintf("%.2fx", tr / lr) : "-"
			printf "| %s | %s | %s | %s | %s | %s |\n", f, k[2], k[3], tr == "" ? "-" : tr, lr == "" ? "-" : lr, ratio
		}
	}
' "$out/cells"
