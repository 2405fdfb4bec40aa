/* core/schema.c — the core's key schemas: [runtime], [data], [train], [plugins], [graph], [distributed] and the
 * keys every layer section has, with their types, defaults and docs. Not the validation (core/config.c). */
#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "parts.h"

/* ---- core schemas ---- */

static const struct glia_key runtime_keys[] = {
    GLIA_KEY("device", GLIA_KEY_STRING, "auto", "auto | cpu | cuda | cuda:N (auto: cuda when usable, else cpu)"),
    GLIA_KEY("seed", GLIA_KEY_INT, "1", "seed of weight init, shuffling and random layers", .min = 0, .max = 9.2e18),
    GLIA_KEY("threads", GLIA_KEY_INT, "0", "CPU threads (0: OpenMP default, OMP_NUM_THREADS)", .min = 0, .max = 4096),
    GLIA_KEY("memory_format", GLIA_KEY_ENUM, "contiguous",
             "layout of 4-D activations: contiguous (NCHW) or channels_last (NHWC)", .choices = "contiguous|channels_last"),
    GLIA_KEY("precision", GLIA_KEY_ENUM, "fp32",
             "GEMM/convolution math: fp32, tf32, bf16 or fp16 (fp32 master weights; fp16 scales the loss); CUDA only "
             "beyond fp32", .choices = "fp32|tf32|bf16|fp16"),
    GLIA_KEY("cudnn_benchmark", GLIA_KEY_BOOL, "on",
             "time the convolution algorithms once per shape and keep the fastest (off: heuristics); CUDA only"),
    GLIA_KEY("workspace_mb", GLIA_KEY_INT, "1024", "scratch memory a layer may use for a faster algorithm (MiB)",
             .min = 0, .max = 1 << 20),
    GLIA_KEY("deterministic", GLIA_KEY_BOOL, "off",
             "only algorithms that give the same bits every run: cuDNN convolution algorithms cuDNN marks "
             "deterministic, the CUDA embedding's weight gradient summed in a fixed order (with cudnn_benchmark = off "
             "a run repeats bit for bit); the CPU is deterministic either way"),
    GLIA_KEY("cuda_graph", GLIA_KEY_BOOL, "off",
             "replay each training batch shape's forward, backward and optimizer update (not fp16's) from a CUDA graph "
             "(one launch) once it has run once; CUDA only, not with [distributed] mode"),
    GLIA_KEY("debug_checks", GLIA_KEY_BOOL, "off",
             "surround every tensor a layer call writes (outputs, input and parameter gradients, buffers) with guard "
             "values and stop, naming the layer and the tensor, when a call wrote outside one; slower"),
    GLIA_KEY("nvtx", GLIA_KEY_BOOL, "off",
             "name each layer's forward and backward, the optimizer step, the input and the gradient wait as NVTX ranges, "
             "so that Nsight Systems shows glia's step by name; CUDA only"),
    GLIA_KEY("detect_anomaly", GLIA_KEY_BOOL, "off",
             "after every layer's training forward and backward, look for NaN and inf in what it wrote (its output; "
             "its input and parameter gradients) and stop at the first, naming the layer, the tensor and the step "
             "(torch.autograd.detect_anomaly); slower: every tensor is read on the host"),
    GLIA_KEY_END};

