#!/usr/bin/env bash
# pig_vllm's tests with the vLLM environment's Python (no ctest):
#   python/pig_vllm/run_tests.sh [pytest args...]      e.g. -x, -s, -k server, tests/test_layout.py
# Needs `./pig vllm-setup` (.venv-vllm and the converted model) and pig's module in build/python
# (./pig build). tests/test_layout.py runs in 1-2 minutes; tests/test_llm.py starts one vLLM
# per configuration (stock, pig dense, pig magicpig, magicpig from the prefix cache, magicpig
# preempted) and tests/test_server.py one OpenAI server: 8-11 minutes on 2 cores.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
PY="$ROOT/.venv-vllm/bin/python"
[ -x "$PY" ] || { echo "pig_vllm: $PY missing: run ./pig vllm-setup" >&2; exit 1; }
compgen -G "$ROOT/build/python/pig/_pig*.so" >/dev/null ||
  { echo "pig_vllm: pig's module is not built: run ./pig build" >&2; exit 1; }
export PYTHONPATH="$ROOT/build/python:$HERE${PYTHONPATH:+:$PYTHONPATH}"
export VLLM_CPU_KVCACHE_SPACE="${VLLM_CPU_KVCACHE_SPACE:-1}"
cd "$HERE"
# Test paths among the arguments (tests/test_layout.py) replace the default, the whole tests/.
paths=(tests)
for a in "$@"; do [[ $a == tests/* ]] && paths=(); done
exec "$PY" -m pytest -q -p no:cacheprovider "${paths[@]}" "$@"
