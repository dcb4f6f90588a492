/* The deploy-time runtime of libktune (ktune.h, "the deploy-time runtime"): a read-only cache, a
 * memo of resolved and loaded kernels, libcuda and libcublasLt loaded at run time.
 *
 * Lookup. The key is (fingerprint of the GPU, graph signature, bound shapes, precision). The hot
 * path lays it out as bytes (memo_key: cache_key_encode's content without its SHA-256 of the
 * fingerprint), hashes (context, key) and finds the kernel in a table under a read lock: no
 * LMDB, no allocation. A miss takes the cold path, one at a time
 * (cold_lock): bind the graph to check the shapes, read the exact key's records best first
 * (a value failing its checksum is read once more, then skipped: never served; an unverified one
 * is skipped too), then, only when the exact key has nothing, the fastest record of a compatible
 * GPU (same model, other driver or toolkit) under the same graph, shapes and precision; check the
 * record against the graph, load it into the context and insert it under the write lock.
 * Kernels live until ktune_runtime_close. The first lookup that misses its exact key reads the
 * cache's GPU fingerprints (cache_gpus: one seek and one decode per GPU, whatever the number of
 * records) and keeps them for the runtime's life: every miss then costs one read per compatible
 * GPU. A GPU whose records are written after that walk is
 * seen by runtimes opened later (exact keys are always read afresh).
 *
 * Contexts. A lookup loads into the calling thread's current context when it is on the wanted
 * device, else into that device's primary context (retained once, released at close). Launches
 * make the kernel's context current for the call when it is not (push/pop).
 *
 * Errors follow ktune.h: negative errno and a one-line message in ktune_error. CUresult and
 * cublasStatus_t are translated in search/cudrv.c and search/cublaslt.c, as everywhere. */
#include "libktune_internal.h"
#include "runtime_internal.h"

#include "cache/cache.h"
#include "ktune_config.h"
#include "ops/family.h"
#include "ops/library.h"
#include "ops/ops.h"

#include <dlfcn.h>
#include <elf.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#if KTUNE_HAVE_NVRTC
#include "search/cublaslt.h"
#include "search/cudrv.h"
#else
typedef void *CUcontext;
typedef int CUdevice;
#endif

#define RT_LOG          "runtime"
#define RT_MAX_DEVICES  64
#define RT_SMEM_DEFAULT (48 * 1024) /* dynamic shared memory a launch gets without opting in */
#define RT_LIBRARY      "library"
#define RT_LT_ENTRY     "cublasLtMatmul"
#define RT_CACHE_ENV    "KTUNE_CACHE"
#define RT_CACHE_DIR    "/var/lib/ktune/cache"
#define RT_MAX_RANK     32 /* cache.c's CACHE_MAX_RUNNER_UPS: ranks 0..32 of one key */
/* memo_key: name, 5 int32, mem, declaration digest, precision, tolerance, then per shape name,
 * NUL, int64 */
#define RT_MEMO_KEY_MAX                                                                            \
    (CACHE_GPU_NAME_MAX + 1 + 20 + 8 + OPS_SIG_BYTES + 1 + 8 +                                     \
     CACHE_MAX_SHAPES * (CACHE_SYM_NAME_MAX + 8))

struct ktune_kernel {
    struct ktune_kernel *next; /* hash chain */
    uint64_t hash;
    ktune_runtime *rt;
    CUcontext ctx; /* NULL: resolved only (ktune_rt_resolve), nothing loaded */
    size_t klen;
    uint8_t key[RT_MEMO_KEY_MAX]; /* memo_key */
    cache_record rec;
    ktune_match match;
    int n_in, n_out;
    /* Callers pass tensors in the graph's declared order, records index them by canonical rank
     * (docs/formats.md): mapped once here, at lookup, from the caller's bound graph. */
    int *io_of_rank;    /* the declared index of the input, then the output, of each rank */
    uint64_t *io_bytes; /* bytes of each input, then each output, declared order */
    char **io_names;    /* declared names, inputs then outputs: what launch errors say */
    bool library;
#if KTUNE_HAVE_NVRTC
    CUmodule mod;
    CUfunction *fn; /* rec.n_kernels */
    srch_lt_plan *plan;
    pthread_mutex_t plan_lock; /* a plan holds its last bias pointer: one launch at a time */
#endif
};

typedef struct rt_device {
    atomic_bool fp_ready;
    cache_gpu fp;
    int smem_optin;
    atomic_bool primary_ready;
    CUcontext primary;
} rt_device;

#if KTUNE_HAVE_NVRTC
typedef struct rt_lt_ctx {
    struct rt_lt_ctx *next;
    CUcontext ctx;
    srch_lt *lt;
} rt_lt_ctx;
#endif

struct ktune_runtime {
    cache_env *cache;
    /* the memo: chained hash table of (context, key) -> kernel */
    pthread_rwlock_t lock;
    ktune_kernel **buckets;
    size_t n_buckets, n_entries;
    pthread_mutex_t cold_lock; /* one cold lookup at a time; guards the fields below it */
    /* The distinct GPU fingerprints of the cache's verified records, read by the first lookup
     * that misses its exact key (one walk over the cache), then reused by every later miss. */
    bool gpus_ready;
    cache_gpu *gpus;
    size_t n_gpus;
    /* the driver, devices and cuBLASLt handles (cu_lock) */
    pthread_mutex_t cu_lock;
    atomic_int cu_state; /* 0: not tried, 1: loaded, < 0: the failure */
    kt_err cu_err;
    int n_devices;
    int cuda_version;
    rt_device dev[RT_MAX_DEVICES];
#if KTUNE_HAVE_NVRTC
    srch_cuda cu;
    rt_lt_ctx *lts;
#endif
};

static int rt_fail(ktune_error *err, int rc, const char *fmt, ...) KT_PRINTF(3, 4);

static int rt_fail(ktune_error *err, int rc, const char *fmt, ...)
{
    if (!err)
        return rc;
    char msg[sizeof(err->msg)];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return ktune_err_from(err, rc, "%s", msg);
}

static void rt_ok(ktune_error *err)
{
    if (err) {
        err->code = 0;
        err->msg[0] = '\0';
    }
}

/* ---- keys and the memo ---- */

static uint64_t memo_hash(const void *ctx, const uint8_t *key, size_t len)
{
    uint64_t h = 1469598103934665603ull;
    uintptr_t c = (uintptr_t)ctx;
    for (size_t i = 0; i < sizeof(c); i++) {
        h ^= (uint8_t)(c >> (8 * i));
        h *= 1099511628211ull;
    }
    for (size_t i = 0; i < len; i++) {
        h ^= key[i];
        h *= 1099511628211ull;
    }
    return h;
}

/* Under at least the read lock. */
static ktune_kernel *memo_find(ktune_runtime *rt, uint64_t h, const void *ctx, const uint8_t *key,
                               size_t len)
{
    if (!rt->n_buckets)
        return NULL;
    for (ktune_kernel *k = rt->buckets[h & (rt->n_buckets - 1)]; k; k = k->next)
        if (k->hash == h && k->ctx == ctx && k->klen == len && memcmp(k->key, key, len) == 0)
            return k;
    return NULL;
}

static ktune_kernel *memo_get(ktune_runtime *rt, uint64_t h, const void *ctx, const uint8_t *key,
                              size_t len)
{
    pthread_rwlock_rdlock(&rt->lock);
    ktune_kernel *k = memo_find(rt, h, ctx, key, len);
    pthread_rwlock_unlock(&rt->lock);
    return k;
}

/* Under the write lock. -ENOMEM leaves the table as it was. */
static int memo_insert(ktune_runtime *rt, ktune_kernel *k)
{
    if (rt->n_entries + 1 > rt->n_buckets) {
        size_t n = rt->n_buckets ? rt->n_buckets * 2 : 256;
        ktune_kernel **b = calloc(n, sizeof(*b));
        if (!b)
            return -ENOMEM;
        for (size_t i = 0; i < rt->n_buckets; i++) {
            for (ktune_kernel *e = rt->buckets[i], *next; e; e = next) {
                next = e->next;
                e->next = b[e->hash & (n - 1)];
                b[e->hash & (n - 1)] = e;
            }
        }
        free(rt->buckets);
        rt->buckets = b;
        rt->n_buckets = n;
    }
    ktune_kernel **slot = &rt->buckets[k->hash & (rt->n_buckets - 1)];
    k->next = *slot;
    *slot = k;
    rt->n_entries++;
    return 0;
}

/* The key of a lookup before the graph is bound: the problem digest is filled in by
 * resolve_cold, and tolerance is as asked (0: the default), normalised there too. */
static int make_key(const uint8_t sig[OPS_SIG_BYTES], const ktune_shape *shapes, int n,
                    const char *precision, double tolerance, const cache_gpu *fp, cache_key *k,
                    ktune_error *err)
{
    memset(k, 0, sizeof(*k));
    if (n < 0 || (n > 0 && !shapes))
        return rt_fail(err, -EINVAL, "%d shapes given at %p", n, (const void *)shapes);
    if (n > CACHE_MAX_SHAPES)
        return rt_fail(err, -EINVAL, "%d shapes bound: a key holds at most %d", n,
                       CACHE_MAX_SHAPES);
    if (!(tolerance >= 0) || isinf(tolerance))
        return rt_fail(err, -EINVAL, "tolerance %g: expected a finite value >= 0 (0: the default)",
                       tolerance);
    k->gpu = *fp;
    memcpy(k->sig, sig, OPS_SIG_BYTES);
    k->n_shapes = n;
    k->tolerance = tolerance;
    for (int i = 0; i < n; i++) {
        const char *name = shapes[i].name;
        size_t len = name ? strlen(name) : 0;
        if (len == 0 || len >= CACHE_SYM_NAME_MAX)
            return rt_fail(err, -EINVAL, "shape %d: symbol name %s", i,
                           len ? "too long" : "missing");
        memcpy(k->shapes[i].name, name, len + 1);
        k->shapes[i].value = shapes[i].value;
    }
    if (!precision)
        k->precision = OPS_PREC_EXACT;
    else if (ops_precision_from_name(precision, &k->precision) < 0)
        return rt_fail(err, -EINVAL, "unknown precision '%.40s' (exact, tf32 or reduced)",
                       precision);
    return 0;
}