static const struct glia_key data_keys[] = {
    GLIA_KEY("format", GLIA_KEY_ENUM, "idx",
             "dataset files: idx (images), tokens (lines of a label then token ids), cifar10 or cifar100 (binary batches); "
             "synthetic: random images and labels made when the model is built (no files); token_stream (llm.c's "
             "uint16 token files) or bytes (any files, a token per byte): a language model's windows of seq_len tokens; "
             "npy: uint8 or float32 images and integer labels as NumPy .npy files; folder: an ImageFolder tree of PNG "
             "and JPEG images, one folder per class",
             .choices = "idx|tokens|cifar10|cifar100|synthetic|token_stream|bytes|npy|folder"),
    GLIA_KEY("train_images", GLIA_KEY_STRING, NULL, "format = idx or npy: IDX image file for training (raw or .gz); required"),
    GLIA_KEY("train_labels", GLIA_KEY_STRING, NULL, "format = idx or npy: IDX label file for training; required"),
    GLIA_KEY("test_images", GLIA_KEY_STRING, NULL, "format = idx or npy: IDX image file for evaluation; required"),
    GLIA_KEY("test_labels", GLIA_KEY_STRING, NULL, "format = idx or npy: IDX label file for evaluation; required"),
    GLIA_KEY("train_dir", GLIA_KEY_STRING, NULL, "format = folder: the training images, one folder per class (the "
             "sorted folder names are the classes); required"),
    GLIA_KEY("test_dir", GLIA_KEY_STRING, NULL, "format = folder: the evaluation images, their folders among the "
             "training classes; required"),
    GLIA_KEY("image_size", GLIA_KEY_INT, NULL, "format = folder: the side of the square images the model sees "
             "(required)", .min = 1, .max = 4096),
    GLIA_KEY("random_resized_crop", GLIA_KEY_BOOL, "on", "format = folder: training images are RandomResizedCrop's "
             "(area 8-100%, aspect 3/4-4/3) resized to image_size; off, and always in evaluation: resized to "
             "image_size / 0.875 on the shorter side and cropped to the center"),
    GLIA_KEY("layout", GLIA_KEY_ENUM, "nchw", "format = npy: 4-D images are N x C x H x W (nchw) or N x H x W x C "
             "(nhwc, as NumPy and TensorFlow keep them)", .choices = "nchw|nhwc"),
    GLIA_KEY("train", GLIA_KEY_STRING, NULL,
             "format = tokens: token file for training (raw or .gz); cifar10, cifar100: comma-separated batch files; required"),
    GLIA_KEY("test", GLIA_KEY_STRING, NULL, "format = tokens, cifar10, cifar100: the evaluation file(s); required"),
    GLIA_KEY("coarse_labels", GLIA_KEY_BOOL, "off", "format = cifar100: train on the 20 coarse labels instead of the 100 fine ones"),
    GLIA_KEY("channels", GLIA_KEY_INT, "3", "format = synthetic: image channels", .min = 1, .max = GLIA__MAX_CHANNELS),
    GLIA_KEY("rows", GLIA_KEY_INT, "224", "format = synthetic: image height", .min = 1, .max = 1 << 16),
    GLIA_KEY("cols", GLIA_KEY_INT, "224", "format = synthetic: image width", .min = 1, .max = 1 << 16),
    GLIA_KEY("classes", GLIA_KEY_INT, "1000", "format = synthetic: labels are uniform on 0 .. classes-1", .min = 1,
             .max = 1 << 24),
    GLIA_KEY("seed", GLIA_KEY_INT, NULL, "format = synthetic: seed of the images and labels (default: [runtime] seed)",
             .min = 0, .max = 9.2e18),
    GLIA_KEY("vocab", GLIA_KEY_INT, "0", "format = tokens: token ids are 1 .. vocab-1 (0 pads); required; "
             "token_stream: tokens are below it, a file with another is refused (0: the largest token + 1)", .min = 0,
             .max = 1 << 30),
    GLIA_KEY("train_tokens", GLIA_KEY_LIST, NULL,
             "format = token_stream, bytes: the training files, comma-separated glob patterns (each pattern's matches "
             "in name order, e.g. data/fineweb_train_*.bin); required"),
    GLIA_KEY("val_tokens", GLIA_KEY_LIST, NULL,
             "format = token_stream, bytes: the validation files, as train_tokens; required for token_stream (bytes: "
             "default the last val_fraction of the training bytes)"),
    GLIA_KEY("seq_len", GLIA_KEY_INT, NULL,
             "format = token_stream, bytes: T, the tokens of a sample (windows of T + 1 tokens: inputs the first T, "
             "targets the last T); required", .min = 1, .max = 1 << 24),
    GLIA_KEY("steps_per_epoch", GLIA_KEY_INT, "0",
             "format = token_stream, bytes: training batches per epoch (0: the training tokens / (batch_size x seq_len), "
             "at least 1)", .min = 0, .max = 1e12),
    GLIA_KEY("val_batches", GLIA_KEY_INT, "0",
             "format = token_stream, bytes: evaluate on at most this many batches of test_batch_size windows (0: every "
             "window; llm.c's val_max_steps)", .min = 0, .max = 1e12),
    GLIA_KEY("val_fraction", GLIA_KEY_FLOAT, "0.1",
             "format = bytes without val_tokens: the last part of the training bytes set aside for validation", .min = 0,
             .max = 1),
    GLIA_KEY("max_length", GLIA_KEY_INT, "0", "format = tokens: keep the first N ids of longer samples (0: all)", .min = 0,
             .max = 1 << 24),
    GLIA_KEY("pad_to_multiple", GLIA_KEY_INT, "1", "format = tokens: a batch is padded to a length that is a multiple of N",
             .min = 1, .max = 1 << 16),
    GLIA_KEY("group_by_length", GLIA_KEY_BOOL, "off",
             "format = tokens: batches of samples of similar lengths (runs of group_size batches sorted by length, "
             "then the batches shuffled); evaluation sorted by length"),
    GLIA_KEY("group_size", GLIA_KEY_INT, "50", "group_by_length: batches per sorted run", .min = 1, .max = 1 << 20),
    GLIA_KEY("batch_size", GLIA_KEY_INT, "64", "training mini-batch size", .min = 1, .max = 1 << 20),
    GLIA_KEY("test_batch_size", GLIA_KEY_INT, "1000", "evaluation batch size", .min = 1, .max = 1 << 20),
    GLIA_KEY("shuffle", GLIA_KEY_BOOL, "on", "reshuffle training samples every epoch (seed + epoch); token_stream, "
             "bytes: training windows start at random offsets drawn per epoch (off: sequential windows)"),
    GLIA_KEY("mean", GLIA_KEY_LIST, NULL,
             "normalization x = (pixel/255 - mean) / std: one value, or one per channel (default: the data set's, "
             "idx 0.2860 (Fashion-MNIST), cifar10 0.4914, 0.4822, 0.4465, cifar100 0.5071, 0.4865, 0.4409, synthetic 0.5)"),
    GLIA_KEY("std", GLIA_KEY_LIST, NULL,
             "normalization divisor: one value, or one per channel (default: idx 0.3530, cifar10 0.2470, 0.2435, 0.2616, "
             "cifar100 0.2673, 0.2564, 0.2762, synthetic 0.2898)"),
    GLIA_KEY("workers", GLIA_KEY_INT, "2", "loader threads (0: load in the training thread)", .min = 0, .max = 256),
    GLIA_KEY("prefetch", GLIA_KEY_INT, "2", "batches each worker prepares ahead", .min = 1, .max = 1024),
    GLIA_KEY("persistent_workers", GLIA_KEY_BOOL, "on", "keep loader threads alive between epochs"),
    GLIA_KEY("pin_memory", GLIA_KEY_BOOL, "on", "page-locked batch buffers, copied to the device on a copy stream during the previous step (no effect on the CPU backend)"),
    GLIA_KEY("drop_last", GLIA_KEY_BOOL, "off", "drop the last training batch when it is smaller than batch_size"),
    GLIA_KEY("random_crop_padding", GLIA_KEY_INT, "0", "augment: random crop from the image padded by N zero pixels (0: off)", .min = 0, .max = 1024),
    GLIA_KEY("random_flip", GLIA_KEY_BOOL, "off", "augment: horizontal flip with probability 0.5"),
    GLIA_KEY("resident", GLIA_KEY_ENUM, "auto",
             "image formats: keep the training set on the device and make each batch there (the loader's order and "
             "augmentation, the same bits); auto: on with CUDA when it takes under resident_share of the free device "
             "memory, off on the CPU", .choices = "auto|on|off"),
    GLIA_KEY("resident_share", GLIA_KEY_FLOAT, "0.25", "resident = auto: the most of the device's free memory the "
             "training set's images and labels may take", .min = 0, .max = 1),
    GLIA_KEY("train_samples", GLIA_KEY_INT, "0", "use only the first N training samples (0: all); format = synthetic: "
             "how many to make (0: 1024)", .min = 0, .max = 1e12),
    GLIA_KEY("test_samples", GLIA_KEY_INT, "0", "use only the first N test samples (0: all); format = synthetic: how "
             "many to make (0: 256)", .min = 0, .max = 1e12),
    GLIA_KEY_END};

