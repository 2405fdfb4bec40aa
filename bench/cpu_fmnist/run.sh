#!/bin/sh
# bench/cpu_fmnist/run.sh — trains fmnist-cnn.ini for one epoch in glia and the same network
# with the same hyper-parameters in PyTorch, alternating, ROUNDS rounds, both with THREADS
# threads, and prints median training seconds, test accuracy, peak resident memory and the ratios
# glia/PyTorch.
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
    OMP_NUM_THREADS=$threads /usr/bin/python3 bench/peak_rss.py "$out/glia-$r.rss" "$glia" train \
        share/glia/examples/fmnist-cnn.ini --quiet --set train.epochs=1 --set runtime.device=cpu \
        --set runtime.threads="$threads" --set runtime.seed="$r" --metrics "$out/glia-$r.jsonl"
    OMP_NUM_THREADS=$threads /usr/bin/python3 bench/peak_rss.py "$out/torch-$r.rss" /usr/bin/python3 \
        bench/cpu_fmnist/torch_fmnist.py "$data" "$threads" "$r" > "$out/torch-$r.json"
    echo "round $r: glia $(cat "$out/glia-$r.jsonl") peak RSS $(cat "$out/glia-$r.rss") MB"
    echo "round $r: torch $(cat "$out/torch-$r.json") peak RSS $(cat "$out/torch-$r.rss") MB"
done
/usr/bin/python3 - "$out" "$rounds" <<'PY'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
gs, ga, gm, ts, ta, tm = [], [], [], [], [], []
for r in range(1, rounds + 1):
    g = json.loads(open(f"{out}/glia-{r}.jsonl").readline())
    t = json.loads(open(f"{out}/torch-{r}.json").read())
    gs.append(60000 / g["samples_per_s"]); ga.append(g["test_accuracy"])
    ts.append(t["train_seconds"]); ta.append(t["test_accuracy"])
    gm.append(float(open(f"{out}/glia-{r}.rss").read())); tm.append(float(open(f"{out}/torch-{r}.rss").read()))
mg, mt = statistics.median(gs), statistics.median(ts)
rg, rt = statistics.median(gm), statistics.median(tm)
print()
print(f"{'':10} {'epoch s (median)':>17} {'test acc (median)':>18} {'peak RSS MB (median)':>21}")
print(f"{'glia':10} {mg:17.2f} {statistics.median(ga):18.4f} {rg:21.0f}")
print(f"{'pytorch':10} {mt:17.2f} {statistics.median(ta):18.4f} {rt:21.0f}")
print(f"ratio glia/pytorch (epoch time): {mg / mt:.3f}   (< 1.0: glia is faster)")
print(f"ratio glia/pytorch (peak RSS):   {rg / rt:.3f}   (< 1.0: glia uses less memory)")
print("peak RSS: the whole process (libraries, dataset, model, activations); the PyTorch script holds")
print("the data sets as normalized float32 tensors (219.5 MB), glia as the files' bytes (54.9 MB)")
PY
rm -rf "$out"
