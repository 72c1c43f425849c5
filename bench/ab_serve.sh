#!/usr/bin/env bash
# Two pig-serve binaries under the same load, interleaved: A, B, A, B, ... (the machine's noise
# falls on both), each run a fresh server on a loopback port loaded by pig-bench-serve. Prints one
# line a run and writes each report to OUT. Used to check that a change of the HTTP layer leaves
# throughput alone (docs/PERFORMANCE.md, "Serving").
#
#   bench/ab_serve.sh OUT A_BINARY B_BINARY [PAIRS=3]
#
# Load: 8 clients, 32 requests of 256-token prompts and 64 tokens out (ignore_eos), dense,
# --parallel 8, 2 threads; streaming, as pig-bench-serve always is. Everything binds and connects
# to 127.0.0.1; every run is bounded (pig-bench-serve --timeout 600).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=${1:?usage: bench/ab_serve.sh OUT A_BINARY B_BINARY [PAIRS]}
A=${2:?A_BINARY}
B=${3:?B_BINARY}
PAIRS=${4:-3}
PORT=${PIG_BENCH_PORT:-8094}
URL="http://127.0.0.1:$PORT"
mkdir -p "$OUT"
SERVER=""
stop() { [ -n "$SERVER" ] && kill "$SERVER" 2>/dev/null && wait "$SERVER" 2>/dev/null; SERVER=""; }
trap stop EXIT

run() { # run LABEL BINARY
  local label=$1 bin=$2
  "$bin" --host 127.0.0.1 --port "$PORT" --threads 2 --parallel 8 --quiet 2>"$OUT/$label.serve.log" &
  SERVER=$!
  for _ in $(seq 600); do
    curl -sf "$URL/health" >/dev/null 2>&1 && break
    sleep 0.1
  done
  "$ROOT/build/bin/pig-bench-serve" --url "$URL" --clients 8 --requests 32 --prompt-tokens 256 \
    --output-tokens 64 --ignore-eos --pig-json '{"attention": "dense"}' --timeout 600 \
    --label "$label" --json "$OUT/$label.json" >"$OUT/$label.txt"
  stop
  python3 - "$OUT/$label.json" "$label" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
med = lambda k: (r.get(k) or {}).get("median")
print(f"{sys.argv[2]}: completed {r['completed']}, failed {r['failed']}, "
      f"output {r['output_throughput']:.1f} tok/s, steady {r['steady_output_throughput'] or 0:.1f}"
      f" tok/s, TTFT median {med('ttft_ms') or 0:.0f} ms, TPOT median {med('tpot_ms') or 0:.1f} ms")
PY
}

for i in $(seq "$PAIRS"); do
  run "A$i" "$A"
  run "B$i" "$B"
done
