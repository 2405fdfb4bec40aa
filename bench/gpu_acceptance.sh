#!/bin/sh
# bench/gpu_acceptance.sh — the GPU checks of glia in stages that each fit a short session on a lent GPU
# machine: build against pip-installed cuDNN/NCCL wheels, the test suite with the GPU tests, training
# the examples on device = cuda (one process, DataParallel on devices 0,0, NCCL DDP with one rank, the
# token model), and the side-by-side benchmarks. Every stage writes its logs under OUTDIR. Not a test
# and not CI: run it from the checkout on a machine with a GPU.
#   usage: bench/gpu_acceptance.sh STAGES OUTDIR    STAGES: one or more of build test train bench roofline gpt2
#          ("test train" runs both, in that order), or all (roofline: glia profile's per-layer roofline of the
#          examples at bf16, channels_last, half activations on and off, and bench/layer's memory-bound ops
#          against PyTorch; gpt2: bench/gpt2/run.sh, GPT-2 124M against PyTorch at batches 16 and 32 on the
#          kit's token files)
#   environment: PYTHON (python3) with torch and the nvidia wheels; JOBS (nproc); GPU_TESTS=1: the test
#   stage runs only the programs that use the GPU; TEST_TIMEOUT (600): seconds one test program may run;
#   REPEAT (1): the test stage runs the suite that many times (the programs run in parallel each time).
#   test, train and bench build first on a tree without a build.
#   a bare machine: make gpu-kit/ here first (bench/gpu_kit.sh) and carry it; build then uses its generated
#   build system, oneDNN, CUnit and zlib, and its Fashion-MNIST files (bench/data)
set -eu
[ $# -eq 2 ] || { echo "usage: $0 'build|test|train|bench|roofline ...'|all OUTDIR" >&2; exit 2; }
stage=$1
mkdir -p "$2"
out=$(cd "$2" && pwd)
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
export PYTHON="$python"  # the benchmarks' PyTorch side (theirs defaults to Debian's /usr/bin/python3)
jobs=${JOBS:-$(nproc)}
export GLIA_PLUGIN_PATH="$PWD/stage/plugins" GLIA_PLUGIN_SYSTEM_PATH=  # this build's plugins, never an installed glia's
# the kit's libraries, unpacked again when a warm machine got the kit anew beside an earlier build
if [ -f gpu-kit/deps.tar.gz ]; then
    [ -d gpu-kit/deps/lib ] || { mkdir -p gpu-kit/deps && tar xzf gpu-kit/deps.tar.gz -C gpu-kit/deps; }
    export LD_LIBRARY_PATH="$PWD/gpu-kit/deps/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
log() { echo "== $*" | tee -a "$out/summary.txt"; }
# cuDNN from a pip wheel opens its engine libraries (and NVRTC) by name at run time: the folders on the search path
nv=$("$python" -c 'import nvidia, os; print(list(nvidia.__path__)[0])' 2>/dev/null) || nv=""
[ -z "$nv" ] || export LD_LIBRARY_PATH="$nv/cudnn/lib:$nv/nccl/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

versions() {
    {
        nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
        nvcc --version | tail -n 1 || true
        ${CC:-cc} --version | head -n 1 || true
        "$python" -c 'import torch; print("pytorch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version(), "nccl", ".".join(map(str, torch.cuda.nccl.version())))' || true
        [ -x tools/glia ] && tools/glia --version || true
    } > "$out/versions.txt" 2>&1
    cat "$out/versions.txt"
}

build() {
    [ -n "$nv" ] || { log "build: $python has no nvidia wheels (cuDNN, NCCL)"; exit 1; }
    log "build with cuDNN $nv/cudnn and NCCL $nv/nccl"
    set --
    if [ -f gpu-kit/deps.tar.gz ]; then  # a bare machine: generated build files and libraries from the kit
        kit=$PWD/gpu-kit
        tar xzf "$kit/build-files.tar.gz"
        mkdir -p bench/data && cp "$kit"/data/*.gz bench/data/
        set -- --disable-maintainer-mode CPPFLAGS="-I$kit/deps/include" LDFLAGS="-L$kit/deps/lib -Wl,-rpath,$kit/deps/lib" \
            ZLIB_CFLAGS="-I$kit/deps/include" ZLIB_LIBS="-L$kit/deps/lib -lz"
    else
        ./bootstrap > "$out/build.log" 2>&1
    fi
    ./configure --with-cudnn="$nv/cudnn" --with-nccl="$nv/nccl" "$@" >> "$out/build.log" 2>&1 || { tail -n 30 "$out/build.log"; exit 1; }
    if ! make -j"$jobs" >> "$out/build.log" 2>&1; then
        # another host compiler may warn where this project's does not: logged, and built again without -Werror
        log "the build fails with -Werror here (build.log): building without it"
        grep -E 'error:|warning:' "$out/build.log" | head -n 20 | tee -a "$out/summary.txt"
        make -j"$jobs" WARN_CFLAGS="-Wall -Wextra -Wno-unused-parameter" NVCC_WARN="-Wall,-Wextra" >> "$out/build.log" 2>&1 \
            || { tail -n 30 "$out/build.log"; exit 1; }
    fi
    sed -n '/^glia [0-9]/,/tests (CUnit)/p' "$out/build.log" | tee -a "$out/summary.txt"
    versions
}

# A lent machine is handed back soon after a call ends, so a later stage may find a bare copy of the
# checkout: every stage after build builds first when the tree holds no CUDA build.
ensure_built() {
    [ -x tools/glia ] && [ -f stage/plugins/cuda.so ] && return 0
    log "no CUDA build here: building first"
    build
}

# GPU_TESTS=1 runs only the test programs that use the GPU (the CPU suite runs in CI anyway); GPU_PROGRAMS, where set,
# names fewer (a rerun of the ones that failed).
GPU_PROGRAMS=${GPU_PROGRAMS:-"tests/test_cuda tests/test_cuda_conv tests/test_cuda_dense tests/test_cuda_norm_pool tests/test_cuda_pointwise
 tests/test_cuda_optim tests/test_cuda_seq tests/test_cuda_attention tests/test_cuda_layernorm tests/test_cuda_dist tests/test_syncbn
 tests/test_dp tests/test_layer_run tests/test_model tests/test_tensor tests/test_cache tests/test_config tests/test_pw_jit
 tests/test_synthetic tests/test_bench"}

tests() {
    ensure_built
    rc=0
    limit="timeout ${TEST_TIMEOUT:-600}"  # a program that hangs on the GPU fails instead of taking the stage
    # another compiler may warn where this project's does not: that is logged, and the tests still run
    if ! make -j"$jobs" check TESTS= > "$out/check-build.log" 2>&1; then
        log "the tests do not build with -Werror here (check-build.log): building them without it"
        make -j"$jobs" check TESTS= WARN_CFLAGS="-Wall -Wextra -Wno-unused-parameter" NVCC_WARN="-Wall,-Wextra" \
            >> "$out/check-build.log" 2>&1 || rc=$?
    fi
    all=0
    for run in $(seq "${REPEAT:-1}"); do  # the programs in parallel, REPEAT times over
        rc=0
        if [ "${GPU_TESTS:-0}" = 1 ]; then
            log "make check, the GPU programs only (run $run of ${REPEAT:-1})"
            make -j"$jobs" check TESTS="$(echo $GPU_PROGRAMS)" LOG_COMPILER="$limit" > "$out/check.log" 2>&1 || rc=$?
        else
            log "make check (run $run of ${REPEAT:-1})"
            make -j"$jobs" check LOG_COMPILER="$limit" > "$out/check.log" 2>&1 || rc=$?
        fi
        tests/summary.sh "$rc" > "$out/summary-run.txt" || all=1
        tee -a "$out/summary.txt" < "$out/summary-run.txt"
        mkdir -p "$out/tests/$run"
        cp tests/*.log "$out/tests/$run/" 2>/dev/null || true
    done
    [ "${REPEAT:-1}" -eq 1 ] || log "$REPEAT runs: $([ $all -eq 0 ] && echo all passed || echo SOME FAILED)"
}

train_one() {  # name ini args...
    name=$1 ini=$2
    shift 2
    log "train $name: $ini $*"
    tools/glia train "$ini" --quiet --metrics "$out/train-$name.jsonl" "$@" > "$out/train-$name.txt" 2>&1 \
        || echo "FAILED: $(tail -n 1 "$out/train-$name.txt")" | tee -a "$out/summary.txt"
    tail -n 1 "$out/train-$name.jsonl" 2>/dev/null | tee -a "$out/summary.txt" || true
}

train() {
    ensure_built
    [ -f bench/data/train-images-idx3-ubyte.gz ] && d=bench/data || d=/usr/share/datasets/fashion-mnist
    set -- --set data.train_images="$d/train-images-idx3-ubyte.gz" --set data.train_labels="$d/train-labels-idx1-ubyte.gz" \
        --set data.test_images="$d/t10k-images-idx3-ubyte.gz" --set data.test_labels="$d/t10k-labels-idx1-ubyte.gz"
    train_one cnn share/glia/examples/fmnist-cnn.ini --set runtime.device=cuda "$@"
    train_one resnet share/glia/examples/fmnist-resnet.ini --set runtime.device=cuda "$@"
    # the fuse_pointwise pass (auto: on for CUDA) against the layers one by one, one epoch each
    train_one resnet-1epoch share/glia/examples/fmnist-resnet.ini --set runtime.device=cuda --set train.epochs=1 "$@"
    train_one resnet-1epoch-nofuse share/glia/examples/fmnist-resnet.ini --set runtime.device=cuda --set train.epochs=1 \
        --set graph.fuse_pointwise=off "$@"
    train_one cnn-1epoch share/glia/examples/fmnist-cnn.ini --set runtime.device=cuda --set train.epochs=1 "$@"
    # [runtime] cuda_graph: the same epoch replayed from CUDA graphs (the same accuracy as cnn-1epoch)
    train_one cnn-1epoch-graph share/glia/examples/fmnist-cnn.ini --set runtime.device=cuda --set train.epochs=1 \
        --set runtime.cuda_graph=on "$@"
    train_one resnet-1epoch-graph share/glia/examples/fmnist-resnet.ini --set runtime.device=cuda --set train.epochs=1 \
        --set runtime.cuda_graph=on "$@"
    # [runtime] deterministic with the heuristics' choice: the graph run is the same bits as the run without (equal losses)
    for m in cnn resnet; do
        train_one $m-1epoch-det share/glia/examples/fmnist-$m.ini --set runtime.device=cuda --set train.epochs=1 \
            --set runtime.deterministic=on --set runtime.cudnn_benchmark=off "$@"
        train_one $m-1epoch-det-graph share/glia/examples/fmnist-$m.ini --set runtime.device=cuda --set train.epochs=1 \
            --set runtime.deterministic=on --set runtime.cudnn_benchmark=off --set runtime.cuda_graph=on "$@"
    done
    train_one cnn-dp00 share/glia/examples/fmnist-cnn.ini --set runtime.device=cuda --set train.epochs=1 \
        --set distributed.mode=dp --set distributed.devices=0,0 "$@"
    train_one cnn-ddp-nccl1 share/glia/examples/fmnist-cnn.ini --set runtime.device=cuda --set train.epochs=1 \
        --set distributed.mode=ddp --set distributed.transport=nccl "$@"
    train_one cnn-cpu-1epoch share/glia/examples/fmnist-cnn.ini --set runtime.device=cpu --set train.epochs=1 "$@"
    [ -f bench/data/tokens/train.txt ] || "$python" bench/length_bucket/gen_tokens.py bench/data/tokens
    train_one text-cnn bench/length_bucket/text-cnn.ini --set runtime.device=cuda --set data.group_by_length=on
}

bench() {
    ensure_built
    mkdir -p "$out/results"
    log "bench/gpu_conv"
    bench/gpu_conv/run.sh 3 > "$out/results/gpu_conv.txt" 2>&1 || echo "gpu_conv FAILED" | tee -a "$out/summary.txt"
    tail -n 25 "$out/results/gpu_conv.txt" >> "$out/summary.txt"
    log "bench/gpu_conv, relu fused"
    RELU=on bench/gpu_conv/run.sh 3 > "$out/results/gpu_conv_relu.txt" 2>&1 || echo "gpu_conv relu FAILED" | tee -a "$out/summary.txt"
    tail -n 25 "$out/results/gpu_conv_relu.txt" >> "$out/summary.txt"
    log "bench/gpu_fmnist"
    bench/gpu_fmnist/run.sh --rounds 1 > "$out/results/gpu_fmnist.txt" 2>&1 || echo "gpu_fmnist FAILED" | tee -a "$out/summary.txt"
    tail -n 21 "$out/results/gpu_fmnist.txt" >> "$out/summary.txt"
    log "bench/gpu_fmnist --cuda-graph on"
    bench/gpu_fmnist/run.sh --rounds 1 --cuda-graph on > "$out/results/gpu_fmnist-graph.txt" 2>&1 \
        || echo "gpu_fmnist --cuda-graph on FAILED" | tee -a "$out/summary.txt"
    tail -n 21 "$out/results/gpu_fmnist-graph.txt" >> "$out/summary.txt"
    log "bench/gpu_fmnist --fuse off (glia without its fusions)"
    bench/gpu_fmnist/run.sh --rounds 1 --fuse off --variants eager > "$out/results/gpu_fmnist-nofuse.txt" 2>&1 \
        || echo "gpu_fmnist --fuse off FAILED" | tee -a "$out/summary.txt"
    tail -n 21 "$out/results/gpu_fmnist-nofuse.txt" >> "$out/summary.txt"
    log "bench/gpu_resnet50"
    bench/gpu_resnet50/run.sh > "$out/results/gpu_resnet50.txt" 2>&1 || echo "gpu_resnet50 FAILED" | tee -a "$out/summary.txt"
    tail -n 14 "$out/results/gpu_resnet50.txt" >> "$out/summary.txt"
    log "bench/ddp_overhead"
    bench/ddp_overhead/run.sh --device cuda --out "$out/results/ddp_overhead-cuda.txt" > "$out/results/ddp_overhead.log" 2>&1 \
        || echo "ddp_overhead FAILED" | tee -a "$out/summary.txt"
    tail -n 8 "$out/results/ddp_overhead.log" >> "$out/summary.txt"
    log "[runtime] nvtx overhead (fmnist-cnn, 1 epoch on cuda, off then on, twice)"
    for run in off on off on; do
        ./tools/glia train share/glia/examples/fmnist-cnn.ini --quiet --set runtime.device=cuda --set train.epochs=1 \
            --set runtime.nvtx=$run --set train.checkpoint_dir="$out/nvtx-ckpt" --metrics "$out/results/nvtx-$run.jsonl" \
            > /dev/null 2>&1 || echo "nvtx $run FAILED" | tee -a "$out/summary.txt"
        echo "nvtx $run: $(tail -n 1 "$out/results/nvtx-$run.jsonl" | sed -n 's/.*"samples_per_s": \([0-9.e+]*\).*/\1/p') samples/s" |
            tee -a "$out/summary.txt"
    done
    log "bench/length_bucket"
    bench/length_bucket/run.sh --device cuda --rounds 2 --out "$out/results/length_bucket-cuda.txt" \
        > "$out/results/length_bucket.log" 2>&1 || echo "length_bucket FAILED" | tee -a "$out/summary.txt"
    tail -n 12 "$out/results/length_bucket.log" >> "$out/summary.txt"
}

roofline() {
    ensure_built
    mkdir -p "$out/results"
    # half activations on (the default at bf16) and off: what storing them in bf16 saves, layer by layer
    for run in fmnist-cnn:auto fmnist-cnn:off fmnist-resnet:auto fmnist-resnet:off resnet50:auto resnet50:off; do
        ex=${run%:*} half=${run#*:}
        log "glia profile $ex (cuda, bf16, channels_last, resident data, half_activations $half)"
        set -- --steps 50 --set runtime.device=cuda --set runtime.precision=bf16 --set runtime.memory_format=channels_last \
            --set data.resident=on --set graph.half_activations=$half
        [ "$ex" = resnet50 ] && set -- "$@" --steps 20 --set data.train_samples=6400  # 25 batches of 256
        ./tools/glia profile "share/glia/examples/$ex.ini" "$@" > "$out/results/profile-$ex-half-$half.txt" 2>&1 \
            || echo "profile $ex half_activations $half FAILED" | tee -a "$out/summary.txt"
        tail -n 40 "$out/results/profile-$ex-half-$half.txt" >> "$out/summary.txt"
    done
    log "bench/layer"
    bench/layer/run.sh > "$out/results/layer.txt" 2>&1 || echo "bench/layer FAILED" | tee -a "$out/summary.txt"
    grep -E '^(==|forward)' "$out/results/layer.txt" >> "$out/summary.txt" || true
}

gpt2() {
    ensure_built
    mkdir -p "$out/results"
    data=bench/gpt2/data
    [ -f gpu-kit/gpt2-data/tokens_train_000001.bin ] && data=gpu-kit/gpt2-data
    log "bench/gpt2 ($data)"
    bench/gpt2/run.sh --data "$data" --out "$out/results/gpt2.txt" > "$out/results/gpt2.log" 2>&1 \
        || echo "bench/gpt2 FAILED" | tee -a "$out/summary.txt"
    grep -E '"(tokens_per_s|mfu)"|^(==|forward|TFLOP)' "$out/results/gpt2.log" >> "$out/summary.txt" || true
}

[ "$stage" = all ] && stage="build test train bench roofline gpt2"
for one in $stage; do
    case "$one" in build | test | train | bench | roofline | gpt2) ;;
    *) echo "$0: unknown stage $one (build, test, train, bench, roofline, gpt2 or all)" >&2; exit 2 ;;
    esac
done
for one in $stage; do  # several stages in one call: "test train" (checked above)
    case "$one" in build) build ;; test) tests ;; train) train ;; bench) bench ;; roofline) roofline ;; gpt2) gpt2 ;; esac
done
