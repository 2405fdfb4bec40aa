#!/bin/sh
# bench/gpt2/run.sh — GPT-2 124M on one GPU, glia (share/glia/examples/gpt2-124m.ini, bf16) against the same model in
# PyTorch at its best (bench/gpt2/torch_gpt2.py: torch.compile, SDPA, fused AdamW, bf16 autocast, data on the GPU),
# one after the other on the same llm.c token files: per batch size, tokens/s, MFU (6N + 6·L·C·T FLOPs per token, N
# = 124475904, against --peak-tflops), peak memory; the losses of both every 10 steps; then the attention layer alone
# at GPT-2's shape (glia bench layer attention against F.scaled_dot_product_attention), the MLP's fc with and without
# its fused GELU, and the loss over GPT-2's logits (glia's gradient written in the forward's pass). Under a header naming the GPU,
# driver and versions. At the first batch size glia also runs with the whole step in a CUDA graph (side glia-graph),
# with GPT2_UNFUSED=on with [graph] fuse_pointwise = off (side glia-unfused), and with GPT2_PRECISION=on with f32
# activations between layers (side glia-f32act) and in tf32 (side glia-tf32). glia evaluates nothing (eval_every = 0)
# and keeps its rate constant after the warmup, as the PyTorch side does; the loss table has a column per side.
# Not a test: run it on an idle GPU from a built tree; commit the raw output.
#   usage: bench/gpt2/run.sh [--data DIR] [--batches "16 32"] [--steps N] [--warmup N] [--peak-tflops X] [--out FILE]
#   --data: llm.c token files tokens_train_*.bin and tokens_val_*.bin (bench/gpt2/gen_tokens.py DIR makes them from
#           text; default bench/gpt2/data); --steps: measured steps a side (default 60), after --warmup (default 10)
#   environment: GLIA (./tools/glia), GLIA_PLUGIN_PATH (stage/plugins), PYTHON (python3, with torch and a GPU)
set -eu
here=$PWD
cd "$(dirname "$0")/../.."
data=bench/gpt2/data batches="16 32" steps=60 warmup=10 peak=989 outfile=""
while [ $# -gt 0 ]; do
    [ $# -ge 2 ] || { echo "run.sh: $1 needs a value" >&2; exit 2; }
    case "$1" in
    --data) data=$2 ;;
    --batches) batches=$2 ;;
    --steps) steps=$2 ;;
    --warmup) warmup=$2 ;;
    --peak-tflops) peak=$2 ;;
    --out) case "$2" in /*) outfile=$2 ;; *) outfile=$here/$2 ;; esac ;;
    *) echo "run.sh: unknown option $1 (see the usage at the top of $0)" >&2; exit 2 ;;
    esac
    shift 2
done
glia=${GLIA:-./tools/glia}
py=${PYTHON:-python3}
export GLIA_PLUGIN_PATH="${GLIA_PLUGIN_PATH:-$PWD/stage/plugins}"
ls "$data"/tokens_train_*.bin >/dev/null 2>&1 || { echo "run.sh: no $data/tokens_train_*.bin (bench/gpt2/gen_tokens.py $data)" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM
ini=${GPT2_INI:-share/glia/examples/gpt2-124m.ini}  # another model (one of the same data) to try the script on
{
    gpu=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -n 1) || gpu=""
    echo "gpu, driver: ${gpu:-none (nvidia-smi found no GPU)}"
    "$py" -c 'import torch; print("pytorch %s, CUDA %s, cuDNN %s" % (torch.__version__, torch.version.cuda, torch.backends.cudnn.version()))' || true
    echo "$("$glia" --version); $ini on $data; $warmup warm-up + $steps measured steps a side; MFU against $peak TFLOP/s"
} | tee "$tmp/out"
T=1024
for b in $batches; do
    echo "== batch $b x $T" | tee -a "$tmp/out"
    # glia: epoch 1 warms up (kernels compiled, plans built), epoch 2 is timed; a loss line every 10 steps. The
    # schedule is warmup then constant, as on the PyTorch side (the example's cosine steps down per epoch: at its second
    # epoch of 2 it would halve the rate and the curves would part for that alone). At the first batch size also with
    # the whole step in a CUDA graph (side glia-graph: [runtime] cuda_graph = on); with GPT2_UNFUSED=on without
    # [graph] fuse_pointwise (side glia-unfused: no GELU epilogues, GELU gradient hand-off, residual + layernorm), to
    # show what the fusions give; with GPT2_PRECISION=on with f32 activations between the layers (side glia-f32act:
    # [graph] half_activations = off, the GEMMs and attention still bf16) and in tf32 (side glia-tf32: every
    # activation f32, TF32 GEMMs), for where the loss curve parts from PyTorch's.
    spe=$((steps > warmup ? steps : warmup))
    for side in glia glia-graph glia-unfused glia-f32act glia-tf32; do
        fuse=auto graph=off half=auto prec=bf16
        case $side in
        glia-graph) [ "$b" = "${batches%% *}" ] || continue; graph=on ;;
        glia-unfused) [ "$b" = "${batches%% *}" ] && [ "${GPT2_UNFUSED:-off}" = on ] || continue; fuse=off ;;
        glia-f32act) [ "$b" = "${batches%% *}" ] && [ "${GPT2_PRECISION:-off}" = on ] || continue; half=off ;;
        glia-tf32) [ "$b" = "${batches%% *}" ] && [ "${GPT2_PRECISION:-off}" = on ] || continue; prec=tf32 ;;
        esac
        "$glia" train "$ini" --metrics "$tmp/m.jsonl" --set data.train_tokens="$data/tokens_train_*.bin" \
            --set data.val_tokens="$data/tokens_val_*.bin" --set data.batch_size="$b" --set data.test_batch_size="$b" \
            --set train.accumulate=1 --set data.steps_per_epoch="$spe" --set graph.fuse_pointwise=$fuse \
            --set graph.half_activations=$half --set runtime.precision=$prec --set train.schedule=constant \
            --set runtime.cuda_graph=$graph --set train.eval_every=0 --set train.epochs=2 --set data.val_batches=1 \
            --set train.log_every=10 --set train.checkpoint_dir="$tmp/ckpt" > "$tmp/glia.log" 2>&1 ||
            { cat "$tmp/glia.log"; exit 1; }
        awk -v spe="$spe" -v side="$side" '/^epoch [0-9]+\/[0-9]+ step [0-9]+\/[0-9]+ loss/ {
            split($2, e, "/"); split($4, k, "/"); printf "{\"side\": \"%s\", \"step\": %d, \"loss\": %s}\n", side, (e[1] - 1) * spe + k[1], $6 }' \
            "$tmp/glia.log" | tee -a "$tmp/out"
        tail -n 1 "$tmp/m.jsonl" | awk -v b="$b" -v t="$T" -v pk="$peak" -v side="$side" '
            function num(k,   v) { v = $0; sub(".*\"" k "\": ", "", v); sub(/[,}].*/, "", v); return v + 0 }
            { s = num("samples_per_s"); tok = s * t; f = 6 * 124475904 + 6 * 12 * 768 * t
              printf "{\"side\": \"%s\", \"batch\": %d, \"seq_len\": %d, \"ms_per_step\": %.3f, \"tokens_per_s\": %.0f, \"mfu\": %.4f, \"peak_mb\": %s, \"train_loss\": %s}\n",
                     side, b, t, 1e3 * b / s, tok, tok * f / (pk * 1e12), num("device_peak_mb"), num("train_loss") }' | tee -a "$tmp/out"
    done
    "$py" bench/gpt2/torch_gpt2.py --train "$data/tokens_train_*.bin" --batch "$b" --steps "$steps" \
        --warmup "$warmup" --peak-tflops "$peak" > "$tmp/torch.out" 2>&1 || echo "pytorch failed at batch $b" >> "$tmp/torch.out"
    tee -a "$tmp/out" < "$tmp/torch.out"
    # the loss curves side by side (the same recipe and data; glia's second epoch goes on from its first): a column for
    # each side that logged losses at this batch size, in the order they ran
    awk -v b="$b" '
        /^== / { on = ($2 == "batch" && $3 == b) }
        on && /"step": / { sd = $0; sub(/.*"side": "/, "", sd); sub(/".*/, "", sd); s = $0; sub(/.*"step": /, "", s); sub(/,.*/, "", s)
                     l = $0; sub(/.*"loss": /, "", l); sub(/}.*/, "", l); if (!(sd in seen)) { seen[sd] = 1; col[++n] = sd }
                     v[sd, s + 0] = l; have[s + 0] = 1 }
        END { printf "%5s", "step"; for (c = 1; c <= n; c++) printf "  %12s", col[c]; printf "  (batch %d)\n", b
              for (k = 1; k <= 100000; k++) if (k in have) { printf "%5d", k
                  for (c = 1; c <= n; c++) printf "  %12s", ((col[c], k) in v) ? sprintf("%.4f", v[col[c], k]) : "-"; printf "\n" } }' "$tmp/out" |
        tee -a "$tmp/out"
