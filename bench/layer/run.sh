#!/bin/sh
# bench/layer/run.sh — the memory-bound layers glia against PyTorch, one `glia bench layer` row pair each
# (glia ms, GB/s, PyTorch beside it via torch_layer.py) over the shapes of ResNet-50 (256x64x56x56, fp32 and
# bf16, both memory formats) and of fmnist-resnet (64x16x28x28, bf16, channels_last), under a header naming the
# GPU, driver and versions. Not a test: run it on an idle GPU from a built tree; raw output to commit as is.
#   usage: bench/layer/run.sh [OP...]          (default: batchnorm batchnorm_relu maxpool avgpool dropout relu
#                                               gelu cat cross_entropy; cross_entropy on 256x1000 and 64x10)
#   environment: PYTHON (python3) with torch; GLIA (./tools/glia); DEVICE (cuda); STEPS (50), WARMUP (10)
set -eu
cd "$(dirname "$0")/../.."
glia=${GLIA:-./tools/glia}
device=${DEVICE:-cuda}
steps=${STEPS:-50}
warmup=${WARMUP:-10}
export GLIA_PYTHON="${PYTHON:-python3}"
export GLIA_PLUGIN_PATH="${GLIA_PLUGIN_PATH:-$PWD/stage/plugins}"
ops=${*:-batchnorm batchnorm_relu maxpool avgpool dropout relu gelu cat cross_entropy}

gpu=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -n 1) || gpu=""
echo "gpu, driver: ${gpu:-none (nvidia-smi found no GPU)}"
"$GLIA_PYTHON" -c 'import torch; print("pytorch %s, CUDA %s, cuDNN %s" % (torch.__version__, torch.version.cuda, torch.backends.cudnn.version()))' || true
echo "$("$glia" --version); device $device, $steps steps after $warmup warm-up"
echo

st=0
one() {  # op shape precision format
    echo "== $1 $2 $3 $4"
    "$glia" bench layer "$1" --shape "$2" --precision "$3" --memory-format "$4" --device "$device" \
        --steps "$steps" --warmup "$warmup" --torch bench/layer/torch_layer.py || st=1
    echo
}
for op in $ops; do
    if [ "$op" = cross_entropy ]; then
        for shape in 256x1000 64x10; do one cross_entropy "$shape" bf16 contiguous; done
        continue
    fi
    for prec in fp32 bf16; do
        for fmt in contiguous channels_last; do one "$op" 256x64x56x56 "$prec" "$fmt"; done
    done
    one "$op" 64x16x28x28 bf16 channels_last
    one "$op" 64x32x14x14 bf16 channels_last
done
exit $st
