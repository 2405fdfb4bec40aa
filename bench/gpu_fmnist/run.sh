#!/bin/sh
# bench/gpu_fmnist/run.sh — trains fmnist-cnn.ini and fmnist-resnet.ini on the GPU with glia and the
# same networks with PyTorch tuned per its performance-tuning guide (torch_fmnist_gpu.py) in each of its
# variants (loader, eager, graph, compile, compile-graphs: see that file), one after another in every round,
# ROUNDS rounds, and prints each one's epoch time, samples/s, test accuracy and peak device memory, and the
# ratio of glia to the fastest PyTorch variant. A variant that cannot run is marked failed, with why; the
# others go on. Not a test: run it on an idle GPU from a built tree (fetch-data.sh first where the dataset
# is not installed).
#   usage: bench/gpu_fmnist/run.sh [--rounds N] [--epochs N] [--precision fp32|tf32|bf16|fp16]
#          [--memory-format contiguous|channels_last] [--cudnn-benchmark on|off] [--models "cnn resnet"]
#          [--device cuda|cpu] [--train-samples N] [--test-samples N] [--cuda-graph on|off]
#          [--fuse auto|on|off] [--variants "loader eager graph compile compile-graphs"]
#   defaults: 3 rounds, the INI files' epochs, bf16, channels_last, cudnn_benchmark on, cuda, all samples,
#   cuda_graph off (on: glia replays its training passes from CUDA graphs; PyTorch's graph variants are
#   its own), fuse auto (glia's [graph] fuse_pointwise: off runs glia without its fusions, among them
#   conv2d + relu and, in evaluation, conv2d + batchnorm), every variant
#   environment: PYTHON (python3) with torch; GLIA (./tools/glia); DATA_DIR (bench/data when it holds
#   the dataset, else /usr/share/datasets/fashion-mnist)
set -eu
cd "$(dirname "$0")/../.."
rounds=3 epochs=0 precision=bf16 format=channels_last bench=on models="cnn resnet" device=cuda graph=off fuse=auto
train_samples=0 test_samples=0 variants="loader eager graph compile compile-graphs"
while [ $# -gt 0 ]; do
    [ $# -ge 2 ] || { echo "run.sh: $1 needs a value" >&2; exit 2; }
    case "$1" in
    --rounds) rounds=$2 ;;
    --epochs) epochs=$2 ;;
    --precision) precision=$2 ;;
    --memory-format) format=$2 ;;
    --cudnn-benchmark) bench=$2 ;;
    --models) models=$2 ;;
    --device) device=$2 ;;
    --train-samples) train_samples=$2 ;;
    --test-samples) test_samples=$2 ;;
    --cuda-graph) graph=$2 ;;
    --fuse) fuse=$2 ;;
    --variants) variants=$2 ;;
    *) echo "run.sh: unknown option $1 (see the usage at the top of $0)" >&2; exit 2 ;;
    esac
    shift 2
done
python=${PYTHON:-python3}
glia=${GLIA:-./tools/glia}
if [ -z "${DATA_DIR:-}" ]; then
    if [ -f bench/data/train-images-idx3-ubyte.gz ]; then DATA_DIR=bench/data; else DATA_DIR=/usr/share/datasets/fashion-mnist; fi
fi
for f in train-images-idx3-ubyte.gz train-labels-idx1-ubyte.gz t10k-images-idx3-ubyte.gz t10k-labels-idx1-ubyte.gz; do
    [ -f "$DATA_DIR/$f" ] || { echo "run.sh: $DATA_DIR/$f not found: set DATA_DIR or run bench/gpu_fmnist/fetch-data.sh" >&2; exit 1; }
done
export GLIA_PLUGIN_PATH="${GLIA_PLUGIN_PATH:-$PWD/stage/plugins}"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT INT TERM

gpu=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -n 1) || gpu=""
echo "gpu, driver: ${gpu:-none (nvidia-smi found no GPU)}"
"$python" -c 'import torch; print("pytorch %s, CUDA %s, cuDNN %s" % (torch.__version__, torch.version.cuda, torch.backends.cudnn.version()))'
echo "$("$glia" --version); device $device, precision $precision, memory_format $format, cudnn_benchmark $bench, cuda_graph $graph, fuse_pointwise $fuse"
echo "data $DATA_DIR; $rounds rounds; epochs: $([ "$epochs" = 0 ] && echo "as in the INI files" || echo "$epochs"); pytorch variants: $variants"