/* The memo's key for k asked with graph g: the fingerprint's fields, the graph as declared (its
 * names and order: two graphs of one signature may pose different problems under the same
 * shapes), the precision, the tolerance asked and the shapes in name order. Built without
 * binding or hashing the graph: this is the hot path. Keys that the cold path refuses (a value
 * < 1, a name bound twice) never reach the memo. */
static size_t memo_key(const cache_key *k, const ktune_graph *g, uint8_t out[RT_MEMO_KEY_MAX])
{
    size_t off = strnlen(k->gpu.name, sizeof(k->gpu.name));
    memcpy(out, k->gpu.name, off);
    out[off++] = 0;
    int32_t v[5] = {k->gpu.sm_major, k->gpu.sm_minor, k->gpu.sm_count, k->gpu.driver_version,
                    k->gpu.cuda_version};
    memcpy(out + off, v, sizeof(v));
    off += sizeof(v);
    memcpy(out + off, &k->gpu.mem_bytes, sizeof(k->gpu.mem_bytes));
    off += sizeof(k->gpu.mem_bytes);
    memcpy(out + off, g->decl, OPS_SIG_BYTES);
    off += OPS_SIG_BYTES;
    out[off++] = (uint8_t)k->precision;
    memcpy(out + off, &k->tolerance, sizeof(k->tolerance));
    off += sizeof(k->tolerance);
    int order[CACHE_MAX_SHAPES];
    for (int i = 0; i < k->n_shapes; i++) {
        int j = i;
        while (j > 0 && strcmp(k->shapes[order[j - 1]].name, k->shapes[i].name) > 0) {
            order[j] = order[j - 1];
            j--;
        }
        order[j] = i;
    }
    for (int i = 0; i < k->n_shapes; i++) {
        const cache_bound *b = &k->shapes[order[i]];
        size_t nl = strlen(b->name); /* < CACHE_SYM_NAME_MAX: make_key checked */
        memcpy(out + off, b->name, nl + 1);
        off += nl + 1;
        memcpy(out + off, &b->value, sizeof(b->value));
        off += sizeof(b->value);
    }
    return off;
}

/* "M=1024,N=512" */
static void shapes_text(const ktune_shape *shapes, int n, char *out, size_t cap)
{
    size_t used = 0;
    out[0] = '\0';
    for (int i = 0; i < n && used < cap; i++)
        used += (size_t)snprintf(out + used, cap - used, "%s%s=%" PRId64, i ? "," : "",
                                 shapes[i].name ? shapes[i].name : "?", shapes[i].value);
    if (n == 0)
        snprintf(out, cap, "(no shapes)");
}

bool ktune_rt_gpu_compatible(const cache_gpu *here, const cache_gpu *tuned)
{
    return strncmp(here->name, tuned->name, sizeof(here->name)) == 0 &&
           here->sm_major == tuned->sm_major && here->sm_minor == tuned->sm_minor &&
           here->sm_count == tuned->sm_count && here->mem_bytes == tuned->mem_bytes;
}

static bool gpu_same(const cache_gpu *a, const cache_gpu *b)
{
    return ktune_rt_gpu_compatible(a, b) && a->driver_version == b->driver_version &&
           a->cuda_version == b->cuda_version;
}

bool ktune_rt_key_matches(const cache_key *rec_key, const cache_key *want)
{
    return memcmp(rec_key->sig, want->sig, OPS_SIG_BYTES) == 0 &&
           memcmp(rec_key->problem, want->problem, OPS_SIG_BYTES) == 0 &&
           rec_key->precision == want->precision && rec_key->tolerance == want->tolerance;
}

int ktune_rt_complete_key(cache_key *k, const ops_graph *bound, ktune_error *err)
{
    ops_diag d = {0};
    int rc = ops_graph_problem(bound, k->problem, NULL, NULL, &d);
    if (rc < 0)
        return rt_fail(err, rc, "%s", d.msg);
    if (k->tolerance > 0 && k->tolerance == ops_default_tolerance(bound, k->precision))
        k->tolerance = 0;
    return 0;
}

/* ---- schedules ---- */

int ktune_rt_schedule_parse(const char *text, ops_schedule *out, kt_err *err)
{
    memset(out, 0, sizeof(*out));
    if (!text)
        return kt_err_set(err, -EINVAL, "no schedule");
    char buf[512];
    if (snprintf(buf, sizeof(buf), "%s", text) >= (int)sizeof(buf))
        return kt_err_set(err, -EINVAL, "schedule longer than %zu bytes", sizeof(buf) - 1);
    char *save = NULL, *tok = strtok_r(buf, " ", &save);
    const ops_family *f = NULL;
    for (int id = 0; tok && id < OPS_FAM_COUNT && !f; id++)
        if (strcmp(ops_family_get((ops_family_id)id)->name, tok) == 0)
            f = ops_family_get((ops_family_id)id);
    if (!f)
        return kt_err_set(err, -EINVAL, "schedule '%.60s': unknown family", text);
    out->family = f->id;
    bool set[OPS_MAX_KNOBS] = {false};
    while ((tok = strtok_r(NULL, " ", &save))) {
        char *eq = strchr(tok, '=');
        if (!eq)
            return kt_err_set(err, -EINVAL, "schedule '%.60s': '%.40s' is not knob=value", text,
                              tok);
        *eq = '\0';
        const char *val = eq + 1;
        int k = 0;
        while (k < f->n_knobs && strcmp(f->knobs[k].name, tok) != 0)
            k++;
        if (k == f->n_knobs)
            return kt_err_set(err, -EINVAL, "schedule '%.60s': family %s has no knob '%.40s'", text,
                              f->name, tok);
        const ops_knob *knob = &f->knobs[k];
        bool ok = false;
        for (int i = 0; knob->labels && i < knob->n_values && !ok; i++) {
            if (strcmp(knob->labels[i], val) == 0) {
                out->v[k] = knob->values[i];
                ok = true;
            }
        }
        if (!ok && !knob->labels) {
            char *end = NULL;
            long v = strtol(val, &end, 10);
            for (int i = 0; end && *end == '\0' && end != val && i < knob->n_values && !ok; i++)
                ok = knob->values[i] == v;
            if (ok)
                out->v[k] = (int)v;
        }
        if (!ok)
            return kt_err_set(err, -EINVAL, "schedule '%.60s': %s=%.40s is not a value of it", text,
                              knob->name, val);
        set[k] = true;
    }
    for (int k = 0; k < f->n_knobs; k++)
        if (!set[k])
            return kt_err_set(err, -EINVAL, "schedule '%.60s': knob %s missing", text,
                              f->knobs[k].name);
    return 0;
}

/* ---- what a record asks the driver to trust ---- */

bool ktune_rt_range_fits(uint64_t off, uint64_t len, uint64_t size)
{
    return off <= size && len <= size - off;
}

/* A table of n entries of ent bytes at off inside len bytes (n, ent < 2^16: no overflow). */
static bool table_fits(uint64_t off, uint64_t n, uint64_t ent, size_t len)
{
    return ktune_rt_range_fits(off, n * ent, len);
}

int ktune_rt_check_cubin(const uint8_t *img, size_t len, kt_err *why)
{
    Elf64_Ehdr eh;
    if (!img || len < sizeof(eh))
        return kt_err_set(why, -EBADMSG, "cubin of %zu bytes is shorter than an ELF64 header",
                          img ? len : 0);
    memcpy(&eh, img, sizeof(eh)); /* the image need not be aligned */
    if (memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0)
        return kt_err_set(why, -EBADMSG, "cubin is not an ELF image (bad magic)");
    if (eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_ident[EI_DATA] != ELFDATA2LSB)
        return kt_err_set(why, -EBADMSG, "cubin is not a little-endian ELF64 image (class %d)",
                          eh.e_ident[EI_CLASS]);
    if (eh.e_machine != EM_CUDA)
        return kt_err_set(why, -EBADMSG, "cubin is for ELF machine %d, not CUDA (%d)", eh.e_machine,
                          EM_CUDA);
    if (eh.e_ehsize != sizeof(eh) || eh.e_shentsize != sizeof(Elf64_Shdr) ||
        (eh.e_phnum && eh.e_phentsize != sizeof(Elf64_Phdr)))
        return kt_err_set(why, -EBADMSG, "cubin has header sizes %u/%u/%u, not ELF64's",
                          eh.e_ehsize, eh.e_shentsize, eh.e_phentsize);
    /* e_shnum 0 means none, or more than 0xff00 sections (extended numbering): neither is a
     * cubin NVRTC writes */
    if (eh.e_shnum == 0 || eh.e_shstrndx >= eh.e_shnum)
        return kt_err_set(why, -EBADMSG, "cubin has %u sections, string table %u", eh.e_shnum,
                          eh.e_shstrndx);
    if (!table_fits(eh.e_shoff, eh.e_shnum, eh.e_shentsize, len))
        return kt_err_set(why, -EBADMSG,
                          "cubin's section headers (%u at %" PRIu64 ") end past its %zu bytes",
                          eh.e_shnum, (uint64_t)eh.e_shoff, len);
    if (eh.e_phnum && !table_fits(eh.e_phoff, eh.e_phnum, eh.e_phentsize, len))
        return kt_err_set(why, -EBADMSG,
                          "cubin's program headers (%u at %" PRIu64 ") end past its %zu bytes",
                          eh.e_phnum, (uint64_t)eh.e_phoff, len);
    for (unsigned i = 0; i < eh.e_shnum; i++) {
        Elf64_Shdr sh;
        memcpy(&sh, img + eh.e_shoff + (uint64_t)i * sizeof(sh), sizeof(sh));
        if (sh.sh_type != SHT_NOBITS && !ktune_rt_range_fits(sh.sh_offset, sh.sh_size, len))
            return kt_err_set(why, -EBADMSG,
                              "cubin section %u (%" PRIu64 " bytes at %" PRIu64
                              ") ends past its %zu bytes",
                              i, (uint64_t)sh.sh_size, (uint64_t)sh.sh_offset, len);
    }
    for (unsigned i = 0; i < eh.e_phnum; i++) {
        Elf64_Phdr ph;
        memcpy(&ph, img + eh.e_phoff + (uint64_t)i * sizeof(ph), sizeof(ph));
        if (!ktune_rt_range_fits(ph.p_offset, ph.p_filesz, len))
            return kt_err_set(why, -EBADMSG,
                              "cubin segment %u (%" PRIu64 " bytes at %" PRIu64
                              ") ends past its %zu bytes",
                              i, (uint64_t)ph.p_filesz, (uint64_t)ph.p_offset, len);
    }
    return 0;
}

