#!/usr/bin/env bash
# The pig-serve figures of docs/PERFORMANCE.md ("Serving"), in one run on one machine: starts
# build/bin/pig-serve on a loopback port, loads it with build/bin/pig-bench-serve and writes each
# run's report (.txt) and records (.json) to OUT.
#
#   bench/serve_matrix.sh OUT [part...]  parts: batch, context, long, prefill (default: all)
#
#   batch     8 concurrent short requests (256-token prompts, 512 tokens out), dense and
#             magicpig, beside pig-bench-batch's B = 8 and B = 1 at a 512-token context in the same
#             run: what the server adds to the batch engine (compare the steady rate: all 8 rows
#             decoding)
#   context   dense vs magicpig at 8k and 16k-token prompts, 1, 4 and 8 concurrent clients, 64
#             tokens out (--ctx 16448 --long-context: past the model's trained 8k)
#   long      8 clients at 7k-token prompts with 1024 tokens out (8k in all, the model's trained
#             context): decode at a long context once every prompt is in
#   prefill   4 streams decoding (1k prompts) while one 16k-token prompt is prefilled beside
#             them: their inter-token latency with --prefill-share 1 (the default) and 0 (fixed
#             256-token chunks)
# Everything binds and connects to 127.0.0.1; every load is bounded (pig-bench-serve --timeout).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
B="$ROOT/build/bin"
OUT=${1:?usage: bench/serve_matrix.sh OUT [batch|context|prefill ...]}
shift
PARTS=("$@")
[ ${#PARTS[@]} -eq 0 ] && PARTS=(batch context long prefill)
PORT=${PIG_BENCH_PORT:-8093}
URL="http://127.0.0.1:$PORT"
THREADS=${PIG_BENCH_THREADS:-2}
mkdir -p "$OUT"
SERVER=""

start() { # start NAME [pig-serve flags...]
  local name=$1
  shift
  "$B/pig-serve" --host 127.0.0.1 --port "$PORT" --threads "$THREADS" --quiet "$@" \
    2>"$OUT/$name.serve.log" &
  SERVER=$!
  for _ in $(seq 600); do
    curl -sf "$URL/health" >/dev/null 2>&1 && return 0
    kill -0 "$SERVER" 2>/dev/null || { cat "$OUT/$name.serve.log" >&2; exit 1; }
    sleep 0.1
  done
  echo "pig-serve did not become healthy" >&2
  exit 1
}
stop() {
  [ -n "$SERVER" ] && kill -TERM "$SERVER" && wait "$SERVER" || true
  SERVER=""
}
trap stop EXIT
load() { # load LABEL [pig-bench-serve flags...]
  local label=$1
  shift
  # Exit status 3 (some requests failed) is reported in the text and the JSON: go on.
  "$B/pig-bench-serve" --url "$URL" --label "$label" --json "$OUT/$label.json" "$@" \
    | tee "$OUT/$label.txt" || true
}
lsh() { echo "{\"attention\": \"$1\"}"; }

for part in "${PARTS[@]}"; do
  case "$part" in
    batch)
      "$B/pig-bench-batch" --threads "$THREADS" --batches 1,8 --contexts 512 --prefill 256 \
        --prompts 0 --steps 32 --attention magicpig | tee "$OUT/batch-bench.txt"
      start batch --parallel 8
      for m in dense magicpig; do
        load "batch-$m-c8" --clients 8 --requests 8 --prompt-tokens 256 --output-tokens 512 \
          --ignore-eos --pig-json "$(lsh $m)" --timeout 1200
      done
      stop
      ;;
    long)
      start long --parallel 8
      for m in dense magicpig; do
        load "long-$m-p7168-c8" --clients 8 --requests 8 --prompt-tokens 7168 \
          --output-tokens 1024 --ignore-eos --pig-json "$(lsh $m)" --timeout 3600
      done
      stop
      ;;
    context)
      start context --parallel 8 --ctx 16448 --long-context
      for p in 8192 16384; do
        for c in 1 4 8; do
          for m in dense magicpig; do
            load "context-$m-p$p-c$c" --clients "$c" --requests "$c" --prompt-tokens "$p" \
              --output-tokens 64 --ignore-eos --pig-json "$(lsh $m)" --timeout 3600
          done
        done
      done
      stop
      ;;
    prefill)
      for share in 1 0; do
        start "prefill-share$share" --parallel 8 --ctx 16448 --long-context \
          --prefill-share "$share"
        load "prefill-share$share-streams" --clients 4 --requests 4 --prompt-tokens 1024 \
          --output-tokens 8000 --ignore-eos --pig-json "$(lsh magicpig)" --seed 1 \
          --timeout 1800 &
        streams=$!
        sleep 40 # the four streams are decoding
        load "prefill-share$share-long" --clients 1 --requests 1 --prompt-tokens 16384 \
          --output-tokens 8 --ignore-eos --pig-json "$(lsh magicpig)" --seed 2 --timeout 1800
        wait "$streams" || true
        stop
      done
      ;;
    *)
      echo "unknown part '$part' (batch, context, long, prefill)" >&2
      exit 2
      ;;
  esac
done
