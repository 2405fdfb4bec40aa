/* backends/cuda/cuda_backend.c — the CUDA backend plugin (cuda.so): device memory from a caching
 * allocator, one compute stream per device, copies, f32 GEMM through cuBLASLt, NCHW <-> NHWC
 * transposes, page-locked uploads on a copy stream; its probe refuses machines without a usable
 * GPU. Not kernels: the CUDA kernels of layer types and optimizers that cuda.so registers live in
 * their own files (conv.c, dense.c, norm_pool.c, pointwise.c, optim.c, seq.c). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cuda_internal.h"
#include <nvtx3/nvToolsExt.h>
#include "conv_kernels.h"
#include "kernels.h"

/* ---- memory ---- */

/* During a capture the calling thread allocates in relaxed mode: cudaMalloc is not stream-ordered, so
 * a capture forbids it, but a block that stays allocated while the graph lives (the cache holds it,
 * cache.h) is what the graph needs. The caller holds c->lock. */
static int raw_alloc(void *user, size_t n, void **p)
{
    struct glia__cuda *c = user;
    if (cudaSetDevice(c->device) != cudaSuccess) return 1;
    bool capturing = glia__cache_capturing(c->cache);
    enum cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    if (capturing) cudaThreadExchangeStreamCaptureMode(&mode);
    cudaError_t e = cudaMalloc(p, n);
    if (capturing) cudaThreadExchangeStreamCaptureMode(&mode);
    if (e != cudaSuccess) {
        cudaGetLastError();  /* clear the sticky-free out-of-memory error */
        return 1;
    }
    return 0;
}

static void raw_free(void *user, void *p)
{
    struct glia__cuda *c = user;
    cudaSetDevice(c->device);
    cudaDeviceSynchronize();  /* the block may still be read by queued work */
    cudaFree(p);
}

static glia_status cuda_alloc(void *priv, size_t nbytes, void **ptr)
{
    struct glia__cuda *c = priv;
    pthread_mutex_lock(&c->lock);
    int r = glia__cache_alloc(c->cache, nbytes, ptr);
    struct glia__cache_stats s;
    glia__cache_get_stats(c->cache, &s);
    pthread_mutex_unlock(&c->lock);
    if (r)
        return glia_error(c->ctx, GLIA_ENOMEM, "cuda:%d: out of device memory allocating %zu bytes (%zu in tensors, %zu held)",
                          c->device, nbytes, s.current, s.reserved);
    return GLIA_OK;
}

/* Blocks go back to the cache at once: every use of them is queued on the one stream, so the
 * next owner's work runs after the last user's. */
static void cuda_free(void *priv, void *ptr)
{
    struct glia__cuda *c = priv;
    pthread_mutex_lock(&c->lock);
    glia__cache_release(c->cache, ptr);
    pthread_mutex_unlock(&c->lock);
}

static glia_status cuda_memory_stats(void *priv, struct glia_memory_stats *out)
{
    struct glia__cuda *c = priv;
    struct glia__cache_stats s;
    pthread_mutex_lock(&c->lock);
    glia__cache_get_stats(c->cache, &s);
    pthread_mutex_unlock(&c->lock);
    *out = (struct glia_memory_stats){s.current, s.peak, s.reserved, s.raw_allocs};
    return GLIA_OK;
}

/* ---- copies ---- */

static glia_status cuda_copy(void *priv, void *dst, bool dst_host, const void *src, bool src_host, size_t nbytes)
{
    struct glia__cuda *c = priv;
    glia__cuda_use(c);
    glia_status st = GLIA_OK;
    if (nbytes == 0) return GLIA_OK;
    if (dst_host && src_host) {
        memmove(dst, src, nbytes);
        return GLIA_OK;
    }
    CUDA_TRY(c->ctx, cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDefault, c->stream));
    if (dst_host || src_host) CUDA_TRY(c->ctx, cudaStreamSynchronize(c->stream));  /* the host side is pageable */
fail:
    return st;
}

