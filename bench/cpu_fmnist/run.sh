#!/bin/sh
# bench/cpu_fmnist/run.sh — trains fmnist-cnn.ini for one epoch in glia and the same network
# with the same hyper-parameters in PyTorch, alternating, ROUNDS rounds, both with THREADS
# threads, and prints median training seconds, test accuracy and the ratio glia/PyTorch.
# Not a test: run it on an idle machine from a built tree (or set GLIA to an installed glia).
#   usage: bench/cpu_fmnist/run.sh [ROUNDS] [THREADS]
set -eu
cd "$(dirname "$0")/../.."
rounds=${1:-3}
threads=${2:-2}
data=/usr/share/datasets/fashion-mnist
glia=${GLIA:-./tools/glia}
export GLIA_PLUGIN_PATH=${GLIA_PLUGIN_PATH:-$PWD/stage/plugins}
export OPENBLAS_CORETYPE=SkylakeX   # OpenBLAS misdetects some CPUs; give PyTorch its best
out=$(mktemp -d)
# Debian's python3-torch calls libblas.so.3: the reference BLAS unless OpenBLAS is installed
# (apt-get install libopenblas0-pthread). Refuse to compare against the reference BLAS.
blas=$(readlink -f /usr/lib/x86_64-linux-gnu/libblas.so.3 2>/dev/null || echo unknown)
case "$blas" in
*openblas*) ;;
*) echo "PyTorch would use the reference BLAS ($blas): apt-get install libopenblas0-pthread" >&2; exit 1 ;;
esac
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "glia: $($glia --version)   torch: $(/usr/bin/python3 -c 'import torch; print(torch.__version__)')   threads: $threads   rounds: $rounds"
echo "torch BLAS: $blas   OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE"
for r in $(seq 1 "$rounds"); do
    OMP_NUM_THREADS=$threads "$glia" train share/glia/examples/fmnist-cnn.ini --quiet \
        --set train.epochs=1 --set runtime.device=cpu --set runtime.threads="$threads" \
        --set runtime.seed="$r" --metrics "$out/glia-$r.jsonl"
    OMP_NUM_THREADS=$threads /usr/bin/python3 bench/cpu_fmnist/torch_fmnist.py "$data" "$threads" "$r" > "$out/torch-$r.json"
    echo "round $r: glia $(cat "$out/glia-$r.jsonl")"
    echo "round $r: torch $(cat "$out/torch-$r.json")"
done
/usr/bin/python3 - "$out" "$rounds" <<'PY'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
gs, ga, ts, ta = [], [], [], []
for r in range(1, rounds + 1):
    g = json.loads(open(f"{out}/glia-{r}.jsonl").readline())
    t = json.loads(open(f"{out}/torch-{r}.json").read())
    gs.append(60000 / g["samples_per_s"]); ga.append(g["test_accuracy"])
    ts.append(t["train_seconds"]); ta.append(t["test_accuracy"])
mg, mt = statistics.median(gs), statistics.median(ts)
print()
print(f"{'':10} {'epoch s (median)':>17} {'test acc (median)':>18}")
print(f"{'glia':10} {mg:17.2f} {statistics.median(ga):18.4f}")
print(f"{'pytorch':10} {mt:17.2f} {statistics.median(ta):18.4f}")
print(f"ratio glia/pytorch (epoch time): {mg / mt:.3f}   (< 1.0: glia is faster)")
PY
rm -rf "$out"
