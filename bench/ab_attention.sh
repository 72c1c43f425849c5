#!/usr/bin/env bash
# Two builds of pig-bench-attention alternated (A, B, A, B, ...), the medians each prints, one line
# per (run, build, benchmark): for a kernel change, the before/after figure on one machine.
#
#   bench/ab_attention.sh BUILD_A BUILD_B [FILTER] [RUNS]
#   e.g. git worktree add /tmp/old <commit>; (configure /tmp/old/build as ./pig does: Release)
#        bench/ab_attention.sh /tmp/old/build build '^(dense|sampled)/d:64/G:3/n:131072/' 3
set -euo pipefail
a=${1:?build dir A}
b=${2:?build dir B}
filter=${3:-'^(dense|sampled)/d:(64|128)/G:(1|3)/n:131072/'}
runs=${4:-3}
for r in $(seq "$runs"); do
  for dir in "$a" "$b"; do
    "$dir/bin/pig-bench-attention" --benchmark_filter="$filter" 2>/dev/null |
      sed 's/\x1b\[[0-9;]*m//g' | grep '_median' |
      awk -v run="$r" -v build="$dir" '{sub(/\/min_time.*/, "", $1); print run, build, $1, $2, $3}'
  done
done