static glia_status cuda_memzero(void *priv, void *ptr, size_t nbytes)
{
    struct glia__cuda *c = priv;
    glia__cuda_use(c);
    glia_status st = GLIA_OK;
    CUDA_TRY(c->ctx, cudaMemsetAsync(ptr, 0, nbytes, c->stream));
fail:
    return st;
}

/* Both streams: an upload in flight writes memory the caller may be about to free. */
static glia_status cuda_sync(void *priv)
{
    struct glia__cuda *c = priv;
    glia__cuda_use(c);
    glia_status st = GLIA_OK;
    CUDA_TRY(c->ctx, cudaStreamSynchronize(c->stream));
    CUDA_TRY(c->ctx, cudaStreamSynchronize(c->copy_stream));
fail:
    return st;
}

static glia_status cuda_transpose(void *priv, float *dst, const float *src, int64_t B, int64_t rows, int64_t cols,
                                  float beta)
{
    struct glia__cuda *c = priv;
    glia__cuda_use(c);
    glia_status st = GLIA_OK;
    CUDA_TRY(c->ctx, glia__cuda_transpose(dst, src, B, rows, cols, beta, c->stream));
fail:
    return st;
}

/* dst(B, cols, rows) = src(B, rows, cols)^T (+ dst) between f32, f16 and bf16 (glia_backend_convert checked the
 * types): f32 to f32 by the tiled transpose, the rest by the conversion kernels conv2d uses */
static glia_status cuda_convert(void *priv, void *dst, enum glia_dtype dt, const void *src, enum glia_dtype sdt,
                                int64_t B, int64_t rows, int64_t cols, float beta)
{
    struct glia__cuda *c = priv;
    glia__cuda_use(c);
    glia_status st = GLIA_OK;
    if (dt == GLIA_F32 && sdt == GLIA_F32)
        CUDA_TRY(c->ctx, glia__cuda_transpose(dst, src, B, rows, cols, beta, c->stream));
    else
        CUDA_TRY(c->ctx, glia__conv_convert(dst, glia__cuda_conv_type(dt), src, glia__cuda_conv_type(sdt), B, rows, cols,
                                            beta, c->stream));
fail:
    return st;
}

/* ---- scratch, reductions, settings ---- */

/* The scratch grown to n bytes where it holds fewer than nbytes (the debug log says so: the scratch is often the
 * largest allocation of a small model, the autotuner's timing its peak). */
static glia_status scratch_grow(struct glia__cuda *c, size_t nbytes, size_t n, void **out)
{
    if (nbytes > c->scratch_size) {
        glia_log(c->ctx, GLIA_LOG_DEBUG, "cuda:%d: scratch grows from %.1f MB to %.1f MB", c->device,
                 (double)c->scratch_size / 1048576.0, (double)n / 1048576.0);
        if (c->scratch) cuda_free(c, c->scratch);
        c->scratch = NULL;
        c->scratch_size = 0;
        glia_status st = cuda_alloc(c, n, &c->scratch);
        if (st) return st;
        c->scratch_size = n;
    }
    *out = c->scratch;
    return GLIA_OK;
}

glia_status glia__cuda_scratch(struct glia__cuda *c, size_t nbytes, void **out)
{
    return scratch_grow(c, nbytes, nbytes + nbytes / 4, out);  /* a quarter more, so that growth is rare */
}

glia_status glia__cuda_scratch_exact(struct glia__cuda *c, size_t nbytes, void **out)
{
    return scratch_grow(c, nbytes, nbytes, out);
}

/* A device block of nbytes pushed on *list, kept until the backend closes (the cache frees its memory then). */
static glia_status keep_block(struct glia__cuda *c, size_t nbytes, struct glia__cuda_kept **list)
{
    struct glia__cuda_kept *k = calloc(1, sizeof *k);
    if (!k) return glia_error(c->ctx, GLIA_ENOMEM, "cuda:%d: out of host memory", c->device);
    glia_status st = cuda_alloc(c, nbytes, &k->p);
    if (st) {
        free(k);
        return st;
    }
    k->size = nbytes;
    k->next = *list;
    *list = k;
    return GLIA_OK;
}

