#!/bin/sh
# bench/gpu_session.sh — a short lease on a lent GPU, spent in priority order: the stages named, each under its own
# time limit and all within one budget, their logs packed at the end into OUTDIR/gpu.tgz (one file comes back where
# few may) beside OUTDIR/summary.txt. Not the checks themselves: bench/gpu_acceptance.sh and the benches do those.
#   usage: bench/gpu_session.sh OUTDIR BUDGET_S NAME:LIMIT_S ...
#   NAME: build, test (the GPU programs), gpt2 (bench/gpt2 at batches $GPT2_BATCHES, $GPT2_STEPS steps), conv
#   (bench/gpu_conv, one round; conv-relu with RELU=on), fmnist (bench/gpu_fmnist, 2 epochs, glia with CUDA graphs
#   against PyTorch eager and whole-step graph), fmnist-nofuse, resnet50, layer (bench/layer), bn-sweep (batchnorm's
#   GLIA_CUDA_BN_FUSE and GLIA_CUDA_BN_BLOCKS settings by glia bench layer, and fmnist-resnet fused), ln-ab (the
#   layernorm backward in one pass or two, GLIA_CUDA_LN_FUSE, at GPT-2's shapes), roofline, train,
#   diag-conv (bench conv --relu on: each configuration's chosen path from the debug log, its kernels' times by ncu),
#   diag-gpt2 (GPT-2 124M at batch 16: glia profile, glia's kernels by ncu, PyTorch's by torch.profiler),
#   diag-startup (where fmnist-cnn's first epoch goes: each cuDNN graph build and pointwise kernel compile from the
#   debug log, summed, and the scratch's largest size: bench/startup_summary.py), diag-r50 (the same for ResNet-50
#   at batch 256, with cuDNN's engines compiled at run time and without, GLIA_CUDA_CONV_RTC, each run cut at
#   $R50_LIMIT s, default 100, and summed as far as it went), diag-fmnist (fmnist-resnet's training step kernel by
#   kernel: glia's 5 steps by ncu beside PyTorch eager's 5 by torch.profiler), ktrace (each kernel's time in normal runs
#   of fmnist-resnet and GPT-2, glia's and PyTorch's alike: bench/ktrace)
#   environment: as bench/gpu_acceptance.sh; CUDA_ARCHS (90 here: one architecture builds fastest)
set -u
if [ "${1:-}" = --stage ]; then  # one stage, run by the loop below under timeout (which ends its whole process group)
    work=$2
    fmnist_dir() { if [ -f bench/data/train-images-idx3-ubyte.gz ]; then echo bench/data; else echo /usr/share/datasets/fashion-mnist; fi; }
    cd "$(dirname "$0")/.."
    acc=bench/gpu_acceptance.sh
    case "$3" in
    build) $acc build "$work" ;;
    test) GPU_TESTS=1 TEST_TIMEOUT=${TEST_TIMEOUT:-240} $acc test "$work" ;;
    train) $acc train "$work" ;;
    roofline) $acc roofline "$work" ;;
    gpt2) d=bench/gpt2/data
        [ -f gpu-kit/gpt2-data/tokens_train_000001.bin ] && d=gpu-kit/gpt2-data
        bench/gpt2/run.sh --data "$d" --batches "${GPT2_BATCHES:-16 32}" --steps "${GPT2_STEPS:-30}" --out "$work/gpt2.txt" ;;
    conv) bench/gpu_conv/run.sh 1 ;;
    conv-relu) RELU=on bench/gpu_conv/run.sh 1 ;;
    fmnist) bench/gpu_fmnist/run.sh --rounds 1 --epochs 2 --cuda-graph on --variants "eager graph" ;;
    fmnist-nofuse) bench/gpu_fmnist/run.sh --rounds 1 --epochs 2 --fuse off --variants eager ;;
    resnet50) # the issue's two PyTorch sides (eager, torch.compile); glia with CUDA graphs only (one autotuned start,
        # not two); R50_GLIA_GRAPH="off on" for both
        bench/gpu_resnet50/run.sh --steps 20 --variants "eager compile" --glia-graph "${R50_GLIA_GRAPH:-on}" ;;
    layer) bench/layer/run.sh ;;
    bn-sweep) # batchnorm's finalize in the pass's launch (GLIA_CUDA_BN_FUSE) and its split target (GLIA_CUDA_BN_BLOCKS):
        # glia bench layer batchnorm_relu at fmnist-resnet's and ResNet-50's shapes for each setting, PyTorch once a shape,
        # then fmnist-resnet's second epoch (CUDA graphs) under each
        for shape in 64x16x28x28 64x32x14x14 64x32x7x7 256x64x56x56; do
            ./tools/glia bench layer batchnorm_relu --shape "$shape" --precision bf16 --memory-format channels_last \
                --device cuda --steps 50 --warmup 10 --torch bench/layer/torch_layer.py 2>&1 | grep -E '^(layer|forward)'
            for set in "off 4096" "on 4096" "on 1024" "on 512" "on 256"; do
                f=${set% *} b=${set#* }
                printf 'fuse %s blocks %s: ' "$f" "$b"
                GLIA_CUDA_BN_FUSE=$f GLIA_CUDA_BN_BLOCKS=$b ./tools/glia bench layer batchnorm_relu --shape "$shape" \
                    --precision bf16 --memory-format channels_last --device cuda --steps 50 --warmup 10 --torch off 2>&1 |
                    awk '/^forward/ { printf "%s %s ms  ", $1, $2 } END { print "" }'
            done
        done
        # fmnist-resnet's second epoch (CUDA graphs, bf16, channels_last) under each setting, glia alone
        d=$(fmnist_dir)
        for set in "off 4096" "on 4096" "on 1024" "on 512" "on 256"; do
            f=${set% *} b=${set#* }
            GLIA_CUDA_BN_FUSE=$f GLIA_CUDA_BN_BLOCKS=$b GLIA_PLUGIN_PATH="${GLIA_PLUGIN_PATH:-$PWD/stage/plugins}" \
                ./tools/glia train share/glia/examples/fmnist-resnet.ini --quiet --metrics "$work/bn-sweep-$f-$b.jsonl" \
                --set runtime.device=cuda --set runtime.precision=bf16 --set runtime.memory_format=channels_last \
                --set runtime.cuda_graph=on --set train.epochs=2 --set train.eval_every=0 \
                --set data.train_images="$d/train-images-idx3-ubyte.gz" --set data.train_labels="$d/train-labels-idx1-ubyte.gz" \
                --set data.test_images="$d/t10k-images-idx3-ubyte.gz" --set data.test_labels="$d/t10k-labels-idx1-ubyte.gz" \
                > "$work/bn-sweep-$f-$b.log" 2>&1
            printf 'fmnist-resnet fuse %s blocks %s: epoch 2 %s s\n' "$f" "$b" \
                "$(tail -n 1 "$work/bn-sweep-$f-$b.jsonl" 2>/dev/null | sed -n 's/.*"seconds": \([0-9.]*\).*/\1/p')"
        done ;;
    ln-ab) # the layernorm backward with its parameter gradients in the input gradient's pass (default) against the two
        # passes (GLIA_CUDA_LN_FUSE=off), at GPT-2's shapes, PyTorch beside
        for shape in 16x1024x768 32x1024x768; do
            for f in on off; do
                echo "GLIA_CUDA_LN_FUSE=$f:"
                GLIA_CUDA_LN_FUSE=$f ./tools/glia bench layer layernorm --shape "$shape" --precision bf16 --device cuda \
                    --steps 50 --warmup 10 --torch "$([ $f = on ] && echo bench/layer/torch_layer.py || echo off)" 2>&1 |
                    grep -E '^(layer|forward)'
            done
        done ;;
    diag-conv) # which path each configuration of bench conv --relu on takes (debug log), and its kernels' times (ncu)
        GLIA_LOG_LEVEL=debug ./tools/glia bench conv --relu on --steps 20 --warmup 5 > "$work/diag-conv-relu.txt" 2>&1
        grep -E 'chose|differs|did not run|no fused plan|^(forward|pass)' "$work/diag-conv-relu.txt" | head -n 80
        if command -v ncu > /dev/null; then
            ncu --clock-control none --target-processes all --metrics gpu__time_duration.sum --csv --launch-count 400 \
                ./tools/glia bench conv --relu on --steps 3 --warmup 1 > "$work/diag-conv-ncu.csv" 2>&1 || true
            python3 bench/ncu_summary.py "$work/diag-conv-ncu.csv" | head -n 40
        fi ;;
    diag-gpt2) # GPT-2 124M at batch 16 on the kit's tokens: glia profile (per-layer times and roofline), glia's kernels
        # by ncu (500 launches, about one step, after 3000) and PyTorch's 3 steps by torch.profiler, side by side
        d=bench/gpt2/data
        [ -f gpu-kit/gpt2-data/tokens_train_000001.bin ] && d=gpu-kit/gpt2-data
        set -- share/glia/examples/gpt2-124m.ini --steps 10 --set data.train_tokens="$d/tokens_train_*.bin" \
            --set data.val_tokens="$d/tokens_val_*.bin" --set data.batch_size=16 --set train.accumulate=1
        ./tools/glia profile "$@"
        if command -v ncu > /dev/null; then
            ncu --clock-control none --target-processes all --metrics gpu__time_duration.sum --csv --launch-skip 3000 \
                --launch-count 500 ./tools/glia profile "$@" > "$work/diag-gpt2-ncu.csv" 2>&1 || true
            echo "glia (ncu, 500 launches):"
            python3 bench/ncu_summary.py "$work/diag-gpt2-ncu.csv" | head -n 40
        fi
        echo "pytorch (torch.compile):"
        python3 bench/gpt2/torch_gpt2.py --train "$d/tokens_train_*.bin" --batch 16 --steps 5 --warmup 5 --profile 3 2>&1 |
            tail -n 45 ;;
    diag-startup) # fmnist-cnn, 1 epoch as bench/gpu_fmnist runs it (CUDA graphs on), with the debug log's times
        d=$(fmnist_dir)
        t0=$(date +%s.%N)
        GLIA_PLUGIN_PATH="${GLIA_PLUGIN_PATH:-$PWD/stage/plugins}" GLIA_LOG_LEVEL=debug \
            ./tools/glia train share/glia/examples/fmnist-cnn.ini --set runtime.device=cuda --set runtime.precision=bf16 \
            --set runtime.memory_format=channels_last --set runtime.cuda_graph=on --set train.epochs=1 \
            --set data.train_images="$d/train-images-idx3-ubyte.gz" --set data.train_labels="$d/train-labels-idx1-ubyte.gz" \
            --set data.test_images="$d/t10k-images-idx3-ubyte.gz" --set data.test_labels="$d/t10k-labels-idx1-ubyte.gz" \
            > "$work/diag-startup.txt" 2>&1
        awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "real %.1f\n", b - a }' >> "$work/diag-startup.txt"
        python3 bench/startup_summary.py "$work/diag-startup.txt" ;;
    diag-r50) # ResNet-50's start as bench/gpu_resnet50 runs it (bf16, channels_last, batch 256, data on the device,
        # CUDA graphs off), 2 epochs of 2 steps, with the debug log's times: cuDNN's engines compiled at run time
        # allowed (glia's default, as PyTorch's) and refused (GLIA_CUDA_CONV_RTC=off)
        for rtc in on off; do
            t0=$(date +%s.%N)
            GLIA_CUDA_CONV_RTC=$rtc GLIA_PLUGIN_PATH="${GLIA_PLUGIN_PATH:-$PWD/stage/plugins}" GLIA_LOG_LEVEL=debug \
                timeout "${R50_LIMIT:-100}" ./tools/glia train share/glia/examples/resnet50.ini --set train.epochs=2 \
                --set data.train_samples=512 --set data.test_samples=256 --set train.eval_every=0 --set data.resident=on \
                --metrics "$work/diag-r50-$rtc.jsonl" > "$work/diag-r50-$rtc.txt" 2>&1
            awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "real %.1f\n", b - a }' >> "$work/diag-r50-$rtc.txt"
            echo "GLIA_CUDA_CONV_RTC=$rtc:"
            python3 bench/startup_summary.py "$work/diag-r50-$rtc.txt"
        done ;;
    ktrace) # each GPU kernel's time in a normal run (CUPTI, bench/ktrace: no replay, caches as they are), the same
        # tool on both sides, a window of steps each ending at the optimizer's kernels: fmnist-resnet (bf16,
        # channels_last) 400 steps after 300, glia with CUDA graphs against PyTorch's whole-step graph and eager; GPT-2
        # 124M at batch 16, 4 steps after 6, glia (without and with CUDA graphs) against PyTorch compiled
        bench/ktrace/build.sh "$work/libktrace.so" || exit 1
        export GLIA_PLUGIN_PATH="${GLIA_PLUGIN_PATH:-$PWD/stage/plugins}" KTRACE_MARK=adam KTRACE_TOP=30
        kt() {  # kt NAME COMMAND...: COMMAND traced, its report printed (or the end of its log)
            n=$1
            shift
            CUDA_INJECTION64_PATH="$work/libktrace.so" KTRACE_OUT="$work/ktrace-$n.txt" "$@" > "$work/ktrace-$n.log" 2>&1
            echo "== $n (exit $?)"
            cat "$work/ktrace-$n.txt" 2>/dev/null || tail -n 3 "$work/ktrace-$n.log"
        }
        d=$(fmnist_dir)
        fm="--set data.train_images=$d/train-images-idx3-ubyte.gz --set data.train_labels=$d/train-labels-idx1-ubyte.gz
            --set data.test_images=$d/t10k-images-idx3-ubyte.gz --set data.test_labels=$d/t10k-labels-idx1-ubyte.gz"
        export KTRACE_SKIP=300 KTRACE_STEPS=400
        # shellcheck disable=SC2086  # $fm is words
        kt glia-fmnist-resnet-graph ./tools/glia train share/glia/examples/fmnist-resnet.ini --quiet --set runtime.device=cuda \
            --set runtime.precision=bf16 --set runtime.memory_format=channels_last --set runtime.cuda_graph=on \
            --set train.epochs=1 --set train.eval_every=0 $fm
        for v in graph eager; do
            kt torch-fmnist-resnet-$v python3 bench/gpu_fmnist/torch_fmnist_gpu.py "$d" resnet --variant $v --epochs 1 \
                --test-samples 1000
        done
        g=bench/gpt2/data
        [ -f gpu-kit/gpt2-data/tokens_train_000001.bin ] && g=gpu-kit/gpt2-data
        export KTRACE_SKIP=6 KTRACE_STEPS=4
        for graph in off on; do
            kt glia-gpt2-graph-$graph ./tools/glia train share/glia/examples/gpt2-124m.ini --quiet \
                --set data.train_tokens="$g/tokens_train_*.bin" --set data.val_tokens="$g/tokens_val_*.bin" \
                --set data.batch_size=16 --set data.test_batch_size=16 --set train.accumulate=1 \
                --set data.steps_per_epoch=10 --set train.epochs=1 --set train.eval_every=0 --set data.val_batches=1 \
                --set train.schedule=constant --set runtime.cuda_graph=$graph --set train.checkpoint_dir="$work/kt-ckpt"
        done
        kt torch-gpt2-compile python3 bench/gpt2/torch_gpt2.py --train "$g/tokens_train_*.bin" --batch 16 --steps 4 \
            --warmup 6 ;;
    diag-fmnist) # fmnist-resnet, bf16 channels_last, no CUDA graphs: glia profile's per-layer times (its algorithms
        # chosen by a normal timing), glia's kernels of 5 steps (ncu; 85 launches a step, counted in the emulator) after
        # 15000 launches (ncu skews the autotuner's timing: its choices may differ), and PyTorch eager's of 5 steps after 50
        d=$(fmnist_dir)
        GLIA_PLUGIN_PATH="${GLIA_PLUGIN_PATH:-$PWD/stage/plugins}" ./tools/glia profile share/glia/examples/fmnist-resnet.ini \
            --steps 20 --set runtime.device=cuda --set runtime.precision=bf16 --set runtime.memory_format=channels_last \
            --set data.train_images="$d/train-images-idx3-ubyte.gz" --set data.train_labels="$d/train-labels-idx1-ubyte.gz" \
            --set data.test_images="$d/t10k-images-idx3-ubyte.gz" --set data.test_labels="$d/t10k-labels-idx1-ubyte.gz" \
            2>&1 | head -n 60
        if command -v ncu > /dev/null; then
            GLIA_PLUGIN_PATH="${GLIA_PLUGIN_PATH:-$PWD/stage/plugins}" ncu --clock-control none --target-processes all \
                --metrics gpu__time_duration.sum --csv --launch-skip 15000 --launch-count 425 \
                ./tools/glia train share/glia/examples/fmnist-resnet.ini --quiet --set runtime.device=cuda \
                --set runtime.precision=bf16 --set runtime.memory_format=channels_last --set runtime.cuda_graph=off \
                --set train.epochs=1 --set data.train_samples=16000 --set data.test_samples=1000 \
                --set data.train_images="$d/train-images-idx3-ubyte.gz" --set data.train_labels="$d/train-labels-idx1-ubyte.gz" \
                --set data.test_images="$d/t10k-images-idx3-ubyte.gz" --set data.test_labels="$d/t10k-labels-idx1-ubyte.gz" \
                > "$work/diag-fmnist-ncu.csv" 2>&1 || true
            echo "glia (ncu, 5 steps):"
            python3 bench/ncu_summary.py "$work/diag-fmnist-ncu.csv" | head -n 45
        fi
        echo "pytorch eager:"
        python3 bench/gpu_fmnist/torch_fmnist_gpu.py "$d" resnet --variant eager --epochs 1 --train-samples 16000 \
            --test-samples 1000 --profile 5 2>&1 | head -n 55 ;;
    *) echo "unknown stage $3" >&2; exit 2 ;;
    esac
    exit
