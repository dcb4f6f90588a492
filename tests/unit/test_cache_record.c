/* Kernel records and trial entries: stored form round trips, checksum, validation; key encoding. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <math.h>

#include "test_cache_util.h"

#include "cache/internal.h"

static void test_record_roundtrip_every_field(void **state)
{
    (void)state;
    cache_key k;
    test_key(&k, "NVIDIA H100 80GB HBM3", 0x11, 1024);
    k.precision = OPS_PREC_TF32;
    cache_record r, d;
    test_record(&r, &k, "tile=128x128x32 stages=3", 4321.5, 3000, 7);
    r.timing = CACHE_TIMING_HOT;
    r.kernels[1].args[5].scalar = CACHE_SCALAR_F64;
    r.kernels[1].args[5].fval = -2.5e-300;
    r.kernels[1].args[4].scalar = CACHE_SCALAR_I32;
    r.kernels[1].args[4].ival = -7;
    uint8_t *buf = NULL, *buf2 = NULL;
    size_t len = 0, len2 = 0;
    assert_int_equal(cache_record_encode(&r, &buf, &len, NULL), 0);
    assert_true(cache_value_check(buf, len));
    cache_record_init(&d);
    kt_err err = {0};
    assert_int_equal(cache_record_decode(buf, len, &d, &err), 0);
    assert_record_equal(&r, &d);
    /* canonical: re-encoding the decoded record gives the same bytes */
    assert_int_equal(cache_record_encode(&d, &buf2, &len2, NULL), 0);
    assert_int_equal(len, len2);
    assert_memory_equal(buf, buf2, len);
    free(buf);
    free(buf2);
    cache_record_free(&r);
    cache_record_free(&d);
}

static void test_record_shapes_sorted_and_version_default(void **state)
{
    (void)state;
    cache_key k;
    test_key(&k, "gpu", 0x22, 64); /* shapes given as N, M */
    cache_record r, d;
    test_record(&r, &k, "s", 10, 16, 1);
    free(r.ktune_version);
    r.ktune_version = NULL; /* encodes the running build's version */
    uint8_t *buf = NULL;
    size_t len = 0;
    assert_int_equal(cache_record_encode(&r, &buf, &len, NULL), 0);
    cache_record_init(&d);
    assert_int_equal(cache_record_decode(buf, len, &d, NULL), 0);
    assert_string_equal(d.key.shapes[0].name, "M");
    assert_string_equal(d.key.shapes[1].name, "N");
    assert_non_null(d.ktune_version);
    assert_true(strlen(d.ktune_version) > 0);
    free(buf);
    cache_record_free(&r);
    cache_record_free(&d);
}

static void test_record_checksum_detects_every_flip(void **state)
{
    (void)state;
    cache_key k;
    test_key(&k, "gpu", 0x33, 8);
    cache_record r, d;
    test_record(&r, &k, "s", 10, 64, 2);
    uint8_t *buf = NULL;
    size_t len = 0;
    assert_int_equal(cache_record_encode(&r, &buf, &len, NULL), 0);
    cache_record_init(&d);
    for (size_t i = 0; i < len; i++) {
        buf[i] ^= 0x04;
        kt_err err = {0};
        assert_int_equal(cache_record_decode(buf, len, &d, &err), -EBADMSG);
        assert_int_equal(err.code, -EBADMSG);
        assert_false(cache_value_check(buf, len));
        buf[i] ^= 0x04;
    }
    /* truncated values */
    assert_int_equal(cache_record_decode(buf, len - 1, &d, NULL), -EBADMSG);
    assert_int_equal(cache_record_decode(buf, 10, &d, NULL), -EBADMSG);
    assert_int_equal(cache_record_decode(buf, 0, &d, NULL), -EBADMSG);
    assert_int_equal(cache_record_decode(buf, len, &d, NULL), 0);
    free(buf);
    cache_record_free(&r);
    cache_record_free(&d);
}