glia_status glia__cuda_opt_scratch(struct glia__cuda *c, size_t nbytes, void **out)
{
    glia_status st = GLIA_OK;
    if (!c->opt_scratch || c->opt_scratch->size < nbytes) st = keep_block(c, nbytes, &c->opt_scratch);
    if (!st) *out = c->opt_scratch->p;
    return st;
}

bool glia__cuda_scratch_shrink(struct glia__cuda *c, size_t nbytes)
{
    if (!c->scratch || c->scratch_size / 2 <= nbytes) return false;
    pthread_mutex_lock(&c->lock);
    glia__cache_give_back(c->cache, c->scratch);  /* raw_free waits for the queued work that reads it */
    pthread_mutex_unlock(&c->lock);
    c->scratch = NULL;
    c->scratch_size = 0;
    return true;
}

static glia_status cuda_sumsq(void *priv, const float *x, size_t n, double *out)
{
    struct glia__cuda *c = priv;
    glia__cuda_use(c);
    glia_status st = GLIA_OK;
    CUDA_TRY(c->ctx, glia__cuda_sumsq(c->reduce, x, (int64_t)n, c->stream));
    CUDA_TRY(c->ctx, cudaMemcpyAsync(out, c->reduce, sizeof *out, cudaMemcpyDeviceToHost, c->stream));
    CUDA_TRY(c->ctx, cudaStreamSynchronize(c->stream));
fail:
    return st;
}

static glia_status cuda_scale(void *priv, float *x, size_t n, float a)
{
    struct glia__cuda *c = priv;
    glia__cuda_use(c);
    glia_status st = GLIA_OK;
    CUDA_TRY(c->ctx, glia__cuda_scale(x, (int64_t)n, a, c->stream));
fail:
    return st;
}

static glia_status cuda_axpy(void *priv, float *y, const float *x, size_t n, float a)
{
    struct glia__cuda *c = priv;
    glia__cuda_use(c);
    glia_status st = GLIA_OK;
    CUDA_TRY(c->ctx, glia__cuda_axpy(y, x, (int64_t)n, a, c->stream));
fail:
    return st;
}

static glia_status cuda_clip(void *priv, float *x, size_t n, double max_norm)
{
    struct glia__cuda *c = priv;
    glia__cuda_use(c);
    glia_status st = GLIA_OK;
    CUDA_TRY(c->ctx, glia__cuda_clip(x, (int64_t)n, max_norm, c->reduce, c->stream));
fail:
    return st;
}

/* Every precision runs on sm_80 and newer; bf16 and TF32 need it, fp16 tensor cores need sm_70. */
static glia_status cuda_configure(void *priv, const struct glia_runtime_options *o)
{
    struct glia__cuda *c = priv;
    if ((o->precision == GLIA_PRECISION_TF32 || o->precision == GLIA_PRECISION_BF16) && c->cc_major < 8)
        return glia_error(c->ctx, GLIA_EUNSUPPORTED, "cuda:%d: precision %s needs compute capability 8.0 (this GPU has %d.%d)",
                          c->device, glia_precision_name(o->precision), c->cc_major, c->cc_minor);
    c->options = *o;
    return GLIA_OK;
}

/* ---- the input pipeline: page-locked host buffers, uploads on the copy stream ----
 * Buffers are portable: page-locked for every device, since dp replicas on other GPUs read them. */

static glia_status cuda_host_alloc(void *priv, size_t nbytes, void **ptr)
{
    struct glia__cuda *c = priv;
    glia__cuda_use(c);
    glia_status st = GLIA_OK;
    CUDA_TRY(c->ctx, cudaHostAlloc(ptr, nbytes ? nbytes : 1, cudaHostAllocPortable));
fail:
    return st;
}

static void cuda_host_free(void *priv, void *ptr)
{
    (void)priv;
    if (ptr) cudaFreeHost(ptr);
}

