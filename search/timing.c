/* Kernel timing with CUPTI's activity API (see timing.h and docs/evaluation.md).
 *
 * CUPTI hands activity records back through two process-wide callbacks that carry no user
 * pointer, so the one open timer is a process global (g_timer) and the record list is guarded by
 * a mutex: CUPTI may complete a full buffer from its own thread while the caller enqueues more
 * work. Records are kept only while a measurement is collecting; everything the process runs
 * in between (verification, reference kernels) is discarded as it arrives.
 *
 * Matching records to reps is by order and count: the caller runs single-threaded on one
 * stream, so after a synchronise and a forced flush the kernel records of a batch, sorted by
 * start time, are the batch's launches in order, kernels_per_rep to a rep. Any other count is an
 * error (-EIO), never a guess. The L2 scrub (cold reps) writes its buffer (cuMemsetD8, a MEMSET
 * activity, not enabled here) and then reads it back (SCRUB_READ_KERNEL, whose records the
 * buffer callback drops by name), so the candidate starts with L2 cold and clean: after a write
 * alone L2 holds the scrub's dirty lines, and writing them back inside the timed kernel cost the
 * H100 ~10 us on every decode GEMM (docs/evaluation.md).
 *
 * SM clock: NVML (the only interface for the current clock) is loaded at run time when the
 * driver has it (libnvidia-ml.so.1 ships with the driver); without it sm_clock_khz_* stay 0.
 * CU_DEVICE_ATTRIBUTE_CLOCK_RATE is only the nominal clock, so it is not reported as a reading. */
#include "timing.h"

#include <cupti.h>
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SRCH_CUPTI_BUF_BYTES ((size_t)4 << 20) /* ~15k kernel records per buffer */
#define SRCH_CUPTI_BUF_ALIGN 8                 /* CUPTI requires 8-byte aligned buffers */
#define SRCH_SCRUB_MIN_BYTES ((size_t)128 << 20)
#define SRCH_MAX_INTERLEAVED 64

/* The scrub's read: every thread XORs 16-byte words of the buffer, grid-stride, and stores the
 * result only if it is a value the memset never leaves (so nothing is written, and the loads
 * cannot be dropped). PTX, compiled by the driver for whatever GPU the worker has. */
#define SCRUB_READ_KERNEL "ktune_l2_scrub_read"
#define SCRUB_READ_BLOCK  256
static const char scrub_read_ptx[] =
    ".version 7.0\n"
    ".target sm_50\n"
    ".address_size 64\n"
    ".visible .entry " SCRUB_READ_KERNEL "(.param .u64 buf, .param .u64 words, .param .u64 sink)\n"
    "{\n"
    "  .reg .pred %p<3>;\n"
    "  .reg .b32 %r<12>;\n"
    "  .reg .b64 %rd<10>;\n"
    "  ld.param.u64 %rd1, [buf];\n"
    "  ld.param.u64 %rd2, [words];\n"
    "  ld.param.u64 %rd3, [sink];\n"
    "  mov.u32 %r1, %ctaid.x;\n"
    "  mov.u32 %r2, %ntid.x;\n"
    "  mov.u32 %r3, %tid.x;\n"
    "  mov.u32 %r4, %nctaid.x;\n"
    "  mul.wide.u32 %rd4, %r1, %r2;\n"
    "  cvt.u64.u32 %rd5, %r3;\n"
    "  add.u64 %rd4, %rd4, %rd5;\n"
    "  mul.wide.u32 %rd6, %r4, %r2;\n"
    "  mov.b32 %r5, 0;\n"
    "  setp.ge.u64 %p1, %rd4, %rd2;\n"
    "  @%p1 bra DONE;\n"
    "LOOP:\n"
    "  shl.b64 %rd7, %rd4, 4;\n"
    "  add.u64 %rd8, %rd1, %rd7;\n"
    "  ld.global.v4.u32 {%r6, %r7, %r8, %r9}, [%rd8];\n"
    "  xor.b32 %r5, %r5, %r6;\n"
    "  xor.b32 %r5, %r5, %r7;\n"
    "  xor.b32 %r5, %r5, %r8;\n"
    "  xor.b32 %r5, %r5, %r9;\n"
    "  add.u64 %rd4, %rd4, %rd6;\n"
    "  setp.lt.u64 %p1, %rd4, %rd2;\n"
    "  @%p1 bra LOOP;\n"
    "DONE:\n"
    "  setp.ne.b32 %p2, %r5, 0x9e3779b9;\n"
    "  @%p2 bra END;\n"
    "  st.global.u32 [%rd3], %r5;\n"
    "END:\n"
    "  ret;\n"
    "}\n";