static void test_record_bad_body_with_good_checksum(void **state)
{
    (void)state;
    /* a well-formed checksum over a body that is not a record */
    const uint8_t body[] = {0x81, 0xa1, 'v', 0x63}; /* {"v": 99} */
    uint8_t val[sizeof(body) + CACHE_CHECKSUM_BYTES];
    memcpy(val, body, sizeof(body));
    ops_sha256(body, sizeof(body), val + sizeof(body));
    cache_record d;
    cache_record_init(&d);
    kt_err err = {0};
    assert_int_equal(cache_record_decode(val, sizeof(val), &d, &err), -EBADMSG);
    assert_non_null(strstr(err.msg, "version 99"));
    const uint8_t notmap[] = {0x93, 1, 2, 3};
    memcpy(val, notmap, sizeof(notmap));
    ops_sha256(notmap, sizeof(notmap), val + sizeof(notmap));
    assert_int_equal(cache_record_decode(val, sizeof(val), &d, NULL), -EBADMSG);
    cache_record_free(&d);
}

static void test_record_encode_validates(void **state)
{
    (void)state;
    cache_key k;
    test_key(&k, "gpu", 0x44, 8);
    cache_record r;
    test_record(&r, &k, "s", 10, 16, 3);
    uint8_t *buf = NULL;
    size_t len = 0;
    kt_err err = {0};
    r.time_ns = NAN;
    assert_int_equal(cache_record_encode(&r, &buf, &len, &err), -EINVAL);
    r.time_ns = 10;
    int nk = r.n_kernels;
    r.n_kernels = 0;
    assert_int_equal(cache_record_encode(&r, &buf, &len, &err), -EINVAL);
    r.n_kernels = nk;
    r.kernels[0].args[0].kind = CACHE_ARG_KIND_COUNT;
    assert_int_equal(cache_record_encode(&r, &buf, &len, &err), -EINVAL);
    r.kernels[0].args[0].kind = CACHE_ARG_INPUT;
    r.key.shapes[0].value = 0;
    assert_int_equal(cache_record_encode(&r, &buf, &len, &err), -EINVAL);
    r.key.shapes[0].value = 1;
    assert_int_equal(cache_record_encode(&r, &buf, &len, &err), 0);
    free(buf);
    cache_record_free(&r);
}

static void encode(const cache_key *k, uint8_t *buf, size_t *len)
{
    kt_err err = {0};
    int rc = cache_key_encode(k, buf, CACHE_KEY_MAX, len, &err);
    if (rc != 0)
        fail_msg("cache_key_encode: %s", err.msg);
}

static bool same(const uint8_t *a, size_t la, const uint8_t *b, size_t lb)
{
    return la == lb && memcmp(a, b, la) == 0;
}

/* A workspace argument names the bytes it may touch, and they lie inside the workspace. */
static void test_record_workspace_ranges(void **state)
{
    (void)state;
    cache_key k;
    test_key(&k, "gpu", 0x46, 8);
    cache_record r;
    test_record(&r, &k, "s", 10, 16, 4); /* argument 3: workspace [4096, +4096) of 1 MiB */
    uint8_t *buf = NULL;
    size_t len = 0;
    kt_err err = {0};
    assert_int_equal(cache_record_encode(&r, &buf, &len, &err), 0);
    free(buf);
    uint64_t bad[][2] = {{4096, 0}, {r.workspace_bytes - 8, 16}, {UINT64_MAX - 8, 16}};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        r.kernels[1].args[3].offset = bad[i][0];
        r.kernels[1].args[3].bytes = bad[i][1];
        assert_int_equal(cache_record_encode(&r, &buf, &len, &err), -EINVAL);
        assert_non_null(strstr(err.msg, "workspace bytes"));
    }
    cache_record_free(&r);
}

/* Every output slot must be written by some launch, or the caller gets uninitialised memory:
 * refused by the encoder, by the decoder (a stored value written by another build) and, with
 * the graph's output count, by cache_record_check_outputs. */
