#!/bin/sh
# capture.sh ENGINE_URL OUTDIR MAXLEN [extra worker flags...]: a prefill and a decode tandem worker
# (always-remote) in front of ENGINE_URL, a router and a frontend, all on loopback; a few requests; stop.
# Each worker records its exchanges with the engine (--engine-record OUTDIR/prefill, OUTDIR/decode);
# OUTDIR/client.txt is what the client got. DECODE_EXTRA adds decode-worker flags (KV events).
# Run from the repository's root after 'make build'; TANDEM and TOK override the binary and tokenizer.
set -u
URL=$1; OUT=$2; MAXLEN=$3; shift 3
T=${TANDEM:-bin/tandem}
TOK=${TOK:-models/stories260K.gguf}
if [ -e "$OUT" ]; then echo "$OUT exists" >&2; exit 1; fi
mkdir -p "$OUT/prefill" "$OUT/decode"
common="--engine vllm --engine-url $URL --tokenizer $TOK --max-model-len $MAXLEN --log-level warn"
$T prefill $common --listen 127.0.0.1:18304 --kv-listen 127.0.0.1:18305 --engine-record "$OUT/prefill" "$@" > "$OUT/prefill.log" 2>&1 & P1=$!
$T decode $common --listen 127.0.0.1:18301 --prefill-workers 127.0.0.1:18304 --policy always-remote --engine-record "$OUT/decode" ${DECODE_EXTRA:-} "$@" > "$OUT/decode.log" 2>&1 & P2=$!
$T router --listen 127.0.0.1:18302 --decode-workers 127.0.0.1:18301 --prefill-workers 127.0.0.1:18304 --log-level warn > "$OUT/router.log" 2>&1 & P3=$!
$T frontend --listen 127.0.0.1:18303 --router 127.0.0.1:18302 --log-level warn > "$OUT/frontend.log" 2>&1 & P4=$!
for i in $(seq 1 60); do curl -sf 127.0.0.1:18303/v1/models >/dev/null && break; sleep 1; done
sleep 4; exec 3>&1 >"$OUT/client.txt"; curl -s 127.0.0.1:18303/v1/models; echo
for p in "Once upon a time" "The little dog ran to the park and" "On day $(date +%s) there was a little girl named Lily who loved to play in the park with her dog and her friends every day"; do
  curl -s 127.0.0.1:18303/v1/completions -H 'Content-Type: application/json' -d "{\"model\":\"stories260K\",\"prompt\":\"$p\",\"max_tokens\":12,\"temperature\":0}"; echo
done
curl -sN 127.0.0.1:18303/v1/completions -H 'Content-Type: application/json' -d '{"model":"stories260K","prompt":"Tom went","max_tokens":8,"temperature":0,"stream":true}' | head -c 3000; echo
sleep 5; exec 1>&3
kill $P4 $P3 $P2 $P1; wait $P4 $P3 $P2 $P1 2>/dev/null
ls -la "$OUT"/*
