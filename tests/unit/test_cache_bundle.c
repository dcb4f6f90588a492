/* Bundles and merge: export/import byte for byte, refusal of damaged bundles with nothing written,
 * the merge rule (faster wins, fixed tie rule), idempotence and order independence. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "test_cache_util.h"

/* The exporting host's key, trusted by the importing side. */
static cache_signer signer;
static cache_trust trust;

typedef struct fixture {
    char *root;
    char dirs[4][512];
    cache_env *env[4];
    char bundle[512], bundle2[512];
} fixture;

static int setup(void **state)
{
    if (cache_signer_generate(&signer, NULL) != 0 || cache_trust_add(&trust, signer.pk) != 0)
        return -1;
    fixture *f = calloc(1, sizeof(*f));
    f->root = tmpdir_new();
    if (!f->root)
        return -1;
    cache_options o = {.map_size = 1 << 20, .runner_ups = -1};
    for (int i = 0; i < 4; i++) {
        snprintf(f->dirs[i], sizeof(f->dirs[i]), "%s/c%d", f->root, i);
        kt_err err = {0};
        if (cache_open(f->dirs[i], 0, &o, &f->env[i], &err) != 0) {
            fprintf(stderr, "setup: %s\n", err.msg);
            return -1;
        }
    }
    snprintf(f->bundle, sizeof(f->bundle), "%s/export.ktb", f->root);
    snprintf(f->bundle2, sizeof(f->bundle2), "%s/export2.ktb", f->root);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    for (int i = 0; i < 4; i++)
        cache_close(f->env[i]);
    tmpdir_free(f->root);
    free(f);
    cache_trust_free(&trust);
    cache_signer_clear(&signer);
    return 0;
}

static void put_rec(cache_env *env, const cache_key *k, const char *sched, double t, double p90,
                    int64_t created, size_t cubin, uint8_t seed)
{
    cache_record r;
    test_record(&r, k, sched, t, cubin, seed);
    r.time_p90_ns = p90;
    r.created = created;
    kt_err err = {0};
    if (cache_put(env, &r, NULL, &err) != 0)
        fail_msg("cache_put: %s", err.msg);
    cache_record_free(&r);
}

static void put(cache_env *env, const cache_key *k, const char *sched, double t, uint8_t seed)
{
    put_rec(env, k, sched, t, t * 1.1, 1700000000 + seed, 256, seed);
}

static void get(cache_env *env, const cache_key *k, int rank, cache_record *out)
{
    cache_record_init(out);
    kt_err err = {0};
    if (cache_get(env, k, rank, out, &err) != 0)
        fail_msg("cache_get rank %d: %s", rank, err.msg);
}

/* A cache with several keys, runner-ups and a big cubin. */
static void populate(cache_env *env)
{
    cache_key k;
    for (int i = 0; i < 5; i++) {
        test_key(&k, i < 3 ? "gpuA" : "gpuB", (uint8_t)(0x40 + i % 2), 32 * (i + 1));
        put(env, &k, "s1", 100 + i, (uint8_t)(3 * i));
        put(env, &k, "s2", 90 + i, (uint8_t)(3 * i + 1));
        put(env, &k, "s3", 110 + i, (uint8_t)(3 * i + 2));
    }
    test_key(&k, "gpuA", 0x50, 7);
    put_rec(env, &k, "big", 50, 55, 1, 300 << 10, 99);
}

static void export_to(cache_env *env, const char *path, size_t *n)
{
    kt_err err = {0};
    if (cache_export(env, path, &signer, n, &err) != 0)
        fail_msg("cache_export: %s", err.msg);
}

static bool files_equal(const char *a, const char *b)
{
    uint8_t *x = NULL, *y = NULL;
    size_t lx = 0, ly = 0;
    bool ok = file_read(a, &x, &lx) && file_read(b, &y, &ly) && lx == ly && !memcmp(x, y, lx);
    free(x);
    free(y);
    return ok;
}

static size_t n_records(cache_env *env)
{
    cache_stats st;
    assert_int_equal(cache_stat(env, &st, NULL), 0);
    return st.records;
}