static const char *const rt_arg_kinds[CACHE_ARG_KIND_COUNT] = {
    "an input pointer", "an output pointer", "a workspace pointer", "a scalar"};

int ktune_rt_check_params(const cache_kernel *k, const size_t *sizes, int n_params, kt_err *why)
{
    if (n_params != k->n_args)
        return kt_err_set(why, -EBADMSG, "kernel %.100s takes %d parameters; the record passes %d",
                          k->entry, n_params, k->n_args);
    for (int j = 0; j < k->n_args; j++) {
        const cache_arg *a = &k->args[j];
        size_t want = sizeof(uint64_t); /* a CUdeviceptr */
        if (a->kind == CACHE_ARG_SCALAR)
            want = a->scalar == CACHE_SCALAR_I32 || a->scalar == CACHE_SCALAR_F32 ? 4 : 8;
        else if (a->has_tmap)
            want = OPS_TMAP_BYTES; /* a CUtensorMap, by value */
        const char *kind =
            (unsigned)a->kind < CACHE_ARG_KIND_COUNT ? rt_arg_kinds[a->kind] : "an argument";
        if (a->has_tmap && a->kind != CACHE_ARG_SCALAR)
            kind = "a tensor map";
        if (sizes[j] != want)
            return kt_err_set(why, -EBADMSG,
                              "kernel %.100s parameter %d is %zu bytes; the record passes %s of "
                              "%zu",
                              k->entry, j, sizes[j], kind, want);
    }
    return 0;
}

/* Whether [a, a + la) and [b, b + lb) share a byte; no sum is formed, so no overflow. */
static bool ranges_overlap(uintptr_t a, uint64_t la, uintptr_t b, uint64_t lb)
{
    if (la == 0 || lb == 0)
        return false;
    return a <= b ? (uint64_t)(b - a) < la : (uint64_t)(a - b) < lb;
}

/* what_a/what_b: "input", "output"; index -1: the workspace; name NULL: none */
static int alias_fail(kt_err *why, const char *what_a, int ia, const char *name_a, const void *a,
                      uint64_t la, const char *what_b, int ib, const char *name_b, const void *b,
                      uint64_t lb)
{
    char na[96] = "the workspace", nb[96] = "the workspace";
    if (ia >= 0)
        snprintf(na, sizeof(na), "%s %d%s%.60s%s", what_a, ia, name_a ? " '" : "",
                 name_a ? name_a : "", name_a ? "'" : "");
    if (ib >= 0)
        snprintf(nb, sizeof(nb), "%s %d%s%.60s%s", what_b, ib, name_b ? " '" : "",
                 name_b ? name_b : "", name_b ? "'" : "");
    return kt_err_set(why, -EINVAL,
                      "%s (%p, %" PRIu64 " bytes) overlaps %s (%p, %" PRIu64
                      " bytes): kernels assume their buffers do not alias; pass separate ones",
                      na, a, la, nb, b, lb);
}

int ktune_rt_check_aliasing(void *const *in, const uint64_t *in_bytes, int n_in, void *const *out,
                            const uint64_t *out_bytes, int n_out, const void *ws, uint64_t ws_bytes,
                            const char *const *names, kt_err *why)
{
    uintptr_t w = (uintptr_t)ws;
    if (!ws)
        ws_bytes = 0;
#define IN_NAME(i)  (names ? names[i] : NULL)
#define OUT_NAME(j) (names ? names[n_in + (j)] : NULL)
    for (int j = 0; j < n_out; j++) {
        uintptr_t o = (uintptr_t)out[j];
        for (int i = 0; i < n_in; i++)
            if (ranges_overlap(o, out_bytes[j], (uintptr_t)in[i], in_bytes[i]))
                return alias_fail(why, "output", j, OUT_NAME(j), out[j], out_bytes[j], "input", i,
                                  IN_NAME(i), in[i], in_bytes[i]);
        for (int i = 0; i < j; i++)
            if (ranges_overlap(o, out_bytes[j], (uintptr_t)out[i], out_bytes[i]))
                return alias_fail(why, "output", j, OUT_NAME(j), out[j], out_bytes[j], "output", i,
                                  OUT_NAME(i), out[i], out_bytes[i]);
        if (ranges_overlap(o, out_bytes[j], w, ws_bytes))
            return alias_fail(why, "output", j, OUT_NAME(j), out[j], out_bytes[j], "", -1, NULL, ws,
                              ws_bytes);
    }
    for (int i = 0; i < n_in; i++)
        if (ranges_overlap((uintptr_t)in[i], in_bytes[i], w, ws_bytes))
            return alias_fail(why, "", -1, NULL, ws, ws_bytes, "input", i, IN_NAME(i), in[i],
                              in_bytes[i]);
#undef IN_NAME
#undef OUT_NAME
    return 0;
}

/* ---- records ---- */

/* Checks that a record can be launched against a graph of n_in inputs and n_out outputs.
 * -ENOTSUP for a const-input layout this runtime cannot pack (none is known yet), -EBADMSG for an
 * inconsistent record. */
static int check_record(const cache_record *r, int n_in, int n_out, kt_err *why)
{
    if (r->n_layouts > 0 && r->layouts)
        return kt_err_set(why, -ENOTSUP,
                          "the record wants const input %d in layout '%.60s', which this "
                          "runtime cannot pack (upgrade libktune)",
                          r->layouts[0].input, r->layouts[0].layout ? r->layouts[0].layout : "?");
    if (r->n_kernels < 1 || r->n_kernels > CACHE_MAX_KERNELS || !r->kernels)
        return kt_err_set(why, -EBADMSG, "record has %d kernels", r->n_kernels);
    bool library = r->family && strcmp(r->family, RT_LIBRARY) == 0;
    if (library && (r->n_kernels != 1 || !r->kernels[0].entry ||
                    strcmp(r->kernels[0].entry, RT_LT_ENTRY) != 0 || r->kernels[0].n_args < 3 ||
                    r->kernels[0].n_args > 4))
        return kt_err_set(why, -EBADMSG, "library record without its one %s launch of 3-4 args",
                          RT_LT_ENTRY);
    if (!library && (!r->cubin || r->cubin_len == 0))
        return kt_err_set(why, -EBADMSG, "record has no cubin");
    for (int i = 0; i < r->n_kernels; i++) {
        const cache_kernel *k = &r->kernels[i];
        if (!k->entry || !k->entry[0])
            return kt_err_set(why, -EBADMSG, "kernel %d has no entry point", i);
        if (!library)
            for (int d = 0; d < 3; d++)
                if (k->grid[d] == 0 || k->block[d] == 0)
                    return kt_err_set(why, -EBADMSG, "kernel %s: empty grid or block", k->entry);
        if (k->zero_bytes &&
            !ktune_rt_range_fits(k->zero_offset, k->zero_bytes, r->workspace_bytes))
            return kt_err_set(why, -EBADMSG,
                              "kernel %s zeroes %" PRIu64 " bytes at %" PRIu64 ", past the %" PRIu64
                              " of the workspace",
                              k->entry, k->zero_bytes, k->zero_offset, r->workspace_bytes);
        if (k->n_args < 0 || k->n_args > CACHE_MAX_ARGS || (k->n_args && !k->args))
            return kt_err_set(why, -EBADMSG, "kernel %s has %d arguments", k->entry, k->n_args);
        for (int j = 0; j < k->n_args; j++) {
            const cache_arg *a = &k->args[j];
            bool ok = true;
            switch (a->kind) {
            case CACHE_ARG_INPUT:
                ok = a->index >= 0 && a->index < n_in;
                break;
            case CACHE_ARG_OUTPUT:
                ok = a->index >= 0 && a->index < n_out;
                break;
            case CACHE_ARG_WORKSPACE:
                ok = a->bytes > 0 && ktune_rt_range_fits(a->offset, a->bytes, r->workspace_bytes);
                break;
            case CACHE_ARG_SCALAR:
                ok = !library && (unsigned)a->scalar < CACHE_SCALAR_COUNT;
                break;
            default:
                ok = false;
            }
            /* a tensor map only on a kernel's pointer (a cuBLASLt call takes none) */
            if (a->has_tmap && (library || a->kind == CACHE_ARG_SCALAR))
                ok = false;
            if (!ok)
                return kt_err_set(why, -EBADMSG,
                                  "kernel %s argument %d does not fit the graph (%d inputs, %d "
                                  "outputs, %" PRIu64 " bytes of workspace)",
                                  k->entry, j, n_in, n_out, r->workspace_bytes);
        }
    }
    kt_err e = {0};
    if (cache_record_check_outputs(r, n_out, &e) < 0)
        return kt_err_set(why, -EBADMSG, "%s", e.msg);
    return 0;
}

/* cache_get with one more read after a checksum failure (a lock-free reader may see a value a
 * writer is replacing: cache.h, "Read-only opens"). */
static int get_rank(ktune_runtime *rt, const cache_key *k, int rank, cache_record *out, kt_err *why)
{
    int rc = cache_get(rt->cache, k, rank, out, why);
    if (rc == -EBADMSG) {
        cache_record_free(out);
        rc = cache_get(rt->cache, k, rank, out, why);
    }
    if (rc < 0)
        cache_record_free(out);
    return rc;
}

typedef struct pick_state {
    int n_bad; /* corrupt, unverified or inconsistent records skipped */
    kt_err bad;
} pick_state;

/* The best servable record of key k: ranks in order, skipping what fails its checksum, is not
 * verified or does not fit the graph. 0, -ENOENT (none), -ENOTSUP (a layout), other errors. */
