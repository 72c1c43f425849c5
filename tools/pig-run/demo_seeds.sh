#!/bin/sh
# demo_seeds.sh PIG_RUN FIRST LAST MIN_LSH [ARGS...]: the main job's check (ctest pig-run.demo).
# Runs `PIG_RUN --demo --demo-seed S ARGS` for each planted seed S in FIRST..LAST (each plants the
# fact in another paragraph and city), prints each answer row and then
#   demo seeds FIRST-LAST: dense D/N, magicpig M/N
# and exits 1 when dense misses any seed or magicpig answers fewer than MIN_LSH of them.
#
# Why several seeds: whether LSH sampling attention on the 135M model finds one planted sentence
# is close to a coin flip for some paragraphs: a rounding change anywhere in the decode (the f32
# weight path, the int16 or the 8-bit one) flips seed 1's answer, while over seeds 1-10 the
# answers stay 8-9 of 10 (docs/PERFORMANCE.md#weight-kernels). One seed tested a rounding; four
# test the method.
set -u
run=$1 first=$2 last=$3 min_lsh=$4
shift 4
n=0 dense=0 lsh=0
s=$first
while [ "$s" -le "$last" ]; do
  out=$("$run" --demo --demo-seed "$s" "$@" 2>&1) || {
    printf '%s\n' "$out" | tail -5
    echo "demo_seeds.sh: pig-run --demo --demo-seed $s failed"
    exit 1
  }
  row=$(printf '%s\n' "$out" | grep '^answer has ')
  if [ -z "$row" ]; then
    printf '%s\n' "$out" | tail -5
    echo "demo_seeds.sh: seed $s printed no answer row"
    exit 1
  fi
  echo "seed $s: $row"
  n=$((n + 1))
  # answer has "City" | dense | lsh
  d=$(printf '%s\n' "$row" | awk -F'|' '{gsub(/ /, "", $2); print $2}')
  l=$(printf '%s\n' "$row" | awk -F'|' '{gsub(/ /, "", $3); print $3}')
  [ "$d" = yes ] && dense=$((dense + 1))
  [ "$l" = yes ] && lsh=$((lsh + 1))
  s=$((s + 1))
done
echo "demo seeds $first-$last: dense $dense/$n, magicpig $lsh/$n"
[ "$dense" -eq "$n" ] && [ "$lsh" -ge "$min_lsh" ]