/* One kernel execution as CUPTI recorded it (GPU timestamps in ns). */
typedef struct srch_krec {
    uint64_t start, end;
    uint32_t correlation;
} srch_krec;

/* NVML, declared here for the three calls we make: the driver ships libnvidia-ml.so.1 but the
 * toolkit here has no nvml.h. These signatures are NVML's stable C ABI (nvmlReturn_t is an int
 * enum, 0 = success; NVML_CLOCK_SM = 1). */
typedef int (*srch_nvml_init_fn)(void);
typedef int (*srch_nvml_by_pci_fn)(const char *bus_id, void **device);
typedef int (*srch_nvml_clock_fn)(void *device, int type, unsigned int *mhz);
#define SRCH_NVML_CLOCK_SM 1

struct srch_timer {
    pthread_mutex_t lock;
    srch_krec *recs; /* guarded by lock, like the three fields below */
    size_t n_recs, cap;
    uint64_t dropped;
    bool oom;
    bool collecting;

    srch_cuda *scrub_cu; /* the context the scrub buffer lives in */
    CUdeviceptr scrub;
    size_t scrub_bytes;
    CUmodule scrub_mod; /* SCRUB_READ_KERNEL, loaded in scrub_cu */
    CUfunction scrub_read;
    unsigned scrub_blocks;

    void *nvml_lib;
    void *nvml_dev; /* NULL: clock not readable */
    srch_nvml_clock_fn nvml_clock;
    bool nvml_tried;
};

static srch_timer *g_timer;

/* The one translation of CUptiResult into our errors: 0 on success, else a negative errno
 * with "what: CUPTI_ERROR_...: text" in err. */
static int cupti_check(CUptiResult rc, const char *what, kt_err *err)
{
    if (rc == CUPTI_SUCCESS)
        return 0;
    const char *text = NULL;
    if (cuptiGetResultString(rc, &text) != CUPTI_SUCCESS || !text)
        text = "unknown CUPTI error";
    int code;
    switch (rc) {
    case CUPTI_ERROR_OUT_OF_MEMORY:
        code = -ENOMEM;
        break;
    case CUPTI_ERROR_INVALID_PARAMETER:
    case CUPTI_ERROR_INVALID_KIND:
        code = -EINVAL;
        break;
    case CUPTI_ERROR_INVALID_DEVICE:
    case CUPTI_ERROR_NOT_INITIALIZED:
    case CUPTI_ERROR_NOT_COMPATIBLE:
    case CUPTI_ERROR_NOT_SUPPORTED:
    case CUPTI_ERROR_INSUFFICIENT_PRIVILEGES:
    case CUPTI_ERROR_VIRTUALIZED_DEVICE_NOT_SUPPORTED:
    case CUPTI_ERROR_VIRTUALIZED_DEVICE_INSUFFICIENT_PRIVILEGES:
    case CUPTI_ERROR_CONFIDENTIAL_COMPUTING_NOT_SUPPORTED:
    case CUPTI_ERROR_CMP_DEVICE_NOT_SUPPORTED:
    case CUPTI_ERROR_MIG_DEVICE_NOT_SUPPORTED:
    case CUPTI_ERROR_WSL_DEVICE_NOT_SUPPORTED:
    case CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED:
        /* Tracing is impossible in this process or on this device: the caller cannot time. */
        code = -ENODEV;
        break;
    default:
        code = -EIO;
    }
    kt_log_debug("cupti", "%s: %s", what, text);
    return kt_err_set(err, code, "%s: %s", what, text);
}

