#!/bin/sh
# bench/gpt_bytes/run.sh — share/glia/examples/gpt-bytes.ini trained by glia and the same GPT written in PyTorch as
# nanoGPT writes it (bench/gpt_bytes/model.py), on the same bytes with the same hyper-parameters, one after the other
# on the CPU with the same threads: time per training step and the validation loss after the same number of steps.
# Not a test (a few minutes a side at the example's size).
#   usage: bench/gpt_bytes/run.sh [--threads N] [--epochs N] [--steps-per-epoch N] [--files GLOB] [--out FILE]
#   environment: GLIA (./tools/glia), GLIA_PLUGIN_PATH (stage/plugins), PYTHON (/usr/bin/python3, with torch)
set -eu
here=$PWD
cd "$(dirname "$0")/../.."
threads=2 epochs=20 spe=100 files='/usr/share/games/fortunes/*.u8' outfile=""
while [ $# -gt 0 ]; do
    [ $# -ge 2 ] || { echo "run.sh: $1 needs a value" >&2; exit 2; }
    case "$1" in
    --threads) threads=$2 ;;
    --epochs) epochs=$2 ;;
    --steps-per-epoch) spe=$2 ;;
    --files) files=$2 ;;
    --out) case "$2" in /*) outfile=$2 ;; *) outfile=$here/$2 ;; esac ;;
    *) echo "run.sh: unknown option $1 (see the usage at the top of $0)" >&2; exit 2 ;;
    esac
    shift 2
done
glia=${GLIA:-./tools/glia}
py=${PYTHON:-/usr/bin/python3}
export GLIA_PLUGIN_PATH="${GLIA_PLUGIN_PATH:-$PWD/stage/plugins}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM
ini=share/glia/examples/gpt-bytes.ini
{
    echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), load average $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "$("$glia" --version); $ini on $files, $epochs epochs of $spe steps, $threads threads a side"
} | tee "$tmp/out"
OMP_NUM_THREADS=$threads "$glia" train "$ini" --quiet --metrics "$tmp/m.jsonl" --set runtime.device=cpu \
    --set data.train_tokens="$files" --set train.epochs="$epochs" --set data.steps_per_epoch="$spe" \
    --set train.checkpoint_dir="$tmp/ckpt" > "$tmp/glia.log" 2>&1 || { cat "$tmp/glia.log"; exit 1; }
batch=$(sed -n 's/^batch_size *= *\([0-9]*\).*/\1/p' "$ini" | head -n 1)
awk -v b="$batch" -v s="$((epochs * spe))" '
    { v = $0; sub(/.*"val_loss": /, "", v); sub(/,.*/, "", v)
      r = $0; sub(/.*"samples_per_s": /, "", r); sub(/,.*/, "", r); t += 1e3 * b / r; n++ }
    END { printf "{\"side\": \"glia\", \"steps\": %d, \"val_loss\": %s, \"ms_per_step\": %.3f}\n", s, v, t / n }' \
    "$tmp/m.jsonl" | tee -a "$tmp/out"
OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-SkylakeX} OMP_NUM_THREADS=$threads "$py" bench/gpt_bytes/model.py \
    --threads "$threads" --epochs "$epochs" --steps-per-epoch "$spe" --files "$files" | tee -a "$tmp/out"
awk '/"side": "glia"/ { g = $0 } /"side": "pytorch"/ { p = $0 }
     function num(s, k,   v) { v = s; sub(".*\"" k "\": ", "", v); sub(/[,}].*/, "", v); return v + 0 }
     END { printf "glia / PyTorch: time per step %.3f, validation loss %.4f (%+.2f%%)\n", num(g, "ms_per_step") / num(p, "ms_per_step"),
                  num(g, "val_loss") / num(p, "val_loss"), 100 * (num(g, "val_loss") / num(p, "val_loss") - 1) }' "$tmp/out" |
    tee -a "$tmp/out"
[ -z "$outfile" ] || { cp "$tmp/out" "$outfile"; echo "saved to $outfile"; }
