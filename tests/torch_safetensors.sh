#!/bin/sh
# tests/torch_safetensors.sh — weights between glia and PyTorch through safetensors files, on Fashion-MNIST's test
# set: fmnist-cnn trained 60 steps by glia, exported, read by tests/torch_safetensors.py's own reader (json + numpy)
# into PyTorch's twin of the model (load_state_dict, strict), which must score glia's test accuracy within 0.1
# points; then the twin trained 60 steps by PyTorch, written by that script, and glia's eval with [train] init_from
# scoring PyTorch's accuracy within 0.1 points. Skipped (77) without /usr/bin/python3's torch or the dataset.
set -eu
py=/usr/bin/python3
d=/usr/share/datasets/fashion-mnist
[ -x "$py" ] && "$py" -c "import torch, numpy" 2>/dev/null || { echo "torch_safetensors: no /usr/bin/python3 with torch: skipped"; exit 77; }
[ -f "$d/t10k-images-idx3-ubyte.gz" ] || { echo "torch_safetensors: no Fashion-MNIST in $d: skipped"; exit 77; }
glia=${GLIA_BIN:-tools/glia}
src=${GLIA_SRCDIR:-.}
tmp=${GLIA_TMPDIR:-/tmp}/torch-safetensors
rm -rf "$tmp"
mkdir -p "$tmp"
ini=$src/share/glia/examples/fmnist-cnn.ini
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-SkylakeX}
accuracy() { sed -n 's/.*test_accuracy \([0-9.]*\).*/\1/p'; }

"$glia" train "$ini" --quiet --set runtime.device=cpu --set train.max_steps=60 --set train.checkpoint_dir="$tmp/ck" \
    > "$tmp/train.log" 2>&1 || { cat "$tmp/train.log"; exit 1; }
"$glia" export "$ini" --checkpoint "$tmp/ck/step-00000060.ckpt" -o "$tmp/glia.safetensors" --set runtime.device=cpu
g=$("$glia" eval "$ini" --checkpoint "$tmp/ck/step-00000060.ckpt" --set runtime.device=cpu | accuracy)
echo "glia: test accuracy $g after 60 steps"
"$py" "$src/tests/torch_safetensors.py" check "$tmp/glia.safetensors" "$d" "$g"

t=$("$py" "$src/tests/torch_safetensors.py" train "$tmp/torch.safetensors" "$d")
gt=$("$glia" eval "$ini" --set runtime.device=cpu --set train.init_from="$tmp/torch.safetensors" | accuracy)
echo "pytorch: test accuracy $t after 60 steps; glia with its weights: $gt"
"$py" -c "import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); sys.exit(0 if abs(a - b) <= 0.001 else 1)" "$t" "$gt" \
    || { echo "FAIL: glia scores $gt with PyTorch's weights, PyTorch $t"; exit 1; }
echo "torch_safetensors: passed"