static const struct glia_key train_keys[] = {
    GLIA_KEY("epochs", GLIA_KEY_INT, "1", "passes over the training set", .min = 1, .max = 1e9),
    GLIA_KEY("optimizer", GLIA_KEY_STRING, "sgd", "optimizer plugin; its keys go in [optimizer]"),
    GLIA_KEY("lr", GLIA_KEY_FLOAT, "0.01", "base learning rate", .min = 0, .max = 1e6),
    GLIA_KEY("schedule", GLIA_KEY_ENUM, "constant", "learning-rate schedule: step and cosine per epoch, poly and linear "
             "per optimizer step", .choices = "constant|step|cosine|poly|linear"),
    GLIA_KEY("gamma", GLIA_KEY_FLOAT, "0.1", "step: multiply lr by gamma every step_epochs epochs", .min = 0, .max = 1e6),
    GLIA_KEY("step_epochs", GLIA_KEY_INT, "1", "step: epochs between decays (StepLR step_size)", .min = 1, .max = 1e9),
    GLIA_KEY("min_lr", GLIA_KEY_FLOAT, "0", "cosine: the lr of the last epoch's end; poly, linear: the lr from step total_steps on",
             .min = 0, .max = 1e6),
    GLIA_KEY("warmup_steps", GLIA_KEY_INT, "0", "linear warmup over the first N optimizer steps (lr * k/N)", .min = 0, .max = 1e12),
    GLIA_KEY("power", GLIA_KEY_FLOAT, "1", "poly: (lr - min_lr) * (1 - (k-W)/(T-W))^power + min_lr after the warmup W", .min = 0,
             .max = 1e3),
    GLIA_KEY("total_steps", GLIA_KEY_INT, "0", "poly, linear: the optimizer steps T the decay ends at (0: epochs x the "
             "optimizer steps an epoch of the training set makes)", .min = 0, .max = 1e15),
    GLIA_KEY("clip_grad_norm", GLIA_KEY_FLOAT, "0", "scale gradients so their global L2 norm is at most this (0: off)", .min = 0, .max = 1e30),
    GLIA_KEY("accumulate", GLIA_KEY_INT, "1", "micro-batches per optimizer step (gradients averaged)", .min = 1, .max = 1e6),
    GLIA_KEY("eval_every", GLIA_KEY_INT, "1", "evaluate after every Nth epoch and after the last (0: never; an epoch not "
             "evaluated reports no test figures)", .min = 0, .max = 1e9),
    GLIA_KEY("weight_decay_1d", GLIA_KEY_BOOL, "on", "off: the optimizer's weight_decay skips 1-D parameters (biases, "
             "normalization scales and shifts), as many recipes do"),
    GLIA_KEY("metrics", GLIA_KEY_STRING, NULL, "JSON-lines file, one object per epoch (--metrics overrides)"),
    GLIA_KEY("init_from", GLIA_KEY_STRING, NULL, "a safetensors file (glia export's, or PyTorch's state_dict) whose "
             "weights and buffers replace the initial ones, by name (<layer>.<parameter>); a checkpoint --resume loads "
             "comes after it"),
    GLIA_KEY("tensorboard", GLIA_KEY_STRING, NULL, "folder for a TensorBoard event file: train/loss and train/lr every "
             "log_every steps, the epoch's figures after each (made with its parents; a new file each run)"),
    GLIA_KEY("checkpoint_dir", GLIA_KEY_STRING, NULL, "write checkpoints here (every checkpoint_every steps and at the end; made with its parents)"),
    GLIA_KEY("checkpoint_every", GLIA_KEY_INT, "0", "optimizer steps between checkpoints (0: only at the end)", .min = 0, .max = 1e15),
    GLIA_KEY("checkpoint_keep", GLIA_KEY_INT, "2", "the folder's newest step checkpoints kept, whoever wrote them (older ones are deleted; final.ckpt stays)", .min = 1, .max = 1e6),
    GLIA_KEY("max_steps", GLIA_KEY_INT, "0", "stop after this many optimizer steps, with a checkpoint (0: no limit)", .min = 0, .max = 1e15),
    GLIA_KEY("log_every", GLIA_KEY_INT, "100", "steps between progress lines when not on a terminal", .min = 1, .max = 1e9),
    GLIA_KEY_END};