static void test_record_outputs_written(void **state)
{
    (void)state;
    cache_key k;
    test_key(&k, "gpu", 0x45, 8);
    cache_record r, d;
    test_record(&r, &k, "s", 10, 16, 4); /* both kernels write output 0 (argument 2) */
    uint8_t *buf = NULL;
    size_t len = 0;
    kt_err err = {0};
    assert_int_equal(cache_record_check_outputs(&r, 1, &err), 0);
    assert_int_equal(cache_record_check_outputs(&r, 0, &err), -EINVAL);
    /* a graph of two outputs: slot 1 is never written */
    assert_int_equal(cache_record_check_outputs(&r, 2, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "no launch writes output 1 (of 2)"));
    assert_null(strchr(err.msg, '\n'));

    /* slot 0 skipped, slot 1 past the record's one output */
    r.kernels[0].args[2].index = 1;
    r.kernels[1].args[2].index = 1;
    assert_int_equal(cache_record_encode(&r, &buf, &len, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "output 1 of 1"));
    /* a record of two outputs that writes only the second */
    r.n_outputs = 2;
    cache_slot *two = calloc(5, sizeof(*two));
    memcpy(two, r.slots, 4 * sizeof(*two));
    two[4] = two[3];
    free(r.slots);
    r.slots = two;
    assert_int_equal(cache_record_encode(&r, &buf, &len, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "no launch writes output 0 (of 2)"));
    r.n_outputs = 1;
    assert_int_equal(cache_record_check_outputs(&r, 1, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "names output 1; the graph has 1"));
    /* no output at all */
    r.kernels[0].args[2].kind = CACHE_ARG_INPUT;
    r.kernels[1].args[2] = (cache_arg){.kind = CACHE_ARG_WORKSPACE, .offset = 0, .bytes = 64};
    assert_int_equal(cache_record_encode(&r, &buf, &len, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "no launch writes output 0 (of 1)"));
    r.kernels[0].args[2] = (cache_arg){.kind = CACHE_ARG_OUTPUT, .index = -1};
    assert_int_equal(cache_record_encode(&r, &buf, &len, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "output -1 of 1"));

    /* one output written by the second launch only is fine */
    r.kernels[0].args[2] = (cache_arg){.kind = CACHE_ARG_INPUT, .index = 1};
    r.kernels[1].args[2] = (cache_arg){.kind = CACHE_ARG_OUTPUT, .index = 0};
    assert_int_equal(cache_record_encode(&r, &buf, &len, &err), 0);
    /* the stored value edited to name output 1 instead, its checksum made right again: the
     * decoder refuses what the encoder would */
    static const uint8_t out0[] = {0xa6, 'o', 'u', 't', 'p', 'u', 't',
                                   0xa5, 'i', 'n', 'd', 'e', 'x', 0x00};
    size_t body = len - CACHE_CHECKSUM_BYTES, hits = 0;
    for (size_t i = 0; i + sizeof(out0) <= body; i++)
        if (memcmp(buf + i, out0, sizeof(out0)) == 0) {
            buf[i + sizeof(out0) - 1] = 0x01;
            hits++;
        }
    assert_int_equal(hits, 1);
    ops_sha256(buf, body, buf + body);
    cache_record_init(&d);
    assert_int_equal(cache_record_decode(buf, len, &d, &err), -EBADMSG);
    assert_non_null(strstr(err.msg, "output 1 of 1"));
    free(buf);
    cache_record_free(&d);
    cache_record_free(&r);
}

