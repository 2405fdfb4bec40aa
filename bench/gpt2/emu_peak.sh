#!/bin/sh
# bench/gpt2/emu_peak.sh — GPT-2 124M's peak device memory on CUDA (bf16) without a GPU: glia trains 3 steps a batch
# size against the emulated CUDA (tests/emu/glia.sh) with GLIA_EMU_NO_COMPUTE=1, which runs the backend's host code and
# allocations but no computation, and prints the caching allocator's peak (the metrics file's device_peak_mb, what
# bench/gpt2/run.sh reports on a GPU), the scratch's largest size and the planned activation memory. The emulated
# cuDNN and cuBLASLt ask for their own workspaces, which a GPU's libraries may size otherwise. Not a test.
#   usage: bench/gpt2/emu_peak.sh [--data DIR] [--batches "16 32"]   (after tests/emu/run.sh has built the emulation;
#          DIR holds llm.c token files tokens_train_*.bin, tokens_val_*.bin: bench/gpt2/gen_tokens.py DIR)
set -eu
cd "$(dirname "$0")/../.."
data=bench/gpt2/data batches="16 32"
while [ $# -gt 0 ]; do
    [ $# -ge 2 ] || { echo "emu_peak.sh: $1 needs a value" >&2; exit 2; }
    case "$1" in
    --data) data=$2 ;;
    --batches) batches=$2 ;;
    *) echo "emu_peak.sh: unknown option $1" >&2; exit 2 ;;
    esac
    shift 2
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM
echo "$(./tools/glia --version); share/glia/examples/gpt2-124m.ini under tests/emu (GLIA_EMU_NO_COMPUTE=1), 3 steps, no evaluation"
for b in $batches; do
    GLIA_EMU_NO_COMPUTE=1 GLIA_LOG_LEVEL=debug tests/emu/glia.sh train share/glia/examples/gpt2-124m.ini \
        --metrics "$tmp/m.jsonl" --set data.train_tokens="$data/tokens_train_*.bin" \
        --set data.val_tokens="$data/tokens_val_*.bin" --set data.batch_size="$b" --set data.test_batch_size="$b" \
        --set train.accumulate=1 --set data.steps_per_epoch=3 --set train.epochs=1 --set train.eval_every=0 \
        --set data.val_batches=1 --set train.checkpoint_dir="$tmp/ckpt" > "$tmp/log" 2>&1 || { cat "$tmp/log"; exit 1; }
    act=$(sed -n 's/^activation memory: \([0-9.]*\) MB.*/\1/p' "$tmp/log")
    scratch=$(sed -n 's/.*scratch grows from .* to \([0-9.]*\) MB$/\1/p' "$tmp/log" | tail -n 1)
    tail -n 1 "$tmp/m.jsonl" | awk -v b="$b" -v act="$act" -v sc="${scratch:-0}" '{ v = $0; sub(/.*"device_peak_mb": /, "", v);
        sub(/[,}].*/, "", v); printf "{\"batch\": %d, \"device_peak_mb\": %s, \"activation_plan_mb\": %s, \"scratch_mb\": %s}\n", b, v, act, sc }'
done
