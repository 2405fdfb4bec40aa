#!/bin/sh
# bench/gpu_resnet50/run.sh — ResNet-50 training throughput (images/s) on one GPU: glia on
# share/glia/examples/resnet50.ini (synthetic 3x224x224 data, bf16, channels_last, batch 256) with
# [runtime] cuda_graph off and on, against PyTorch on the same data shape (torch_resnet50.py: eager,
# torch.compile, the whole step in a CUDA graph, torch.compile's reduce-overhead), one after another in each
# round on the same GPU, warm-up steps excluded; prints a table with the ratios of glia to the fastest PyTorch
# variant. A variant that cannot run is marked failed, with why; the others go on. Not a test: run it on an
# idle GPU from a built tree.
#   usage: bench/gpu_resnet50/run.sh [--rounds N] [--steps N] [--batch N] [--precision bf16|fp32]
#          [--variants "eager compile graph compile-graphs"] [--glia-graph "off on"] [--device cuda|cpu]
#   defaults: 1 round, 30 timed steps after 30 warm-up steps, batch 256, bf16, every variant, glia with
#   cuda_graph off and on, cuda (cpu: a check of this script at a tiny --batch and --steps with --precision fp32
#   --glia-graph off; the CUDA-graph variants fail there)
#   glia's timing: `glia train` with [train] epochs = 2 of STEPS batches each; epoch 1 is the warm-up (cuDNN
#   autotuning, CUDA graph capture), epoch 2's training samples/s is the figure; no evaluation ([train]
#   eval_every = 0: PyTorch's side has none, and its convolution plans would lengthen the start).
#   Its data are made on the host when the model is built; glia feeds them from the device when this build
#   has [data] resident (used when `glia plugins --describe data` lists it), else through its loader.
#   environment: PYTHON (python3) with torch; GLIA (./tools/glia)
set -eu
cd "$(dirname "$0")/../.."
rounds=1 steps=30 batch=256 precision=bf16 device=cuda variants="eager compile graph compile-graphs" glia_graph="off on"
while [ $# -gt 0 ]; do
    [ $# -ge 2 ] || { echo "run.sh: $1 needs a value" >&2; exit 2; }
    case "$1" in
    --rounds) rounds=$2 ;;
    --steps) steps=$2 ;;
    --batch) batch=$2 ;;
    --precision) precision=$2 ;;
    --variants) variants=$2 ;;
    --glia-graph) glia_graph=$2 ;;
    --device) device=$2 ;;
    *) echo "run.sh: unknown option $1 (see the usage at the top of $0)" >&2; exit 2 ;;
    esac
    shift 2
done
python=${PYTHON:-python3}
glia=${GLIA:-./tools/glia}
export GLIA_PLUGIN_PATH="${GLIA_PLUGIN_PATH:-$PWD/stage/plugins}"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT INT TERM

gpu=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -n 1) || gpu=""
echo "gpu, driver: ${gpu:-none (nvidia-smi found no GPU)}"
"$python" -c 'import torch; print("pytorch %s, CUDA %s, cuDNN %s" % (torch.__version__, torch.version.cuda, torch.backends.cudnn.version()))'
resident=""
if "$glia" plugins --describe data 2>/dev/null | grep -q '^ *resident '; then
    resident="--set data.resident=on"
fi
echo "$("$glia" --version); device $device, batch $batch, $precision, channels_last, $steps timed steps after $steps warm-up steps;" \
    "glia's data: $([ -n "$resident" ] && echo "on the device ([data] resident = on)" || echo "host loader (this build has no [data] resident)")"
echo "$rounds rounds; pytorch variants: $variants; glia cuda_graph: $glia_graph"