done
echo "== attention alone, 16 x 1024 x 2304 (12 heads of 64), bf16" | tee -a "$tmp/out"
"$glia" bench layer attention --shape 16x1024x2304 --precision bf16 --device cuda --steps 20 --warmup 5 \
    --torch bench/layer/torch_layer.py 2>&1 | tee -a "$tmp/out"
echo "== the MLP's fc with its GELU (cuBLASLt's GELU epilogue) and plain, 16 x 1024 x 768 -> 3072, bf16" | tee -a "$tmp/out"
for op in linear_gelu linear; do
    "$glia" bench layer $op --shape 16x1024x768 --precision bf16 --device cuda --steps 20 --warmup 5 \
        --torch bench/layer/torch_layer.py 2>&1 | tee -a "$tmp/out"
done
echo "== the classifier's loss over 16 x 1024 positions of 50304 bf16 logits (glia: its gradient in the forward's pass, bf16)" |
    tee -a "$tmp/out"
"$glia" bench layer cross_entropy --shape 16384x50304 --precision bf16 --device cuda --steps 20 --warmup 5 \
    --torch bench/layer/torch_layer.py 2>&1 | tee -a "$tmp/out"
[ -z "$outfile" ] || { cp "$tmp/out" "$outfile"; echo "saved to $outfile"; }
