#!/bin/sh
# tests/fuzz/run.sh — builds libglia, its plugins and the fuzz harnesses tests/fuzz/fuzz_*.c with
# clang, libFuzzer, ASan and UBSan in a separate folder, then runs each harness for a while.
# Not part of `make check` or CI (it needs clang): run it by hand after changing a parser.
#
#   tests/fuzz/run.sh [SECONDS [TARGET...]]
#
# SECONDS (default 60) is each target's run time (0: build only); TARGETs are harness names without fuzz_
# (default: all). Two fuzzers run at once, one process each. Environment:
#   GLIA_FUZZ_BUILD  the build folder (default /tmp/glia-fuzz-build); the corpora grow in
#                    $GLIA_FUZZ_BUILD/corpus/TARGET across runs, crashes land in .../artifacts/TARGET
#   GLIA_FUZZ_PAR    fuzzers run at once (default 2)
#   CC               the compiler (default clang)
# A finding is replayed with:  $GLIA_FUZZ_BUILD/fuzz_TARGET ARTIFACT
set -eu

secs=${1:-60}
[ $# -gt 0 ] && shift
top=$(cd "$(dirname "$0")/../.." && pwd)
B=${GLIA_FUZZ_BUILD:-/tmp/glia-fuzz-build}
par=${GLIA_FUZZ_PAR:-2}
CC=${CC:-clang}
SAN="-fsanitize=address,undefined -fno-sanitize-recover=all"
CFLAGS_FUZZ="-g -O1 -fno-omit-frame-pointer $SAN"
targets=$*
[ -n "$targets" ] || targets=$(cd "$top/tests/fuzz" && ls fuzz_*.c | sed "s/^fuzz_//; s/\\.c$//" | tr "\\n" " ")

# ---- the sources, copied (an in-tree configured checkout cannot also be built out of tree) --
mkdir -p "$B/src"
if git -C "$top" rev-parse --git-dir >/dev/null 2>&1; then
    (cd "$top" && git ls-files -z --cached --others --exclude-standard |
        tar --null -T - -cf -) | tar -C "$B/src" -xpf -
else
    (cd "$top" && tar -cf - .) | tar -C "$B/src" -xpf -
fi

# ---- libglia and the plugins ------------------------------------------------------------
cd "$B/src"
[ -x configure ] || ./bootstrap >/dev/null 2>&1
if [ ! -f .fuzz-configured ]; then  # (a copied tree may hold another configuration's outputs)
    ./configure CC="$CC" CFLAGS="$CFLAGS_FUZZ -fsanitize=fuzzer-no-link" LDFLAGS="$SAN" \
        --without-cuda --without-mpi >"$B/configure.log" 2>&1 || { tail "$B/configure.log"; exit 1; }
    make -s clean >/dev/null
    touch .fuzz-configured
fi
make -s -j2 >/dev/null

# ---- the harnesses ----------------------------------------------------------------------
# fuzz_plot takes its parser's source (it is not in libglia; the expression language is).
for t in $targets; do
    extra=
    case $t in
        expr) extra="-lm" ;;
        plot) extra="tools/plot.c -lm" ;;
    esac
    $CC $CFLAGS_FUZZ -fsanitize=fuzzer -std=gnu11 -Wall -Wextra -Werror -D_GNU_SOURCE -Iinclude -Icore -Itools \
        "tests/fuzz/fuzz_$t.c" $extra \
        -L.libs -lglia -Wl,-rpath,"$B/src/.libs" -lz -o "$B/fuzz_$t"
done

# ---- seeds --------------------------------------------------------------------------------
# The committed ones (tests/fuzz/seeds/TARGET), the example models for config; the harnesses
# write the seeds that must be generated (a checkpoint, gzip files) into GLIA_FUZZ_SEEDS.
for t in $targets; do
    s="$B/seeds/$t"
    rm -rf "$s"
    mkdir -p "$s" "$B/corpus/$t" "$B/artifacts/$t" "$B/logs/$t"
    [ -d "tests/fuzz/seeds/$t" ] && cp "tests/fuzz/seeds/$t"/* "$s/"
    if [ "$t" = config ]; then
        # the examples read Fashion-MNIST; point them at the harness's small data set
        for f in share/glia/examples/*.ini; do
            sed -e 's|^\(train_images *=\).*|\1 train-images|' -e 's|^\(train_labels *=\).*|\1 train-labels|' \
                -e 's|^\(test_images *=\).*|\1 test-images|' -e 's|^\(test_labels *=\).*|\1 test-labels|' \
                "$f" >"$s/$(basename "$f")"
        done
    fi
done

# ---- runs -----------------------------------------------------------------------------------
[ "$secs" -gt 0 ] || exit 0
export GLIA_PLUGIN_PATH="$B/src/stage/plugins" OMP_NUM_THREADS=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
echo "fuzzing $(echo $targets) for ${secs}s each, $par at a time, in $B"
for t in $targets; do echo "$t"; done |
    xargs -P "$par" -I{} sh -c '
        t={}; B=$1; secs=$2
        cd "$B/logs/$t"
        dict=; [ -f "$B/src/tests/fuzz/$t.dict" ] && dict="-dict=$B/src/tests/fuzz/$t.dict"
        GLIA_FUZZ_SEEDS="$B/seeds/$t" "$B/fuzz_$t" -jobs=1 -workers=1 -max_total_time="$secs" \
            -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 -artifact_prefix="$B/artifacts/$t/" $dict \
            "$B/corpus/$t" "$B/seeds/$t" >"$B/logs/$t/run.log" 2>&1 || true
    ' sh "$B" "$secs"

# ---- summary ------------------------------------------------------------------------------
status=0
for t in $targets; do
    log="$B/logs/$t/fuzz-0.log"
    execs=$(grep -Eo 'stat::number_of_executed_units: *[0-9]+' "$log" 2>/dev/null | grep -Eo '[0-9]+$' || true)
    [ -n "$execs" ] || execs=$(grep -Eo '^#[0-9]+' "$log" 2>/dev/null | tail -n 1 | tr -d '#' || true)
    found=$(ls "$B/artifacts/$t" | wc -l)
    echo "$t: ${execs:-?} runs, corpus $(ls "$B/corpus/$t" | wc -l), findings $found (log $log)"
    [ "$found" -eq 0 ] || { ls "$B/artifacts/$t" | sed "s|^|    $B/artifacts/$t/|"; status=1; }
done
exit $status
