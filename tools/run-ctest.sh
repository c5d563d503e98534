#!/usr/bin/env bash
# Runs ctest in build directory $1 (further arguments go to ctest) and then says
# how many tests were skipped and which, so a skip is never read as a pass.
# (Under CI=true the tests turn skips for missing CI dependencies into failures:
# tests/test_util.h, MXTEST_NEEDS; what may still skip is hardware, e.g. a CPU
# without AVX512-BF16, or what a build does not compile, e.g. GPU backends in the
# sanitizer build.) Exits with ctest's status.
set -uo pipefail
dir=$1; shift
log=$(mktemp)
(cd "$dir" && ctest "$@") 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
skipped=$(sed -n '/The following tests did not run:/,/^$/p' "$log" | grep -E '^[[:space:]]+[0-9]+ - ' || true)
n=$(printf '%s' "$skipped" | grep -c . || true)
echo "skipped tests in $dir: $n"
[ -n "$skipped" ] && printf '%s\n' "$skipped" | sed 's/^[[:space:]]*/  /'
# ... and why: the first line of each GoogleTest skip message, from ctest's log.
if [ -n "$skipped" ] && [ -f "$dir/Testing/Temporary/LastTest.log" ]; then
  echo "why (the tests' own words):"
  awk '/^\[ RUN      \]/ { name = $4 } /: Skipped$/ { if ((getline msg) > 0) print "  " name ": " msg }' \
    "$dir/Testing/Temporary/LastTest.log" | sort -u
fi
rm -f "$log"
exit "$rc"