static const struct glia_key plugins_keys[] = {
    GLIA_KEY("path", GLIA_KEY_LIST, NULL, "extra plugin folders, searched first (relative to this file; each must exist)"),
    GLIA_KEY("load", GLIA_KEY_LIST, NULL,
             "plugins to load: a name (looked up in the plugin folders) or a .so file (relative to this file)"),
    GLIA_KEY_END};

static const struct glia_key graph_keys[] = {
    GLIA_KEY("drop_bias_before_norm", GLIA_KEY_BOOL, "on",
             "remove the bias of a layer whose output goes only into a normalization layer"),
    GLIA_KEY("fuse_pointwise", GLIA_KEY_ENUM, "auto",
             "run a chain of elementwise layers (relu, leaky_relu, sigmoid, tanh, gelu, add, dropout, pointwise) as one "
             "pointwise layer, and a batchnorm + relu as a batchnorm with activation = relu: auto (on for CUDA, where it "
             "saves kernels) | on | off", .choices = "auto|on|off"),
    GLIA_KEY("checkpoint_segments", GLIA_KEY_INT, "0",
             "activation checkpointing: cut the model into N segments; a training step keeps only each segment's last "
             "output and runs the rest of its forward again in backward (less memory, more compute; 0: off)",
             .min = 0, .max = GLIA__MAX_SEGMENTS),
    GLIA_KEY("half_activations", GLIA_KEY_ENUM, "auto",
             "with precision = bf16 or fp16, keep activations and their gradients in that type between layers whose "
             "kernels take it (converting at the others' edges; the loss and its logits stay fp32): auto (on where the "
             "backend converts, CUDA; the default) | off (every activation fp32)", .choices = "auto|off"),
    GLIA_KEY_END};