for r in $(seq 1 "$rounds"); do
    for m in $models; do
        set -- --set runtime.device="$device" --set runtime.precision="$precision" \
            --set runtime.memory_format="$format" --set runtime.cudnn_benchmark="$bench" --set runtime.seed="$r" \
            --set runtime.cuda_graph="$graph" --set graph.fuse_pointwise="$fuse" \
            --set data.train_images="$DATA_DIR/train-images-idx3-ubyte.gz" \
            --set data.train_labels="$DATA_DIR/train-labels-idx1-ubyte.gz" \
            --set data.test_images="$DATA_DIR/t10k-images-idx3-ubyte.gz" \
            --set data.test_labels="$DATA_DIR/t10k-labels-idx1-ubyte.gz" \
            --set data.train_samples="$train_samples" --set data.test_samples="$test_samples"
        [ "$epochs" = 0 ] || set -- "$@" --set train.epochs="$epochs"
        "$glia" train "share/glia/examples/fmnist-$m.ini" --quiet "$@" --metrics "$out/glia-$m-$r.jsonl"
        echo "round $r $m: glia $(tail -n 1 "$out/glia-$m-$r.jsonl")"
        for v in $variants; do
            # a variant that fails leaves its reason (the last line of its stderr) and no result
            rc=0
            "$python" bench/gpu_fmnist/torch_fmnist_gpu.py "$DATA_DIR" "$m" --variant "$v" --epochs "$epochs" \
                --precision "$precision" --memory-format "$format" --cudnn-benchmark "$bench" --seed "$r" \
                --device "$device" --train-samples "$train_samples" --test-samples "$test_samples" \
                > "$out/torch-$m-$v-$r.jsonl" 2> "$out/torch-$m-$v-$r.err" || rc=$?
            if [ "$rc" = 0 ]; then
                echo "round $r $m: torch $v $(tail -n 1 "$out/torch-$m-$v-$r.jsonl")"
            else
                { grep -v '^ *$' "$out/torch-$m-$v-$r.err" || true; } | tail -n 1 > "$out/torch-$m-$v-$r.failed"
                [ -s "$out/torch-$m-$v-$r.failed" ] || echo "exit status $rc" > "$out/torch-$m-$v-$r.failed"
                echo "round $r $m: torch $v FAILED: $(cat "$out/torch-$m-$v-$r.failed")"
            fi
        done
    done
done

"$python" - "$out" "$rounds" "$models" "$DATA_DIR" "$train_samples" "$variants" <<'PY'
import gzip, json, os, statistics, struct, sys
out, rounds, models, data, limit = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(), sys.argv[4], int(sys.argv[5])
variants = sys.argv[6].split()
with gzip.open(f'{data}/train-images-idx3-ubyte.gz', 'rb') as f:
    n = struct.unpack('>I', f.read(8)[4:8])[0]
n = min(n, limit) if limit > 0 else n
def epochs(path, glia):
    """(train seconds, samples trained, test accuracy, peak device MiB or None) per epoch."""
    rows = [json.loads(l) for l in open(path) if l.strip()]
    return [(n / e['samples_per_s'] if glia else e['train_seconds'], n if glia else e['samples'], e['test_accuracy'],
             e.get('device_peak_mb')) for e in rows]
med = statistics.median
print()
print(f"training samples per epoch: {n}; medians over {rounds} rounds; epoch s counts training only (no evaluation);")
print("last epoch: the one the ratio compares (torch.compile's compilation and warm-up fall in epoch 1);")
print("peak MiB: the most device memory in tensors at once (glia's allocator, torch.cuda.max_memory_allocated)")
print(f"{'model':8} {'side':22} {'epoch 1 s':>10} {'last epoch s':>13} {'samples/s':>10} {'test acc (last)':>16} {'peak MiB':>9}")
for m in models:
    sides = [('glia', f'{out}/glia-{m}-%d.jsonl')] + [(f'pytorch {v}', f'{out}/torch-{m}-{v}-%d.jsonl') for v in variants]
    last, mem = {}, {}
    for side, pattern in sides:
        failed = [open(pattern.replace('.jsonl', '.failed') % r).read().strip() for r in range(1, rounds + 1)
                  if os.path.exists(pattern.replace('.jsonl', '.failed') % r)]
        if failed:
            why = failed[0].split(': ', 2)[-1] if failed[0].startswith('torch_fmnist_gpu.py: variant') else failed[0]
            print(f"{m:8} {side:22} failed: {why}")
            continue
        runs = [epochs(pattern % r, side == 'glia') for r in range(1, rounds + 1)]
        first = med(run[0][0] for run in runs)
        last[side] = med(run[-1][0] for run in runs)
        rate = med(run[-1][1] / run[-1][0] for run in runs)
        acc = med(run[-1][2] for run in runs)
        peaks = [run[-1][3] for run in runs if run[-1][3] is not None]
        mem[side] = med(peaks) if peaks else None
        peak = f"{mem[side]:9.1f}" if mem[side] is not None else f"{'-':>9}"
        print(f"{m:8} {side:22} {first:10.2f} {last[side]:13.2f} {rate:10.0f} {acc:16.4f} {peak}")
    torch_sides = [s for s in last if s != 'glia']
    if 'glia' not in last or not torch_sides:
        print(f"{m:8} no ratio: {'glia' if 'glia' not in last else 'every PyTorch variant'} failed")
        continue
    best = min(torch_sides, key=lambda s: last[s])
    print(f"{m:8} best PyTorch: {best[8:]}; ratio glia / best PyTorch, last epoch time: {last['glia'] / last[best]:.3f}"
          "   (< 1.0: glia is faster)")
    if mem['glia'] and mem[best]:
        print(f"{m:8} ratio glia / best PyTorch, peak device memory: {mem['glia'] / mem[best]:.3f}   (< 1.0: glia uses less)")
PY