/* Every (key, value) of the kernels database of dir, concatenated, for byte comparison. */
static size_t raw_dump(const char *dir, uint8_t **out)
{
    MDB_env *e;
    MDB_txn *t;
    MDB_dbi d;
    assert_int_equal(raw_open(dir, &e, &t, &d, "kernels"), 0);
    MDB_cursor *c;
    assert_int_equal(mdb_cursor_open(t, d, &c), 0);
    MDB_val k, v;
    size_t n = 0, cap = 0;
    uint8_t *buf = NULL;
    for (int rc = mdb_cursor_get(c, &k, &v, MDB_FIRST); rc == 0;
         rc = mdb_cursor_get(c, &k, &v, MDB_NEXT)) {
        assert_int_equal(kt_grow(&buf, &cap, n + k.mv_size + v.mv_size + 16, 1), 0);
        memcpy(buf + n, &k.mv_size, sizeof(size_t));
        memcpy(buf + n + 8, k.mv_data, k.mv_size);
        n += 8 + k.mv_size;
        memcpy(buf + n, &v.mv_size, sizeof(size_t));
        memcpy(buf + n + 8, v.mv_data, v.mv_size);
        n += 8 + v.mv_size;
    }
    mdb_cursor_close(c);
    mdb_txn_abort(t);
    mdb_env_close(e);
    *out = buf;
    return n;
}

static void test_export_import_byte_for_byte(void **state)
{
    fixture *f = *state;
    populate(f->env[0]);
    size_t n = 0, m = 0;
    export_to(f->env[0], f->bundle, &n);
    assert_int_equal(n, 5 * 3 + 1);
    kt_err err = {0};
    assert_int_equal(cache_import(f->env[1], f->bundle, &trust, &m, &err), 0);
    assert_int_equal(m, n);
    assert_int_equal(n_records(f->env[1]), n);
    /* every record is the exported one stamped with the signer */
    char id[CACHE_KEY_ID_LEN];
    cache_key_id(signer.pk, id);
    cache_key k;
    test_key(&k, "gpuA", 0x50, 7);
    cache_record r, orig;
    get(f->env[1], &k, 0, &r);
    get(f->env[0], &k, 0, &orig);
    assert_string_equal(r.signer, id);
    assert_null(orig.signer);
    free(r.signer);
    r.signer = NULL;
    uint8_t *va = NULL, *vb = NULL;
    size_t lva = 0, lvb = 0;
    assert_int_equal(cache_record_encode(&r, &va, &lva, NULL), 0);
    assert_int_equal(cache_record_encode(&orig, &vb, &lvb, NULL), 0);
    assert_int_equal(lva, lvb);
    assert_memory_equal(va, vb, lva);
    free(va);
    free(vb);
    cache_record_free(&r);
    cache_record_free(&orig);
    /* a second round trip through a bundle by the same signer changes no byte */
    export_to(f->env[1], f->bundle2, NULL);
    assert_int_equal(cache_import(f->env[2], f->bundle2, &trust, &m, &err), 0);
    for (int i = 0; i < 3; i++)
        cache_close(f->env[i]);
    f->env[0] = f->env[1] = f->env[2] = NULL;
    uint8_t *a = NULL, *b = NULL;
    size_t la = raw_dump(f->dirs[1], &a), lb = raw_dump(f->dirs[2], &b);
    assert_int_equal(la, lb);
    assert_memory_equal(a, b, la);
    free(a);
    free(b);
    /* and so are its exports */
    cache_options o = {.map_size = 1 << 20, .runner_ups = -1};
    assert_int_equal(cache_open(f->dirs[2], CACHE_RDONLY, &o, &f->env[2], NULL), 0);
    export_to(f->env[2], f->bundle, NULL);
    assert_true(files_equal(f->bundle, f->bundle2));
}