fi
[ $# -ge 3 ] || { echo "usage: $0 OUTDIR BUDGET_S NAME:LIMIT_S ..." >&2; exit 2; }
mkdir -p "$1"
out=$(cd "$1" && pwd) budget=$2
shift 2
self=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
cd "$(dirname "$self")/.."
export CUDA_ARCHS="${CUDA_ARCHS:-90}" PYTHONUNBUFFERED=1
# the kit's libraries (the build's rpath): a warm machine that got the kit anew lost the unpacked copy
if [ -f gpu-kit/deps.tar.gz ] && ! [ -d gpu-kit/deps/lib ]; then mkdir -p gpu-kit/deps && tar xzf gpu-kit/deps.tar.gz -C gpu-kit/deps; fi
work=${GLIA_SESSION_WORK:-/tmp/glia-gpu-session}  # kept across calls on a warm machine
mkdir -p "$work"
start=$(date +%s)
for one in "$@"; do
    name=${one%%:*} limit=${one#*:}
    left=$((budget - ($(date +%s) - start)))
    if [ "$left" -lt 20 ]; then echo "== $name: not run (the budget is spent)" | tee -a "$out/summary.txt"; continue; fi
    [ "$limit" -le "$left" ] || limit=$left
    t0=$(date +%s)
    echo "== $name (at most $limit s)" | tee -a "$out/summary.txt"
    timeout -k 5 "$limit" "$self" --stage "$work" "$name" > "$work/stage-$name.log" 2>&1
    rc=$?
    echo "== $name: exit $rc after $(($(date +%s) - t0)) s$([ $rc = 124 ] && echo ' (its time ran out)')" | tee -a "$out/summary.txt"
    tail -n 40 "$work/stage-$name.log" >> "$out/summary.txt"
done
tar czf "$out/gpu.tgz" -C "$work" . 2>/dev/null
cat "$out/summary.txt"
