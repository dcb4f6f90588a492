/* Integration tests of `ktune cache export|import|merge|check` for authenticated bundles (issue
 * 16 item 9): signed bundles, refusal of unsigned, untrusted and tampered ones, the signer kept
 * as provenance; and the physical floor: a genuine-looking record rewritten to 1 ns with its
 * checksums recomputed is refused by import and merge and flagged by check. Runs the binary
 * (KTUNE_BIN) on caches this program builds with the cache library. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <jansson.h>
#include <sys/stat.h>

#include "../unit/test_cache_util.h"
#include "cli_run.h"

static run_result *ktune(const char *first, ...)
{
    const char *args[32];
    int n = 0;
    va_list ap;
    va_start(ap, first);
    for (const char *a = first; a; a = va_arg(ap, const char *)) {
        assert_true(n < 31);
        args[n++] = a;
    }
    va_end(ap);
    args[n] = NULL;
    return run_argv(args);
}

typedef struct fx {
    char *root;
    char src[600], dst[600], keys_a[600], keys_b[600], keys_c[600], bundle[600], forged[600];
} fx;

static int setup(void **state)
{
    fx *f = calloc(1, sizeof(*f));
    if (!f || !(f->root = tmpdir_new()))
        return -1;
    snprintf(f->src, sizeof(f->src), "%s/src", f->root);
    snprintf(f->dst, sizeof(f->dst), "%s/dst", f->root);
    snprintf(f->keys_a, sizeof(f->keys_a), "%s/keys-a", f->root);
    snprintf(f->keys_b, sizeof(f->keys_b), "%s/keys-b", f->root);
    snprintf(f->keys_c, sizeof(f->keys_c), "%s/keys-c", f->root);
    snprintf(f->bundle, sizeof(f->bundle), "%s/a.ktb", f->root);
    snprintf(f->forged, sizeof(f->forged), "%s/forged.ktb", f->root);
    /* no key directory from the environment: every command names its own */
    unsetenv("KTUNE_KEYS");
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fx *f = *state;
    tmpdir_free(f->root);
    free(f);
    return 0;
}

/* A record of M x 256 f16 slots (3 inputs, 1 output) on gpu, timed at time_ns. */
static void make_record(cache_record *r, const char *gpu, int64_t m, double time_ns)
{
    cache_key k;
    test_key(&k, gpu, 0x31, m);
    test_record(r, &k, "s1", time_ns, 512, 7);
}

static void put_records(const char *dir, const char *gpu, int64_t m, double time_ns)
{
    cache_env *env = NULL;
    kt_err err = {0};
    if (cache_open(dir, 0, NULL, &env, &err) < 0)
        fail_msg("cache_open: %s", err.msg);
    cache_record r;
    make_record(&r, gpu, m, time_ns);
    if (cache_put(env, &r, NULL, &err) < 0)
        fail_msg("cache_put: %s", err.msg);
    cache_record_free(&r);
    cache_close(env);
}

/* The records of `ktune cache ls --json --all`; the caller json_decref's. */
static json_t *ls(const char *dir)
{
    run_result *r = ktune("cache", "ls", "--cache", dir, "--all", "--json", NULL);
    if (r->status != 0)
        fail_msg("cache ls: %s", r->err);
    json_error_t e;
    json_t *v = json_loads(r->out, 0, &e);
    free(r);
    assert_non_null(v);
    json_t *recs = json_incref(json_object_get(v, "records"));
    json_decref(v);
    return recs;
}

static size_t n_records(const char *dir)
{
    struct stat st;
    if (stat(dir, &st) < 0)
        return 0;
    json_t *recs = ls(dir);
    size_t n = json_array_size(recs);
    json_decref(recs);
    return n;
}

static const char *signer_of_first(json_t *recs)
{
    json_t *s = json_object_get(json_array_get(recs, 0), "signer");
    return json_is_string(s) ? json_string_value(s) : "(none)";
}

