#!/bin/sh
# bench/large_batch/run.sh — trains share/glia/examples/fmnist-resnet-large-batch.ini (batch 4096, warmup then
# poly decay) for a fixed number of epochs with each optimizer and learning rate given, and the same network at
# batch 64 (the baseline: SGD, Nesterov momentum 0.9, weight decay 5e-4), and writes a markdown table: optimizer, batch, lr, test accuracy
# after the last epoch, the best epoch's (and which), seconds, from the runs' metrics files. Not a test, and not a tuned result: a sweep.
#   usage: bench/large_batch/run.sh [--optimizers "sgd lamb ..."] [--lrs "sgd:0.8,1.6 lamb:0.005,0.01"]
#            [--okeys "lamb:weight_decay=0.01,eps=1e-6"] [--baseline-lrs 0.025,0.05] [--epochs N]
#            [--train-samples N] [--set section.key=value]... [--out FILE] [--quick]
#   --optimizers  the optimizers of the batch-4096 runs (default: the example's, lamb). An optimizer other than
#                 the example's runs without its [optimizer] keys (they are lamb's); --okeys gives it its own
#   --lrs         per optimizer, the learning rates to try (default: the example's lr, 0.04)
#   --baseline-lrs  the batch-64 runs' learning rates (default 0.025: SGD's 0.1 at batch 256 scaled linearly)
#   --epochs      every run's epochs (default: the example's 10); warmup_steps is set to two epochs' steps
#                 at each batch size (drop_last: floor(samples / batch) steps an epoch), so T = epochs x that
#   --train-samples  the training samples the runs use (default: all 60000; --set data.train_samples too)
#   --quick       a smoke run: 4096 training and 256 test samples, 1 epoch, the first lr of each list (under a
#                 minute on 2 CPU cores); its numbers mean nothing
#   environment: GLIA (./tools/glia), GLIA_PLUGIN_PATH (stage/plugins). Runs go one after another; a run that
#   fails (an optimizer glia does not have yet) is a table row saying so, and the others go on.
set -eu
here=$PWD
cd "$(dirname "$0")/../.."
ini=share/glia/examples/fmnist-resnet-large-batch.ini
optimizers="" lrs="" okeys="" baseline_lrs=0.025 epochs="" samples="" quick=0 outfile="" sets=""
while [ $# -gt 0 ]; do
    case "$1" in
    --quick) quick=1; shift; continue ;;
    esac
    [ $# -ge 2 ] || { echo "run.sh: $1 needs a value" >&2; exit 2; }
    case "$1" in
    --optimizers) optimizers=$(echo "$2" | tr ',' ' ') ;;
    --lrs) lrs=$2 ;;
    --okeys) okeys=$2 ;;
    --baseline-lrs) baseline_lrs=$2 ;;
    --epochs) epochs=$2 ;;
    --train-samples) samples=$2 ;;
    --set) sets="$sets $2" ;;
    --out) case "$2" in /*) outfile=$2 ;; *) outfile=$here/$2 ;; esac ;;
    *) echo "run.sh: unknown option $1 (see the usage at the top of $0)" >&2; exit 2 ;;
    esac
    shift 2
done
glia=${GLIA:-./tools/glia}
export GLIA_PLUGIN_PATH="${GLIA_PLUGIN_PATH:-$PWD/stage/plugins}"
test_samples=""
if [ "$quick" = 1 ]; then
    samples=${samples:-4096} test_samples=256 epochs=${epochs:-1}
fi
# the example's own values, read from the file
ini_value() { sed -n "/^\[$1\]/,/^\[/s/^$2 *= *\([^ ;]*\).*/\1/p" "$ini" | head -n 1; }
epochs=${epochs:-$(ini_value train epochs)}
default_lr=$(ini_value train lr)
large=$(ini_value data batch_size)
n=${samples:-60000}
case "$epochs$n" in *[!0-9]*) echo "run.sh: --epochs and --train-samples take whole numbers" >&2; exit 2 ;; esac
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM
# The example without its [optimizer] section (its keys are its optimizer's), for the other optimizers.
own=$(ini_value train optimizer)
optimizers=${optimizers:-$own}
awk '/^\[/ { skip = ($0 ~ /^\[optimizer\]/) } !skip' "$ini" > "$tmp/no-opt-keys.ini"
# The batch-64 baseline's optimizer keys: SGD with Nesterov momentum and weight decay off the 1-D parameters.
baseline_keys="--set optimizer.momentum=0.9 --set optimizer.nesterov=on --set optimizer.weight_decay=0.0005"