n=$((steps * batch))
for r in $(seq 1 "$rounds"); do
    for g in $glia_graph; do
        rc=0
        # shellcheck disable=SC2086  # $resident is empty or two words
        "$glia" train share/glia/examples/resnet50.ini --quiet --metrics "$out/glia-$g-$r.jsonl" \
            --set runtime.device="$device" --set runtime.precision="$precision" --set runtime.seed="$r" \
            --set runtime.cuda_graph="$g" --set train.epochs=2 --set data.train_samples="$n" \
            --set data.test_samples="$batch" --set train.eval_every=0 --set data.batch_size="$batch" --set data.test_batch_size="$batch" \
            $resident > "$out/glia-$g-$r.err" 2>&1 || rc=$?
        if [ "$rc" = 0 ]; then
            echo "round $r glia cuda_graph $g: $(tail -n 1 "$out/glia-$g-$r.jsonl")"
        else
            tail -n 1 "$out/glia-$g-$r.err" > "$out/glia-$g-$r.failed"
            echo "round $r glia cuda_graph $g FAILED: $(cat "$out/glia-$g-$r.failed")"
        fi
    done
    for v in $variants; do
        rc=0
        "$python" bench/gpu_resnet50/torch_resnet50.py --variant "$v" --batch "$batch" --steps "$steps" \
            --warmup "$steps" --samples "$((10 * batch))" --precision "$precision" --seed "$r" --device "$device" \
            > "$out/torch-$v-$r.jsonl" 2> "$out/torch-$v-$r.err" || rc=$?
        if [ "$rc" = 0 ]; then
            echo "round $r torch $v: $(tail -n 1 "$out/torch-$v-$r.jsonl")"
        else
            { grep -v '^ *$' "$out/torch-$v-$r.err" || true; } | tail -n 1 > "$out/torch-$v-$r.failed"
            [ -s "$out/torch-$v-$r.failed" ] || echo "exit status $rc" > "$out/torch-$v-$r.failed"
            echo "round $r torch $v FAILED: $(cat "$out/torch-$v-$r.failed")"
        fi
    done
done

"$python" - "$out" "$rounds" "$glia_graph" "$variants" <<'PY'
import json, os, statistics, sys
out, rounds, graphs, variants = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(), sys.argv[4].split()
med = statistics.median
def result(path, glia):
    """(images/s, peak device MiB or None) of one run."""
    rows = [json.loads(l) for l in open(path) if l.strip()]
    e = rows[-1]
    return (e['samples_per_s'], e.get('device_peak_mb')) if glia else (e['images_per_s'], e.get('device_peak_mb'))
sides = [(f'glia cuda_graph {g}', f'{out}/glia-{g}-%d') for g in graphs] + \
        [(f'pytorch {v}', f'{out}/torch-{v}-%d') for v in variants]
rate, mem = {}, {}
print()
print(f"training images/s, medians over {rounds} round(s); peak MiB: the most device memory in tensors at once")
print(f"{'side':24} {'images/s':>10} {'peak MiB':>10}")
for side, stem in sides:
    failed = [open(f'{stem % r}.failed').read().strip() for r in range(1, rounds + 1) if os.path.exists(f'{stem % r}.failed')]
    if failed:
        why = failed[0].split(': ', 2)[-1] if failed[0].startswith('torch_resnet50.py: variant') else failed[0]
        print(f"{side:24} failed: {why}")
        continue
    runs = [result(f'{stem % r}.jsonl', side.startswith('glia')) for r in range(1, rounds + 1)]
    rate[side] = med(x[0] for x in runs)
    peaks = [x[1] for x in runs if x[1] is not None]
    mem[side] = med(peaks) if peaks else None
    peak = f"{mem[side]:10.1f}" if mem[side] is not None else f"{'-':>10}"
    print(f"{side:24} {rate[side]:10.1f} {peak}")
torch_sides = [s for s in rate if s.startswith('pytorch')]
if torch_sides:
    best = max(torch_sides, key=lambda s: rate[s])
    print(f"best PyTorch: {best[8:]}")
    for side in rate:
        if side.startswith('glia'):
            print(f"ratio {side} / best PyTorch, images/s: {rate[side] / rate[best]:.3f}   (> 1.0: glia is faster)")
print("context only, not a target (another GPU, another input pipeline): NVIDIA's published ResNet-50 mixed-precision "
      "training figure for one A100 is about 2,470 images/s")
PY