static void test_export_empty_and_layout(void **state)
{
    fixture *f = *state;
    size_t n = 1;
    export_to(f->env[0], f->bundle, &n);
    assert_int_equal(n, 0);
    uint8_t *buf = NULL;
    size_t len = 0;
    assert_true(file_read(f->bundle, &buf, &len));
    assert_int_equal(len, 24 + 32 + 32 + 64); /* header, digest, public key, signature */
    assert_memory_equal(buf, "KTBUNDLE", 8);
    uint8_t digest[32];
    ops_sha256(buf, 24, digest);
    assert_memory_equal(buf + 24, digest, 32);
    assert_memory_equal(buf + 56, signer.pk, 32);
    assert_true(cache_verify_digest(signer.pk, digest, buf + 88));
    free(buf);
    assert_int_equal(cache_import(f->env[1], f->bundle, &trust, &n, NULL), 0);
    assert_int_equal(n, 0);
}

static void test_import_damaged_bundle_writes_nothing(void **state)
{
    fixture *f = *state;
    populate(f->env[0]);
    export_to(f->env[0], f->bundle, NULL);
    uint8_t *buf = NULL;
    size_t len = 0;
    assert_true(file_read(f->bundle, &buf, &len));
    kt_err err = {0};
    /* a flipped byte anywhere: in the header, a key, a value, the trailer */
    size_t spots[] = {3, 17, 30, len / 3, len / 2, len - 40, len - 1};
    for (size_t i = 0; i < KT_ARRAY_LEN(spots); i++) {
        buf[spots[i]] ^= 0x01;
        assert_true(file_write(f->bundle2, buf, len));
        int rc = cache_import(f->env[1], f->bundle2, &trust, NULL, &err);
        assert_true(rc == -EBADMSG || rc == -EPROTO);
        assert_int_equal(n_records(f->env[1]), 0);
        buf[spots[i]] ^= 0x01;
    }
    /* truncated, and not a bundle at all */
    assert_true(file_write(f->bundle2, buf, len - 100));
    assert_int_equal(cache_import(f->env[1], f->bundle2, &trust, NULL, &err), -EBADMSG);
    assert_true(file_write(f->bundle2, (const uint8_t *)"hello", 5));
    assert_int_equal(cache_import(f->env[1], f->bundle2, &trust, NULL, &err), -EBADMSG);
    assert_non_null(strstr(err.msg, "not a ktune bundle"));
    assert_int_equal(n_records(f->env[1]), 0);
    char missing[600];
    snprintf(missing, sizeof(missing), "%s/none.ktb", f->root);
    assert_int_equal(cache_import(f->env[1], missing, &trust, NULL, &err), -ENOENT);
    /* the intact file still imports */
    assert_true(file_write(f->bundle2, buf, len));
    assert_int_equal(cache_import(f->env[1], f->bundle2, &trust, NULL, &err), 0);
    free(buf);
}

static void test_import_record_damaged_under_good_file_checksum(void **state)
{
    fixture *f = *state;
    cache_key k;
    test_key(&k, "gpuA", 1, 8);
    put(f->env[0], &k, "s", 10, 1);
    test_key(&k, "gpuA", 1, 16);
    put(f->env[0], &k, "s", 10, 2);
    export_to(f->env[0], f->bundle, NULL);
    uint8_t *buf = NULL;
    size_t len = 0;
    assert_true(file_read(f->bundle, &buf, &len));
    /* damage the last record's value, then re-seal and re-sign the file so only the record
     * checksum fails */
    size_t body = len - 32 - 96;
    buf[body - 40] ^= 0x10;
    ops_sha256(buf, body, buf + body);
    assert_int_equal(cache_sign_digest(&signer, buf + body, buf + len - 64, NULL), 0);
    assert_true(file_write(f->bundle2, buf, len));
    kt_err err = {0};
    assert_int_equal(cache_import(f->env[1], f->bundle2, &trust, NULL, &err), -EBADMSG);
    assert_non_null(strstr(err.msg, "record 1"));
    assert_int_equal(n_records(f->env[1]), 0);
    assert_int_equal(cache_merge(f->env[1], f->bundle2, &trust, NULL, &err), -EBADMSG);
    assert_int_equal(n_records(f->env[1]), 0);
    free(buf);
}