static int pick_key(ktune_runtime *rt, const cache_key *k, const ops_graph *bound, int n_in,
                    int n_out, cache_record *out, pick_state *ps, kt_err *why)
{
    for (int rank = 0; rank <= RT_MAX_RANK; rank++) {
        kt_err e = {0};
        int rc = get_rank(rt, k, rank, out, &e);
        if (rc == -ENOENT)
            return -ENOENT;
        if (rc == -EBADMSG) {
            ps->n_bad++;
            ps->bad = e;
            kt_log_warn(RT_LOG, "%s: not served: %s", cache_path(rt->cache), e.msg);
            continue;
        }
        if (rc < 0) {
            *why = e;
            return rc;
        }
        if (!out->verified) {
            ps->n_bad++;
            kt_err_set(&ps->bad, -EBADMSG, "record %s (rank %d) is not verified",
                       out->schedule ? out->schedule : "?", rank);
            kt_log_warn(RT_LOG, "%s: not served: %s", cache_path(rt->cache), ps->bad.msg);
            cache_record_free(out);
            continue;
        }
        rc = check_record(out, n_in, n_out, &e);
        /* The problem itself, slot by slot: what the record was tuned and verified for. */
        if (rc == 0 && cache_record_check_problem(out, bound, &e) < 0)
            rc = -EBADMSG;
        if (rc == -ENOTSUP) {
            *why = e;
            cache_record_free(out);
            return rc;
        }
        if (rc < 0) {
            ps->n_bad++;
            ps->bad = e;
            kt_log_warn(RT_LOG, "%s: not served: %s", cache_path(rt->cache), e.msg);
            cache_record_free(out);
            continue;
        }
        return 0;
    }
    return -ENOENT;
}

/* Reads the cache's GPU fingerprints once (cache_gpus: one seek per GPU). Under cold_lock. */
static int load_gpus(ktune_runtime *rt, ktune_error *err)
{
    if (rt->gpus_ready)
        return 0;
    kt_err e = {0};
    free(rt->gpus);
    rt->gpus = NULL;
    rt->n_gpus = 0;
    int rc = cache_gpus(rt->cache, &rt->gpus, &rt->n_gpus, &e);
    if (rc < 0)
        return rt_fail(err, rc, "scanning %s for compatible GPUs: %s", cache_path(rt->cache),
                       rc == -ENOMEM && !e.msg[0] ? "out of memory" : e.msg);
    rt->gpus_ready = true;
    kt_log_debug(RT_LOG, "%s: records of %zu GPU fingerprint(s)", cache_path(rt->cache),
                 rt->n_gpus);
    return 0;
}

/* Whether a (time t, fingerprint g) beats the best so far: faster; then the newer driver, then
 * the newer toolkit. */
static bool compat_better(const cache_record *cand, const cache_record *best)
{
    if (cand->time_ns != best->time_ns)
        return cand->time_ns < best->time_ns;
    if (cand->key.gpu.driver_version != best->key.gpu.driver_version)
        return cand->key.gpu.driver_version > best->key.gpu.driver_version;
    return cand->key.gpu.cuda_version > best->key.gpu.cuda_version;
}

/* Bytes of a bound tensor; false on overflow. */
static bool tensor_bytes(const ops_tensor *x, uint64_t *bytes)
{
    return !__builtin_mul_overflow((uint64_t)ops_shape_numel(&x->shape),
                                   (uint64_t)ops_dtype_size(x->dtype), bytes);
}

int ktune_rt_io_map(const ops_graph *bound, int *in_of_rank, int *out_of_rank, kt_err *why)
{
    int n_in = 0;
    for (int t = 0; t < bound->n_tensors; t++)
        n_in += bound->tensors[t].producer < 0;
    int n_out = bound->n_outputs;
    int *rank = malloc(sizeof(int) * (size_t)(n_in + n_out + 1));
    if (!rank)
        return kt_err_set(why, -ENOMEM, "out of memory");
    for (int r = 0; r < n_in; r++)
        in_of_rank[r] = -1;
    for (int r = 0; r < n_out; r++)
        out_of_rank[r] = -1;
    ops_diag d = {0};
    int rc = ops_graph_canonical_io(bound, rank, rank + n_in, &d);
    if (rc < 0) {
        rc = kt_err_set(why, rc, "graph '%s': %s", bound->name ? bound->name : "?", d.msg);
        goto out;
    }
    /* a permutation, or the graph lists a tensor twice: nothing a launch could follow */
    for (int i = 0; i < n_in + n_out && rc == 0; i++) {
        bool in = i < n_in;
        int r = rank[i], *of_rank = in ? in_of_rank : out_of_rank;
        if (r < 0 || r >= (in ? n_in : n_out) || of_rank[r] >= 0)
            rc = kt_err_set(why, -EINVAL,
                            "graph '%s': no canonical order of its inputs and outputs (is a "
                            "tensor listed twice?)",
                            bound->name ? bound->name : "?");
        else
            of_rank[r] = in ? i : i - n_in;
    }
out:
    free(rank);
    return rc;
}

/* k's declared<->canonical map, buffer sizes and names from the caller's bound graph: what
 * ktune_launch maps and checks the caller's buffers with. */
static int io_map(ktune_kernel *k, const ops_graph *bound, ktune_error *err)
{
    size_t n = (size_t)(k->n_in + k->n_out);
    k->io_of_rank = calloc(n + 1, sizeof(int));
    k->io_bytes = calloc(n + 1, sizeof(uint64_t));
    k->io_names = calloc(n + 1, sizeof(char *));
    if (!k->io_of_rank || !k->io_bytes || !k->io_names)
        return rt_fail(err, -ENOMEM, "out of memory");
    kt_err e = {0};
    int rc = ktune_rt_io_map(bound, k->io_of_rank, k->io_of_rank + k->n_in, &e);
    if (rc < 0)
        return rt_fail(err, rc, "%s", e.msg);
    for (int t = 0, i = 0; t < bound->n_tensors; t++) {
        const ops_tensor *x = &bound->tensors[t];
        if (x->producer >= 0)
            continue;
        if (!tensor_bytes(x, &k->io_bytes[i]))
            return rt_fail(err, -EOVERFLOW, "input '%s' has too many bytes", x->name);
        if (!(k->io_names[i++] = kt_strdup(x->name)))
            return rt_fail(err, -ENOMEM, "out of memory");
    }
    for (int j = 0; j < bound->n_outputs; j++) {
        const ops_tensor *x = &bound->tensors[bound->outputs[j]];
        if (!tensor_bytes(x, &k->io_bytes[k->n_in + j]))
            return rt_fail(err, -EOVERFLOW, "output '%s' has too many bytes", x->name);
        if (!(k->io_names[k->n_in + j] = kt_strdup(x->name)))
            return rt_fail(err, -ENOMEM, "out of memory");
    }
    return 0;
}

/* The cold path's reading half: binds g (checks the shapes), then the exact key, then a
 * compatible GPU's. Fills k->rec, k->match, k->n_in/out. *bound_out (may be NULL) receives the
 * bound graph. */
static int resolve_cold(ktune_runtime *rt, const ops_graph *g, const cache_key *key,
                        const ktune_shape *shapes, int n_shapes, ktune_kernel *k,
                        ops_graph **bound_out, ktune_error *err)
{
    char shp[256];
    shapes_text(shapes, n_shapes, shp, sizeof(shp));
    const char *gname = g->name ? g->name : "?";
    ops_binding b[CACHE_MAX_SHAPES];
    for (int i = 0; i < n_shapes; i++)
        b[i] = (ops_binding){key->shapes[i].name, key->shapes[i].value};
    ops_graph *bound = NULL;
    ops_diag d = {0};
    int rc = ops_graph_bind(g, b, n_shapes, &bound, &d);
    if (rc < 0)
        return rt_fail(err, rc, "graph '%s' with %s: %s", gname, shp, d.msg);
    const char *unbound = ops_graph_first_unbound(bound);
    if (unbound) {
        rc = rt_fail(err, -EINVAL, "graph '%s': dimension %s is not bound (pass it in shapes)",
                     gname, unbound);
        goto out;
    }
    k->n_in = 0;
    for (int t = 0; t < g->n_tensors; t++)
        k->n_in += g->tensors[t].producer < 0;
    k->n_out = g->n_outputs;
    cache_key want = *key;
    if ((rc = ktune_rt_complete_key(&want, bound, err)) < 0)
        goto out;
    key = &want;

    pick_state ps = {0};
    kt_err why = {0};
    rc = pick_key(rt, key, bound, k->n_in, k->n_out, &k->rec, &ps, &why);
    if (rc == 0) {
        k->match = KTUNE_MATCH_EXACT;
        goto found;
    }
    if (rc != -ENOENT) {
        rc = rt_fail(err, rc, "graph '%s' at %s: %s", gname, shp, why.msg);
        goto out;
    }
    /* The miss path: the fastest servable record of a compatible GPU. */
    if ((rc = load_gpus(rt, err)) < 0)
        goto out;
    rc = -ENOENT;
    for (size_t i = 0; i < rt->n_gpus; i++) {
        if (gpu_same(&rt->gpus[i], &key->gpu) || !ktune_rt_gpu_compatible(&key->gpu, &rt->gpus[i]))
            continue;
        cache_key ck = *key;
        ck.gpu = rt->gpus[i];
        cache_record cand;
        cache_record_init(&cand);
        kt_err e = {0};
        int crc = pick_key(rt, &ck, bound, k->n_in, k->n_out, &cand, &ps, &e);
        if (crc == 0) {
            if (rc == 0 && !compat_better(&cand, &k->rec)) {
                cache_record_free(&cand);
                continue;
            }
            cache_record_free(&k->rec);
            k->rec = cand;
            rc = 0;
        } else if (crc != -ENOENT && rc != 0) {
            rc = crc;
            why = e;
        }
    }
    if (rc == 0) {
        k->match = KTUNE_MATCH_COMPATIBLE;
        goto found;
    }
    if (rc != -ENOENT) {
        rc = rt_fail(err, rc, "graph '%s' at %s: %s", gname, shp, why.msg);
        goto out;
    }
    if (ps.n_bad)
        rc = rt_fail(err, -EBADMSG,
                     "graph '%s' at %s, precision %s: %d cached record(s) not served (%s) and "
                     "no other fits",
                     gname, shp, ops_precision_name(key->precision), ps.n_bad, ps.bad.msg);
    else
        rc = rt_fail(err, -ENOENT,
                     "nothing cached in %s for graph '%s' at %s, precision %s, on %s (sm_%d%d, "
                     "driver %d, CUDA %d) or a compatible GPU: tune it first",
                     cache_path(rt->cache), gname, shp, ops_precision_name(key->precision),
                     key->gpu.name, key->gpu.sm_major, key->gpu.sm_minor, key->gpu.driver_version,
                     key->gpu.cuda_version);
    goto out;
found:
    k->library = k->rec.family && strcmp(k->rec.family, RT_LIBRARY) == 0;
    if ((rc = io_map(k, bound, err)) < 0)
        goto out;
    if (bound_out) {
        *bound_out = bound;
        bound = NULL;
    }
    rc = 0;
out:
    ops_graph_free(bound);
    return rc;
}

