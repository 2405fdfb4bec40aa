#!/bin/sh
# tests/summary.sh — prints the CUnit run summary of every test program that `make check`
# ran (from tests/*.log) and one closing line "N passed, N failed, N skipped" of CUnit tests.
# Not a test runner: run it after make check, in the build folder, passing make's exit status;
# it exits non-zero when that status was, when a test failed, or when no test ran.
make_status=${1:-0}
passed=0; failed=0; skipped=0
for trs in tests/test_*.trs; do
    [ -f "$trs" ] || continue
    log="${trs%.trs}.log"
    prog=$(basename "${trs%.trs}")
    result=$(sed -n 's/^:test-result: //p' "$trs" | head -n 1)
    echo "== $prog: $result"
    if [ "$result" = SKIP ]; then
        skipped=$((skipped + 1)); continue
    fi
    if grep -q "^Run Summary:" "$log"; then
        sed -n '/^Run Summary:/,/asserts/p' "$log"
        set -- $(grep -E '^ +tests +[0-9]' "$log" | tail -n 1)
        # tests Total Ran Passed Failed Inactive
        passed=$((passed + $4)); failed=$((failed + $5))
        if [ "$result" != PASS ] && [ "$5" -eq 0 ]; then failed=$((failed + 1)); fi
    else
        echo "   (no CUnit summary: the program crashed or did not start; see $log)"
        tail -n 5 "$log" | sed 's/^/   /'
        failed=$((failed + 1))
    fi
done
if [ "$make_status" -ne 0 ] && [ "$failed" -eq 0 ]; then
    # make check failed outside the tests (a build error): the counts above may be an older run's
    echo "make check exited with status $make_status before its tests all ran: see its output above"
    failed=1
fi
echo "$passed passed, $failed failed, $skipped skipped"
[ "$make_status" -eq 0 ] && [ "$failed" -eq 0 ] && [ $((passed + skipped)) -gt 0 ]