static void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records)
{
    /* On failure CUPTI gets no buffer and drops records, which the dropped count reports. */
    *buffer = aligned_alloc(SRCH_CUPTI_BUF_ALIGN, SRCH_CUPTI_BUF_BYTES);
    *size = *buffer ? SRCH_CUPTI_BUF_BYTES : 0;
    *max_records = 0; /* as many as fit */
}

static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size,
                                      size_t valid)
{
    srch_timer *t = g_timer;
    if (!t) {
        free(buffer);
        return;
    }
    pthread_mutex_lock(&t->lock);
    CUpti_Activity *rec = NULL;
    while (valid > 0 && cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
        if (rec->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL || !t->collecting)
            continue;
        /* The header's current kernel record; kind, start, end and correlationId sit at the
         * same offsets in every version of it, so an older CUPTI's records read right too. */
        const CUpti_ActivityKernel10 *k = (const CUpti_ActivityKernel10 *)rec;
        /* the scrub's read is not the candidate's (name follows correlationId and gridId in
         * every version too) */
        if (k->name && strcmp(k->name, SCRUB_READ_KERNEL) == 0)
            continue;
        if (t->n_recs == t->cap) {
            size_t cap = t->cap ? t->cap * 2 : 4096;
            srch_krec *grown = realloc(t->recs, cap * sizeof(*grown));
            if (!grown) {
                t->oom = true;
                continue;
            }
            t->recs = grown;
            t->cap = cap;
        }
        t->recs[t->n_recs++] = (srch_krec){k->start, k->end, k->correlationId};
    }
    size_t dropped = 0;
    if (cuptiActivityGetNumDroppedRecords(ctx, stream, &dropped) == CUPTI_SUCCESS && t->collecting)
        t->dropped += dropped;
    pthread_mutex_unlock(&t->lock);
    free(buffer);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Best effort: the NVML handle of cu's device, looked up by PCI bus id. */
static void nvml_attach(srch_timer *t, srch_cuda *cu)
{
    if (t->nvml_tried)
        return;
    t->nvml_tried = true;
    CUresult (*bus_id)(char *, int, CUdevice) = NULL;
    *(void **)&bus_id = dlsym(cu->lib, "cuDeviceGetPCIBusId");
    char pci[64];
    if (!bus_id || bus_id(pci, (int)sizeof(pci), cu->device) != CUDA_SUCCESS)
        return;
    t->nvml_lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!t->nvml_lib)
        return;
    srch_nvml_init_fn init = NULL;
    srch_nvml_by_pci_fn by_pci = NULL;
    *(void **)&init = dlsym(t->nvml_lib, "nvmlInit_v2");
    *(void **)&by_pci = dlsym(t->nvml_lib, "nvmlDeviceGetHandleByPciBusId_v2");
    *(void **)&t->nvml_clock = dlsym(t->nvml_lib, "nvmlDeviceGetClockInfo");
    if (!init || !by_pci || !t->nvml_clock || init() != 0 || by_pci(pci, &t->nvml_dev) != 0) {
        t->nvml_dev = NULL;
        kt_log_debug("timing", "NVML unavailable: SM clock readings will be 0");
    }
}

static uint32_t sm_clock_khz(srch_timer *t)
{
    unsigned int mhz = 0;
    if (!t->nvml_dev || t->nvml_clock(t->nvml_dev, SRCH_NVML_CLOCK_SM, &mhz) != 0)
        return 0;
    return mhz * 1000u;
}