static void test_key_deterministic(void **state)
{
    (void)state;
    cache_key a, b;
    test_key(&a, "NVIDIA H100", 0x55, 1024);
    b = a;
    /* same shapes in the other order */
    b.shapes[0] = a.shapes[1];
    b.shapes[1] = a.shapes[0];
    uint8_t ka[CACHE_KEY_MAX], kb[CACHE_KEY_MAX];
    size_t la = 0, lb = 0;
    encode(&a, ka, &la);
    encode(&b, kb, &lb);
    assert_true(same(ka, la, kb, lb));
    /* documented layout: version, gpu id, signature, precision, problem, tolerance */
    assert_int_equal(ka[0], 2);
    uint8_t id[CACHE_GPU_ID_BYTES];
    cache_gpu_id(&a.gpu, id);
    assert_memory_equal(ka + 1, id, CACHE_GPU_ID_BYTES);
    assert_memory_equal(ka + 1 + CACHE_GPU_ID_BYTES, a.sig, OPS_SIG_BYTES);
    size_t at = 1 + CACHE_GPU_ID_BYTES + OPS_SIG_BYTES;
    assert_int_equal(ka[at], OPS_PREC_EXACT);
    assert_memory_equal(ka + at + 1, a.problem, OPS_SIG_BYTES);
    const uint8_t zero[8] = {0};
    assert_int_equal(la, at + 1 + OPS_SIG_BYTES + 8);
    assert_memory_equal(ka + at + 1 + OPS_SIG_BYTES, zero, 8); /* the default tolerance */
    /* a tolerance of its own: its IEEE-754 bits, big-endian; -0 is the default */
    b.tolerance = 1e-3;
    encode(&b, kb, &lb);
    uint64_t bits;
    double tol = 1e-3;
    memcpy(&bits, &tol, sizeof(bits));
    for (int i = 0; i < 8; i++)
        assert_int_equal(kb[at + 1 + OPS_SIG_BYTES + i], (uint8_t)(bits >> (56 - 8 * i)));
    b.tolerance = -0.0;
    encode(&b, kb, &lb);
    assert_true(same(ka, la, kb, lb));
}

static void test_key_distinct(void **state)
{
    (void)state;
    cache_key base;
    test_key(&base, "NVIDIA H100", 0x66, 1024);
    uint8_t kb[CACHE_KEY_MAX];
    size_t lb = 0;
    encode(&base, kb, &lb);
    cache_key v[13];
    for (int i = 0; i < 13; i++)
        v[i] = base;
    snprintf(v[0].gpu.name, sizeof(v[0].gpu.name), "NVIDIA H200");
    v[1].gpu.sm_minor = 1;
    v[2].gpu.sm_count = 114;
    v[3].gpu.mem_bytes += 1;
    v[4].gpu.driver_version = 12050;
    v[5].gpu.cuda_version = 12030;
    v[6].sig[0] ^= 1;
    v[7].precision = OPS_PREC_REDUCED;
    v[8].problem[5] ^= 1;
    v[9].problem[31] ^= 0x80;
    v[10].tolerance = 1e-3;
    v[11].gpu.sm_major = 8;
    v[12].tolerance = 2e-3;
    uint8_t keys[13][CACHE_KEY_MAX];
    size_t lens[13];
    for (int i = 0; i < 13; i++) {
        encode(&v[i], keys[i], &lens[i]);
        assert_false(same(keys[i], lens[i], kb, lb));
        for (int j = 0; j < i; j++)
            assert_false(same(keys[i], lens[i], keys[j], lens[j]));
    }
    /* The shapes are for people: the problem digest stands for them in the key, so the same
     * problem under other symbol names shares it. */
    cache_key renamed = base;
    snprintf(renamed.shapes[1].name, sizeof(renamed.shapes[1].name), "K");
    uint8_t kr[CACHE_KEY_MAX];
    size_t lr = 0;
    encode(&renamed, kr, &lr);
    assert_true(same(kr, lr, kb, lb));
}

static void test_key_prefixes(void **state)
{
    (void)state;
    cache_key k;
    test_key(&k, "NVIDIA H100", 0x77, 4096);
    uint8_t key[CACHE_KEY_MAX], p[CACHE_KEY_MAX];
    size_t kl = 0, pl = 0;
    encode(&k, key, &kl);
    size_t want[] = {1 + CACHE_GPU_ID_BYTES, 1 + CACHE_GPU_ID_BYTES + OPS_SIG_BYTES,
                     2 + CACHE_GPU_ID_BYTES + OPS_SIG_BYTES};
    for (int level = CACHE_PREFIX_GPU; level <= CACHE_PREFIX_PRECISION; level++) {
        cache_key_prefix(&k, (cache_prefix)level, p, &pl);
        assert_int_equal(pl, want[level]);
        assert_memory_equal(p, key, pl);
    }
    /* a different GPU does not share the GPU prefix */
    cache_key o = k;
    o.gpu.sm_count = 1;
    uint8_t ok[CACHE_KEY_MAX];
    size_t ol = 0;
    encode(&o, ok, &ol);
    cache_key_prefix(&k, CACHE_PREFIX_GPU, p, &pl);
    assert_memory_not_equal(p, ok, pl);
}