static ktune_kernel *kernel_new(ktune_runtime *rt)
{
    ktune_kernel *k = calloc(1, sizeof(*k));
    if (!k)
        return NULL;
    k->rt = rt;
    cache_record_init(&k->rec);
#if KTUNE_HAVE_NVRTC
    pthread_mutex_init(&k->plan_lock, NULL);
#endif
    return k;
}

/* Frees k and unloads what it loaded (its context made current for that). */
static void kernel_free(ktune_kernel *k)
{
    if (!k)
        return;
#if KTUNE_HAVE_NVRTC
    ktune_runtime *rt = k->rt;
    if (k->plan)
        srch_lt_plan_free(k->plan);
    if (k->mod && rt->cu.lib) {
        CUcontext popped = NULL;
        if (rt->cu.p_cuCtxPushCurrent(k->ctx) == CUDA_SUCCESS) {
            rt->cu.p_cuModuleUnload(k->mod);
            rt->cu.p_cuCtxPopCurrent(&popped);
        }
    }
    free(k->fn);
    pthread_mutex_destroy(&k->plan_lock);
#endif
    for (int i = 0; k->io_names && i < k->n_in + k->n_out; i++)
        free(k->io_names[i]);
    free(k->io_names);
    free(k->io_bytes);
    free(k->io_of_rank);
    cache_record_free(&k->rec);
    free(k);
}

/* ---- the driver and devices ---- */

typedef int (*rt_nvrtc_version_fn)(int *major, int *minor);

/* What ktune-worker puts in cache_gpu.cuda_version: nvrtcVersion() as major * 1000 + minor * 10
 * of the NVRTC it runs with. The runtime needs no NVRTC, so it asks libnvrtc.so.13 when that is
 * installed and otherwise takes the toolkit libktune was built with (the same number for the
 * same toolkit). */
static int toolkit_version(void)
{
    int v = 0;
    void *lib = dlopen("libnvrtc.so.13", RTLD_LAZY | RTLD_LOCAL);
    if (lib) {
        rt_nvrtc_version_fn fn = NULL;
        *(void **)&fn = dlsym(lib, "nvrtcVersion");
        int major = 0, minor = 0;
        if (fn && fn(&major, &minor) == 0)
            v = major * 1000 + minor * 10;
        dlclose(lib);
    }
#if KTUNE_HAVE_NVRTC
    if (v == 0)
        v = CUDA_VERSION / 1000 * 1000 + CUDA_VERSION % 1000 / 10 * 10;
#endif
    return v;
}

/* Loads libcuda once per runtime; later calls return the first outcome. */
static int driver_load(ktune_runtime *rt, ktune_error *err)
{
    int st = atomic_load_explicit(&rt->cu_state, memory_order_acquire);
    if (st == 1)
        return 0;
    if (st == 0) {
        pthread_mutex_lock(&rt->cu_lock);
        st = atomic_load_explicit(&rt->cu_state, memory_order_relaxed);
        if (st == 0) {
#if KTUNE_HAVE_NVRTC
            int rc = srch_cuda_load(&rt->cu, &rt->cu_err);
            if (rc == 0) {
                rc = srch_cuda_check(&rt->cu, rt->cu.p_cuDeviceGetCount(&rt->n_devices),
                                     "cuDeviceGetCount", &rt->cu_err);
                if (rc == 0 && rt->n_devices == 0)
                    rc = kt_err_set(&rt->cu_err, -ENODEV, "the CUDA driver sees no GPU");
                if (rc < 0)
                    srch_cuda_close(&rt->cu);
            }
            if (rc == 0)
                rt->cuda_version = toolkit_version();
            st = rc < 0 ? rc : 1;
#else
            kt_err_set(&rt->cu_err, -ENODEV, "libktune was built without the CUDA toolkit");
            st = -ENODEV;
#endif
            atomic_store_explicit(&rt->cu_state, st, memory_order_release);
        }
        pthread_mutex_unlock(&rt->cu_lock);
    }
    if (st == 1)
        return 0;
    return rt_fail(err, st, "%s", rt->cu_err.msg);
}

#if KTUNE_HAVE_NVRTC
static int cu_fail(ktune_runtime *rt, CUresult r, const char *what, ktune_error *err)
{
    kt_err e = {0};
    int rc = srch_cuda_check(&rt->cu, r, what, &e);
    return rc < 0 ? rt_fail(err, rc, "%s", e.msg) : 0;
}

/* The fingerprint and limits of device d, read once. */
static int device_info(ktune_runtime *rt, CUdevice d, rt_device **out, ktune_error *err)
{
    if ((int)d < 0 || (int)d >= rt->n_devices || (int)d >= RT_MAX_DEVICES)
        return rt_fail(err, -ENODEV, "no CUDA device %d (the driver sees %d)", (int)d,
                       rt->n_devices);
    rt_device *dv = &rt->dev[d];
    *out = dv;
    if (atomic_load_explicit(&dv->fp_ready, memory_order_acquire))
        return 0;
    pthread_mutex_lock(&rt->cu_lock);
    int rc = 0;
    if (!atomic_load_explicit(&dv->fp_ready, memory_order_relaxed)) {
        cache_gpu fp;
        memset(&fp, 0, sizeof(fp));
        size_t mem = 0;
        srch_cuda *cu = &rt->cu;
        if ((rc = cu_fail(rt, cu->p_cuDeviceGetName(fp.name, (int)sizeof(fp.name), d),
                          "cuDeviceGetName", err)) < 0 ||
            (rc = cu_fail(rt, cu->p_cuDeviceTotalMem(&mem, d), "cuDeviceTotalMem", err)) < 0 ||
            (rc = cu_fail(rt,
                          cu->p_cuDeviceGetAttribute(
                              &fp.sm_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d),
                          "cuDeviceGetAttribute", err)) < 0 ||
            (rc = cu_fail(rt,
                          cu->p_cuDeviceGetAttribute(
                              &fp.sm_minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, d),
                          "cuDeviceGetAttribute", err)) < 0 ||
            (rc = cu_fail(rt,
                          cu->p_cuDeviceGetAttribute(&fp.sm_count,
                                                     CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, d),
                          "cuDeviceGetAttribute", err)) < 0 ||
            (rc = cu_fail(
                 rt,
                 cu->p_cuDeviceGetAttribute(
                     &dv->smem_optin, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, d),
                 "cuDeviceGetAttribute", err)) < 0)
            goto out;
        fp.name[sizeof(fp.name) - 1] = '\0';
        fp.mem_bytes = mem;
        fp.driver_version = cu->driver_version;
        fp.cuda_version = rt->cuda_version;
        dv->fp = fp;
        atomic_store_explicit(&dv->fp_ready, true, memory_order_release);
    }
out:
    pthread_mutex_unlock(&rt->cu_lock);
    return rc;
}

/* The primary context of d, retained once for the runtime's life. */
static int device_primary(ktune_runtime *rt, CUdevice d, CUcontext *out, ktune_error *err)
{
    rt_device *dv = &rt->dev[d];
    if (!atomic_load_explicit(&dv->primary_ready, memory_order_acquire)) {
        pthread_mutex_lock(&rt->cu_lock);
        int rc = 0;
        if (!atomic_load_explicit(&dv->primary_ready, memory_order_relaxed)) {
            rc = cu_fail(rt, rt->cu.p_cuDevicePrimaryCtxRetain(&dv->primary, d),
                         "cuDevicePrimaryCtxRetain", err);
            if (rc == 0)
                atomic_store_explicit(&dv->primary_ready, true, memory_order_release);
        }
        pthread_mutex_unlock(&rt->cu_lock);
        if (rc < 0)
            return rc;
    }
    *out = dv->primary;
    return 0;
}

/* The context a lookup for `device` loads into (ktune.h, ktune_lookup) and its device. */
static int pick_context(ktune_runtime *rt, int device, CUcontext *ctx, CUdevice *dev,
                        ktune_error *err)
{
    srch_cuda *cu = &rt->cu;
    CUcontext cur = NULL;
    int rc = cu_fail(rt, cu->p_cuCtxGetCurrent(&cur), "cuCtxGetCurrent", err);
    if (rc < 0)
        return rc;
    CUdevice cd = 0;
    if (cur && (rc = cu_fail(rt, cu->p_cuCtxGetDevice(&cd), "cuCtxGetDevice", err)) < 0)
        return rc;
    if (device < 0) {
        *dev = cur ? cd : 0;
    } else {
        if (device >= rt->n_devices)
            return rt_fail(err, -ENODEV, "no CUDA device %d (the driver sees %d)", device,
                           rt->n_devices);
        *dev = (CUdevice)device;
    }
    if (cur && cd == *dev) {
        *ctx = cur;
        return 0;
    }
    if ((int)*dev >= RT_MAX_DEVICES)
        return rt_fail(err, -ENODEV, "CUDA device %d: this runtime handles %d devices", (int)*dev,
                       RT_MAX_DEVICES);
    return device_primary(rt, *dev, ctx, err);
}