int srch_timer_open(srch_timer **out, kt_err *err)
{
    *out = NULL;
    if (g_timer)
        return kt_err_set(err, -EBUSY, "a CUPTI timer is already open in this process");
    uint32_t version = 0;
    int rc = cupti_check(cuptiGetVersion(&version), "cuptiGetVersion", err);
    if (rc < 0)
        return rc;
    /* The record layouts we read are those of CUPTI_API_VERSION's major release; a library of
     * an older major may lay them out differently. A newer one keeps the prefix we read. */
    if (version / 10000 < CUPTI_API_VERSION / 10000)
        return kt_err_set(err, -ENODEV,
                          "CUPTI %u is older than the headers ktune was built with (%u)", version,
                          (unsigned)CUPTI_API_VERSION);
    if (version != CUPTI_API_VERSION)
        kt_log_debug("timing", "CUPTI %u at run time, headers %u", version,
                     (unsigned)CUPTI_API_VERSION);
    srch_timer *t = calloc(1, sizeof(*t));
    if (!t)
        return kt_err_set(err, -ENOMEM, "out of memory");
    pthread_mutex_init(&t->lock, NULL);
    g_timer = t;
    if ((rc = cupti_check(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed),
                          "cuptiActivityRegisterCallbacks", err)) < 0)
        goto fail;
    /* CONCURRENT_KERNEL, never KERNEL: the latter serialises every kernel on the GPU. */
    if ((rc = cupti_check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL),
                          "cuptiActivityEnable(CONCURRENT_KERNEL)", err)) < 0)
        goto fail;
    *out = t;
    return 0;
fail:
    g_timer = NULL;
    pthread_mutex_destroy(&t->lock);
    free(t);
    return rc;
}

/* Call before srch_cuda_close of the context the timer measured in: the scrub buffer is freed
 * in that context (after srch_cuda_close it is skipped; the context's teardown freed it). */
void srch_timer_close(srch_timer *t)
{
    if (!t)
        return;
    cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
    cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    if (t->scrub && t->scrub_cu && t->scrub_cu->lib) {
        t->scrub_cu->p_cuMemFree(t->scrub);
        if (t->scrub_mod)
            t->scrub_cu->p_cuModuleUnload(t->scrub_mod);
    }
    if (t->nvml_lib)
        dlclose(t->nvml_lib); /* nvmlShutdown is optional; the library refcounts its init */
    g_timer = NULL;
    pthread_mutex_destroy(&t->lock);
    free(t->recs);
    free(t);
}

/* Forgets every record so far and sets whether new ones are kept. The caller has synchronised,
 * so the forced flush delivers everything that ran before. */
static int reset_records(srch_timer *t, bool collecting, kt_err *err)
{
    int rc = cupti_check(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED),
                         "cuptiActivityFlushAll", err);
    pthread_mutex_lock(&t->lock);
    t->n_recs = 0;
    t->dropped = 0;
    t->oom = false;
    t->collecting = collecting;
    pthread_mutex_unlock(&t->lock);
    return rc;
}

static int cmp_krec(const void *a, const void *b)
{
    const srch_krec *x = a, *y = b;
    if (x->start != y->start)
        return x->start < y->start ? -1 : 1;
    return x->correlation < y->correlation ? -1 : x->correlation > y->correlation;
}

/* After a synchronise: flushes, checks that exactly `expected` kernel records arrived and none
 * were dropped, and moves them (sorted by start) into *recs (malloc'd, caller frees). The
 * collected list is emptied. */
static int take_records(srch_timer *t, size_t expected, srch_krec **recs, kt_err *err)
{
    *recs = NULL;
    size_t n = 0;
    uint64_t dropped = 0;
    bool oom = false;
    /* The synchronise guarantees the kernels finished; a record may still be in flight inside
     * CUPTI for a moment, so a short count is retried a bounded number of times. */
    for (int attempt = 0;; attempt++) {
        int rc = cupti_check(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED),
                             "cuptiActivityFlushAll", err);
        if (rc < 0)
            return rc;
        pthread_mutex_lock(&t->lock);
        n = t->n_recs;
        dropped = t->dropped;
        oom = t->oom;
        pthread_mutex_unlock(&t->lock);
        if (n >= expected || dropped || oom || attempt >= 50)
            break;
        nanosleep(&(struct timespec){0, 2000000}, NULL);
    }
    int rc = 0;
    pthread_mutex_lock(&t->lock);
    if (dropped)
        rc =
            kt_err_set(err, -EIO, "CUPTI dropped %llu kernel records", (unsigned long long)dropped);
    else if (oom)
        rc = kt_err_set(err, -ENOMEM, "out of memory storing CUPTI records");
    else if (t->n_recs != expected)
        rc = kt_err_set(err, -EIO, "expected %zu kernel records, CUPTI delivered %zu", expected,
                        t->n_recs);
    if (rc == 0) {
        *recs = t->recs;
        t->recs = NULL;
        t->cap = 0;
    }
    t->n_recs = 0;
    t->dropped = 0;
    t->oom = false;
    pthread_mutex_unlock(&t->lock);
    if (rc == 0)
        qsort(*recs, expected, sizeof(**recs), cmp_krec);
    return rc;
}