static void test_key_rejects_bad_parts(void **state)
{
    (void)state;
    cache_key k;
    uint8_t buf[CACHE_KEY_MAX];
    size_t len = 0;
    kt_err err = {0};
    test_key(&k, "g", 1, 8);
    snprintf(k.shapes[1].name, sizeof(k.shapes[1].name), "N");
    assert_int_equal(cache_key_encode(&k, buf, sizeof(buf), &len, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "twice"));
    test_key(&k, "g", 1, 8);
    snprintf(k.shapes[1].name, sizeof(k.shapes[1].name), "M;N");
    assert_int_equal(cache_key_encode(&k, buf, sizeof(buf), &len, NULL), -EINVAL);
    test_key(&k, "g", 1, 0);
    assert_int_equal(cache_key_encode(&k, buf, sizeof(buf), &len, NULL), -EINVAL);
    test_key(&k, "g", 1, 8);
    k.n_shapes = CACHE_MAX_SHAPES + 1;
    assert_int_equal(cache_key_encode(&k, buf, sizeof(buf), &len, NULL), -EINVAL);
    test_key(&k, "g", 1, 8);
    k.precision = (ops_precision)9;
    assert_int_equal(cache_key_encode(&k, buf, sizeof(buf), &len, NULL), -EINVAL);
    /* a tolerance that is negative, NaN or infinite */
    double bad_tol[] = {-1e-3, NAN, INFINITY};
    for (size_t i = 0; i < sizeof(bad_tol) / sizeof(bad_tol[0]); i++) {
        test_key(&k, "g", 1, 8);
        k.tolerance = bad_tol[i];
        assert_int_equal(cache_key_encode(&k, buf, sizeof(buf), &len, &err), -EINVAL);
        assert_non_null(strstr(err.msg, "tolerance"));
    }
    /* 16 long names fit: the shapes are not encoded */
    test_key(&k, "g", 1, 8);
    k.n_shapes = CACHE_MAX_SHAPES;
    for (int i = 0; i < CACHE_MAX_SHAPES; i++) {
        snprintf(k.shapes[i].name, sizeof(k.shapes[i].name), "S%02d_%s", i,
                 "abcdefghijklmnopqrstuvwxyz0123456789");
        k.shapes[i].value = INT64_MAX;
    }
    assert_int_equal(cache_key_encode(&k, buf, sizeof(buf), &len, &err), 0);
    assert_int_equal(len, 2 + CACHE_GPU_ID_BYTES + 2 * OPS_SIG_BYTES + 8);
    /* an empty shape list is fine */
    test_key(&k, "g", 1, 8);
    k.n_shapes = 0;
    assert_int_equal(cache_key_encode(&k, buf, sizeof(buf), &len, NULL), 0);
    assert_int_equal(len, 2 + CACHE_GPU_ID_BYTES + 2 * OPS_SIG_BYTES + 8);
}