#define N_COPY_EVENTS ((int)(sizeof ((struct glia__cuda *)0)->copy_events / sizeof(cudaEvent_t)))

/* The copy stream first waits for the compute work queued so far (the destination may still be
 * read by it), then copies; the ticket's event marks the copy's end. Tickets are reused after
 * N_COPY_EVENTS uploads, so at most that many may be in flight. */
static glia_status cuda_upload(void *priv, void *dst, const void *src, size_t nbytes, uint64_t *ticket)
{
    struct glia__cuda *c = priv;
    glia__cuda_use(c);
    glia_status st = GLIA_OK;
    cudaEvent_t ev = c->copy_events[c->n_uploads % N_COPY_EVENTS];
    CUDA_TRY(c->ctx, cudaEventRecord(ev, c->stream));
    CUDA_TRY(c->ctx, cudaStreamWaitEvent(c->copy_stream, ev, 0));
    CUDA_TRY(c->ctx, cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyHostToDevice, c->copy_stream));
    CUDA_TRY(c->ctx, cudaEventRecord(ev, c->copy_stream));
    *ticket = c->n_uploads++;
fail:
    return st;
}

/* The copy runs on the compute stream (after the work that produced src); its ticket shares the
 * event ring with uploads. */
static glia_status cuda_download(void *priv, void *dst, const void *src, size_t nbytes, uint64_t *ticket)
{
    struct glia__cuda *c = priv;
    glia__cuda_use(c);
    glia_status st = GLIA_OK;
    cudaEvent_t ev = c->copy_events[c->n_uploads % N_COPY_EVENTS];
    CUDA_TRY(c->ctx, cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDeviceToHost, c->stream));
    CUDA_TRY(c->ctx, cudaEventRecord(ev, c->stream));
    *ticket = c->n_uploads++;
fail:
    return st;
}

static glia_status cuda_wait_copy(void *priv, uint64_t ticket, bool host)
{
    struct glia__cuda *c = priv;
    glia__cuda_use(c);
    glia_status st = GLIA_OK;
    if (ticket + N_COPY_EVENTS < c->n_uploads) {  /* its event was reused since: wait for everything */
        CUDA_TRY(c->ctx, cudaStreamSynchronize(c->copy_stream));
        CUDA_TRY(c->ctx, cudaStreamSynchronize(c->stream));
        return GLIA_OK;
    }
    cudaEvent_t ev = c->copy_events[ticket % N_COPY_EVENTS];
    CUDA_TRY(c->ctx, cudaStreamWaitEvent(c->stream, ev, 0));
    if (host) CUDA_TRY(c->ctx, cudaEventSynchronize(ev));
fail:
    return st;
}

/* ---- CUDA graphs ([runtime] cuda_graph) ----
 * The compute stream is captured in thread-local mode, so a call that would synchronize or read
 * results on the host fails the capture (and the core runs that pass as it comes) instead of
 * running outside the graph. The allocator pins what a graph may touch (cache.h). */

static glia_status cuda_capture_begin(void *priv)
{
    struct glia__cuda *c = priv;
    glia__cuda_use(c);
    glia_status st = GLIA_OK;
    glia__wcopies_prepare(c);  /* the weight copies' table, which a captured pass_begin cannot make */
    CUDA_TRY(c->ctx, cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeThreadLocal));
    pthread_mutex_lock(&c->lock);
    glia__cache_capture_begin(c->cache);
    pthread_mutex_unlock(&c->lock);
fail:
    return st;
}