static int ensure_scrub(srch_timer *t, srch_cuda *cu, kt_err *err)
{
    if (t->scrub && t->scrub_cu == cu)
        return 0;
    int l2 = 0;
    int rc = srch_cuda_check(
        cu, cu->p_cuDeviceGetAttribute(&l2, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, cu->device),
        "L2 size", err);
    if (rc < 0)
        return rc;
    size_t bytes = (size_t)l2 * 2;
    if (bytes < SRCH_SCRUB_MIN_BYTES)
        bytes = SRCH_SCRUB_MIN_BYTES;
    int sms = 0;
    if ((rc = srch_cuda_check(
             cu,
             cu->p_cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, cu->device),
             "SM count", err)) < 0)
        return rc;
    CUdeviceptr p = 0;
    CUmodule mod = NULL;
    CUfunction fn = NULL;
    if ((rc = srch_cuda_check(cu, cu->p_cuModuleLoadData(&mod, scrub_read_ptx),
                              "loading the L2 scrub's read kernel", err)) < 0)
        return rc;
    if ((rc = srch_cuda_check(cu, cu->p_cuModuleGetFunction(&fn, mod, SCRUB_READ_KERNEL),
                              "the L2 scrub's read kernel", err)) < 0 ||
        (rc = srch_cuda_check(cu, cu->p_cuMemAlloc(&p, bytes), "scrub buffer", err)) < 0) {
        cu->p_cuModuleUnload(mod);
        return rc;
    }
    t->scrub = p;
    t->scrub_bytes = bytes;
    t->scrub_cu = cu;
    t->scrub_mod = mod;
    t->scrub_read = fn;
    t->scrub_blocks = (unsigned)(sms > 0 ? sms : 1) * 8; /* 2048 threads an SM: loads in flight */
    return 0;
}

/* Evicts the candidate's data from L2: a write over more than twice its size (the value changes
 * each time so no layer can skip the write as redundant), then a read of the whole buffer, which
 * writes the write's dirty lines back now and leaves L2 holding clean ones. */
static int scrub_l2(srch_timer *t, srch_cuda *cu, kt_err *err)
{
    static unsigned char v;
    int rc = srch_cuda_check(cu, cu->p_cuMemsetD8(t->scrub, ++v, t->scrub_bytes), "L2 scrub", err);
    if (rc < 0)
        return rc;
    unsigned long long words = t->scrub_bytes / 16;
    CUdeviceptr sink = t->scrub; /* never written (see scrub_read_ptx) */
    void *args[] = {&t->scrub, &words, &sink};
    return srch_cuda_check(cu,
                           cu->p_cuLaunchKernel(t->scrub_read, t->scrub_blocks, 1, 1,
                                                SCRUB_READ_BLOCK, 1, 1, 0, NULL, args, NULL),
                           "L2 scrub (read)", err);
}

static int sync_ctx(srch_cuda *cu, kt_err *err)
{
    return srch_cuda_check(cu, cu->p_cuCtxSynchronize(), "synchronize", err);
}

/* One rep: the scrub (cold) then every kernel of the candidate. */
static int run_rep(srch_timer *t, srch_cuda *cu, srch_launch_fn launch, void *ctx, bool cold,
                   kt_err *err)
{
    int rc = cold ? scrub_l2(t, cu, err) : 0;
    return rc < 0 ? rc : launch(ctx, err);
}