static void test_trial_roundtrip(void **state)
{
    (void)state;
    for (int s = 0; s < CACHE_TRIAL_STATUS_COUNT; s++) {
        cache_trial t = {0}, d;
        snprintf(t.cand, sizeof(t.cand), "gemm/tile=64x64/stages=%d", s);
        t.status = (cache_trial_status)s;
        t.time_ns = 1234.25 * s;
        t.error = 1e-5;
        snprintf(t.detail, sizeof(t.detail), "detail %d", s);
        t.ts = 1700000123;
        t.ts_ms = 1700000123456;
        uint8_t *buf = NULL;
        size_t len = 0;
        assert_int_equal(cache_trial_encode(&t, &buf, &len, NULL), 0);
        assert_int_equal(cache_trial_decode(buf, len, &d, NULL), 0);
        assert_memory_equal(&t, &d, sizeof(t));
        cache_trial_status back;
        assert_int_equal(cache_trial_status_from_name(cache_trial_status_name(t.status), &back), 0);
        assert_int_equal(back, t.status);
        buf[len / 2] ^= 0xff;
        assert_int_equal(cache_trial_decode(buf, len, &d, NULL), -EBADMSG);
        free(buf);
    }
    cache_trial_status st;
    assert_int_equal(cache_trial_status_from_name("bogus", &st), -EINVAL);
    assert_string_equal(cache_trial_status_name(CACHE_TRIAL_COMPILE_ERROR), "compile_error");
    cache_trial empty = {0};
    uint8_t *buf = NULL;
    size_t len = 0;
    assert_int_equal(cache_trial_encode(&empty, &buf, &len, NULL), -EINVAL);
    snprintf(empty.cand, sizeof(empty.cand), "c");
    empty.ts_ms = -1;
    assert_int_equal(cache_trial_encode(&empty, &buf, &len, NULL), -EINVAL);
}

/* A trial written before ts_ms existed (7 fields) decodes with ts_ms 0. */
static void test_trial_without_ts_ms(void **state)
{
    (void)state;
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 7);
    assert_int_equal(kt_mp_pack_ku64(&pk, "v", CACHE_TRIAL_VERSION), 0);
    assert_int_equal(kt_mp_pack_kstr(&pk, "cand", "m1 gemm"), 0);
    assert_int_equal(kt_mp_pack_kstr(&pk, "status", "ok"), 0);
    assert_int_equal(kt_mp_pack_kf64(&pk, "time", 1000), 0);
    assert_int_equal(kt_mp_pack_kf64(&pk, "error", 1e-6), 0);
    assert_int_equal(kt_mp_pack_kstr(&pk, "detail", ""), 0);
    assert_int_equal(kt_mp_pack_ki64(&pk, "ts", 1700000123), 0);
    uint8_t *buf = NULL;
    size_t len = 0;
    assert_int_equal(cache_value_finish(&sb, &buf, &len), 0);
    cache_trial d;
    assert_int_equal(cache_trial_decode(buf, len, &d, NULL), 0);
    assert_int_equal(d.ts, 1700000123);
    assert_int_equal(d.ts_ms, 0);
    free(buf);
}

/* The provenance field is optional: absent, a record keeps its bytes; present, it round-trips. */
static void test_record_signer_optional(void **state)
{
    cache_key k;
    test_key(&k, "gpuA", 3, 64);
    cache_record r, back;
    test_record(&r, &k, "s", 100, 64, 1);
    uint8_t *plain = NULL, *signed_ = NULL;
    size_t lp = 0, ls = 0;
    assert_int_equal(cache_record_encode(&r, &plain, &lp, NULL), 0);
    cache_record_init(&back);
    assert_int_equal(cache_record_decode(plain, lp, &back, NULL), 0);
    assert_null(back.signer);
    r.signer = strdup("ed25519:0123456789abcdef");
    assert_int_equal(cache_record_encode(&r, &signed_, &ls, NULL), 0);
    assert_true(ls > lp);
    assert_int_equal(cache_record_decode(signed_, ls, &back, NULL), 0);
    assert_string_equal(back.signer, "ed25519:0123456789abcdef");
    free(plain);
    free(signed_);
    cache_record_free(&r);
    cache_record_free(&back);
}

/* The "v" of a stored record (the first key: a map16 header, "v", a fixint). */
static int stored_version(const uint8_t *buf, size_t len)
{
    assert_true(len > 6 && buf[0] == 0xde && buf[3] == 0xa1 && buf[4] == 'v');
    return buf[5];
}

/* Tensor-map arguments (issue 19): a map over input 0 ([M, 256] f16 in 64 x 16 boxes) and one
 * over the workspace argument round trip, in a record written as version 4; a record without one
 * is still written as version 3, and a version 3 record holding a map is refused (a build that
 * predates maps would have launched it with pointers). The encoder refuses a malformed map, a
 * map on a scalar, one reaching past its slot or workspace range, and too many maps. */
