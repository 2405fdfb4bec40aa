#!/bin/sh
# bench/ddp_overhead/run.sh — the cost of DDP at world size 1: ms per training step of fmnist-resnet.ini
# in glia without and with [distributed] mode = ddp, and of the same network in PyTorch without and with
# DistributedDataParallel (torch_ddp.py), alternating per round; prints medians, each side's DDP cost
# and the ratio glia/PyTorch. Not a test, not a multi-rank benchmark: one process, no mpirun.
#   usage: bench/ddp_overhead/run.sh [--device auto|cpu|cuda] [--rounds N] [--steps N] [--warmup N]
#          [--precision fp32|tf32|bf16|fp16] [--memory-format contiguous|channels_last]
#          [--cudnn-benchmark on|off] [--threads N] [--transport auto|mpi|nccl]
#          [--glia-timer auto|profile|train] [--out FILE]
#   defaults: device auto (cuda when nvidia-smi lists a GPU), 3 rounds, 50 timed steps, 5 warm-up steps,
#   the INI file's runtime (fp32, contiguous, cudnn_benchmark on), threads = cores, transport auto
#   (nccl on CUDA, mpi on the CPU), glia timer auto (profile on the CPU, train on CUDA; see README.md)
#   environment: GLIA (./tools/glia), PYTHON (/usr/bin/python3) with torch, DATA_DIR (bench/data when
#   it holds the dataset, else /usr/share/datasets/fashion-mnist), GLIA_PLUGIN_PATH (stage/plugins)
set -eu
here=$PWD
cd "$(dirname "$0")/../.."
device=auto rounds=3 steps=50 warmup=5 precision=fp32 format=contiguous bench=on threads=$(nproc)
transport=auto timer=auto outfile=""
while [ $# -gt 0 ]; do
    [ $# -ge 2 ] || { echo "run.sh: $1 needs a value" >&2; exit 2; }
    case "$1" in
    --device) device=$2 ;;
    --rounds) rounds=$2 ;;
    --steps) steps=$2 ;;
    --warmup) warmup=$2 ;;
    --precision) precision=$2 ;;
    --memory-format) format=$2 ;;
    --cudnn-benchmark) bench=$2 ;;
    --threads) threads=$2 ;;
    --transport) transport=$2 ;;
    --glia-timer) timer=$2 ;;
    --out) case "$2" in /*) outfile=$2 ;; *) outfile=$here/$2 ;; esac ;;
    *) echo "run.sh: unknown option $1 (see the usage at the top of $0)" >&2; exit 2 ;;
    esac
    shift 2
done
ini=share/glia/examples/fmnist-resnet.ini
python=${PYTHON:-/usr/bin/python3}
glia=${GLIA:-./tools/glia}
export GLIA_PLUGIN_PATH="${GLIA_PLUGIN_PATH:-$PWD/stage/plugins}"
export OPENBLAS_CORETYPE=SkylakeX   # OpenBLAS misdetects some CPUs; give PyTorch its best
if [ "$device" = auto ]; then
    if nvidia-smi -L >/dev/null 2>&1; then device=cuda; else device=cpu; fi
fi
[ "$timer" != auto ] || { [ "$device" = cpu ] && timer=profile || timer=train; }
if [ -z "${DATA_DIR:-}" ]; then
    if [ -f bench/data/train-images-idx3-ubyte.gz ]; then DATA_DIR=bench/data; else DATA_DIR=/usr/share/datasets/fashion-mnist; fi
fi
for f in train-images-idx3-ubyte.gz train-labels-idx1-ubyte.gz t10k-images-idx3-ubyte.gz t10k-labels-idx1-ubyte.gz; do
    [ -f "$DATA_DIR/$f" ] || { echo "run.sh: $DATA_DIR/$f not found: set DATA_DIR or run bench/gpu_fmnist/fetch-data.sh" >&2; exit 1; }
done
if [ "$device" = cpu ]; then  # Debian's python3-torch on the reference BLAS is no fair opponent
    blas=$(readlink -f /usr/lib/x86_64-linux-gnu/libblas.so.3 2>/dev/null || echo unknown)
    case "$blas" in
    *openblas*|unknown) ;;
    *) echo "run.sh: PyTorch would use the reference BLAS ($blas): apt-get install libopenblas0-pthread" >&2; exit 1 ;;
    esac
fi
batch=$(awk -F= '/^\[/ { s = $0 } s == "[data]" && $1 ~ /^batch_size[ \t]*$/ { gsub(/[ \t]/, "", $2); print $2 }' "$ini")
batch=${batch:-64}
if [ "$timer" = profile ]; then  # glia profile always warms up 5 steps; an epoch must hold them all
    gwarm=5
    samples=$(( ( (warmup > 5 ? warmup : 5) + steps) * batch ))
    epochs=1
else  # glia train: whole epochs of STEPS steps warm up, the last epoch is timed
    gwarm=$(( (warmup + steps - 1) / steps * steps ))
    samples=$(( steps * batch ))
    epochs=$(( (warmup + steps - 1) / steps + 1 ))
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM

{
    if [ "$device" = cpu ]; then
        echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), load average $(cut -d' ' -f1-3 /proc/loadavg)"
    else
        echo "gpu, driver: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -n 1)"
    fi
    "$python" -c 'import torch; print("pytorch %s, CUDA %s, cuDNN %s" % (torch.__version__, torch.version.cuda, torch.backends.cudnn.version()))'
    echo "$("$glia" --version); glia timer: glia $timer; transport $transport (glia), $([ "$device" = cpu ] && echo gloo || echo nccl) (pytorch)"
    echo "$ini, device $device, batch $batch, precision $precision, memory_format $format, cudnn_benchmark $bench, threads $threads"
    echo "data $DATA_DIR; $rounds rounds; $steps timed steps after $warmup warm-up steps (glia: $gwarm)"
} | tee "$tmp/header"

for r in $(seq 1 "$rounds"); do
    for mode in plain ddp; do
        set -- --set runtime.device="$device" --set runtime.precision="$precision" \
            --set runtime.memory_format="$format" --set runtime.cudnn_benchmark="$bench" \
            --set runtime.threads="$threads" --set runtime.seed="$r" \
            --set data.train_images="$DATA_DIR/train-images-idx3-ubyte.gz" \
            --set data.train_labels="$DATA_DIR/train-labels-idx1-ubyte.gz" \
            --set data.test_images="$DATA_DIR/t10k-images-idx3-ubyte.gz" \
            --set data.test_labels="$DATA_DIR/t10k-labels-idx1-ubyte.gz" \
            --set data.train_samples="$samples" --set data.test_samples=1000
        [ "$mode" = plain ] || set -- "$@" --set distributed.mode=ddp --set distributed.transport="$transport"
        if [ "$r$mode" = 1ddp ]; then  # glia check names the communicator: rank 0 of 1 over which transport
            c=$("$glia" check "$ini" "$@")
            echo "$c" | grep '^ddp:' | tee -a "$tmp/header"
        fi
        f="$tmp/glia-$mode-$r.txt"
        if [ "$timer" = profile ]; then
            OMP_NUM_THREADS=$threads "$glia" profile "$ini" --steps "$steps" "$@" > "$f"
            echo "round $r glia $mode: $(grep -o '[0-9.]* ms a step' "$f")"
        else
            OMP_NUM_THREADS=$threads "$glia" train "$ini" --quiet --set train.epochs="$epochs" "$@" --metrics "$f"
            echo "round $r glia $mode: $(tail -n 1 "$f")"
        fi
    done
    for mode in plain ddp; do
        f="$tmp/torch-$mode-$r.txt"
        OMP_NUM_THREADS=$threads "$python" bench/ddp_overhead/torch_ddp.py "$DATA_DIR" --ddp "$([ $mode = ddp ] && echo on || echo off)" \
            --device "$device" --steps "$steps" --warmup "$warmup" --precision "$precision" --memory-format "$format" \
            --cudnn-benchmark "$bench" --threads "$threads" --seed "$r" --ini "$ini" > "$f"
        echo "round $r pytorch $mode: $(cat "$f")"
    done
done

"$python" - "$tmp" "$rounds" "$timer" "$batch" <<'PY' | tee "$tmp/table"
import json, re, statistics, sys
tmp, rounds, timer, batch = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
def ms(side, mode, r):
    text = open(f'{tmp}/{side}-{mode}-{r}.txt').read()
    if side == 'torch':
        return json.loads(text.strip().splitlines()[-1])['ms_per_step']
    if timer == 'profile':
        return float(re.search(r'([0-9.]+) ms a step', text).group(1))
    return 1e3 * batch / json.loads(text.strip().splitlines()[-1])['samples_per_s']  # the last (timed) epoch
t = {(s, m): [ms(s, m, r) for r in range(1, rounds + 1)] for s in ('glia', 'torch') for m in ('plain', 'ddp')}
med = statistics.median
cost = {s: med(100 * (d / p - 1) for p, d in zip(t[s, 'plain'], t[s, 'ddp'])) for s in ('glia', 'torch')}
print()
print(f"ms per step: median of {rounds} rounds (min); DDP cost: median over rounds of ddp/no-ddp - 1")
print(f"{'side':8} {'no DDP ms':>18} {'DDP world 1 ms':>18} {'DDP cost':>9}")
for s in ('glia', 'torch'):
    p, d = t[s, 'plain'], t[s, 'ddp']
    print(f"{s if s == 'glia' else 'pytorch':8} {med(p):9.2f} ({min(p):6.2f}) {med(d):9.2f} ({min(d):6.2f}) {cost[s]:+8.1f}%")
print(f"ratio glia/pytorch with DDP:    {med(t['glia', 'ddp']) / med(t['torch', 'ddp']):.3f}   (< 1.0: glia is faster)")
print(f"ratio glia/pytorch without DDP: {med(t['glia', 'plain']) / med(t['torch', 'plain']):.3f}")
PY

if [ -n "$outfile" ]; then
    {
        cat "$tmp/header"
        for r in $(seq 1 "$rounds"); do
            for f in glia-plain glia-ddp torch-plain torch-ddp; do
                echo "### round $r $f"
                cat "$tmp/$f-$r.txt"
            done
        done
        cat "$tmp/table"
    } > "$outfile"
    echo "raw output saved to $outfile"
fi