/* Runs one rep alone and counts its kernel records (kernels_per_rep <= 0: ask the GPU). */
static int probe_kernels(srch_timer *t, srch_cuda *cu, srch_launch_fn launch, void *ctx, int *kpr,
                         kt_err *err)
{
    int rc;
    if ((rc = reset_records(t, true, err)) < 0 || (rc = launch(ctx, err)) < 0 ||
        (rc = sync_ctx(cu, err)) < 0 ||
        (rc = cupti_check(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED),
                          "cuptiActivityFlushAll", err)) < 0)
        return rc;
    pthread_mutex_lock(&t->lock);
    size_t n = t->n_recs;
    pthread_mutex_unlock(&t->lock);
    if (n == 0)
        return kt_err_set(err, -EIO, "the candidate enqueued no kernel");
    if (n > 4096)
        return kt_err_set(err, -EIO, "the candidate enqueued %zu kernels per run", n);
    *kpr = (int)n;
    return 0;
}

/* Warm-up: whole reps (scrubbed too when cold, so clocks and caches settle as they will be
 * measured) until at least warmup_s of wall time has passed. */
static int warm_up(srch_timer *t, srch_cuda *cu, int n, srch_launch_fn *launch, void **ctx,
                   bool cold, double warmup_s, kt_err *err)
{
    double t0 = now_s();
    int batch = 1, rc;
    while (now_s() - t0 < warmup_s) {
        for (int r = 0; r < batch; r++)
            for (int i = 0; i < n; i++)
                if ((rc = run_rep(t, cu, launch[i], ctx[i], cold, err)) < 0)
                    return rc;
        if ((rc = sync_ctx(cu, err)) < 0)
            return rc;
        if (batch < 64)
            batch *= 2;
    }
    return 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double percentile(const double *sorted, int n, double q)
{
    double h = (n - 1) * q;
    int lo = (int)floor(h), hi = lo + 1 < n ? lo + 1 : lo;
    return sorted[lo] + (h - lo) * (sorted[hi] - sorted[lo]);
}

/* Median, p10, p90 and the relative spread of the median over samples[0..n). scratch holds n. */
static void fill_stats(const double *samples, int n, double *scratch, srch_time_stats *st)
{
    memcpy(scratch, samples, (size_t)n * sizeof(double));
    qsort(scratch, (size_t)n, sizeof(double), cmp_double);
    st->reps = n;
    st->median_ns = percentile(scratch, n, 0.5);
    st->p10_ns = percentile(scratch, n, 0.1);
    st->p90_ns = percentile(scratch, n, 0.9);
    st->rel_spread =
        st->median_ns > 0 ? (st->p90_ns - st->p10_ns) / st->median_ns / sqrt((double)n) : INFINITY;
}

/* Durations of `reps` reps from records sorted by start: first start to last end of each run
 * of kpr records. */
static void rep_durations(const srch_krec *recs, int reps, int kpr, int stride, double *out)
{
    for (int r = 0; r < reps; r++) {
        const srch_krec *g = recs + (size_t)r * (size_t)stride;
        uint64_t first = g[0].start, last = g[0].end;
        for (int k = 1; k < kpr; k++) {
            if (g[k].start < first)
                first = g[k].start;
            if (g[k].end > last)
                last = g[k].end;
        }
        out[r] = last > first ? (double)(last - first) : 0.0;
    }
}

int srch_time(srch_timer *t, srch_cuda *cu, srch_launch_fn launch, void *ctx, int kernels_per_rep,
              const srch_time_opts *opts, srch_time_stats *out, kt_err *err)
{
    if (!t || !cu || !cu->lib || !launch || !out)
        return kt_err_set(err, -EINVAL, "srch_time: missing timer, context or launch function");
    srch_time_opts o = opts ? *opts : (srch_time_opts){0};
    if (o.warmup_s <= 0)
        o.warmup_s = 0.025;
    if (o.budget_s <= 0)
        o.budget_s = 0.5;
    if (o.min_reps <= 0)
        o.min_reps = 10;
    if (o.max_reps <= 0)
        o.max_reps = 2000;
    if (o.max_reps < o.min_reps)
        o.max_reps = o.min_reps;
    if (o.target_rel <= 0)
        o.target_rel = 0.01;
    memset(out, 0, sizeof(*out));
    out->cold = o.cold;

    double *samples = NULL, *scratch = NULL;
    srch_krec *recs = NULL;
    int rc, kpr = kernels_per_rep, reps = 0;
    nvml_attach(t, cu);
    if ((rc = sync_ctx(cu, err)) < 0)
        goto out;
    if (o.cold && (rc = ensure_scrub(t, cu, err)) < 0)
        goto out;
    if (kpr <= 0 && (rc = probe_kernels(t, cu, launch, ctx, &kpr, err)) < 0)
        goto out;
    samples = malloc((size_t)o.max_reps * sizeof(double));
    scratch = malloc((size_t)o.max_reps * sizeof(double));
    if (!samples || !scratch) {
        rc = kt_err_set(err, -ENOMEM, "out of memory");
        goto out;
    }
    out->sm_clock_khz_before = sm_clock_khz(t);
    if ((rc = reset_records(t, false, err)) < 0 ||
        (rc = warm_up(t, cu, 1, &launch, &ctx, o.cold, o.warmup_s, err)) < 0 ||
        (rc = reset_records(t, true, err)) < 0)
        goto out;

    double t0 = now_s();
    while (reps < o.max_reps) {
        /* Batches grow with the sample so flushing stays a small share of the wall time. */
        int batch = reps == 0 ? o.min_reps : reps / 2;
        if (batch < 5)
            batch = 5;
        if (batch > 256)
            batch = 256;
        if (batch > o.max_reps - reps)
            batch = o.max_reps - reps;
        for (int r = 0; r < batch; r++)
            if ((rc = run_rep(t, cu, launch, ctx, o.cold, err)) < 0)
                goto out;
        if ((rc = sync_ctx(cu, err)) < 0 ||
            (rc = take_records(t, (size_t)batch * (size_t)kpr, &recs, err)) < 0)
            goto out;
        rep_durations(recs, batch, kpr, kpr, samples + reps);
        free(recs);
        recs = NULL;
        reps += batch;
        fill_stats(samples, reps, scratch, out);
        if (reps >= o.min_reps && out->rel_spread < o.target_rel)
            break;
        if (now_s() - t0 >= o.budget_s && reps >= 3)
            break;
    }
    out->kernels_per_rep = kpr;
    out->sm_clock_khz_after = sm_clock_khz(t);
    rc = 0;
out:
    pthread_mutex_lock(&t->lock);
    t->collecting = false;
    pthread_mutex_unlock(&t->lock);
    free(recs);
    free(samples);
    free(scratch);
    return rc;
}

int srch_time_interleaved(srch_timer *t, srch_cuda *cu, int n, srch_launch_fn *launch, void **ctx,
                          const int *kernels_per_rep, int rounds, bool cold, srch_time_stats *out,
                          kt_err *err)
{
    if (!t || !cu || !cu->lib || n <= 0 || !launch || !ctx || !out || rounds <= 0)
        return kt_err_set(err, -EINVAL, "srch_time_interleaved: bad arguments");
    if (n > SRCH_MAX_INTERLEAVED)
        return kt_err_set(err, -E2BIG, "at most %d candidates are re-timed together",
                          SRCH_MAX_INTERLEAVED);
    int kpr[SRCH_MAX_INTERLEAVED], per_round = 0, rc;
    double *samples = NULL, *scratch = NULL;
    srch_krec *recs = NULL;
    memset(out, 0, (size_t)n * sizeof(*out));
    nvml_attach(t, cu);
    if ((rc = sync_ctx(cu, err)) < 0)
        goto out;
    if (cold && (rc = ensure_scrub(t, cu, err)) < 0)
        goto out;
    for (int i = 0; i < n; i++) {
        kpr[i] = kernels_per_rep ? kernels_per_rep[i] : 0;
        if (kpr[i] <= 0 && (rc = probe_kernels(t, cu, launch[i], ctx[i], &kpr[i], err)) < 0)
            goto out;
        per_round += kpr[i];
    }
    samples = malloc((size_t)n * (size_t)rounds * sizeof(double));
    scratch = malloc((size_t)rounds * sizeof(double));
    if (!samples || !scratch) {
        rc = kt_err_set(err, -ENOMEM, "out of memory");
        goto out;
    }
    uint32_t clk0 = sm_clock_khz(t);
    if ((rc = reset_records(t, false, err)) < 0 ||
        (rc = warm_up(t, cu, n, launch, ctx, cold, 0.025, err)) < 0 ||
        (rc = reset_records(t, true, err)) < 0)
        goto out;
    /* samples[i * rounds + r]: candidate i's time in round r. */
    for (int done = 0; done < rounds;) {
        int batch = rounds - done < 32 ? rounds - done : 32;
        for (int r = 0; r < batch; r++)
            for (int i = 0; i < n; i++)
                if ((rc = run_rep(t, cu, launch[i], ctx[i], cold, err)) < 0)
                    goto out;
        if ((rc = sync_ctx(cu, err)) < 0 ||
            (rc = take_records(t, (size_t)batch * (size_t)per_round, &recs, err)) < 0)
            goto out;
        /* Sorted by start, a round is candidate 0's kernels, then 1's, ...: per_round apart. */
        for (int i = 0, off = 0; i < n; off += kpr[i], i++)
            rep_durations(recs + off, batch, kpr[i], per_round,
                          samples + (size_t)i * rounds + done);
        free(recs);
        recs = NULL;
        done += batch;
    }
    uint32_t clk1 = sm_clock_khz(t);
    for (int i = 0; i < n; i++) {
        fill_stats(samples + (size_t)i * rounds, rounds, scratch, &out[i]);
        out[i].kernels_per_rep = kpr[i];
        out[i].cold = cold;
        out[i].sm_clock_khz_before = clk0;
        out[i].sm_clock_khz_after = clk1;
    }
    rc = 0;
out:
    pthread_mutex_lock(&t->lock);
    t->collecting = false;
    pthread_mutex_unlock(&t->lock);
    free(recs);
    free(samples);
    free(scratch);
    return rc;
}

int srch_time_events(srch_cuda *cu, srch_launch_fn launch, void *ctx, int reps, double *median_ns,
                     kt_err *err)
{
    if (!cu || !cu->lib || !launch || !median_ns || reps <= 0)
        return kt_err_set(err, -EINVAL, "srch_time_events: bad arguments");
    CUevent *ev = calloc((size_t)reps * 2, sizeof(CUevent));
    double *ms = malloc((size_t)reps * sizeof(double));
    int rc = 0, made = 0;
    if (!ev || !ms) {
        rc = kt_err_set(err, -ENOMEM, "out of memory");
        goto out;
    }
    for (; made < reps * 2; made++)
        if ((rc = srch_cuda_check(cu, cu->p_cuEventCreate(&ev[made], CU_EVENT_DEFAULT),
                                  "cuEventCreate", err)) < 0)
            goto out;
    /* The same warm-up as CUPTI timing gets, so both see the same clocks. */
    double t0 = now_s();
    while (now_s() - t0 < 0.025) {
        for (int r = 0; r < 8; r++)
            if ((rc = launch(ctx, err)) < 0)
                goto out;
        if ((rc = sync_ctx(cu, err)) < 0)
            goto out;
    }
    for (int r = 0; r < reps; r++) {
        if ((rc = srch_cuda_check(cu, cu->p_cuEventRecord(ev[2 * r], NULL), "cuEventRecord", err)) <
                0 ||
            (rc = launch(ctx, err)) < 0 ||
            (rc = srch_cuda_check(cu, cu->p_cuEventRecord(ev[2 * r + 1], NULL), "cuEventRecord",
                                  err)) < 0)
            goto out;
    }
    if ((rc = srch_cuda_check(cu, cu->p_cuEventSynchronize(ev[2 * reps - 1]), "cuEventSynchronize",
                              err)) < 0)
        goto out;
    for (int r = 0; r < reps; r++) {
        float f = 0;
        if ((rc = srch_cuda_check(cu, cu->p_cuEventElapsedTime(&f, ev[2 * r], ev[2 * r + 1]),
                                  "cuEventElapsedTime", err)) < 0)
            goto out;
        ms[r] = f;
    }
    qsort(ms, (size_t)reps, sizeof(double), cmp_double);
    *median_ns = percentile(ms, reps, 0.5) * 1e6;
out:
    for (int i = 0; i < made; i++)
        cu->p_cuEventDestroy(ev[i]);
    free(ev);
    free(ms);
    return rc;
}
