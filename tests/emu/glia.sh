#!/bin/bash
# tests/emu/glia.sh — runs tools/glia against the emulated CUDA that tests/emu/run.sh built in ${GLIA_EMU_DIR:-/tmp/glia-emu}
# (its plugin folder, with the emulated cuda.so), so that any model can be trained, checked or profiled on
# `device = cuda` without a GPU: slowly (kernels run on the CPU one block at a time), but with the backend's own host
# code, allocations and kernels. Not a GPU and not a timing. GLIA_EMU_NO_COMPUTE=1 (emu_runtime.c) skips the
# computation and keeps the allocations: a GPT-2 step in seconds, for the caching allocator's peak (the metrics file's
# device_peak_mb), not for any value.
#   tests/emu/glia.sh COMMAND [ARGS...]     (e.g. train MODEL.ini --metrics m.jsonl --set runtime.device=cuda)
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
out=${GLIA_EMU_DIR:-/tmp/glia-emu}
[ -e "$out/plugins/cuda.so" ] && [ -e "$out/lib/libglia-cudaemu.so" ] && [ -e "$out/env.sh" ] ||
    { echo "glia.sh: no emulated CUDA in $out: run tests/emu/run.sh (any test) first" >&2; exit 2; }
. "$out/env.sh"  # as run.sh sets it: how emu_jit.c builds NVRTC's kernels for the host
export GLIA_PLUGIN_PATH=$out/plugins GLIA_PLUGIN_SYSTEM_PATH=
mkdir -p "$out/tmp"
exec "$top/tools/glia" "$@"
