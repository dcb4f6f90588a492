/* Cache keys: the GPU id and the byte encoding of (GPU, signature, precision, problem digest,
 * tolerance).
 * The layout is in docs/formats.md (part 3), "Key encoding". */
#include "internal.h"
#include "ops/ops.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

static size_t put_be(uint8_t *p, uint64_t v, int bytes)
{
    for (int i = 0; i < bytes; i++)
        p[i] = (uint8_t)(v >> (8 * (bytes - 1 - i)));
    return (size_t)bytes;
}

void cache_gpu_id(const cache_gpu *gpu, uint8_t id[CACHE_GPU_ID_BYTES])
{
    uint8_t buf[2 + CACHE_GPU_NAME_MAX + 4 * 5 + 8];
    size_t n = strnlen(gpu->name, sizeof(gpu->name) - 1), off = 0;
    off += put_be(buf + off, n, 2);
    memcpy(buf + off, gpu->name, n);
    off += n;
    off += put_be(buf + off, (uint32_t)gpu->sm_major, 4);
    off += put_be(buf + off, (uint32_t)gpu->sm_minor, 4);
    off += put_be(buf + off, (uint32_t)gpu->sm_count, 4);
    off += put_be(buf + off, gpu->mem_bytes, 8);
    off += put_be(buf + off, (uint32_t)gpu->driver_version, 4);
    off += put_be(buf + off, (uint32_t)gpu->cuda_version, 4);
    uint8_t digest[32];
    ops_sha256(buf, off, digest);
    memcpy(id, digest, CACHE_GPU_ID_BYTES);
}

static bool sym_name_ok(const char *s)
{
    size_t n = strnlen(s, CACHE_SYM_NAME_MAX);
    if (n == 0 || n == CACHE_SYM_NAME_MAX)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_'))
            return false;
    }
    return true;
}

int cache_key_sorted(const cache_key *k, cache_bound sorted[CACHE_MAX_SHAPES], kt_err *err)
{
    if (k->n_shapes < 0 || k->n_shapes > CACHE_MAX_SHAPES)
        return kt_err_set(err, -EINVAL, "key: %d bound shapes (at most %d)", k->n_shapes,
                          CACHE_MAX_SHAPES);
    if ((unsigned)k->precision > OPS_PREC_REDUCED)
        return kt_err_set(err, -EINVAL, "key: bad precision %d", (int)k->precision);
    for (int i = 0; i < k->n_shapes; i++) {
        const cache_bound *b = &k->shapes[i];
        if (!sym_name_ok(b->name))
            return kt_err_set(err, -EINVAL,
                              "key: shape %d: symbol name must be 1..%d of [A-Za-z0-9_]", i,
                              CACHE_SYM_NAME_MAX - 1);
        if (b->value < 1)
            return kt_err_set(err, -EINVAL, "key: shape %s=%" PRId64 ": value must be >= 1",
                              b->name, b->value);
        /* insertion sort: at most CACHE_MAX_SHAPES entries */
        int j = i;
        while (j > 0 && strcmp(sorted[j - 1].name, b->name) > 0) {
            sorted[j] = sorted[j - 1];
            j--;
        }
        if (j > 0 && strcmp(sorted[j - 1].name, b->name) == 0)
            return kt_err_set(err, -EINVAL, "key: symbol %s bound twice", b->name);
        sorted[j] = *b;
    }
    return 0;
}