/* The cuBLASLt handle of ctx (made current by the caller), created once. Under cold_lock. */
static int lt_for(ktune_runtime *rt, CUcontext ctx, srch_lt **out, ktune_error *err)
{
    for (rt_lt_ctx *l = rt->lts; l; l = l->next)
        if (l->ctx == ctx) {
            *out = l->lt;
            return 0;
        }
    rt_lt_ctx *l = calloc(1, sizeof(*l));
    if (!l)
        return rt_fail(err, -ENOMEM, "out of memory");
    kt_err e = {0};
    int rc = srch_lt_open(&l->lt, &e);
    if (rc < 0) {
        free(l);
        return rt_fail(err, rc, "%s", e.msg);
    }
    l->ctx = ctx;
    l->next = rt->lts;
    rt->lts = l;
    *out = l->lt;
    return 0;
}

/* The cuBLASLt plan of a library record: the call rebuilt from the graph (bound, then
 * canonicalised as the search space does) and the schedule, as srch_tune described it. */
static int load_library(ktune_runtime *rt, ktune_kernel *k, const ops_graph *bound,
                        ktune_error *err)
{
    const cache_record *r = &k->rec;
    ops_graph *canon = NULL;
    ops_diag d = {0};
    ops_group grp;
    ops_schedule s;
    ops_lt_desc desc;
    kt_err e = {0};
    int rc = ops_graph_canonicalize(bound, &canon, &d);
    if (rc == 0 && canon->n_nodes >= OPS_GROUP_MAX_NODES)
        rc = kt_err_set(NULL, -EINVAL, "%d nodes", canon->n_nodes);
    if (rc == 0)
        rc = ops_group_init(&grp, canon, (1ull << canon->n_nodes) - 1, &d);
    if (rc < 0) {
        rc = rt_fail(err, rc, "library record %s: %s", r->schedule, d.msg);
        goto out;
    }
    grp.precision = r->key.precision;
    if ((rc = ktune_rt_schedule_parse(r->schedule, &s, &e)) < 0) {
        rc = rt_fail(err, -EBADMSG, "library record: %s", e.msg);
        goto out;
    }
    if (s.family != OPS_FAM_LIBRARY || (rc = ops_library_describe(&grp, &s, &desc, &d)) < 0) {
        rc = rt_fail(err, -EBADMSG,
                     "library record %s does not describe a cuBLASLt call for this "
                     "graph: %s",
                     r->schedule, s.family != OPS_FAM_LIBRARY ? "other family" : d.msg);
        goto out;
    }
    if ((uint64_t)desc.workspace_bytes > r->workspace_bytes ||
        r->kernels[0].n_args != 3 + (desc.bias_tensor >= 0)) {
        rc = rt_fail(err, -EBADMSG,
                     "library record %s: workspace %" PRIu64 " (needs %" PRId64 ") or %d "
                     "arguments do not fit its call",
                     r->schedule, r->workspace_bytes, desc.workspace_bytes, r->kernels[0].n_args);
        goto out;
    }
    srch_lt *lt = NULL;
    if ((rc = lt_for(rt, k->ctx, &lt, err)) < 0)
        goto out;
    if ((rc = srch_lt_plan_new(lt, &desc, &k->plan, NULL, &e)) < 0)
        rc = rt_fail(err, rc, "library record %s: %s", r->schedule, e.msg);
out:
    ops_graph_free(canon);
    return rc;
}

/* The record's launch of kk against fn's parameters: cuLaunchKernel reads as many argument
 * pointers, of as many bytes, as the kernel declares, whatever the record says. */
static int check_params(ktune_runtime *rt, CUfunction fn, const cache_kernel *kk, ktune_error *err)
{
    size_t sizes[CACHE_MAX_ARGS + 1];
    int n = 0;
    for (; n <= CACHE_MAX_ARGS; n++) {
        size_t off = 0;
        CUresult cr = rt->cu.p_cuFuncGetParamInfo(fn, (size_t)n, &off, &sizes[n]);
        if (cr == CUDA_ERROR_INVALID_VALUE) /* n is past the last parameter */
            break;
        if (cr != CUDA_SUCCESS) {
            char what[160];
            snprintf(what, sizeof(what), "cuFuncGetParamInfo (kernel %.100s)", kk->entry);
            return cu_fail(rt, cr, what, err);
        }
    }
    kt_err e = {0};
    int rc = ktune_rt_check_params(kk, sizes, n, &e);
    return rc < 0 ? rt_fail(err, rc, "%s", e.msg) : 0;
}

/* Loads k's record into ctx (device dev). Under cold_lock. */
static int kernel_load(ktune_runtime *rt, ktune_kernel *k, CUcontext ctx, CUdevice dev,
                       const ops_graph *bound, ktune_error *err)
{
    srch_cuda *cu = &rt->cu;
    const cache_record *r = &k->rec;
    rt_device *dv = NULL;
    kt_err e = {0};
    int rc = device_info(rt, dev, &dv, err);
    if (rc < 0)
        return rc;
    if ((rc = cu_fail(rt, cu->p_cuCtxPushCurrent(ctx), "cuCtxPushCurrent", err)) < 0)
        return rc;
    k->ctx = ctx;
    if (k->library) {
        rc = load_library(rt, k, bound, err);
        goto pop;
    }
    if (!(k->fn = calloc((size_t)r->n_kernels, sizeof(*k->fn)))) {
        rc = rt_fail(err, -ENOMEM, "out of memory");
        goto pop;
    }
    /* cuModuleLoadData takes no length: the image's own tables must lie inside it */
    if ((rc = ktune_rt_check_cubin(r->cubin, r->cubin_len, &e)) < 0) {
        rc = rt_fail(err, rc, "record %s: %s", r->schedule ? r->schedule : "?", e.msg);
        goto pop;
    }
    if ((rc = cu_fail(rt, cu->p_cuModuleLoadData(&k->mod, r->cubin), "cuModuleLoadData", err)) <
        0) {
        k->mod = NULL;
        goto pop;
    }
    for (int i = 0; i < r->n_kernels; i++) {
        const cache_kernel *kk = &r->kernels[i];
        char what[160];
        snprintf(what, sizeof(what), "kernel %.100s", kk->entry);
        rc = cu_fail(rt, cu->p_cuModuleGetFunction(&k->fn[i], k->mod, kk->entry), what, err);
        if (rc < 0 || (rc = check_params(rt, k->fn[i], kk, err)) < 0)
            goto pop;
        int static_smem = 0;
        cu->p_cuFuncGetAttribute(&static_smem, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, k->fn[i]);
        if ((int64_t)static_smem + kk->smem_bytes > dv->smem_optin) {
            rc = rt_fail(err, -E2BIG,
                         "kernel %s needs %d + %u bytes of shared memory; %s allows %d per block",
                         kk->entry, static_smem, kk->smem_bytes, dv->fp.name, dv->smem_optin);
            goto pop;
        }
        /* the default cap on dynamic shared memory is the 48 KiB less the static */
        if ((int64_t)static_smem + kk->smem_bytes > RT_SMEM_DEFAULT &&
            (rc = cu_fail(rt,
                          cu->p_cuFuncSetAttribute(k->fn[i],
                                                   CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                                   (int)kk->smem_bytes),
                          what, err)) < 0)
            goto pop;
    }
pop:;
    CUcontext popped = NULL;
    cu->p_cuCtxPopCurrent(&popped);
    return rc;
}
#endif /* KTUNE_HAVE_NVRTC */

/* ---- the runtime ---- */

/* The structural check at open (cache_check, docs/operations.md "A damaged cache"): LMDB trusts
 * its pages, so a damaged B-tree page would crash the user's process on a later lookup. Each
 * version of a cache file (device, inode, size and modification time of data.mdb: a file restored
 * or written since is checked again) is checked once per process, by a spawned ktune-cache-check
 * (no fork of this process: PyTorch's threads and gigabytes stay out of it); only sound results
 * are remembered. RT_CHECK_ENV=0 turns it off for processes that must not start a process. */
#define RT_CHECK_ENV "KTUNE_CACHE_CHECK"
#define RT_CHECK_MAX 16 /* cache files remembered as checked */

static pthread_mutex_t rt_checked_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    dev_t dev;
    ino_t ino;
    off_t size;
    struct timespec mtime;
} rt_checked[RT_CHECK_MAX];
static int rt_n_checked;

static int rt_check_cache(const char *dir, ktune_error *err)
{
    const char *off = getenv(RT_CHECK_ENV);
    if (off && strcmp(off, "0") == 0)
        return 0;
    char path[4200];
    struct stat sb;
    if (snprintf(path, sizeof(path), "%s/data.mdb", dir) >= (int)sizeof(path) ||
        stat(path, &sb) < 0)
        return 0; /* cache_open says what is wrong */
    pthread_mutex_lock(&rt_checked_lock);
    for (int i = 0; i < rt_n_checked; i++) {
        if (rt_checked[i].dev == sb.st_dev && rt_checked[i].ino == sb.st_ino &&
            rt_checked[i].size == sb.st_size && rt_checked[i].mtime.tv_sec == sb.st_mtim.tv_sec &&
            rt_checked[i].mtime.tv_nsec == sb.st_mtim.tv_nsec) {
            pthread_mutex_unlock(&rt_checked_lock);
            return 0;
        }
    }
    cache_check_report rep;
    kt_err e = {0};
    int rc = cache_check(dir, CACHE_CHECK_READER, 0, &rep, &e);
    if (rc < 0) {
        /* no verdict (cannot fork, out of time): serve as before the check existed, say so */
        kt_log_warn(RT_LOG, "cache %s opened unchecked: %s", dir, e.msg);
    } else if (rep.verdict == CACHE_CHECK_DAMAGED_STRUCTURE) {
        pthread_mutex_unlock(&rt_checked_lock);
        return rt_fail(err, -EBADMSG,
                       "cache %.120s is damaged (%.150s): not opened; run `ktune cache check "
                       "--cache %.120s`, then restore or rebuild it (docs/operations.md)",
                       dir, rep.what, dir);
    } else {
        /* remembered as checked; the oldest entry makes room */
        if (rt_n_checked == RT_CHECK_MAX) {
            memmove(&rt_checked[0], &rt_checked[1], sizeof(rt_checked[0]) * (RT_CHECK_MAX - 1));
            rt_n_checked--;
        }
        int slot = rt_n_checked++;
        rt_checked[slot].dev = sb.st_dev;
        rt_checked[slot].ino = sb.st_ino;
        rt_checked[slot].size = sb.st_size;
        rt_checked[slot].mtime = sb.st_mtim;
    }
    pthread_mutex_unlock(&rt_checked_lock);
    return 0;
}

