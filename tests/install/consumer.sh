#!/usr/bin/env bash
# consumer.sh BUILD SOURCE CMAKE CXX: install BUILD into a temporary prefix, then build and run
# examples/cpp_consumer (C++, the static libraries) and examples/c_consumer (C, pig.h and
# libpig.so) against it, each through find_package(pig) and through pkg-config, from clean
# directories that see nothing of the source tree but the example. The prefix holds no MLIR or
# LLVM: the check below fails if an installed file names them.
set -euo pipefail
build=$1 src=$2 cmake=$3 cxx=$4
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix
"$cmake" --install "$build" --prefix "$prefix" --component library >/dev/null
if grep -rlE "mlir|llvm" "$prefix/lib/cmake" "$prefix/lib/pkgconfig"; then
  echo "consumer.sh: the installed package refers to MLIR or LLVM" >&2
  exit 1
fi
# the installed libpig.so exports pig.h's functions and nothing else
bash "$src/tests/capi/symbols.sh" "$prefix/lib/libpig.so" "$prefix/include/pig.h"
cp -r "$src/examples/cpp_consumer" "$tmp/example"
cp -r "$src/examples/c_consumer" "$tmp/c_example"

# find_package from a clean build directory: cmake_build EXAMPLE_DIR BUILD_DIR, then run PROGRAM
cmake_build() {
  "$cmake" -S "$1" -B "$2" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER="$cxx" \
    -DCMAKE_PREFIX_PATH="$prefix" >"$2.configure.log" 2>&1 || { cat "$2.configure.log"; exit 1; }
  "$cmake" --build "$2" >"$2.build.log" 2>&1 || { cat "$2.build.log"; exit 1; }
}

echo "== find_package(pig)"
cmake_build "$tmp/example" "$tmp/cmake-build"
"$tmp/cmake-build/pig_consumer"

echo "== pkg-config pig"
export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
generated=""
[ -f "$prefix/lib/libpig_generated_kernels.a" ] && generated=-DPIG_CONSUMER_GENERATED=1
# shellcheck disable=SC2046
"$cxx" -O2 $generated "$tmp/example/main.cpp" -o "$tmp/pc_consumer" $(pkg-config --cflags --libs pig)
"$tmp/pc_consumer"

echo "== find_package(pig): pig::c"
cmake_build "$tmp/c_example" "$tmp/c-build"
"$tmp/c-build/pig_c_consumer"

echo "== pkg-config pig-c"
# shellcheck disable=SC2046
cc -std=c11 -O2 "$tmp/c_example/main.c" -o "$tmp/pc_c_consumer" $(pkg-config --cflags --libs pig-c) -lm
"$tmp/pc_c_consumer"