static void test_record_tensor_maps(void **state)
{
    (void)state;
    cache_key k;
    test_key(&k, "gpu", 0x19, 100);
    cache_record r, d;
    test_record(&r, &k, "s", 100, 64, 1);
    uint8_t *buf = NULL, *buf2 = NULL;
    size_t len = 0, len2 = 0;
    kt_err err = {0};
    assert_int_equal(cache_record_encode(&r, &buf, &len, &err), 0);
    assert_int_equal(stored_version(buf, len), 3);
    free(buf);

    uint64_t m = (uint64_t)r.slots[0].dims[0];
    cache_arg *in0 = &r.kernels[1].args[0], *ws = &r.kernels[1].args[3];
    in0->has_tmap = true;
    in0->tmap = (ops_tensor_map){.rank = 2,
                                 .dtype = OPS_DT_F16,
                                 .dims = {256, m},
                                 .strides = {512},
                                 .box = {64, 16},
                                 .elem_strides = {1, 1},
                                 .swizzle = 128,
                                 .l2_promotion = 256};
    ws->has_tmap = true; /* [4096, +4096): 2048 f16 */
    ws->tmap = (ops_tensor_map){.rank = 1,
                                .dtype = OPS_DT_F16,
                                .dims = {2048},
                                .box = {64},
                                .elem_strides = {1},
                                .oob_nan = true};
    assert_int_equal(cache_record_encode(&r, &buf, &len, &err), 0);
    assert_int_equal(stored_version(buf, len), 4);
    cache_record_init(&d);
    if (cache_record_decode(buf, len, &d, &err) < 0)
        fail_msg("decode: %s", err.msg);
    assert_record_equal(&r, &d);
    assert_true(d.kernels[1].args[0].has_tmap && d.kernels[1].args[3].has_tmap);
    assert_false(d.kernels[1].args[1].has_tmap);
    assert_int_equal(cache_record_encode(&d, &buf2, &len2, NULL), 0);
    assert_int_equal(len, len2);
    assert_memory_equal(buf, buf2, len);
    free(buf2);
    cache_record_free(&d);

    /* the same bytes labelled version 3, checksum redone */
    buf[5] = 3;
    ops_sha256(buf, len - CACHE_CHECKSUM_BYTES, buf + len - CACHE_CHECKSUM_BYTES);
    cache_record_init(&d);
    assert_int_equal(cache_record_decode(buf, len, &d, &err), -EBADMSG);
    assert_non_null(strstr(err.msg, "'arg.tmap' in a version 3 record"));
    cache_record_free(&d);
    free(buf);

    in0->tmap.box[1] = 300;
    assert_int_equal(cache_record_encode(&r, &buf, &len, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "box[1] = 300"));
    in0->tmap.box[1] = 16;
    in0->tmap.dims[1] = m + 1; /* one row past the slot */
    assert_int_equal(cache_record_encode(&r, &buf, &len, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "spans"));
    in0->tmap.dims[1] = m;
    ws->tmap.dims[0] = 2056; /* 16 bytes past the argument's workspace range */
    assert_int_equal(cache_record_encode(&r, &buf, &len, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "4112 bytes of a 4096-byte buffer"));
    ws->tmap.dims[0] = 2048;
    cache_arg *sc = &r.kernels[1].args[4];
    sc->has_tmap = true;
    sc->tmap = in0->tmap;
    assert_int_equal(cache_record_encode(&r, &buf, &len, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "a scalar with a tensor map"));
    sc->has_tmap = false;
    /* 17 maps on one kernel */
    cache_kernel *kk = &r.kernels[1];
    cache_arg mapped = *in0; /* in0 points into the array realloc moves */
    cache_arg *more = realloc(kk->args, 24 * sizeof(*more));
    assert_non_null(more);
    kk->args = more;
    while (kk->n_args < 24)
        kk->args[kk->n_args++] = mapped;
    assert_int_equal(cache_record_encode(&r, &buf, &len, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "more than 16 tensor maps"));
    cache_record_free(&r);
}