KTUNE_EXPORT int ktune_runtime_open(const char *cache_dir, ktune_runtime **out, ktune_error *err)
{
    if (!out)
        return rt_fail(err, -EINVAL, "ktune_runtime_open: out is NULL");
    *out = NULL;
    const char *dir = cache_dir;
    if (!dir || !dir[0])
        dir = getenv(RT_CACHE_ENV);
    if (!dir || !dir[0])
        dir = RT_CACHE_DIR;
    int rc = rt_check_cache(dir, err);
    if (rc < 0)
        return rc;
    ktune_runtime *rt = calloc(1, sizeof(*rt));
    if (!rt)
        return rt_fail(err, -ENOMEM, "out of memory opening the runtime");
    kt_err e = {0};
    rc = cache_open(dir, CACHE_RDONLY, NULL, &rt->cache, &e);
    if (rc < 0) {
        free(rt);
        return rt_fail(err, rc, "%s", e.msg);
    }
    pthread_rwlock_init(&rt->lock, NULL);
    pthread_mutex_init(&rt->cold_lock, NULL);
    pthread_mutex_init(&rt->cu_lock, NULL);
    atomic_init(&rt->cu_state, 0);
    for (int i = 0; i < RT_MAX_DEVICES; i++) {
        atomic_init(&rt->dev[i].fp_ready, false);
        atomic_init(&rt->dev[i].primary_ready, false);
    }
    *out = rt;
    rt_ok(err);
    return 0;
}

KTUNE_EXPORT void ktune_runtime_close(ktune_runtime *rt)
{
    if (!rt)
        return;
    for (size_t i = 0; i < rt->n_buckets; i++) {
        for (ktune_kernel *k = rt->buckets[i], *next; k; k = next) {
            next = k->next;
            kernel_free(k);
        }
    }
    free(rt->buckets);
    free(rt->gpus);
#if KTUNE_HAVE_NVRTC
    for (rt_lt_ctx *l = rt->lts, *next; l; l = next) {
        next = l->next;
        CUcontext popped = NULL;
        bool pushed = rt->cu.p_cuCtxPushCurrent(l->ctx) == CUDA_SUCCESS;
        srch_lt_close(l->lt);
        if (pushed)
            rt->cu.p_cuCtxPopCurrent(&popped);
        free(l);
    }
    for (int d = 0; d < RT_MAX_DEVICES; d++)
        if (atomic_load(&rt->dev[d].primary_ready))
            rt->cu.p_cuDevicePrimaryCtxRelease((CUdevice)d);
            /* libcuda stays loaded: contexts of the application (PyTorch's) may still use it. */
#endif
    cache_close(rt->cache);
    pthread_rwlock_destroy(&rt->lock);
    pthread_mutex_destroy(&rt->cold_lock);
    pthread_mutex_destroy(&rt->cu_lock);
    free(rt);
}

cache_env *ktune_rt_cache(ktune_runtime *rt)
{
    return rt->cache;
}

int ktune_rt_fingerprint(ktune_runtime *rt, int device, cache_gpu *out, ktune_error *err)
{
    if (!rt || !out)
        return rt_fail(err, -EINVAL, "ktune_rt_fingerprint: bad arguments");
    int rc = driver_load(rt, err);
    if (rc < 0)
        return rc;
#if KTUNE_HAVE_NVRTC
    rt_device *dv = NULL;
    if ((rc = device_info(rt, (CUdevice)(device < 0 ? 0 : device), &dv, err)) < 0)
        return rc;
    *out = dv->fp;
    return 0;
#else
    (void)device;
    return rt_fail(err, -ENODEV, "libktune was built without the CUDA toolkit");
#endif
}

/* The hot path's key, or the resolved kernel when memoised. */
int ktune_rt_resolve(ktune_runtime *rt, const ktune_graph *g, const ktune_shape *shapes,
                     int n_shapes, const char *precision, double tolerance, const cache_gpu *fp,
                     int device, unsigned flags, ktune_kernel **out, ktune_match *match,
                     ktune_error *err)
{
    if (!rt || !g || !g->g || !out)
        return rt_fail(err, -EINVAL, "ktune_rt_resolve: bad arguments");
    *out = NULL;
    cache_gpu here;
    if (!fp) {
        int rc = ktune_rt_fingerprint(rt, device, &here, err);
        if (rc < 0)
            return rc;
        fp = &here;
    }
    cache_key key;
    int rc = make_key(g->sig, shapes, n_shapes, precision, tolerance, fp, &key, err);
    if (rc < 0)
        return rc;
    uint8_t kb[RT_MEMO_KEY_MAX];
    size_t klen = memo_key(&key, g, kb);
    bool memo = !(flags & KTUNE_RT_NO_MEMO);
    uint64_t h = memo_hash(NULL, kb, klen);
    ktune_kernel *k = memo ? memo_get(rt, h, NULL, kb, klen) : NULL;
    if (k)
        goto done;
    pthread_mutex_lock(&rt->cold_lock);
    if (memo && (k = memo_get(rt, h, NULL, kb, klen))) {
        pthread_mutex_unlock(&rt->cold_lock);
        goto done;
    }
    if (!(k = kernel_new(rt))) {
        rc = rt_fail(err, -ENOMEM, "out of memory");
        goto cold_out;
    }
    memcpy(k->key, kb, klen);
    k->klen = klen;
    k->hash = h;
    if ((rc = resolve_cold(rt, g->g, &key, shapes, n_shapes, k, NULL, err)) < 0)
        goto cold_out;
    if (memo) {
        pthread_rwlock_wrlock(&rt->lock);
        rc = memo_insert(rt, k);
        pthread_rwlock_unlock(&rt->lock);
        if (rc < 0) {
            rc = rt_fail(err, rc, "out of memory");
            goto cold_out;
        }
    }
cold_out:
    pthread_mutex_unlock(&rt->cold_lock);
    if (rc < 0) {
        kernel_free(k);
        return rc;
    }
done:
    *out = k;
    if (match)
        *match = k->match;
    rt_ok(err);
    return 0;
}

void ktune_rt_kernel_free(ktune_kernel *k)
{
    kernel_free(k);
}

const cache_record *ktune_rt_kernel_record(const ktune_kernel *k)
{
    return &k->rec;
}

KTUNE_EXPORT int ktune_lookup(ktune_runtime *rt, const ktune_graph *g, const ktune_shape *shapes,
                              int n_shapes, const char *precision, int device, ktune_kernel **out,
                              ktune_match *match, ktune_error *err)
{
    return ktune_lookup_within(rt, g, shapes, n_shapes, precision, 0, device, out, match, err);
}

KTUNE_EXPORT int ktune_lookup_within(ktune_runtime *rt, const ktune_graph *g,
                                     const ktune_shape *shapes, int n_shapes, const char *precision,
                                     double tolerance, int device, ktune_kernel **out,
                                     ktune_match *match, ktune_error *err)
{
    if (!rt || !g || !g->g || !out)
        return rt_fail(err, -EINVAL, "ktune_lookup: %s is NULL",
                       !rt           ? "the runtime"
                       : !g || !g->g ? "the graph"
                                     : "out");
    *out = NULL;
    if (device < -1)
        return rt_fail(err, -EINVAL, "ktune_lookup: device %d (-1: the current one)", device);
    int rc = driver_load(rt, NULL);
    if (rc < 0)
        return rt_fail(err, rc, "ktune_lookup: %s", rt->cu_err.msg);
#if KTUNE_HAVE_NVRTC
    CUcontext ctx = NULL;
    CUdevice dev = 0;
    rt_device *dv = NULL;
    if ((rc = pick_context(rt, device, &ctx, &dev, err)) < 0 ||
        (rc = device_info(rt, dev, &dv, err)) < 0)
        return rc;
    cache_key key;
    if ((rc = make_key(g->sig, shapes, n_shapes, precision, tolerance, &dv->fp, &key, err)) < 0)
        return rc;
    uint8_t kb[RT_MEMO_KEY_MAX];
    size_t klen = memo_key(&key, g, kb);
    uint64_t h = memo_hash(ctx, kb, klen);
    ktune_kernel *k = memo_get(rt, h, ctx, kb, klen);
    if (k)
        goto done;

    pthread_mutex_lock(&rt->cold_lock);
    if ((k = memo_get(rt, h, ctx, kb, klen))) {
        pthread_mutex_unlock(&rt->cold_lock);
        goto done;
    }
    ops_graph *bound = NULL;
    if (!(k = kernel_new(rt))) {
        rc = rt_fail(err, -ENOMEM, "out of memory");
        goto cold_out;
    }
    memcpy(k->key, kb, klen);
    k->klen = klen;
    k->hash = h;
    if ((rc = resolve_cold(rt, g->g, &key, shapes, n_shapes, k, &bound, err)) < 0 ||
        (rc = kernel_load(rt, k, ctx, dev, bound, err)) < 0)
        goto cold_out;
    pthread_rwlock_wrlock(&rt->lock);
    rc = memo_insert(rt, k);
    pthread_rwlock_unlock(&rt->lock);
    if (rc < 0)
        rc = rt_fail(err, rc, "out of memory");
    else
        kt_log_debug(RT_LOG, "%s: %s %s loaded (%s match)", g->name, k->rec.family, k->rec.schedule,
                     k->match == KTUNE_MATCH_EXACT ? "exact" : "compatible");
cold_out:
    pthread_mutex_unlock(&rt->cold_lock);
    ops_graph_free(bound);
    if (rc < 0) {
        kernel_free(k);
        return rc;
    }
done:
    *out = k;
    if (match)
        *match = k->match;
    rt_ok(err);
    return 0;
#else
    (void)shapes;
    (void)n_shapes;
    (void)precision;
    (void)tolerance;
    (void)match;
    return rt_fail(err, -ENODEV, "ktune_lookup: libktune was built without the CUDA toolkit");
#endif
}

