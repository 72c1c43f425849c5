#!/bin/sh
# run_checked.sh [--model FILE] [--status N] COMMAND [ARGS...]: ctest wrapper of the tool and
# bench tests (tests/PigCheckedTest.cmake).
#  --model FILE  the test needs the model. When FILE is missing or empty it prints
#                "pig-test: SKIP ..." and exits 77 (ctest's SKIP_RETURN_CODE); when CI=true it
#                prints "pig-test: FAIL ..." and exits 1 instead: CI installs the model
#                (./pig test), so a missing one there is an error, not a reason to skip.
#  --status N    the exit status COMMAND must end with (default 0).
# Any other exit status prints "pig-test: FAIL ..." (the tests' FAIL_REGULAR_EXPRESSION: with a
# PASS_REGULAR_EXPRESSION alone ctest ignores the status, so a crash after the expected line
# would pass) and exits 1.
model=
status=0
while :; do
  case "$1" in
  --model) model=$2; shift 2 ;;
  --status) status=$2; shift 2 ;;
  *) break ;;
  esac
done
if [ -n "$model" ] && [ ! -s "$model" ]; then
  case "${CI:-}" in
  true | TRUE | True | 1)
    echo "pig-test: FAIL: model not found: $model (CI=true: tests that need the model must run, not skip; ./pig setup installs it)"
    exit 1
    ;;
  esac
  echo "pig-test: SKIP: model not found: $model (./pig setup installs it; with CI=true this fails)"
  exit 77
fi
"$@"
rc=$?
if [ "$rc" -ne "$status" ]; then
  echo "pig-test: FAIL: $(basename "$1") exited with status $rc, expected $status"
  exit 1
fi
exit 0
