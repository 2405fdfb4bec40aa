#!/bin/sh
# bench/gpu_fmnist/run.sh — trains fmnist-cnn.ini and fmnist-resnet.ini on the GPU with glia and the
# same networks with PyTorch tuned per its performance-tuning guide (torch_fmnist_gpu.py), alternating,
# ROUNDS rounds, and prints epoch time, samples/s and test accuracy of each side and the ratio.
# Not a test: run it on an idle GPU from a built tree (fetch-data.sh first where the dataset is not
# installed).
#   usage: bench/gpu_fmnist/run.sh [--rounds N] [--epochs N] [--precision fp32|tf32|bf16|fp16]
#          [--memory-format contiguous|channels_last] [--cudnn-benchmark on|off] [--models "cnn resnet"]
#          [--device cuda|cpu] [--train-samples N] [--test-samples N] [--cuda-graph on|off]
#   defaults: 3 rounds, the INI files' epochs, bf16, channels_last, cudnn_benchmark on, cuda, all samples,
#   cuda_graph off (on: glia replays its training passes from CUDA graphs; PyTorch runs as before)
#   environment: PYTHON (python3) with torch; GLIA (./tools/glia); DATA_DIR (bench/data when it holds
#   the dataset, else /usr/share/datasets/fashion-mnist)
set -eu
cd "$(dirname "$0")/../.."
rounds=3 epochs=0 precision=bf16 format=channels_last bench=on models="cnn resnet" device=cuda graph=off
train_samples=0 test_samples=0
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
echo "$("$glia" --version); device $device, precision $precision, memory_format $format, cudnn_benchmark $bench, cuda_graph $graph"
echo "data $DATA_DIR; $rounds rounds; epochs: $([ "$epochs" = 0 ] && echo "as in the INI files" || echo "$epochs")"

for r in $(seq 1 "$rounds"); do
    for m in $models; do
        set -- --set runtime.device="$device" --set runtime.precision="$precision" \
            --set runtime.memory_format="$format" --set runtime.cudnn_benchmark="$bench" --set runtime.seed="$r" \
            --set runtime.cuda_graph="$graph" \
            --set data.train_images="$DATA_DIR/train-images-idx3-ubyte.gz" \
            --set data.train_labels="$DATA_DIR/train-labels-idx1-ubyte.gz" \
            --set data.test_images="$DATA_DIR/t10k-images-idx3-ubyte.gz" \
            --set data.test_labels="$DATA_DIR/t10k-labels-idx1-ubyte.gz" \
            --set data.train_samples="$train_samples" --set data.test_samples="$test_samples"
        [ "$epochs" = 0 ] || set -- "$@" --set train.epochs="$epochs"
        "$glia" train "share/glia/examples/fmnist-$m.ini" --quiet "$@" --metrics "$out/glia-$m-$r.jsonl"
        "$python" bench/gpu_fmnist/torch_fmnist_gpu.py "$DATA_DIR" "$m" --epochs "$epochs" --precision "$precision" \
            --memory-format "$format" --cudnn-benchmark "$bench" --seed "$r" --device "$device" \
            --train-samples "$train_samples" --test-samples "$test_samples" > "$out/torch-$m-$r.jsonl"
        echo "round $r $m: glia $(tail -n 1 "$out/glia-$m-$r.jsonl")"
        echo "round $r $m: torch $(tail -n 1 "$out/torch-$m-$r.jsonl")"
    done
done

"$python" - "$out" "$rounds" "$models" "$DATA_DIR" "$train_samples" <<'PY'
import gzip, json, statistics, struct, sys
out, rounds, models, data, limit = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(), sys.argv[4], int(sys.argv[5])
with gzip.open(f'{data}/train-images-idx3-ubyte.gz', 'rb') as f:
    n = struct.unpack('>I', f.read(8)[4:8])[0]
n = min(n, limit) if limit > 0 else n
def epochs(path, side):
    """(train seconds, test accuracy, peak device MiB or None) per epoch."""
    rows = [json.loads(l) for l in open(path) if l.strip()]
    return [(n / e['samples_per_s'] if side == 'glia' else e['train_seconds'], e['test_accuracy'],
             e.get('device_peak_mb')) for e in rows]
med = statistics.median
print()
print(f"training samples per epoch: {n}; medians over {rounds} rounds; epoch s counts training only (no evaluation);")
print("peak MiB: the most device memory in tensors at once (glia's allocator, torch.cuda.max_memory_allocated)")
print(f"{'model':8} {'side':8} {'epoch 1 s':>10} {'later epochs s':>15} {'samples/s':>10} {'test acc (last)':>16} {'peak MiB':>9}")
for m in models:
    res, mem = {}, {}
    for side in ('glia', 'torch'):
        runs = [epochs(f'{out}/{side}-{m}-{r}.jsonl', side) for r in range(1, rounds + 1)]
        first = med(run[0][0] for run in runs)
        later = med(med(e[0] for e in run[1:]) if len(run) > 1 else run[0][0] for run in runs)
        acc = med(run[-1][1] for run in runs)
        peaks = [run[-1][2] for run in runs if run[-1][2] is not None]
        mem[side] = med(peaks) if peaks else None
        res[side] = later
        peak = f"{mem[side]:9.1f}" if mem[side] is not None else f"{'-':>9}"
        print(f"{m:8} {side if side == 'glia' else 'pytorch':8} {first:10.2f} {later:15.2f} {n / later:10.0f} {acc:16.4f} {peak}")
    print(f"{m:8} ratio glia/pytorch, epoch time (later epochs): {res['glia'] / res['torch']:.3f}   (< 1.0: glia is faster)")
    if mem['glia'] and mem['torch']:
        print(f"{m:8} ratio glia/pytorch, peak device memory:       {mem['glia'] / mem['torch']:.3f}   (< 1.0: glia uses less)")
PY