/* "ed25519:" and the first 16 hex digits of the key in a .pub file. */
static void key_id_of(const char *pub, char id[32])
{
    uint8_t *buf = NULL;
    size_t len = 0;
    assert_true(file_read(pub, &buf, &len));
    assert_true(len > 14 + 16);
    assert_memory_equal(buf, "ktune-ed25519 ", 14);
    snprintf(id, 32, "ed25519:%.16s", (const char *)buf + 14);
    free(buf);
}

static void copy_file(const char *from, const char *to)
{
    uint8_t *buf = NULL;
    size_t len = 0;
    assert_true(file_read(from, &buf, &len));
    assert_true(file_write(to, buf, len));
    free(buf);
}

static uint64_t be(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = 0; i < n; i++)
        v = v << 8 | p[i];
    return v;
}

static void put_be(uint8_t *p, uint64_t v, int n)
{
    for (int i = 0; i < n; i++)
        p[i] = (uint8_t)(v >> (8 * (n - 1 - i)));
}

/* Rewrites a signed (format 2) bundle as an attacker would: every record's times set to
 * new_time_ns (when > 0) with the record checksum recomputed, then the file digest recomputed;
 * the signature block kept (keep_sig) or dropped with the format set to 1 (unsigned). */
static void forge(const char *from, const char *to, double new_time_ns, bool keep_sig)
{
    uint8_t *in = NULL;
    size_t len = 0;
    assert_true(file_read(from, &in, &len));
    assert_int_equal(be(in + 8, 4), 2);
    size_t body = len - 32 - 96, count = be(in + 16, 8), off = 24;
    uint8_t *out = malloc(len + (1 << 20));
    memcpy(out, in, 24);
    size_t o = 24;
    for (size_t i = 0; i < count; i++) {
        size_t klen = be(in + off, 2);
        const uint8_t *key = in + off + 2;
        size_t vlen = be(key + klen, 4);
        const uint8_t *val = key + klen + 4;
        off += 2 + klen + 4 + vlen;
        uint8_t *nv = NULL;
        size_t nlen = vlen;
        if (new_time_ns > 0) {
            cache_record r;
            cache_record_init(&r);
            assert_int_equal(cache_record_decode(val, vlen, &r, NULL), 0);
            r.time_ns = r.time_p10_ns = r.time_p90_ns = new_time_ns;
            kt_err err = {0};
            if (cache_record_encode(&r, &nv, &nlen, &err) < 0)
                fail_msg("encode: %s", err.msg);
            cache_record_free(&r);
        }
        memcpy(out + o, in + off - (2 + klen + 4 + vlen), 2 + klen);
        o += 2 + klen;
        put_be(out + o, nlen, 4);
        o += 4;
        memcpy(out + o, nv ? nv : val, nlen);
        o += nlen;
        free(nv);
    }
    assert_int_equal(off, body);
    if (!keep_sig)
        put_be(out + 8, 1, 4);
    ops_sha256(out, o, out + o);
    o += 32;
    if (keep_sig) {
        memcpy(out + o, in + len - 96, 96);
        o += 96;
    }
    assert_true(file_write(to, out, o));
    free(out);
    free(in);
}

static void expect_refused(run_result *r, const char *file, const char *why)
{
    if (r->status != 1 || !strstr(r->err, file) || !strstr(r->err, why))
        fail_msg("expected exit 1 naming %s and \"%s\"; got %d: %s%s", file, why, r->status, r->out,
                 r->err);
    /* one line */
    const char *nl = strchr(r->err, '\n');
    assert_true(nl && nl[1] == '\0');
    free(r);
}