/* The physical floor: traffic beyond twice the L2 at the table's bandwidth, FLOPs (when the
 * graph is given) at the fastest unit, halved; a GPU not in the table gets the fastest entry. */
static void test_record_floor(void **state)
{
    /* 4096^3 f16 matmul: 3 x 32 MiB of traffic (0.66 MB past 2 x L2), 137 GFLOP */
    const char *json = "{\"name\": \"mm\", \"inputs\": {\"A\": {\"dtype\": \"f16\", \"shape\": "
                       "[4096, 4096]}, \"B\": {\"dtype\": \"f16\", \"shape\": [4096, 4096]}}, "
                       "\"nodes\": [{\"out\": \"C\", \"op\": \"matmul\", \"in\": [\"A\", "
                       "\"B\"]}], \"outputs\": [\"C\"]}";
    ops_graph *g = NULL;
    ops_diag d = {0};
    assert_int_equal(ops_graph_from_json(json, strlen(json), &g, &d), 0);
    cache_key k;
    test_key(&k, "NVIDIA H100 80GB HBM3", 3, 4096);
    cache_record r;
    test_record(&r, &k, "s", 1000, 64, 1);
    r.n_inputs = 2;
    r.n_outputs = 1;
    for (int i = 0; i < 3; i++)
        r.slots[i] = (cache_slot){.dtype = OPS_DT_F16, .rank = 2, .dims = {4096, 4096}};
    for (int i = 0; i < r.n_kernels; i++)
        r.kernels[i].args[1].index = 1;
    double bytes = 3.0 * 4096 * 4096 * 2, flops = 2.0 * 4096 * 4096 * 4096;
    double mem = 0.5 * (bytes - 100e6) / 3.0e12 * 1e9, fl = 0.5 * flops / 745e12 * 1e9;
    assert_true(fabs(cache_record_floor_ns(&r, NULL) - mem) < 1e-6 * mem);
    assert_true(fabs(cache_record_floor_ns(&r, g) - fl) < 1e-6 * fl);
    /* 1 us passes on traffic alone (0.11 us), not with the FLOPs (92 us); cuBLAS's 195 us does */
    kt_err err = {0};
    assert_int_equal(cache_record_check_floor(&r, NULL, &err), 0);
    assert_int_equal(cache_record_check_floor(&r, g, &err), -ERANGE);
    assert_non_null(strstr(err.msg, "physical floor"));
    r.time_ns = 195e3;
    assert_int_equal(cache_record_check_floor(&r, g, &err), 0);
    /* an unknown GPU: the table's fastest (the H200's 4.19 TB/s) */
    snprintf(r.key.gpu.name, sizeof(r.key.gpu.name), "Some Future GPU");
    double mem_fast = 0.5 * (bytes - 100e6) / 4.19e12 * 1e9;
    assert_true(fabs(cache_record_floor_ns(&r, NULL) - mem_fast) < 1e-6 * mem_fast);
    cache_record_free(&r);
    ops_graph_free(g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_record_roundtrip_every_field),
        cmocka_unit_test(test_trial_without_ts_ms),
        cmocka_unit_test(test_record_shapes_sorted_and_version_default),
        cmocka_unit_test(test_record_checksum_detects_every_flip),
        cmocka_unit_test(test_record_bad_body_with_good_checksum),
        cmocka_unit_test(test_record_encode_validates),
        cmocka_unit_test(test_record_outputs_written),
        cmocka_unit_test(test_record_workspace_ranges),
        cmocka_unit_test(test_key_deterministic),
        cmocka_unit_test(test_key_distinct),
        cmocka_unit_test(test_key_prefixes),
        cmocka_unit_test(test_key_rejects_bad_parts),
        cmocka_unit_test(test_trial_roundtrip),
        cmocka_unit_test(test_record_signer_optional),
        cmocka_unit_test(test_record_floor),
        cmocka_unit_test(test_record_tensor_maps),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