static glia_status cuda_capture_end(void *priv, void **graph)
{
    struct glia__cuda *c = priv;
    glia__cuda_use(c);
    cudaGraph_t g = NULL;
    cudaGraphExec_t x = NULL;
    const char *call = "cudaStreamEndCapture(c->stream, &g)";
    cudaError_t e = cudaStreamEndCapture(c->stream, &g);
    if (e == cudaSuccess) {
        call = "cudaGraphInstantiate(&x, g, 0)";
        e = cudaGraphInstantiate(&x, g, 0);
    }
    if (e == cudaSuccess) {  /* on the device now, not at the first launch */
        call = "cudaGraphUpload(x, c->stream)";
        e = cudaGraphUpload(x, c->stream);
        if (e != cudaSuccess) cudaGraphExecDestroy(x);
    }
    if (g) cudaGraphDestroy(g);
    pthread_mutex_lock(&c->lock);
    glia__cache_capture_end(c->cache, e == cudaSuccess);
    pthread_mutex_unlock(&c->lock);
    *graph = e == cudaSuccess ? (void *)x : NULL;
    if (e == cudaSuccess) return GLIA_OK;
    cudaGetLastError();  /* not sticky: the stream works as before */
    return glia__cuda_status(c->ctx, e, call, __FILE__, __LINE__);
}

static glia_status cuda_graph_launch(void *priv, void *graph)
{
    struct glia__cuda *c = priv;
    glia__cuda_use(c);
    glia_status st = GLIA_OK;
    CUDA_TRY(c->ctx, cudaGraphLaunch((cudaGraphExec_t)graph, c->stream));
fail:
    return st;
}

static void cuda_graph_free(void *priv, void *graph)
{
    struct glia__cuda *c = priv;
    glia__cuda_use(c);
    cudaStreamSynchronize(c->stream);  /* its replays are done */
    cudaGraphExecDestroy((cudaGraphExec_t)graph);
    pthread_mutex_lock(&c->lock);
    glia__cache_graph_freed(c->cache);
    pthread_mutex_unlock(&c->lock);
}

static glia_status cuda_write_u64(void *priv, void *dst, uint64_t v)
{
    struct glia__cuda *c = priv;
    glia__cuda_use(c);
    glia_status st = GLIA_OK;
    CUDA_TRY(c->ctx, glia__cuda_write_u64(dst, v, c->stream));
fail:
    return st;
}

static glia_status cuda_write(void *priv, void *dst, const void *src, size_t n)
{
    struct glia__cuda *c = priv;
    glia__cuda_use(c);
    glia_status st = GLIA_OK;
    CUDA_TRY(c->ctx, glia__cuda_write(dst, src, n, c->stream));
fail:
    return st;
}

static glia_status cuda_scaler_step(void *priv, struct glia_loss_scaler *sc, const struct glia_scaler_args *a)
{
    struct glia__cuda *c = priv;
    glia__cuda_use(c);
    glia_status st = GLIA_OK;
    CUDA_TRY(c->ctx, glia__cuda_scaler_step(sc, a, c->reduce, c->stream));
fail:
    return st;
}

static glia_status cuda_select(void *priv, int64_t *dst, const int64_t *table, const int64_t *key, size_t words)
{
    struct glia__cuda *c = priv;
    glia__cuda_use(c);
    glia_status st = GLIA_OK;
    CUDA_TRY(c->ctx, glia__cuda_select(dst, table, key, words, c->stream));
fail:
    return st;
}

/* ---- device ---- */

static void cuda_close(void *priv)
{
    struct glia__cuda *c = priv;
    if (!c) return;
    cudaSetDevice(c->device);
    if (c->stream) cudaStreamSynchronize(c->stream);
    if (c->copy_stream) cudaStreamSynchronize(c->copy_stream);
    glia__cuda_gemm_close(c);
    if (c->lt) cublasLtDestroy(c->lt);
    if (c->dnn) cudnnDestroy(c->dnn);
    for (int i = 0; i < N_COPY_EVENTS; i++)
        if (c->copy_events[i]) cudaEventDestroy(c->copy_events[i]);
    if (c->copy_stream) cudaStreamDestroy(c->copy_stream);
    if (c->stream) cudaStreamDestroy(c->stream);
    glia__wcopies_close(c);
    glia__cache_free(c->cache);  /* with the blocks of opt_scratch */
    for (struct glia__cuda_kept *k = c->opt_scratch, *next; k; k = next) {
        next = k->next;
        free(k);
    }
    pthread_mutex_destroy(&c->lock);
    free(c);
}

