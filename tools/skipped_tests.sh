#!/usr/bin/env bash
# The tests ctest reported as skipped, one line per reason: how many, and their suites.
#   tools/skipped_tests.sh build/Testing/Temporary/LastTest.log
# Reads ctest's log of the last run (each test's output, where GoogleTest prints "file:line:
# Skipped" and the reason on the next line). Prints nothing when nothing was skipped; exits 0.
set -euo pipefail
log=${1:?usage: tools/skipped_tests.sh build/Testing/Temporary/LastTest.log}
[ -r "$log" ] || exit 0
awk '
  / Test: / { test = $0; sub(/^.* Test: /, "", test); sub(/[ <].*$/, "", test) }
  skipped_next { reason[$0] = reason[$0] + 1
                 split(test, parts, ".")
                 if (index(suites[$0], parts[1] " ") == 0) suites[$0] = suites[$0] parts[1] " "
                 total++; skipped_next = 0; next }
  /: Skipped$/ { skipped_next = 1 }
  END {
    if (total == 0) exit
    printf "skipped: %d test(s), by reason\n", total
    for (r in reason) {
      n = split(suites[r], names, " ")
      list = ""
      for (i = 1; i <= n && i <= 4; i++) list = list (i > 1 ? ", " : "") names[i]
      if (n > 4) list = list sprintf(", and %d more suites", n - 4)
      printf "  %4d  %s  (%s)\n", reason[r], r, list
    }
  }' "$log"
