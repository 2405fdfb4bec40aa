#!/bin/sh
# bench/gpu_conv/run.sh — the convolution table of PyTorch's performance-tuning guide, glia against
# PyTorch: `glia bench conv --json` and torch_conv.py alternating ROUNDS rounds in one run, then one
# side-by-side table of median ms per iteration and the ratio glia/PyTorch, under a header naming the
# GPU, driver, CUDA, cuDNN and PyTorch versions. Not a test: run it on an idle GPU from a built tree.
#   usage: bench/gpu_conv/run.sh [ROUNDS]
#   environment: PYTHON (python3) with torch; GLIA (./tools/glia); DEVICE (cuda; cpu to try the
#   script on a machine without a GPU); STEPS (50), WARMUP (10), BATCH (32), BIAS (on), RELU (off; on: the
#   convolution followed by a relu, glia's conv2d with activation = relu against F.relu(conv(x)))
set -eu
cd "$(dirname "$0")/../.."
rounds=${1:-3}
python=${PYTHON:-python3}
glia=${GLIA:-./tools/glia}
device=${DEVICE:-cuda}
steps=${STEPS:-50}
warmup=${WARMUP:-10}
batch=${BATCH:-32}
bias=${BIAS:-on}
relu=${RELU:-off}
export GLIA_PLUGIN_PATH="${GLIA_PLUGIN_PATH:-$PWD/stage/plugins}"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT INT TERM

gpu=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -n 1) || gpu=""
echo "gpu, driver: ${gpu:-none (nvidia-smi found no GPU)}"
"$python" -c 'import torch; print("pytorch %s, CUDA %s, cuDNN %s" % (torch.__version__, torch.version.cuda, torch.backends.cudnn.version()))'
echo "$("$glia" --version); device $device, batch $batch, bias $bias, relu $relu, $steps steps after $warmup warm-up, $rounds rounds"

for r in $(seq 1 "$rounds"); do
    st=0
    "$glia" bench conv --json --device "$device" --steps "$steps" --warmup "$warmup" --batch "$batch" --bias "$bias" --relu "$relu" \
        > "$out/glia-$r.jsonl" || st=$?
    if ! grep -q '"pass"' "$out/glia-$r.jsonl"; then
        echo "run.sh: glia bench conv failed (exit $st)" >&2
        exit 1
    fi
    [ "$st" = 0 ] || echo "run.sh: round $r: some glia rows failed (see the table)" >&2
    "$python" bench/gpu_conv/torch_conv.py --device "$device" --steps "$steps" --warmup "$warmup" --batch "$batch" \
        --bias "$bias" --relu "$relu" > "$out/torch-$r.jsonl"
    echo "round $r done"
done

"$python" - "$out" "$rounds" <<'PY'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
def rows(path):
    d = {}
    for line in open(path):
        o = json.loads(line)
        if 'pass' in o:
            d[(o['pass'], o['cudnn_benchmark'], o['precision'], o['memory_format'])] = o
    return d
g = [rows(f'{out}/glia-{r}.jsonl') for r in range(1, rounds + 1)]
t = [rows(f'{out}/torch-{r}.jsonl') for r in range(1, rounds + 1)]
def med(runs, k):
    v = [x[k]['ms'] for x in runs if k in x and x[k].get('ms') is not None]
    return statistics.median(v) if v else None
def note(runs, k):
    return next((x[k]['note'] for x in runs if k in x and x[k].get('note')), 'missing')
meta = json.loads(open(f'{out}/glia-1.jsonl').readline())
flops = meta['forward_flops']
print()
print(f"conv2d 64->64 3x3 padding 1, bias {'on' if meta['bias'] else 'off'}, input {meta['batch']}x64x64x64; "
      f"glia impl {meta['impl']}; median of {rounds} rounds; PyTorch fp32 without TF32 (allow_tf32 = False)")
print(f"{'pass':17} {'autotune':8} {'precision':9} {'format':13} {'glia ms':>9} {'torch ms':>9} {'glia/torch':>10} "
      f"{'glia TF/s':>9} {'torch TF/s':>10}")
for p, mult in (('forward', 1), ('forward+backward', 3)):
    for tune in (False, True):
        for prec in ('fp32', 'bf16'):
            for fmt in ('contiguous', 'channels_last'):
                k = (p, tune, prec, fmt)
                gm, tm = med(g, k), med(t, k)
                head = f"{p:17} {'on' if tune else 'off':8} {prec:9} {fmt:13} "
                tf = lambda ms: flops * mult / (ms * 1e-3) * 1e-12
                if gm is None:
                    print(head + f"{'-':>9} {tm:9.3f} {'-':>10} {'-':>9} {tf(tm):10.2f}   glia: {note(g, k)}")
                else:
                    print(head + f"{gm:9.3f} {tm:9.3f} {gm / tm:10.3f} {tf(gm):9.2f} {tf(tm):10.2f}")
print("glia/torch < 1.0: glia is faster")
PY