KTUNE_EXPORT void ktune_kernel_get_info(const ktune_kernel *k, ktune_kernel_info *out)
{
    if (!out)
        return;
    memset(out, 0, sizeof(*out));
    if (!k)
        return;
    const cache_record *r = &k->rec;
    out->match = k->match;
    out->family = r->family ? r->family : "";
    out->schedule = r->schedule ? r->schedule : "";
    out->source = r->source ? r->source : "";
    out->time_ns = r->time_ns;
    out->err_norm = r->err_norm;
    out->tolerance = r->tolerance;
    out->cublaslt_ns = r->cublaslt_ns;
    out->workspace_bytes = r->workspace_bytes;
    out->n_launches = r->n_kernels;
    out->n_inputs = k->n_in;
    out->n_outputs = k->n_out;
    snprintf(out->gpu, sizeof(out->gpu), "%s", r->key.gpu.name);
    out->driver_version = r->key.gpu.driver_version;
    out->cuda_version = r->key.gpu.cuda_version;
}

KTUNE_EXPORT uint64_t ktune_kernel_workspace_size(const ktune_kernel *k)
{
    return k ? k->rec.workspace_bytes : 0;
}

/* Records ask for no layout yet (a record that does is refused at lookup), so no input is ever
 * packed: the tensor is passed as it is. `input` is a declared index; a record's layouts name
 * canonical ones, so supporting them means mapping through io_of_rank here. */
KTUNE_EXPORT uint64_t ktune_prepack_size(const ktune_kernel *k, int input)
{
    (void)k;
    (void)input;
    return 0;
}

KTUNE_EXPORT int ktune_prepack(ktune_kernel *k, int input, const void *src, void *dst, void *stream,
                               ktune_error *err)
{
    (void)src;
    (void)dst;
    (void)stream;
    if (!k)
        return rt_fail(err, -EINVAL, "ktune_prepack: kernel is NULL");
    if (input < 0 || input >= k->n_in)
        return rt_fail(err, -EINVAL, "ktune_prepack: input %d out of range (the graph has %d)",
                       input, k->n_in);
    return rt_fail(err, -EINVAL,
                   "ktune_prepack: input %d needs no packing (ktune_prepack_size is 0: pass the "
                   "tensor as it is)",
                   input);
}

/* The one place a caller's buffer becomes a record's argument: the record names input and
 * output ranks, the caller's arrays are in declared order. */
static uint64_t arg_pointer(const ktune_kernel *k, const cache_arg *a, void *const *inputs,
                            void *const *outputs, void *workspace)
{
    switch (a->kind) {
    case CACHE_ARG_INPUT:
        return (uint64_t)(uintptr_t)inputs[k->io_of_rank[a->index]];
    case CACHE_ARG_OUTPUT:
        return (uint64_t)(uintptr_t)outputs[k->io_of_rank[k->n_in + a->index]];
    case CACHE_ARG_WORKSPACE:
        return (uint64_t)(uintptr_t)workspace + a->offset;
    default:
        return 0;
    }
}

void ktune_rt_launch_params(const ktune_kernel *k, int launch, void *const *inputs,
                            void *const *outputs, void *workspace, ktune_rt_param *val)
{
    const cache_kernel *kk = &k->rec.kernels[launch];
    for (int j = 0; j < kk->n_args; j++) {
        const cache_arg *a = &kk->args[j];
        if (a->kind != CACHE_ARG_SCALAR)
            val[j].ptr = arg_pointer(k, a, inputs, outputs, workspace);
        else if (a->scalar == CACHE_SCALAR_I32)
            val[j].i32 = (int32_t)a->ival;
        else if (a->scalar == CACHE_SCALAR_I64)
            val[j].i64 = a->ival;
        else if (a->scalar == CACHE_SCALAR_F32)
            val[j].f32 = (float)a->fval;
        else
            val[j].f64 = a->fval;
    }
}

#if KTUNE_HAVE_NVRTC
static int launch_library(ktune_runtime *rt, ktune_kernel *k, void *const *inputs,
                          void *const *outputs, void *workspace, CUstream stream, ktune_error *err)
{
    ktune_rt_param v[4] = {{0}}; /* 3 or 4 pointers (check_record) */
    ktune_rt_launch_params(k, 0, inputs, outputs, workspace, v);
    kt_err e = {0};
    pthread_mutex_lock(&k->plan_lock);
    int rc = srch_lt_run_on(k->plan, stream, v[0].ptr, v[1].ptr, v[2].ptr, v[3].ptr,
                            (CUdeviceptr)(uintptr_t)workspace, &e);
    pthread_mutex_unlock(&k->plan_lock);
    (void)rt;
    return rc < 0 ? rt_fail(err, rc, "ktune_launch (%s): %s", k->rec.schedule, e.msg) : 0;
}
#endif

KTUNE_EXPORT int ktune_launch(ktune_kernel *k, void *const *inputs, void *const *outputs,
                              void *workspace, void *stream, ktune_error *err)
{
    if (!k)
        return rt_fail(err, -EINVAL, "ktune_launch: kernel is NULL");
    if ((k->n_in && !inputs) || (k->n_out && !outputs))
        return rt_fail(err, -EINVAL, "ktune_launch: %s array is NULL",
                       k->n_in && !inputs ? "the inputs" : "the outputs");
    for (int i = 0; i < k->n_in; i++)
        if (!inputs[i])
            return rt_fail(err, -EINVAL,
                           "ktune_launch: input %d '%s' is NULL (inputs go in the graph's declared "
                           "order)",
                           i, k->io_names[i]);
    for (int i = 0; i < k->n_out; i++)
        if (!outputs[i])
            return rt_fail(err, -EINVAL, "ktune_launch: output %d '%s' is NULL", i,
                           k->io_names[k->n_in + i]);
    if (k->rec.workspace_bytes && !workspace)
        return rt_fail(err, -EINVAL,
                       "ktune_launch: the kernel needs %" PRIu64
                       " bytes of workspace (ktune_kernel_workspace_size)",
                       k->rec.workspace_bytes);
    kt_err why; /* filled only on failure: this is the per-call hot path */
    if (ktune_rt_check_aliasing(inputs, k->io_bytes, k->n_in, outputs, k->io_bytes + k->n_in,
                                k->n_out, workspace, k->rec.workspace_bytes,
                                (const char *const *)k->io_names, &why) < 0)
        return rt_fail(err, -EINVAL, "ktune_launch: %s", why.msg);
    if (!k->ctx)
        return rt_fail(err, -ENODEV,
                       "ktune_launch: kernel was resolved, not loaded (use "
                       "ktune_lookup)");
#if KTUNE_HAVE_NVRTC
    ktune_runtime *rt = k->rt;
    srch_cuda *cu = &rt->cu;
    const cache_record *r = &k->rec;
    CUstream s = (CUstream)stream;
    CUcontext cur = NULL, popped = NULL;
    int rc = cu_fail(rt, cu->p_cuCtxGetCurrent(&cur), "cuCtxGetCurrent", err);
    if (rc < 0)
        return rc;
    bool pushed = cur != k->ctx;
    if (pushed && (rc = cu_fail(rt, cu->p_cuCtxPushCurrent(k->ctx), "cuCtxPushCurrent", err)) < 0)
        return rc;
    if (k->library) {
        rc = launch_library(rt, k, inputs, outputs, workspace, s, err);
        goto out;
    }
    ktune_rt_param val[CACHE_MAX_ARGS];
    void *params[CACHE_MAX_ARGS];
    CUtensorMap tm[CACHE_MAX_TMAPS];
    for (int i = 0; i < r->n_kernels && rc == 0; i++) {
        const cache_kernel *kk = &r->kernels[i];
        char what[160]; /* formatted only on failure: this is the per-call hot path */
        if (kk->zero_bytes) {
            CUresult cr = cu->p_cuMemsetD8Async((CUdeviceptr)(uintptr_t)workspace + kk->zero_offset,
                                                0, (size_t)kk->zero_bytes, s);
            if (cr != CUDA_SUCCESS) {
                snprintf(what, sizeof(what), "ktune_launch: clearing the workspace of %.100s",
                         kk->entry);
                rc = cu_fail(rt, cr, what, err);
                break;
            }
        }
        ktune_rt_launch_params(k, i, inputs, outputs, workspace, val);
        int n_tm = 0;
        for (int j = 0; j < kk->n_args && rc == 0; j++) {
            params[j] = &val[j];
            if (!kk->args[j].has_tmap)
                continue;
            /* the map over the caller's buffer, encoded now: its address is known only here
             * (at most CACHE_MAX_TMAPS per kernel, checked when the record decoded) */
            kt_err te;
            int trc = srch_cuda_encode_tmap(cu, &kk->args[j].tmap, val[j].ptr, &tm[n_tm], kk->entry,
                                            j, &te);
            if (trc < 0) {
                rc = rt_fail(err, trc, "ktune_launch: %s", te.msg);
                break;
            }
            params[j] = &tm[n_tm++];
        }
        if (rc < 0)
            break;
        CUresult cr = cu->p_cuLaunchKernel(k->fn[i], kk->grid[0], kk->grid[1], kk->grid[2],
                                           kk->block[0], kk->block[1], kk->block[2], kk->smem_bytes,
                                           s, kk->n_args ? params : NULL, NULL);
        if (cr != CUDA_SUCCESS) {
            snprintf(what, sizeof(what), "ktune_launch: kernel %.100s", kk->entry);
            rc = cu_fail(rt, cr, what, err);
        }
    }
out:
    if (pushed)
        cu->p_cuCtxPopCurrent(&popped);
    if (rc == 0)
        rt_ok(err);
    return rc;
#else
    (void)stream;
    return rt_fail(err, -ENODEV, "ktune_launch: libktune was built without the CUDA toolkit");
#endif
}
