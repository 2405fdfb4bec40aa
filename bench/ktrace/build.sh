#!/bin/sh
# bench/ktrace/build.sh — builds bench/ktrace/ktrace.cc into OUT.so against the CUPTI it finds: the CUDA toolkit's
# (CUDA_HOME, /usr/local/cuda, their extras/CUPTI) or the pip wheel's beside PyTorch (nvidia/...). Then run any CUDA
# program with CUDA_INJECTION64_PATH=OUT.so (ktrace.cc's head says what it prints). Not part of glia's build.
#   usage: bench/ktrace/build.sh OUT.so
set -eu
[ $# -eq 1 ] || { echo "usage: $0 OUT.so" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
roots="${CUDA_HOME:-} /usr/local/cuda /usr/local/cuda/extras/CUPTI"
py=$(python3 -c 'import nvidia, os; print(list(nvidia.__path__)[0])' 2>/dev/null) && roots="$roots $py"
inc="" lib=""
for r in $roots; do
    [ -d "$r" ] || continue
    [ -n "$inc" ] || inc=$(find "$r/" -name cupti_activity.h 2>/dev/null | head -n 1)
    [ -n "$lib" ] || lib=$(find "$r/" -name 'libcupti.so*' 2>/dev/null | sort | head -n 1)
done
[ -n "$inc" ] && [ -n "$lib" ] || { echo "build.sh: no CUPTI found (header: ${inc:-none}, library: ${lib:-none})" >&2; exit 1; }
cuda_inc=$(dirname "$(find ${CUDA_HOME:+$CUDA_HOME/} /usr/local/cuda/ -name cuda.h 2>/dev/null | head -n 1)")
${CXX:-g++} -std=c++17 -O2 -shared -fPIC -o "$1" "$here/ktrace.cc" -I"$(dirname "$inc")" -I"$cuda_inc" "$lib" \
    -Wl,-rpath,"$(dirname "$lib")"
echo "ktrace: built $1 with $inc and $lib"