int cache_key_encode(const cache_key *k, uint8_t *buf, size_t cap, size_t *len, kt_err *err)
{
    cache_bound sorted[CACHE_MAX_SHAPES] = {0};
    int rc = cache_key_sorted(k, sorted, err);
    if (rc < 0)
        return rc;
    if (!(k->tolerance >= 0) || isinf(k->tolerance))
        return kt_err_set(err, -EINVAL, "key: tolerance %g is not a finite value >= 0",
                          k->tolerance);
    if (cap < CACHE_KEY_FIXED)
        return kt_err_set(err, -EINVAL, "key: buffer too small");
    /* The shapes are not part of the bytes: the problem digest identifies the bound problem
     * whatever the symbols are called (their names differ between equal problems). */
    size_t off = 0;
    buf[off++] = CACHE_KEY_VERSION;
    cache_gpu_id(&k->gpu, buf + off);
    off += CACHE_GPU_ID_BYTES;
    memcpy(buf + off, k->sig, OPS_SIG_BYTES);
    off += OPS_SIG_BYTES;
    buf[off++] = (uint8_t)k->precision;
    memcpy(buf + off, k->problem, OPS_SIG_BYTES);
    off += OPS_SIG_BYTES;
    uint64_t bits;
    double tol = k->tolerance; /* 0 (the default) has one encoding: never -0 */
    memcpy(&bits, &tol, sizeof(bits));
    off += put_be(buf + off, tol == 0 ? 0 : bits, 8);
    *len = off;
    return 0;
}

void cache_key_prefix(const cache_key *k, cache_prefix level, uint8_t *buf, size_t *len)
{
    size_t off = 0;
    buf[off++] = CACHE_KEY_VERSION;
    cache_gpu_id(&k->gpu, buf + off);
    off += CACHE_GPU_ID_BYTES;
    if (level >= CACHE_PREFIX_SIGNATURE) {
        memcpy(buf + off, k->sig, OPS_SIG_BYTES);
        off += OPS_SIG_BYTES;
    }
    if (level >= CACHE_PREFIX_PRECISION)
        buf[off++] = (uint8_t)k->precision;
    *len = off;
}

void cache_key_describe(const uint8_t *key, size_t len, bool has_rank, char *out, size_t cap)
{
    size_t klen = has_rank && len > 0 ? len - 1 : len;
    if (klen != CACHE_KEY_FIXED || key[0] != CACHE_KEY_VERSION) {
        char hex[2 * 24 + 1];
        kt_hex(key, len < 24 ? len : 24, hex);
        snprintf(out, cap, "raw=%s%s", hex, len > 24 ? "..." : "");
        return;
    }
    char gpu[9], sig[13];
    kt_hex(key + 1, 4, gpu);
    kt_hex(key + 1 + CACHE_GPU_ID_BYTES, 6, sig);
    size_t at = 1 + CACHE_GPU_ID_BYTES + OPS_SIG_BYTES;
    uint8_t p = key[at];
    const char *prec = p <= OPS_PREC_REDUCED ? ops_precision_name((ops_precision)p) : "?";
    char problem[13];
    kt_hex(key + at + 1, 6, problem);
    uint64_t bits = 0;
    for (int i = 0; i < 8; i++)
        bits = bits << 8 | key[at + 1 + OPS_SIG_BYTES + i];
    double tol;
    memcpy(&tol, &bits, sizeof(tol));
    int n = tol == 0 ? snprintf(out, cap, "gpu=%s sig=%s prec=%s problem=%s tol=default", gpu, sig,
                                prec, problem)
                     : snprintf(out, cap, "gpu=%s sig=%s prec=%s problem=%s tol=%g", gpu, sig, prec,
                                problem, tol);
    if (has_rank && len > 0 && n >= 0 && (size_t)n < cap)
        snprintf(out + n, cap - (size_t)n, " rank=%u", key[len - 1]);
}

int cache_record_matches_key(const cache_record *r, const uint8_t *key, size_t klen, kt_err *err)
{
    uint8_t mine[CACHE_KEY_MAX];
    size_t mlen = 0;
    if (cache_key_encode(&r->key, mine, sizeof(mine), &mlen, NULL) < 0 || mlen != klen ||
        memcmp(mine, key, klen) != 0) {
        char d[256];
        cache_key_describe(key, klen, false, d, sizeof(d));
        return kt_err_set(err, -EBADMSG, "record stored under %s does not belong to that key", d);
    }
    return 0;
}