# lrs_of OPT: its learning rates (comma-separated in --lrs as OPT:a,b), or the example's; one with --quick.
lrs_of() {
    l=""
    for spec in $lrs; do [ "${spec%%:*}" = "$1" ] && l=${spec#*:}; done
    l=$(echo "${l:-$default_lr}" | tr ',' ' ')
    [ "$quick" = 1 ] && l=${l%% *}
    echo "$l"
}
# okeys_of OPT: --set arguments for its [optimizer] keys from --okeys OPT:k=v,k=v.
okeys_of() {
    for spec in $okeys; do
        [ "${spec%%:*}" = "$1" ] || continue
        for kv in $(echo "${spec#*:}" | tr ',' ' '); do printf ' --set optimizer.%s' "$kv"; done
    done
}

rows="$tmp/rows"
: > "$rows"
# run OPT BATCH LR [SETS]: one training run (SETS: --set options of its own); appends a row
# "opt batch lr last best epoch seconds" or "opt batch lr failed: why".
run() {
    opt=$1 batch=$2 lr=$3 own_sets=${4:-}
    file=$ini
    [ "$opt" = "$own" ] || file=$tmp/no-opt-keys.ini
    steps=$((n / batch))
    [ "$steps" -ge 1 ] || { echo "$opt $batch $lr failed: fewer than $batch samples" >> "$rows"; return; }
    m="$tmp/$opt-$batch-$lr.jsonl"
    extra="--set data.train_samples=${samples:-0}"
    [ -z "$test_samples" ] || extra="$extra --set data.test_samples=$test_samples"
    # shellcheck disable=SC2046,SC2086  # the --set lists split on spaces on purpose
    if "$glia" train "$file" --quiet --metrics "$m" --set data.batch_size="$batch" --set train.optimizer="$opt" \
        --set train.lr="$lr" --set train.epochs="$epochs" --set train.warmup_steps=$((2 * steps)) $extra \
        $(okeys_of "$opt") $own_sets $(for s in $sets; do printf ' --set %s' "$s"; done) > "$tmp/log" 2>&1; then
        awk -v o="$opt" -v b="$batch" -v l="$lr" '
            { a = $0; sub(/.*"test_accuracy": /, "", a); sub(/,.*/, "", a)
              s = $0; sub(/.*"seconds": /, "", s); sub(/,.*/, "", s)
              e = $0; sub(/.*"epoch": /, "", e); sub(/,.*/, "", e)
              t += s; last = a; if (a + 0 > best + 0 || NR == 1) { best = a; at = e } }
            END { printf "%s %s %s %.4f %.4f %d %.1f\n", o, b, l, last, best, at, t }' "$m" >> "$rows"
    else
        echo "$opt $batch $lr failed: $(grep -v '^glia: info' "$tmp/log" | tail -n 1)" >> "$rows"
    fi
    tail -n 1 "$rows"
}

{
    echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), load average $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "$("$glia" --version); $ini, $epochs epochs, $n training samples${test_samples:+, $test_samples test samples}, warmup two epochs' steps${sets:+; --set:$sets}"
} | tee "$tmp/header"
for opt in $optimizers; do
    for lr in $(lrs_of "$opt"); do run "$opt" "$large" "$lr"; done
done
for lr in $(echo "$baseline_lrs" | tr ',' ' '); do
    [ "$quick" = 1 ] && [ "$lr" != "$(echo "$baseline_lrs" | cut -d, -f1)" ] && continue
    run sgd 64 "$lr" "$baseline_keys"
done
{
    echo
    echo "| optimizer | batch | lr | test accuracy, last epoch | best epoch's (epoch) | seconds |"
    echo "|---|---:|---:|---:|---:|---:|"
    while read -r opt batch lr last best at secs; do
        case "$last" in
        failed:) echo "| $opt | $batch | $lr | failed: $best $at $secs | — | — |" ;;
        *) echo "| $opt | $batch | $lr | $last | $best ($at) | $secs |" ;;
        esac
    done < "$rows"
} | tee "$tmp/table"
if [ -n "$outfile" ]; then
    cat "$tmp/header" "$tmp/table" > "$outfile"
    echo "table saved to $outfile"
fi