static void test_import_replaces_keys_in_bundle_only(void **state)
{
    fixture *f = *state;
    cache_key a, b;
    test_key(&a, "gpuA", 2, 8);
    test_key(&b, "gpuA", 2, 16);
    put(f->env[0], &a, "s1", 50, 1);
    export_to(f->env[0], f->bundle, NULL);
    put(f->env[1], &a, "s1", 10, 2); /* faster, but import restores the bundle's list */
    put(f->env[1], &a, "s2", 20, 3);
    put(f->env[1], &b, "s1", 30, 4);
    assert_int_equal(cache_import(f->env[1], f->bundle, &trust, NULL, NULL), 0);
    cache_record r;
    get(f->env[1], &a, 0, &r);
    assert_true(r.time_ns == 50);
    cache_record_free(&r);
    assert_int_equal(cache_get(f->env[1], &a, 1, &r, NULL), -ENOENT);
    get(f->env[1], &b, 0, &r);
    assert_true(r.time_ns == 30);
    cache_record_free(&r);
}

static void test_merge_faster_wins(void **state)
{
    fixture *f = *state;
    cache_key k;
    test_key(&k, "gpuA", 3, 64);
    put(f->env[0], &k, "old", 10, 1);
    put(f->env[1], &k, "new", 8, 2);
    cache_merge_stats st = {0};
    kt_err err = {0};
    assert_int_equal(cache_merge(f->env[0], f->dirs[1], &trust, &st, &err), 0);
    assert_int_equal(st.read, 1);
    assert_int_equal(st.keys, 1);
    assert_int_equal(st.changed, 1);
    cache_record r;
    get(f->env[0], &k, 0, &r);
    assert_string_equal(r.schedule, "new");
    cache_record_free(&r);
    get(f->env[0], &k, 1, &r); /* the loser stays as a runner-up */
    assert_string_equal(r.schedule, "old");
    cache_record_free(&r);
    /* a slower source changes nothing but the runner-ups */
    test_key(&k, "gpuA", 3, 128);
    put(f->env[0], &k, "a", 5, 3);
    put(f->env[2], &k, "b", 6, 4);
    assert_int_equal(cache_merge(f->env[0], f->dirs[2], &trust, &st, &err), 0);
    get(f->env[0], &k, 0, &r);
    assert_string_equal(r.schedule, "a");
    cache_record_free(&r);
    get(f->env[0], &k, 1, &r);
    assert_string_equal(r.schedule, "b");
    cache_record_free(&r);
}

static void test_merge_tie_rule(void **state)
{
    fixture *f = *state;
    cache_key k;
    cache_record r;
    /* equal medians: the smaller p90 wins */
    test_key(&k, "gpuA", 4, 1);
    put_rec(f->env[0], &k, "x", 10, 14, 100, 64, 1);
    put_rec(f->env[1], &k, "y", 10, 12, 200, 64, 2);
    assert_int_equal(cache_merge(f->env[0], f->dirs[1], &trust, NULL, NULL), 0);
    get(f->env[0], &k, 0, &r);
    assert_string_equal(r.schedule, "y");
    cache_record_free(&r);
    /* equal medians and p90: the older record wins */
    test_key(&k, "gpuA", 4, 2);
    put_rec(f->env[0], &k, "x", 10, 12, 300, 64, 3);
    put_rec(f->env[2], &k, "y", 10, 12, 200, 64, 4);
    assert_int_equal(cache_merge(f->env[0], f->dirs[2], &trust, NULL, NULL), 0);
    get(f->env[0], &k, 0, &r);
    assert_string_equal(r.schedule, "y");
    cache_record_free(&r);
    /* all equal: the smaller checksum wins, whichever side it came from */
    test_key(&k, "gpuA", 4, 3);
    put_rec(f->env[0], &k, "x", 10, 12, 300, 64, 5);
    put_rec(f->env[3], &k, "y", 10, 12, 300, 64, 6);
    cache_record rx, ry;
    get(f->env[0], &k, 0, &rx);
    get(f->env[3], &k, 0, &ry);
    uint8_t *bx = NULL, *by = NULL;
    size_t lx = 0, ly = 0;
    assert_int_equal(cache_record_encode(&rx, &bx, &lx, NULL), 0);
    assert_int_equal(cache_record_encode(&ry, &by, &ly, NULL), 0);
    const char *want = memcmp(bx + lx - 32, by + ly - 32, 32) < 0 ? "x" : "y";
    assert_int_equal(cache_merge(f->env[0], f->dirs[3], &trust, NULL, NULL), 0);
    get(f->env[0], &k, 0, &r);
    assert_string_equal(r.schedule, want);
    cache_record_free(&r);
    free(bx);
    free(by);
    cache_record_free(&rx);
    cache_record_free(&ry);
}

