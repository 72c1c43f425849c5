#!/usr/bin/env bash
# symbols.sh LIBPIG PIG_H: libpig.so's dynamic symbols are exactly the functions pig.h declares
# (PIG_API ... pig_name(...)): nothing of the runtime, the kernels or the C++ library leaks.
set -euo pipefail
lib=$1 header=$2
exported=$(nm -D --defined-only "$lib" | awk '{print $3}' | sed 's/@.*//' | sort -u)
declared=$(grep -oE '^PIG_API [^(]*\b(pig_[a-z0-9_]+)\(' "$header" | grep -oE 'pig_[a-z0-9_]+\($' |
           tr -d '(' | sort -u)
if [ "$exported" != "$declared" ]; then
  echo "libpig.so exports (nm -D --defined-only):"; echo "$exported"
  echo "pig.h declares:"; echo "$declared"
  diff <(echo "$declared") <(echo "$exported") || true
  exit 1
fi
echo "libpig.so exports exactly pig.h's $(echo "$declared" | wc -l) functions"