static glia_status cuda_open(struct glia_context *ctx, int index, void **priv)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) return glia__cuda_status(ctx, e, "cudaGetDeviceCount(&n)", __FILE__, __LINE__);
    if (index < 0 || index >= n)
        return glia_error(ctx, GLIA_EDEVICE, "cuda:%d: this machine has %d CUDA device%s", index, n, n == 1 ? "" : "s");
    glia_status st = GLIA_OK;
    struct glia__cuda *c = calloc(1, sizeof *c);
    if (!c) return GLIA_ENOMEM;
    c->ctx = ctx;
    c->device = index;
    pthread_mutex_init(&c->lock, NULL);
    *priv = c;
    CUDA_TRY(ctx, cudaSetDevice(index));
    CUDA_TRY(ctx, cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking));
    CUDA_TRY(ctx, cudaStreamCreateWithFlags(&c->copy_stream, cudaStreamNonBlocking));
    for (int i = 0; i < N_COPY_EVENTS; i++)
        CUDA_TRY(ctx, cudaEventCreateWithFlags(&c->copy_events[i], cudaEventDisableTiming));
    CUBLAS_TRY(ctx, cublasLtCreate(&c->lt));
    CUDNN_TRY(ctx, cudnnCreate(&c->dnn));
    CUDNN_TRY(ctx, cudnnSetStream(c->dnn, c->stream));
    if (!(c->cache = glia__cache_new(raw_alloc, raw_free, c))) {
        st = GLIA_ENOMEM;
        goto fail;
    }
    if ((st = cuda_alloc(c, GLIA__CUDA_LT_WORKSPACE, &c->lt_workspace))) goto fail;
    if ((st = cuda_alloc(c, (1 + GLIA__SUMSQ_BLOCKS) * sizeof(double), (void **)&c->reduce))) goto fail;
    if ((st = glia__wcopies_open(c))) goto fail;
    struct cudaDeviceProp prop;
    CUDA_TRY(ctx, cudaGetDeviceProperties(&prop, index));
    c->cc_major = prop.major;
    c->cc_minor = prop.minor;
    glia_log(ctx, GLIA_LOG_DEBUG, "cuda:%d: %s, compute capability %d.%d, %.1f GiB", index, prop.name, prop.major,
             prop.minor, prop.totalGlobalMem / 1073741824.0);
    return GLIA_OK;
fail:
    cuda_close(c);
    *priv = NULL;
    return st;
}

/* The stream, with its device made current for the caller's launches. */
static void *cuda_queue(void *priv)
{
    glia__cuda_use(priv);
    return ((struct glia__cuda *)priv)->stream;
}

/* Dense floating-point operations a clock per SM at each enum glia_precision (fp32 on the CUDA cores; tf32, bf16,
 * fp16 on the tensor cores, fp32 accumulation), from NVIDIA's datasheets of the data-centre parts: H100 SXM's 989
 * bf16 TFLOP/s = 132 SMs x 1.83 GHz x 4096. A precision a generation lacks runs at its fp32 rate. */
static const struct sm_rate {
    int major, minor;
    double per_clock[4];
} sm_rates[] = {
    {7, 0, {128, 128, 128, 1024}},  {7, 5, {128, 128, 128, 1024}},   {8, 0, {128, 1024, 2048, 2048}},
    {8, 6, {256, 512, 1024, 1024}}, {8, 9, {256, 512, 1024, 1024}},  {9, 0, {256, 2048, 4096, 4096}},
    {10, 0, {256, 4096, 8192, 8192}},
};

