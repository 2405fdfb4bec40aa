#!/bin/sh
# bench/optim/run.sh — one optimizer step over a 50M-parameter arena in 160 tensors, `glia bench optim` per
# optimizer (adamw, lamb, lars, novograd, sgd by default): ms, bytes, GB/s and fraction of the GPU's peak
# bandwidth, under a header naming the GPU, driver and versions. Not a test, and not yet run (written where no GPU
# was at hand): run it on an idle GPU from a built tree and commit its raw output under bench/results/.
#   usage: bench/optim/run.sh [OPTIMIZER...]   (default: adamw lamb lars novograd sgd)
#   environment: GLIA (./tools/glia); DEVICE (cuda); PARAMS (50000000); TENSORS (160); STEPS (50), WARMUP (10)
set -eu
cd "$(dirname "$0")/../.."
glia=${GLIA:-./tools/glia}
device=${DEVICE:-cuda}
params=${PARAMS:-50000000}
tensors=${TENSORS:-160}
steps=${STEPS:-50}
warmup=${WARMUP:-10}
export GLIA_PLUGIN_PATH="${GLIA_PLUGIN_PATH:-$PWD/stage/plugins}"
opts=${*:-adamw lamb lars novograd sgd}

gpu=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -n 1) || gpu=""
echo "gpu, driver: ${gpu:-none (nvidia-smi found no GPU)}"
echo "$("$glia" --version); device $device, $params parameters in $tensors tensors, $steps steps after $warmup warm-up"
echo

st=0
for o in $opts; do
    echo "== $o"
    "$glia" bench optim "$o" --device "$device" --params "$params" --tensors "$tensors" --steps "$steps" \
        --warmup "$warmup" || st=1
    echo
done
exit $st