static void test_merge_idempotent_and_order_independent(void **state)
{
    fixture *f = *state;
    /* sources A (env 0) and B (env 1) overlap on some keys */
    populate(f->env[0]);
    cache_key k;
    for (int i = 0; i < 5; i++) {
        test_key(&k, i < 3 ? "gpuA" : "gpuB", (uint8_t)(0x40 + i % 2), 32 * (i + 1));
        put(f->env[1], &k, "s4", 95 + i, (uint8_t)(100 + i));
        put(f->env[1], &k, "s2", 91 + i, (uint8_t)(110 + i)); /* slower re-measure of s2 */
    }
    test_key(&k, "gpuB", 0x60, 5);
    put(f->env[1], &k, "only-b", 1, 120);
    kt_err err = {0};
    cache_merge_stats st;
    /* C = A then B; D = B then A */
    assert_int_equal(cache_merge(f->env[2], f->dirs[0], &trust, &st, &err), 0);
    assert_int_equal(cache_merge(f->env[2], f->dirs[1], &trust, &st, &err), 0);
    assert_int_equal(cache_merge(f->env[3], f->dirs[1], &trust, &st, &err), 0);
    assert_int_equal(cache_merge(f->env[3], f->dirs[0], &trust, &st, &err), 0);
    export_to(f->env[2], f->bundle, NULL);
    export_to(f->env[3], f->bundle2, NULL);
    assert_true(files_equal(f->bundle, f->bundle2));
    /* merging again changes nothing */
    assert_int_equal(cache_merge(f->env[2], f->dirs[1], &trust, &st, &err), 0);
    assert_int_equal(st.changed, 0);
    assert_int_equal(cache_merge(f->env[2], f->dirs[0], &trust, &st, &err), 0);
    assert_int_equal(st.changed, 0);
    /* a bundle of the same records: they come stamped with its signer, which may win the tie
     * rule once; a second merge of it changes nothing */
    assert_int_equal(cache_merge(f->env[2], f->bundle2, &trust, &st, &err), 0);
    assert_int_equal(cache_merge(f->env[2], f->bundle2, &trust, &st, &err), 0);
    assert_int_equal(st.changed, 0);
    /* the ranking: s2 from A (faster) survives once, then s4, s1, s3 cut to 1 + 3 */
    test_key(&k, "gpuA", 0x40, 32);
    const char *order[] = {"s2", "s4", "s1", "s3"};
    for (int r = 0; r < 4; r++) {
        cache_record rec;
        get(f->env[2], &k, r, &rec);
        assert_string_equal(rec.schedule, order[r]);
        if (r == 0)
            assert_true(rec.time_ns == 90);
        cache_record_free(&rec);
    }
}

static void test_merge_from_bundle(void **state)
{
    fixture *f = *state;
    populate(f->env[0]);
    export_to(f->env[0], f->bundle, NULL);
    cache_merge_stats st;
    kt_err err = {0};
    assert_int_equal(cache_merge(f->env[1], f->bundle, &trust, &st, &err), 0);
    assert_int_equal(st.read, 16);
    assert_int_equal(st.keys, 6);
    assert_int_equal(st.changed, 6);
    /* into an empty cache, merge stores what import stores */
    assert_int_equal(cache_import(f->env[2], f->bundle, &trust, NULL, &err), 0);
    export_to(f->env[1], f->bundle2, NULL);
    export_to(f->env[2], f->bundle, NULL);
    assert_true(files_equal(f->bundle, f->bundle2));
}