/* Bandwidth = 2 (double data rate) x memory clock x bus width; FLOP/s = SMs x boost clock x the table's rate. */
static glia_status cuda_peak(void *priv, struct glia_device_peak *out)
{
    struct glia__cuda *c = priv;
    int mem_khz = 0, bus_bits = 0, sm_khz = 0, sms = 0;
    glia_status st = GLIA_OK;
    CUDA_TRY(c->ctx, cudaDeviceGetAttribute(&mem_khz, cudaDevAttrMemoryClockRate, c->device));
    CUDA_TRY(c->ctx, cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, c->device));
    CUDA_TRY(c->ctx, cudaDeviceGetAttribute(&sm_khz, cudaDevAttrClockRate, c->device));
    CUDA_TRY(c->ctx, cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, c->device));
    out->bandwidth = 2.0 * mem_khz * 1e3 * bus_bits / 8.0;
    for (size_t i = 0; i < sizeof sm_rates / sizeof *sm_rates; i++)
        if (sm_rates[i].major == c->cc_major && sm_rates[i].minor == c->cc_minor)
            for (int p = 0; p < 4; p++) out->flops[p] = (double)sms * sm_khz * 1e3 * sm_rates[i].per_clock[p];
    snprintf(out->basis, sizeof out->basis, "memory %d MHz x %d bits, %d SMs x %d MHz, sm_%d%d", mem_khz / 1000, bus_bits,
             sms, sm_khz / 1000, c->cc_major, c->cc_minor);
fail:
    return st;
}

static const struct glia_backend_device_ops cuda_device = {
    .struct_size = sizeof(struct glia_backend_device_ops),
    .open = cuda_open,
    .close = cuda_close,
    .configure = cuda_configure,
    .queue = cuda_queue,
    .peak = cuda_peak,
};

static const struct glia_backend_memory_ops cuda_memory = {
    .struct_size = sizeof(struct glia_backend_memory_ops),
    .alloc = cuda_alloc,
    .free = cuda_free,
    .host_alloc = cuda_host_alloc,
    .host_free = cuda_host_free,
    .stats = cuda_memory_stats,
};

static const struct glia_backend_stream_ops cuda_stream = {
    .struct_size = sizeof(struct glia_backend_stream_ops),
    .copy = cuda_copy,
    .memzero = cuda_memzero,
    .sync = cuda_sync,
    .upload = cuda_upload,
    .download = cuda_download,
    .wait_copy = cuda_wait_copy,
};

static const struct glia_backend_math_ops cuda_math = {
    .struct_size = sizeof(struct glia_backend_math_ops),
    .gemm_f32 = glia__cuda_gemm_f32,
    .transpose_f32 = cuda_transpose,
    .axpy_f32 = cuda_axpy,
    .scale_f32 = cuda_scale,
    .sumsq_f32 = cuda_sumsq,
    .clip_f32 = cuda_clip,
    .convert = cuda_convert,
};

static const struct glia_backend_graph_ops cuda_graph = {
    .struct_size = sizeof(struct glia_backend_graph_ops),
    .capture_begin = cuda_capture_begin,
    .capture_end = cuda_capture_end,
    .launch = cuda_graph_launch,
    .free = cuda_graph_free,
    .write_u64 = cuda_write_u64,
    .write = cuda_write,
    .scaler_step = cuda_scaler_step,
    .select = cuda_select,
};

/* ---- trace: NVTX ranges (NVTX 3 is header-only: without a profiler attached each call returns at once) ---- */

static void cuda_range_push(void *priv, const char *name)
{
    (void)priv;
    nvtxRangePushA(name);
}

static void cuda_range_pop(void *priv)
{
    (void)priv;
    nvtxRangePop();
}

static const struct glia_backend_trace_ops cuda_trace = {
    .struct_size = sizeof(struct glia_backend_trace_ops),
    .range_push = cuda_range_push,
    .range_pop = cuda_range_pop,
};

const struct glia_backend_ops glia__cuda_ops = {
    .struct_size = sizeof(struct glia_backend_ops),
    .name = "cuda",
    .device_type = GLIA_DEVICE_CUDA,
    .device = &cuda_device,
    .memory = &cuda_memory,
    .stream = &cuda_stream,
    .math = &cuda_math,
    .graph = &cuda_graph,
    .data = &glia__cuda_data_ops,
    .trace = &cuda_trace,
    .params = &glia__cuda_params_ops,
};
