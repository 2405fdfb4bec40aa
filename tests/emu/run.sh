#!/bin/bash
# tests/emu/run.sh — runs the GPU test programs on the CPU against an emulated CUDA: the backend's host
# code from the build as it is, its kernels rebuilt as host C++ (cuda_emu.h), the CUDA runtime
# (with stream capture and CUDA graphs), cuDNN (its graph API interpreted), cuBLASLt, a one-rank NCCL and NVRTC's
# kernels built for the host from emu_runtime.c, emu_libs.c, emu_cudnn_graph.c, emu_nccl.c and emu_jit.c (one library that the
# emulated cuda.so and nccl.so share). Not part of make check and not a GPU: it finds wrong indexing,
# descriptors, layouts, arguments, barriers, missing stream waits (GLIA_EMU_DEFER) and calls a GPU
# refuses during a stream capture in code that has never met a GPU, not performance problems.
# Several NCCL ranks cannot run here. GLIA_EMU_STATS=1 prints the kernel and graph launches run; GLIA_EMU_TRACE=1 prints
# each launch (its name and grid) as it runs.
# GLIA_EMU_FAIL_CAPTURE=1 makes every stream capture fail at its end (what a failed capture does).
# GLIA_EMU_NO_EPILOGUE=1 makes cuBLASLt find no algorithm for any epilogue (bias, GELU, bias gradient), as it may for
# some types, shapes or alignments, so that the callers' fallbacks run. In cuDNN's graph API (emu_cudnn_graph.c):
# GLIA_EMU_CUDNN_MAX_OPS=N refuses every graph of more than N operations, GLIA_EMU_CUDNN_NONDET=1 notes every engine
# nondeterministic, GLIA_EMU_CUDNN_RTC=1 notes every engine compiled at run time, GLIA_EMU_CUDNN_CONV_SKEW=1 makes
# every convolution plan's result wrong (1.5 times too large),
# GLIA_EMU_CUDNN_FWD_WS=BYTES makes the fastest forward convolution algorithm of the heuristics want that much workspace,
# GLIA_EMU_CUDNN_MATMUL_SKEW=N makes every matrix product of a graph of more than N operations 1.5 times too large (attention),
# GLIA_EMU_CUDNN_NO_INSTANT=1 makes the instant heuristics (mode A) give no configuration, GLIA_EMU_CUDNN_FUSED_MS=T makes
# a fused convolution graph take T simulated ms in event timing (default 0.5; a plain one takes 0.8).
#
#   tests/emu/run.sh [--asan] [TEST...]    (in a built tree configured with CUDA; default: every
#                                            GPU program, test_cuda_dist without its watchdog test,
#                                            and the GPU tests of test_syncbn and test_model)
# $GLIA_TESTS, when set, chooses the tests inside each program (see tests/testutil.h).
# Output and the emulated plugin folder go to ${GLIA_EMU_DIR:-/tmp/glia-emu}.
set -euo pipefail
cd "$(dirname "$0")/../.."
top=$PWD
out=${GLIA_EMU_DIR:-/tmp/glia-emu}
asan=""
if [ "${1:-}" = "--asan" ]; then asan="-fsanitize=address -fno-omit-frame-pointer"; shift; fi
tests=("$@")
[ ${#tests[@]} -gt 0 ] || tests=(test_cuda test_cuda_conv test_cuda_dense test_cuda_norm_pool test_cuda_pointwise
                                 test_cuda_optim test_cuda_seq test_cuda_attention test_cuda_layernorm test_cuda_dist test_layer_run
                                 test_syncbn test_model)
[ -e backends/cuda/.libs/cuda.so ] || { echo "run.sh: no backends/cuda/.libs/cuda.so: configure with CUDA and build first" >&2; exit 2; }

q() { make -s -f Makefile -f - q <<<"q: ; @echo \$($1)"; }
cuda_dir=$(q CUDA_DIR)
cxx=${CXX:-g++}
cc=${CC:-gcc}
mkdir -p "$out/obj" "$out/plugins" "$out/tmp"
inc=(-I"$top/include" -I"$top/backends/cuda" -iquote "$top/backends/cuda" -I"$cuda_dir/include")
flags=(-O1 -g -fPIC -ffp-contract=off -fno-fast-math $asan)

objs=()
for lo in $(q backends_cuda_cuda_la_OBJECTS); do
    base=$(basename "$lo" .lo)
    src=backends/cuda/$base.cu
    if [ -e "$src" ]; then
        # kernel<<<grid, block, smem, stream>>>(args) -> glia_emu_launch("kernel", grid, block, smem, stream, kernel, args)
        perl -pe 's/\b([A-Za-z_]\w*(?:<[^<>;()]*>)?)<<<(.*?)>>>\(/glia_emu_launch("$1", $2, $1, /g' "$src" >"$out/obj/$base.cc"
        $cxx -std=c++17 "${flags[@]}" -Wall -Wextra -Wno-unused-parameter -Wno-unknown-pragmas -include "$top/tests/emu/cuda_emu.h" \
            "${inc[@]}" -c -o "$out/obj/$base.o" "$out/obj/$base.cc"
        objs+=("$out/obj/$base.o")
    else
        objs+=("$(dirname "$lo")/.libs/$base.o")
    fi
done
# the emulated CUDA runtime, cuDNN, cuBLASLt and NCCL: one library that cuda.so and nccl.so share
emu=()
for f in emu_runtime emu_libs emu_cudnn_graph emu_nccl emu_jit; do
    $cc -std=gnu11 "${flags[@]}" -Wall -Wextra -Wno-deprecated-declarations -I"$cuda_dir/include" $(q NCCL_CFLAGS) \
        -c -o "$out/obj/$f.o" "tests/emu/$f.c"
    emu+=("$out/obj/$f.o")
done
mkdir -p "$out/lib"
rm -f "$out/plugins/"*.so  # links to the staged plugins: never write through them
$cc -shared $asan -o "$out/lib/libglia-cudaemu.so" "${emu[@]}" -ldl -lpthread -lm
emulib=(-L"$out/lib" -Wl,-rpath,"$out/lib" -lglia-cudaemu)
$cxx -shared -Wl,-Bsymbolic $asan -o "$out/plugins/cuda.so" "${objs[@]}" -L"$top/.libs" -lglia "${emulib[@]}" \
    -L"$cuda_dir/lib64" -Wl,-rpath,"$cuda_dir/lib64" -lnvrtc -lpthread -lm
nccl_o=plugins/comm/nccl/.libs/nccl_la-nccl.o
if [ -e "$nccl_o" ]; then
    $cc -shared -Wl,-Bsymbolic $asan -o "$out/plugins/nccl.so" "$nccl_o" -L"$top/.libs" -lglia "${emulib[@]}" -lpthread
fi
for p in stage/plugins/*.so; do
    [ -e "$out/plugins/$(basename "$p")" ] && [ ! -L "$out/plugins/$(basename "$p")" ] || ln -sfn "$top/$p" "$out/plugins/$(basename "$p")"
done

# how emu_jit.c builds the source of NVRTC's kernels for the host, also for tests/emu/glia.sh (which sources env.sh)
{
    printf 'export GLIA_EMU_JIT_CXX=%q\n' "$cxx -std=c++17 ${flags[*]} -shared -w -include $top/tests/emu/cuda_emu.h -I$cuda_dir/include -x c++"
    printf 'export GLIA_EMU_JIT_LIBS=%q\n' "-x none -L$out/lib -Wl,-rpath,$out/lib -lglia-cudaemu"
    printf 'export GLIA_EMU_JIT_DIR=%q\n' "$out/tmp"
} > "$out/env.sh"
. "$out/env.sh"
export GLIA_PLUGIN_PATH=$out/plugins GLIA_PLUGIN_SYSTEM_PATH= GLIA_FIXTURES=$top/tests/fixtures/.libs GLIA_SRCDIR=$top GLIA_TMPDIR=$out/tmp \
    GLIA_BIN=$top/tools/glia
[ -z "$asan" ] || export LD_PRELOAD=$($cc -print-file-name=libasan.so) ASAN_OPTIONS=detect_leaks=0
pass=0 fail=0
for t in "${tests[@]}"; do
    make -s "tests/$t" >/dev/null
    sel=${GLIA_TESTS:-}
    # the watchdog test stands in for a stalled peer with 70 TFLOP of GEMMs, far too many for the CPU
    [ "$t" != test_cuda_dist ] || [ -n "$sel" ] || sel=-test_nccl_watchdog
    # of the CPU programs, only their tests that take the GPU (the rest run in make check)
    [ "$t" != test_syncbn ] || [ -n "$sel" ] || sel=test_cuda_replicas
    [ "$t" != test_model ] || [ -n "$sel" ] || sel=test_device_cuda_or_fallback
    if GLIA_TESTS=$sel "tests/$t" >"$out/$t.log" 2>&1; then pass=$((pass + 1)); r=PASS; else r="FAIL ($?)"; fail=$((fail + 1)); fi
    echo "$r: $t   ($(grep -E '^ +asserts' "$out/$t.log" | tr -s ' ' || true))"
done
echo "$pass passed, $fail failed (logs in $out)"
[ "$fail" -eq 0 ]