static const struct glia_key distributed_keys[] = {
    GLIA_KEY("mode", GLIA_KEY_ENUM, "none",
             "none | ddp: one process per device, started by mpirun or srun, gradients all-reduced in buckets during "
             "backward | dp: one process drives the devices listed in devices", .choices = "none|dp|ddp"),
    GLIA_KEY("transport", GLIA_KEY_STRING, "auto", "auto (nccl for a CUDA device, else mpi) | mpi | nccl | a transport plugin"),
    GLIA_KEY("bucket_mb", GLIA_KEY_FLOAT, "25", "ddp: gradient bucket size in MiB", .min = 1e-6, .max = 1e6),
    GLIA_KEY("first_bucket_mb", GLIA_KEY_FLOAT, "1", "ddp: size of the first bucket (the last layers' gradients), so "
             "communication starts early", .min = 1e-6, .max = 1e6),
    GLIA_KEY("timeout_s", GLIA_KEY_FLOAT, "300", "a collective not done after this long fails the run (a rank died or "
             "stalled)", .min = 0.01, .max = 1e9),
    GLIA_KEY("devices", GLIA_KEY_LIST, NULL, "dp: the devices one process drives, e.g. cuda:0, cuda:1 (N is cuda:N; "
             "cpu, cpu for tests)"),
    GLIA_KEY("rank_log", GLIA_KEY_STRING, NULL, "ddp: every rank writes its progress lines to this file; {rank} is "
             "replaced by the rank (relative to this file)"),
    GLIA_KEY_END};

static const struct glia_key layer_common_keys[] = {
    GLIA_KEY("type", GLIA_KEY_STRING, NULL, "layer type (a plugin feature)", .required = true),
    GLIA_KEY("inputs", GLIA_KEY_LIST, NULL, "input layers by name ('input' is the data); default: the previous layer"),
    GLIA_KEY("impl", GLIA_KEY_STRING, "auto", "implementation: auto or a registered impl (glia plugins)"),
    GLIA_KEY("weight_decay", GLIA_KEY_BOOL, "on", "off: the optimizer's weight_decay skips this layer's parameters "
             "(a PyTorch param group with weight_decay 0)"),
    GLIA_KEY("tie_weight", GLIA_KEY_STRING, NULL, "an earlier layer whose parameter 'weight' this layer's 'weight' is "
             "(same shape; one tensor, both gradients summed into it: GPT-2's lm_head and wte)"),
    GLIA_KEY_END};

const char *const glia__reserved[] = {"runtime", "data", "train", "optimizer", "plugins", "graph", "distributed"};

const struct glia_key *glia__core_schema(const char *section)
{
    if (!strcmp(section, "runtime")) return runtime_keys;
    if (!strcmp(section, "data")) return data_keys;
    if (!strcmp(section, "train")) return train_keys;
    if (!strcmp(section, "plugins")) return plugins_keys;
    if (!strcmp(section, "graph")) return graph_keys;
    if (!strcmp(section, "distributed")) return distributed_keys;
    if (!strcmp(section, "layer")) return layer_common_keys;
    return NULL;
}

bool glia__is_reserved(const char *name)
{
    for (size_t i = 0; i < GLIA__N_RESERVED; i++)
        if (!strcmp(glia__reserved[i], name)) return true;
    return false;
}


const struct glia_key *glia_config_schema(const char *section) { return glia__core_schema(section); }