static void test_signed_bundles(void **state)
{
    fx *f = *state;
    put_records(f->src, "NVIDIA H100 80GB HBM3", 64, 5000);
    /* export makes the key on first use: secret 0600, public beside it */
    run_result *r =
        ktune("cache", "export", f->bundle, "--cache", f->src, "--keys", f->keys_a, NULL);
    if (r->status != 0)
        fail_msg("export: %s", r->err);
    assert_non_null(strstr(r->err, "made the bundle signing key"));
    free(r);
    char sec[700], pub[700], trusted[700], id[32];
    snprintf(sec, sizeof(sec), "%s/bundle-signing.key", f->keys_a);
    snprintf(pub, sizeof(pub), "%s/bundle-signing.pub", f->keys_a);
    struct stat st;
    assert_int_equal(stat(sec, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);
    key_id_of(pub, id);
    /* a second export reuses the key: same signer, no new key */
    r = ktune("cache", "export", f->bundle, "--cache", f->src, "--keys", f->keys_a, "--json", NULL);
    assert_int_equal(r->status, 0);
    assert_null(strstr(r->err, "made the bundle signing key"));
    assert_non_null(strstr(r->out, id));
    free(r);

    /* a host that does not trust A's key refuses the bundle, its cache untouched */
    expect_refused(
        ktune("cache", "import", f->bundle, "--cache", f->dst, "--keys", f->keys_b, NULL),
        f->bundle, "not in");
    expect_refused(ktune("cache", "merge", f->bundle, "--cache", f->dst, "--keys", f->keys_b, NULL),
                   f->bundle, "not in");
    assert_int_equal(n_records(f->dst), 0);

    /* trusting it (its .pub in trusted-keys/) accepts it; the records name the signer */
    snprintf(trusted, sizeof(trusted), "%s/trusted-keys", f->keys_b);
    assert_int_equal(mkdir(f->keys_b, 0755), 0);
    assert_int_equal(mkdir(trusted, 0755), 0);
    snprintf(trusted, sizeof(trusted), "%s/trusted-keys/host-a.pub", f->keys_b);
    copy_file(pub, trusted);
    r = ktune("cache", "import", f->bundle, "--cache", f->dst, "--keys", f->keys_b, NULL);
    if (r->status != 0)
        fail_msg("import: %s", r->err);
    free(r);
    json_t *recs = ls(f->dst);
    assert_int_equal(json_array_size(recs), 1);
    assert_string_equal(signer_of_first(recs), id);
    json_decref(recs);

    /* one byte changed, file digest recomputed, signature kept: refused by import and merge */
    char other[700];
    snprintf(other, sizeof(other), "%s/other", f->root);
    forge(f->bundle, f->forged, 4000, true);
    expect_refused(ktune("cache", "import", f->forged, "--cache", other, "--keys", f->keys_b,
                         "--trust-unsigned", NULL),
                   f->forged, "does not verify");
    expect_refused(ktune("cache", "merge", f->forged, "--cache", other, "--keys", f->keys_b, NULL),
                   f->forged, "does not verify");
    /* and without the digest recomputed: damaged */
    uint8_t *buf = NULL;
    size_t len = 0;
    assert_true(file_read(f->bundle, &buf, &len));
    buf[len / 2] ^= 0x01;
    assert_true(file_write(f->forged, buf, len));
    free(buf);
    expect_refused(ktune("cache", "import", f->forged, "--cache", other, "--keys", f->keys_b, NULL),
                   f->forged, "checksum mismatch");
    assert_int_equal(n_records(other), 0);

    /* unsigned (the format-1 layout): refused, then accepted with --trust-unsigned */
    forge(f->bundle, f->forged, 0, false);
    expect_refused(ktune("cache", "import", f->forged, "--cache", other, "--keys", f->keys_b, NULL),
                   f->forged, "unsigned bundle");
    expect_refused(ktune("cache", "merge", f->forged, "--cache", other, "--keys", f->keys_b, NULL),
                   f->forged, "unsigned bundle");
    assert_int_equal(n_records(other), 0);
    r = ktune("cache", "import", f->forged, "--cache", other, "--keys", f->keys_b,
              "--trust-unsigned", NULL);
    if (r->status != 0)
        fail_msg("import --trust-unsigned: %s", r->err);
    free(r);
    recs = ls(other);
    assert_string_equal(signer_of_first(recs), "unsigned");
    json_decref(recs);

    /* signed by a key nobody trusts: refused; accepted with --trust-unsigned, marked so */
    r = ktune("cache", "export", f->forged, "--cache", f->src, "--keys", f->keys_c, NULL);
    assert_int_equal(r->status, 0);
    free(r);
    char third[700], id_c[32], pub_c[700];
    snprintf(third, sizeof(third), "%s/third", f->root);
    snprintf(pub_c, sizeof(pub_c), "%s/bundle-signing.pub", f->keys_c);
    key_id_of(pub_c, id_c);
    expect_refused(ktune("cache", "import", f->forged, "--cache", third, "--keys", f->keys_b, NULL),
                   f->forged, id_c);
    assert_int_equal(n_records(third), 0);
    r = ktune("cache", "merge", f->forged, "--cache", third, "--keys", f->keys_b,
              "--trust-unsigned", NULL);
    assert_int_equal(r->status, 0);
    free(r);
    recs = ls(third);
    char want[64];
    snprintf(want, sizeof(want), "untrusted %s", id_c);
    assert_string_equal(signer_of_first(recs), want);
    json_decref(recs);
}

/* Writes r under its key at rank 0 with raw LMDB, as a cache written before the floor was
 * enforced (or by a hand) would hold it. */
static void raw_put(const char *dir, const cache_record *r)
{
    cache_env *env = NULL;
    assert_int_equal(cache_open(dir, 0, NULL, &env, NULL), 0);
    cache_close(env);
    uint8_t key[CACHE_KEY_MAX + 1], *val = NULL;
    size_t klen = 0, vlen = 0;
    assert_int_equal(cache_key_encode(&r->key, key, sizeof(key), &klen, NULL), 0);
    key[klen++] = 0;
    assert_int_equal(cache_record_encode(r, &val, &vlen, NULL), 0);
    MDB_env *e;
    MDB_txn *t;
    MDB_dbi d;
    assert_int_equal(raw_open(dir, &e, &t, &d, "kernels"), 0);
    MDB_val k = {klen, key}, v = {vlen, val};
    assert_int_equal(mdb_put(t, d, &k, &v, 0), 0);
    assert_int_equal(mdb_txn_commit(t), 0);
    mdb_env_close(e);
    free(val);
}

/* The plain listing names each record's graph, which the signature alone does not tell. */
static void test_ls_names_the_graph(void **state)
{
    fx *f = *state;
    put_records(f->src, "NVIDIA H100 80GB HBM3", 64, 200e3);
    run_result *r = ktune("cache", "ls", "--cache", f->src, NULL);
    if (r->status != 0)
        fail_msg("cache ls: %s", r->err);
    const char *nl = strchr(r->out, '\n');
    assert_non_null(nl);
    assert_non_null(strstr(r->out, "GRAPH"));
    assert_true(strstr(r->out, "GRAPH") < nl);     /* a column of the header */
    assert_non_null(strstr(nl, "gemm_bias_relu")); /* and of the record's row */
    free(r);
}

/* `cache backup DIR`: the copy lists the same records (a cache directory of its own) and a
 * second backup over it succeeds; a missing operand is a usage error. */
static void test_backup(void **state)
{
    fx *f = *state;
    put_records(f->src, "NVIDIA H100 80GB HBM3", 64, 200e3);
    put_records(f->src, "NVIDIA H100 80GB HBM3", 128, 300e3);
    for (int round = 0; round < 2; round++) {
        run_result *r = ktune("cache", "backup", f->dst, "--cache", f->src, "--json", NULL);
        if (r->status != 0)
            fail_msg("cache backup: %s", r->err);
        assert_non_null(strstr(r->out, "\"bytes\""));
        free(r);
    }
    json_t *a = ls(f->src), *b = ls(f->dst);
    assert_int_equal(json_array_size(a), 2);
    assert_true(json_equal(a, b)); /* every field of every record */
    json_decref(a);
    json_decref(b);
    run_result *r = ktune("cache", "backup", "--cache", f->src, NULL);
    assert_int_equal(r->status, 2);
    assert_non_null(strstr(r->err, "missing DIR"));
    free(r);
}

static void test_implausible_time_floor(void **state)
{
    fx *f = *state;
    /* 262144 x 256 f16 in and out: 537 MB; 200 us is a plausible time on an H100 (its floor:
     * (537 - 100) MB at 3.0 TB/s, halved: 73 us) */
    const int64_t m = 262144;
    put_records(f->src, "NVIDIA H100 80GB HBM3", m, 200e3);
    run_result *r =
        ktune("cache", "export", f->bundle, "--cache", f->src, "--keys", f->keys_a, NULL);
    if (r->status != 0)
        fail_msg("export: %s", r->err);
    free(r);
    /* rewritten to 1 ns, record checksum and file digest recomputed, unsigned */
    forge(f->bundle, f->forged, 1, false);
    expect_refused(ktune("cache", "import", f->forged, "--cache", f->dst, "--keys", f->keys_a,
                         "--trust-unsigned", NULL),
                   f->forged, "physical floor");
    expect_refused(ktune("cache", "merge", f->forged, "--cache", f->dst, "--keys", f->keys_a,
                         "--trust-unsigned", NULL),
                   f->forged, "physical floor");
    assert_int_equal(n_records(f->dst), 0);
    /* the genuine bundle still goes in */
    forge(f->bundle, f->forged, 0, false);
    r = ktune("cache", "import", f->forged, "--cache", f->dst, "--keys", f->keys_a,
              "--trust-unsigned", NULL);
    if (r->status != 0)
        fail_msg("import of the genuine record: %s", r->err);
    free(r);

    /* a store (what tuning does) refuses it too */
    cache_record rec;
    make_record(&rec, "NVIDIA H100 80GB HBM3", m, 1);
    cache_env *env = NULL;
    kt_err err = {0};
    assert_int_equal(cache_open(f->dst, 0, NULL, &env, NULL), 0);
    assert_int_equal(cache_put(env, &rec, NULL, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "physical floor"));
    cache_close(env);

    /* one already in a cache: check flags it, lookups do not serve it, merge skips it */
    char bad[700];
    snprintf(bad, sizeof(bad), "%s/bad", f->root);
    raw_put(bad, &rec);
    r = ktune("cache", "check", "--cache", bad, "--json", NULL);
    assert_int_equal(r->status, 1);
    json_error_t je;
    json_t *v = json_loads(r->out, 0, &je);
    assert_non_null(v);
    assert_string_equal(json_string_value(json_object_get(v, "verdict")), "damaged_records");
    assert_int_equal(json_integer_value(json_object_get(v, "records_implausible")), 1);
    assert_non_null(strstr(json_string_value(json_object_get(v, "first_bad")), "physical floor"));
    json_decref(v);
    free(r);
    assert_int_equal(cache_open(bad, CACHE_RDONLY, NULL, &env, NULL), 0);
    cache_record got;
    cache_record_init(&got);
    assert_int_equal(cache_get(env, &rec.key, 0, &got, &err), -EBADMSG);
    assert_non_null(strstr(err.msg, "physical floor"));
    cache_record_free(&got);
    cache_close(env);
    r = ktune("cache", "merge", bad, "--cache", f->dst, "--json", NULL);
    if (r->status != 0)
        fail_msg("merge from a directory: %s", r->err);
    v = json_loads(r->out, 0, &je);
    assert_non_null(v);
    assert_int_equal(json_integer_value(json_object_get(v, "implausible")), 1);
    assert_int_equal(json_integer_value(json_object_get(v, "changed")), 0);
    json_decref(v);
    free(r);
    json_t *recs = ls(f->dst);
    double t = json_number_value(
        json_object_get(json_object_get(json_array_get(recs, 0), "time"), "median_ns"));
    assert_true(t == 200e3);
    json_decref(recs);
    cache_record_free(&rec);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_signed_bundles, setup, teardown),
        cmocka_unit_test_setup_teardown(test_implausible_time_floor, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ls_names_the_graph, setup, teardown),
        cmocka_unit_test_setup_teardown(test_backup, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
