#!/usr/bin/env bash
# kernel_tree.sh SOURCE PIG_OPT PIG_TRANSLATE CMAKE LIBPIG_DIR PIG_H_DIR: a deployment's kernels on
# their own. pig-kernel-tree turns a two-line manifest into a source tree; the tree must name
# nothing of MLIR or LLVM; it builds from a clean directory with CMake and Highway alone into a
# shared object with no undefined symbol of pig's; a C program over pig.h (libpig.so) loads it
# and checks that it serves both configurations (tests/install/kernel_tree_check.c).
set -euo pipefail
src=$1 pig_opt=$2 pig_translate=$3 cmake=$4 libdir=$5 incdir=$6
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf 'K=9 L=120 d=64 bf16\nK=12 L=50 d=128 f32\n' >"$tmp/manifest.txt"
python3 "$src/tools/pig-kernel-tree/pig_kernel_tree.py" --manifest "$tmp/manifest.txt" \
  --out "$tmp/tree" --pig-opt "$pig_opt" --pig-translate "$pig_translate"
if grep -liE "find_package\((MLIR|LLVM)|mlir::|llvm-[0-9]" "$tmp/tree/CMakeLists.txt"; then
  echo "kernel_tree.sh: the tree's build names MLIR or LLVM" >&2
  exit 1
fi
"$cmake" -S "$tmp/tree" -B "$tmp/build" -G Ninja >"$tmp/configure.log" 2>&1 ||
  { cat "$tmp/configure.log"; exit 1; }
"$cmake" --build "$tmp/build" >"$tmp/build.log" 2>&1 || { tail -40 "$tmp/build.log"; exit 1; }
lib=$tmp/build/libpig_deployment_kernels.so
# nothing of pig's libraries: only Highway, the C++ runtime and libc are left to the loader
if nm -D --undefined-only "$lib" | c++filt | grep -E "pig::|pig_"; then
  echo "kernel_tree.sh: $lib needs pig symbols" >&2
  exit 1
fi
cc -std=c11 -O2 "$src/tests/install/kernel_tree_check.c" -I"$incdir" -L"$libdir" \
  -Wl,-rpath,"$libdir" -lpig -lm -o "$tmp/check"
"$tmp/check" "$lib"