static void test_merge_skips_corrupt_source_record(void **state)
{
    fixture *f = *state;
    cache_key a, b;
    test_key(&a, "gpuA", 5, 8);
    test_key(&b, "gpuA", 5, 16);
    put(f->env[0], &a, "s", 10, 1);
    put(f->env[0], &b, "s", 10, 2);
    cache_close(f->env[0]);
    f->env[0] = NULL;
    uint8_t key[CACHE_KEY_MAX + 1];
    size_t kl = 0;
    assert_int_equal(cache_key_encode(&a, key, sizeof(key), &kl, NULL), 0);
    key[kl++] = 0;
    MDB_env *e;
    MDB_txn *t;
    MDB_dbi d;
    assert_int_equal(raw_open(f->dirs[0], &e, &t, &d, "kernels"), 0);
    MDB_val mk = {.mv_size = kl, .mv_data = key}, mv;
    assert_int_equal(mdb_get(t, d, &mk, &mv), 0);
    uint8_t *copy = malloc(mv.mv_size);
    memcpy(copy, mv.mv_data, mv.mv_size);
    copy[5] ^= 0x01;
    mv.mv_data = copy;
    assert_int_equal(mdb_put(t, d, &mk, &mv, 0), 0);
    assert_int_equal(mdb_txn_commit(t), 0);
    mdb_env_close(e);
    free(copy);

    cache_merge_stats st;
    kt_err err = {0};
    assert_int_equal(cache_merge(f->env[1], f->dirs[0], &trust, &st, &err), 0);
    assert_int_equal(st.read, 2);
    assert_int_equal(st.corrupt, 1);
    assert_int_equal(st.keys, 1);
    cache_record r;
    assert_int_equal(cache_get(f->env[1], &a, 0, &r, NULL), -ENOENT);
    get(f->env[1], &b, 0, &r);
    cache_record_free(&r);
    /* export leaves the corrupt record out */
    cache_options o = {.runner_ups = -1};
    assert_int_equal(cache_open(f->dirs[0], CACHE_RDONLY, &o, &f->env[0], NULL), 0);
    size_t n = 0;
    export_to(f->env[0], f->bundle, &n);
    assert_int_equal(n, 1);
}

static void test_merge_refuses_itself_and_missing(void **state)
{
    fixture *f = *state;
    kt_err err = {0};
    assert_int_equal(cache_merge(f->env[0], f->dirs[0], &trust, NULL, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "itself"));
    char missing[600];
    snprintf(missing, sizeof(missing), "%s/none", f->root);
    assert_int_equal(cache_merge(f->env[0], missing, &trust, NULL, &err), -ENOENT);
    /* a directory that is not a cache */
    snprintf(missing, sizeof(missing), "%s", f->root);
    assert_int_equal(cache_merge(f->env[0], missing, &trust, NULL, &err), -ENOENT);
}

static void test_merge_grows_map(void **state)
{
    fixture *f = *state;
    cache_key k;
    for (int i = 0; i < 12; i++) {
        test_key(&k, "gpuA", 6, i + 1);
        put_rec(f->env[0], &k, "s", 10, 11, 1, 256 << 10, (uint8_t)i);
    }
    cache_stats st;
    assert_int_equal(cache_stat(f->env[1], &st, NULL), 0);
    size_t before = st.map_size;
    cache_merge_stats ms;
    assert_int_equal(cache_merge(f->env[1], f->dirs[0], &trust, &ms, NULL), 0);
    assert_int_equal(ms.changed, 12);
    assert_int_equal(cache_stat(f->env[1], &st, NULL), 0);
    assert_true(st.map_size > before);
    assert_int_equal(st.records, 12);
}

int main(void)
{
#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)
    const struct CMUnitTest tests[] = {
        T(test_export_import_byte_for_byte),
        T(test_export_empty_and_layout),
        T(test_import_damaged_bundle_writes_nothing),
        T(test_import_record_damaged_under_good_file_checksum),
        T(test_import_replaces_keys_in_bundle_only),
        T(test_merge_faster_wins),
        T(test_merge_tie_rule),
        T(test_merge_idempotent_and_order_independent),
        T(test_merge_from_bundle),
        T(test_merge_skips_corrupt_source_record),
        T(test_merge_refuses_itself_and_missing),
        T(test_merge_grows_map),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
