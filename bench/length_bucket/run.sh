#!/bin/sh
# bench/length_bucket/run.sh — what length-bucketing buys on variable-length data: one training epoch
# of text-cnn.ini on gen_tokens.py's set, glia with [data] group_by_length off and on, and the same
# network in PyTorch (torch_textcnn.py) with random and with length-grouped batches, alternating per
# round; prints median train seconds per epoch, the padding share, test accuracy, each side's speedup
# from grouping and the ratio glia/PyTorch. Not a test.
#   usage: bench/length_bucket/run.sh [--device auto|cpu|cuda] [--rounds N] [--threads N] [--out FILE]
#   environment: GLIA (./tools/glia), PYTHON (/usr/bin/python3) with torch, GLIA_PLUGIN_PATH
#   (stage/plugins). The data is made once into bench/data/tokens (git-ignored).
set -eu
here=$PWD
cd "$(dirname "$0")/../.."
device=auto rounds=3 threads=$(nproc) outfile=""
while [ $# -gt 0 ]; do
    [ $# -ge 2 ] || { echo "run.sh: $1 needs a value" >&2; exit 2; }
    case "$1" in
    --device) device=$2 ;;
    --rounds) rounds=$2 ;;
    --threads) threads=$2 ;;
    --out) case "$2" in /*) outfile=$2 ;; *) outfile=$here/$2 ;; esac ;;
    *) echo "run.sh: unknown option $1 (see the usage at the top of $0)" >&2; exit 2 ;;
    esac
    shift 2
done
ini=bench/length_bucket/text-cnn.ini
python=${PYTHON:-/usr/bin/python3}
glia=${GLIA:-./tools/glia}
export GLIA_PLUGIN_PATH="${GLIA_PLUGIN_PATH:-$PWD/stage/plugins}"
export OPENBLAS_CORETYPE=SkylakeX   # OpenBLAS misdetects some CPUs; give PyTorch its best
if [ "$device" = auto ]; then
    if nvidia-smi -L >/dev/null 2>&1; then device=cuda; else device=cpu; fi
fi
data=bench/data/tokens
[ -f "$data/train.txt" ] || "$python" bench/length_bucket/gen_tokens.py "$data"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM
{
    if [ "$device" = cpu ]; then
        echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), load average $(cut -d' ' -f1-3 /proc/loadavg)"
    else
        echo "gpu, driver: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -n 1)"
    fi
    "$python" -c 'import torch; print("pytorch %s, CUDA %s, cuDNN %s" % (torch.__version__, torch.version.cuda, torch.backends.cudnn.version()))'
    echo "$("$glia" --version); $ini, device $device, threads $threads, $rounds rounds"
    echo "data: $data ($(wc -l < "$data/train.txt") training, $(wc -l < "$data/test.txt") test samples, gen_tokens.py defaults)"
} | tee "$tmp/header"
for r in $(seq 1 "$rounds"); do
    for g in off on; do
        f="$tmp/glia-$g-$r.txt"
        OMP_NUM_THREADS=$threads "$glia" train "$ini" --quiet --set runtime.device="$device" --set runtime.threads="$threads" \
            --set runtime.seed="$r" --set data.group_by_length="$g" --set data.train="$data/train.txt" \
            --set data.test="$data/test.txt" --metrics "$f"
        echo "round $r glia group_by_length $g: $(tail -n 1 "$f")"
        f="$tmp/torch-$g-$r.txt"
        OMP_NUM_THREADS=$threads "$python" bench/length_bucket/torch_textcnn.py "$data" --group "$g" --threads "$threads" \
            --seed "$r" --device "$device" > "$f"
        echo "round $r pytorch group $g: $(cat "$f")"
    done
done
"$python" - "$tmp" "$rounds" "$data" <<'PY' | tee "$tmp/table"
import json, statistics, sys
tmp, rounds, data = sys.argv[1], int(sys.argv[2]), sys.argv[3]
n = sum(1 for line in open(data + '/train.txt') if line.strip() and not line.startswith('#'))
def rec(side, g, r):
    d = json.loads(open(f'{tmp}/{side}-{g}-{r}.txt').read().strip().splitlines()[-1])
    s = n / d['samples_per_s'] if side == 'glia' else d['train_s']
    return s, d['pad_frac'], d['test_accuracy']
med = statistics.median
print()
print(f"train seconds per epoch: median of {rounds} rounds (min); padding: share of batch elements that are padding")
print(f"{'side':8} {'batches':8} {'seconds':>16} {'padding':>8} {'test acc':>9}")
t = {}
for side in ('glia', 'torch'):
    for g in ('off', 'on'):
        v = [rec(side, g, r) for r in range(1, rounds + 1)]
        t[side, g] = [x[0] for x in v]
        name = 'glia' if side == 'glia' else 'pytorch'
        print(f"{name:8} {'random' if g == 'off' else 'grouped':8} {med(t[side, g]):8.2f} ({min(t[side, g]):6.2f}) "
              f"{med(x[1] for x in v):8.3f} {med(x[2] for x in v):9.4f}")
for side in ('glia', 'torch'):
    print(f"{'glia' if side == 'glia' else 'pytorch'} speedup from grouping: {med(t[side, 'off']) / med(t[side, 'on']):.2f}x")
print(f"ratio glia/pytorch, random batches:  {med(t['glia', 'off']) / med(t['torch', 'off']):.3f}   (< 1.0: glia is faster)")
print(f"ratio glia/pytorch, grouped batches: {med(t['glia', 'on']) / med(t['torch', 'on']):.3f}")
PY
if [ -n "$outfile" ]; then
    {
        cat "$tmp/header"
        for r in $(seq 1 "$rounds"); do
            for f in glia-off glia-on torch-off torch-on; do echo "### round $r $f"; cat "$tmp/$f-$r.txt"; done
        done
        cat "$tmp/table"
    } > "$outfile"
    echo "raw output saved to $outfile"
fi
