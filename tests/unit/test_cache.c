/* The LMDB cache: open and schema version, put/get/list/delete, ranking, map growth, corruption,
 * a reader in another process, trials. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <signal.h>
#include <sys/wait.h>

#include "test_cache_util.h"

#include "cache/internal.h" /* CACHE_LOCK_FILE_BYTES */

#include <dirent.h>
#include <sys/stat.h>

typedef struct fixture {
    char *dir;
    cache_env *env;
} fixture;

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof(*f));
    f->dir = tmpdir_new();
    kt_err err = {0};
    cache_options o = {.map_size = 1 << 20, .runner_ups = -1};
    if (!f->dir || cache_open(f->dir, 0, &o, &f->env, &err) != 0) {
        fprintf(stderr, "setup: %s\n", err.msg);
        return -1;
    }
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    cache_close(f->env);
    tmpdir_free(f->dir);
    free(f);
    return 0;
}

static void reopen(fixture *f, unsigned flags, const cache_options *o)
{
    cache_close(f->env);
    f->env = NULL;
    kt_err err = {0};
    if (cache_open(f->dir, flags, o, &f->env, &err) != 0)
        fail_msg("reopen: %s", err.msg);
}

static int put(cache_env *env, const cache_key *k, const char *sched, double t, size_t cubin,
               uint8_t seed)
{
    cache_record r;
    test_record(&r, k, sched, t, cubin, seed);
    kt_err err = {0};
    int rank = -2;
    int rc = cache_put(env, &r, &rank, &err);
    cache_record_free(&r);
    if (rc != 0)
        fail_msg("cache_put: %s", err.msg);
    return rank;
}

static double time_at(cache_env *env, const cache_key *k, int rank)
{
    cache_record r;
    cache_record_init(&r);
    int rc = cache_get(env, k, rank, &r, NULL);
    double t = rc == 0 ? r.time_ns : -(double)-rc;
    cache_record_free(&r);
    return t;
}

static uint32_t raw_schema(const char *dir)
{
    MDB_env *e;
    MDB_txn *t;
    MDB_dbi d;
    assert_int_equal(raw_open(dir, &e, &t, &d, "meta"), 0);
    MDB_val k = {.mv_size = strlen("schema_version"), .mv_data = "schema_version"}, v;
    assert_int_equal(mdb_get(t, d, &k, &v), 0);
    assert_int_equal(v.mv_size, 4);
    const uint8_t *b = v.mv_data;
    uint32_t ver = (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
    mdb_txn_abort(t);
    mdb_env_close(e);
    return ver;
}

static void test_open_creates_databases_and_schema(void **state)
{
    fixture *f = *state;
    assert_string_equal(cache_path(f->env), f->dir);
    cache_close(f->env);
    f->env = NULL;
    /* the lock file's blocks are reserved at the size LMDB uses (internal.h: else a full disk
     * makes LMDB's first store into it a SIGBUS); a changed LMDB layout shows here */
    char path[1200];
    snprintf(path, sizeof(path), "%s/lock.mdb", f->dir);
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    assert_int_equal(sb.st_size, CACHE_LOCK_FILE_BYTES);
    /* created whole in a private directory and moved in: nothing of it is left */
    DIR *listing = opendir(f->dir);
    assert_non_null(listing);
    int entries = 0;
    for (struct dirent *e; (e = readdir(listing));)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
            entries++;
    closedir(listing);
    assert_int_equal(entries, 2); /* data.mdb, lock.mdb */
    assert_int_equal(raw_schema(f->dir), CACHE_SCHEMA_VERSION);
    const char *dbs[] = {"kernels", "trials", "jobs", "meta"};
    for (int i = 0; i < 4; i++) {
        MDB_env *e;
        MDB_txn *t;
        MDB_dbi d;
        assert_int_equal(raw_open(f->dir, &e, &t, &d, dbs[i]), 0);
        mdb_txn_abort(t);
        mdb_env_close(e);
    }
    reopen(f, CACHE_RDONLY, NULL);
    cache_stats st;
    assert_int_equal(cache_stat(f->env, &st, NULL), 0);
    assert_int_equal(st.schema_version, CACHE_SCHEMA_VERSION);
    assert_int_equal(st.records, 0);
    assert_true(st.map_size >= (1u << 20));
}

static void test_future_schema_refused(void **state)
{
    fixture *f = *state;
    cache_close(f->env);
    f->env = NULL;
    MDB_env *e;
    MDB_txn *t;
    MDB_dbi d;
    assert_int_equal(raw_open(f->dir, &e, &t, &d, "meta"), 0);
    uint8_t v99[4] = {0, 0, 0, 99};
    MDB_val k = {.mv_size = strlen("schema_version"), .mv_data = "schema_version"};
    MDB_val v = {.mv_size = 4, .mv_data = v99};
    assert_int_equal(mdb_put(t, d, &k, &v, 0), 0);
    assert_int_equal(mdb_txn_commit(t), 0);
    mdb_env_close(e);
    kt_err err = {0};
    assert_int_equal(cache_open(f->dir, 0, NULL, &f->env, &err), -EPROTO);
    assert_null(f->env);
    assert_non_null(strstr(err.msg, "schema version 99"));
    assert_non_null(strstr(err.msg, "upgrade"));
    assert_int_equal(cache_open(f->dir, CACHE_RDONLY, NULL, &f->env, &err), -EPROTO);
    assert_int_equal(raw_schema(f->dir), 99); /* untouched */
}

/* One record, one trial ("c1") and one job (7, "kept") of key *k, in f's cache. */
static void put_one_of_each(fixture *f, cache_key *k)
{
    test_key(k, "NVIDIA H100", 3, 64);
    assert_int_equal(put(f->env, k, "tile=1", 100, 64, 1), 0);
    cache_trial tr = {.cand = "c1", .status = CACHE_TRIAL_OK, .time_ns = 5};
    assert_int_equal(cache_trial_append(f->env, k, &tr, NULL), 0);
    cache_job j = {.id = 7, .name = "kept", .budget_s = 1};
    assert_int_equal(cache_job_put(f->env, &j, NULL), 0);
}

/* A backup holds everything (records, trials, jobs) from one snapshot while the writer keeps
 * its handle open, replaces an earlier backup whole, and is refused into the cache itself. */
static void test_backup(void **state)
{
    fixture *f = *state;
    cache_key k;
    put_one_of_each(f, &k);
    char dir[600];
    snprintf(dir, sizeof(dir), "%s/backup/of", f->dir); /* parents made too */
    size_t bytes = 0;
    kt_err err = {0};
    assert_int_equal(cache_backup(f->env, dir, &bytes, &err), 0);
    assert_true(bytes > 0);
    /* the writer goes on; a second backup replaces the first with the newer state */
    cache_trial tr2 = {.cand = "c2", .status = CACHE_TRIAL_OK, .time_ns = 6};
    assert_int_equal(cache_trial_append(f->env, &k, &tr2, NULL), 0);
    assert_int_equal(cache_backup(f->env, dir, NULL, &err), 0);
    cache_env *copy = NULL;
    assert_int_equal(cache_open(dir, CACHE_RDONLY, NULL, &copy, &err), 0);
    cache_stats st;
    assert_int_equal(cache_stat(copy, &st, NULL), 0);
    assert_int_equal(st.records, 1);
    assert_int_equal(st.trials, 2);
    assert_int_equal(st.jobs, 1);
    cache_job back;
    assert_int_equal(cache_job_get(copy, 7, &back, NULL), 0);
    assert_string_equal(back.name, "kept");
    cache_job_free(&back);
    cache_close(copy);
    assert_int_equal(cache_backup(f->env, f->dir, NULL, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "the cache itself"));
}

/* A schema 1 cache (records keyed by symbol names): read-only opens refuse it, naming the way
 * out; the first read-write open drops its records and trials, keeps its jobs, and says so. */
static void test_schema1_migrated(void **state)
{
    fixture *f = *state;
    cache_key k;
    put_one_of_each(f, &k);
    cache_close(f->env);
    f->env = NULL;
    MDB_env *e;
    MDB_txn *t;
    MDB_dbi d;
    assert_int_equal(raw_open(f->dir, &e, &t, &d, "meta"), 0);
    uint8_t v1[4] = {0, 0, 0, 1};
    MDB_val mk = {.mv_size = strlen("schema_version"), .mv_data = "schema_version"};
    MDB_val mv = {.mv_size = 4, .mv_data = v1};
    assert_int_equal(mdb_put(t, d, &mk, &mv, 0), 0);
    assert_int_equal(mdb_txn_commit(t), 0);
    mdb_env_close(e);
    kt_err err = {0};
    assert_int_equal(cache_open(f->dir, CACHE_RDONLY, NULL, &f->env, &err), -EPROTO);
    assert_non_null(strstr(err.msg, "schema version 1"));
    assert_non_null(strstr(err.msg, "read-write"));
    assert_int_equal(raw_schema(f->dir), 1); /* untouched */
    reopen(f, 0, NULL);
    assert_int_equal(raw_schema(f->dir), CACHE_SCHEMA_VERSION);
    cache_stats st;
    assert_int_equal(cache_stat(f->env, &st, NULL), 0);
    assert_int_equal(st.records, 0);
    assert_int_equal(st.trials, 0);
    assert_int_equal(st.jobs, 1);
    cache_job back;
    assert_int_equal(cache_job_get(f->env, 7, &back, NULL), 0);
    assert_string_equal(back.name, "kept");
    cache_job_free(&back);
    reopen(f, CACHE_RDONLY, NULL);
}

static void test_open_errors(void **state)
{
    fixture *f = *state;
    cache_env *env = NULL;
    kt_err err = {0};
    char missing[512];
    snprintf(missing, sizeof(missing), "%s/nope", f->dir);
    assert_int_equal(cache_open(missing, CACHE_RDONLY, NULL, &env, &err), -ENOENT);
    assert_null(env);
    assert_int_equal(cache_open("", 0, NULL, &env, &err), -EINVAL);
    cache_options o = {.runner_ups = 99};
    assert_int_equal(cache_open(f->dir, 0, &o, &env, &err), -EINVAL);
    /* read-write creates nested directories */
    snprintf(missing, sizeof(missing), "%s/a/b/c", f->dir);
    assert_int_equal(cache_open(missing, 0, NULL, &env, &err), 0);
    cache_close(env);
}

static void test_put_get_roundtrip(void **state)
{
    fixture *f = *state;
    cache_key k;
    test_key(&k, "NVIDIA H100", 1, 1024);
    cache_record r, g;
    test_record(&r, &k, "tile=128", 5000, 4096, 9);
    int rank = -2;
    assert_int_equal(cache_put(f->env, &r, &rank, NULL), 0);
    assert_int_equal(rank, 0);
    cache_record_init(&g);
    assert_int_equal(cache_get(f->env, &k, 0, &g, NULL), 0);
    assert_record_equal(&r, &g);
    /* shapes given in another order name the same key */
    cache_key k2 = k;
    k2.shapes[0] = k.shapes[1];
    k2.shapes[1] = k.shapes[0];
    assert_int_equal(cache_get(f->env, &k2, 0, &g, NULL), 0);
    assert_int_equal(cache_get(f->env, &k, 1, &g, NULL), -ENOENT);
    /* another problem (the digest), or another tolerance, is another key */
    k2.problem[7] ^= 1;
    kt_err err = {0};
    assert_int_equal(cache_get(f->env, &k2, 0, &g, &err), -ENOENT);
    assert_non_null(strstr(err.msg, "no record"));
    k2 = k;
    k2.tolerance = 1e-2;
    assert_int_equal(cache_get(f->env, &k2, 0, &g, &err), -ENOENT);
    assert_non_null(strstr(err.msg, "no record"));
    /* survives reopening read-only */
    reopen(f, CACHE_RDONLY, NULL);
    assert_int_equal(cache_get(f->env, &k, 0, &g, NULL), 0);
    assert_record_equal(&r, &g);
    assert_int_equal(cache_put(f->env, &r, NULL, &err), -EACCES);
    cache_record_free(&r);
    cache_record_free(&g);
}

static void test_unverified_refused(void **state)
{
    fixture *f = *state;
    cache_key k;
    test_key(&k, "g", 2, 8);
    cache_record r;
    test_record(&r, &k, "s", 10, 16, 1);
    r.verified = false;
    kt_err err = {0};
    assert_int_equal(cache_put(f->env, &r, NULL, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "unverified"));
    cache_stats st;
    assert_int_equal(cache_stat(f->env, &st, NULL), 0);
    assert_int_equal(st.records, 0);
    assert_int_equal(time_at(f->env, &k, 0), -ENOENT);
    cache_record_free(&r);
}

static void test_ranking_order_and_truncation(void **state)
{
    fixture *f = *state;
    cache_key k;
    test_key(&k, "g", 3, 64);
    const double times[] = {50, 20, 40, 10, 60, 30};
    const int expect_rank[] = {0, 0, 1, 0, -1, 2};
    for (int i = 0; i < 6; i++) {
        char s[16];
        snprintf(s, sizeof(s), "s%d", i);
        assert_int_equal(put(f->env, &k, s, times[i], 32, (uint8_t)i), expect_rank[i]);
    }
    const double want[] = {10, 20, 30, 40};
    for (int r = 0; r < 4; r++)
        assert_true(time_at(f->env, &k, r) == want[r]);
    assert_true(time_at(f->env, &k, 4) == -ENOENT);
    cache_stats st;
    assert_int_equal(cache_stat(f->env, &st, NULL), 0);
    assert_int_equal(st.records, 4);
    assert_int_equal(st.keys, 1);
}

static void test_ranking_runner_ups_option(void **state)
{
    fixture *f = *state;
    cache_options o = {.map_size = 1 << 20, .runner_ups = 0};
    reopen(f, 0, &o);
    cache_key k;
    test_key(&k, "g", 4, 64);
    assert_int_equal(put(f->env, &k, "a", 30, 8, 1), 0);
    assert_int_equal(put(f->env, &k, "b", 40, 8, 2), -1);
    assert_int_equal(put(f->env, &k, "c", 20, 8, 3), 0);
    assert_true(time_at(f->env, &k, 0) == 20);
    assert_true(time_at(f->env, &k, 1) == -ENOENT);
}

static void test_same_schedule_kept_once(void **state)
{
    fixture *f = *state;
    cache_key k;
    test_key(&k, "g", 5, 64);
    assert_int_equal(put(f->env, &k, "x", 10, 8, 1), 0);
    assert_int_equal(put(f->env, &k, "x", 8, 8, 2), 0);   /* re-measured faster: replaces */
    assert_int_equal(put(f->env, &k, "x", 12, 8, 3), -1); /* slower re-measure: dropped */
    assert_int_equal(put(f->env, &k, "y", 9, 8, 4), 1);
    assert_int_equal(put(f->env, &k, "y", 9, 8, 4), 1); /* byte-identical: no change */
    assert_true(time_at(f->env, &k, 0) == 8);
    assert_true(time_at(f->env, &k, 1) == 9);
    assert_true(time_at(f->env, &k, 2) == -ENOENT);
}

typedef struct collect {
    int n;
    double times[64];
    int ranks[64];
    int stop_after;
} collect;

static int collect_cb(const cache_record *r, int rank, void *ctx)
{
    collect *c = ctx;
    c->times[c->n] = r->time_ns;
    c->ranks[c->n] = rank;
    c->n++;
    return c->stop_after && c->n == c->stop_after ? 42 : 0;
}

static int list(cache_env *env, const uint8_t *p, size_t pl, bool best, size_t *corrupt)
{
    collect c = {0};
    kt_err err = {0};
    int rc = cache_list(env, p, pl, best, collect_cb, &c, corrupt, &err);
    if (rc != 0)
        fail_msg("cache_list: %s", err.msg);
    return c.n;
}

static void test_list_prefixes(void **state)
{
    fixture *f = *state;
    cache_key k;
    /* 2 GPUs x 2 signatures x 2 shapes, each with a best and a runner-up */
    for (int g = 0; g < 2; g++) {
        for (int s = 0; s < 2; s++) {
            for (int m = 1; m <= 2; m++) {
                test_key(&k, g ? "gpuB" : "gpuA", (uint8_t)(0x10 + s), m * 8);
                put(f->env, &k, "fast", 10, 8, 1);
                put(f->env, &k, "slow", 20, 8, 2);
            }
        }
    }
    assert_int_equal(list(f->env, NULL, 0, false, NULL), 16);
    assert_int_equal(list(f->env, NULL, 0, true, NULL), 8);
    uint8_t p[CACHE_KEY_MAX];
    size_t pl = 0;
    test_key(&k, "gpuA", 0x11, 8);
    cache_key_prefix(&k, CACHE_PREFIX_GPU, p, &pl);
    assert_int_equal(list(f->env, p, pl, true, NULL), 4);
    cache_key_prefix(&k, CACHE_PREFIX_SIGNATURE, p, &pl);
    assert_int_equal(list(f->env, p, pl, false, NULL), 4);
    cache_key_prefix(&k, CACHE_PREFIX_PRECISION, p, &pl);
    assert_int_equal(list(f->env, p, pl, true, NULL), 2);
    k.precision = OPS_PREC_REDUCED;
    cache_key_prefix(&k, CACHE_PREFIX_PRECISION, p, &pl);
    assert_int_equal(list(f->env, p, pl, true, NULL), 0);
    /* ranks come in order, and the callback's value stops the walk */
    collect c = {.stop_after = 3};
    assert_int_equal(cache_list(f->env, NULL, 0, false, collect_cb, &c, NULL, NULL), 42);
    assert_int_equal(c.n, 3);
    assert_int_equal(c.ranks[0], 0);
    assert_int_equal(c.ranks[1], 1);
    assert_true(c.times[0] == 10 && c.times[1] == 20);
}

static void test_delete(void **state)
{
    fixture *f = *state;
    cache_key a, b;
    test_key(&a, "g", 6, 1);
    test_key(&b, "g", 6, 10); /* its shapes text extends a's: "M=1" vs "M=10" */
    put(f->env, &a, "s1", 10, 8, 1);
    put(f->env, &a, "s2", 11, 8, 2);
    put(f->env, &b, "s1", 20, 8, 3);
    put(f->env, &b, "s2", 21, 8, 4);
    assert_true(time_at(f->env, &a, 1) == 11);
    assert_true(time_at(f->env, &b, 1) == 21);
    assert_int_equal(cache_delete(f->env, &a, NULL), 0);
    assert_true(time_at(f->env, &a, 0) == -ENOENT);
    assert_true(time_at(f->env, &a, 1) == -ENOENT);
    assert_true(time_at(f->env, &b, 0) == 20);
    assert_true(time_at(f->env, &b, 1) == 21);
    kt_err err = {0};
    assert_int_equal(cache_delete(f->env, &a, &err), -ENOENT);
    assert_int_equal(list(f->env, NULL, 0, false, NULL), 2);
}

static void check_cubin(const cache_record *r, size_t len, uint8_t seed)
{
    assert_int_equal(r->cubin_len, len);
    for (size_t i = 0; i < len; i += 997)
        assert_int_equal(r->cubin[i], (uint8_t)(seed + i * 31 + (i >> 8)));
}

static void test_map_grows_from_1mib(void **state)
{
    fixture *f = *state;
    cache_stats st;
    assert_int_equal(cache_stat(f->env, &st, NULL), 0);
    size_t initial = st.map_size;
    assert_true(initial < (2u << 20));
    const size_t big = 512 << 10;
    cache_key k;
    for (int i = 0; i < 40; i++) { /* 20 MiB of cubins */
        test_key(&k, "g", 7, i + 1);
        assert_int_equal(put(f->env, &k, "s", 100 + i, big, (uint8_t)i), 0);
    }
    assert_int_equal(cache_stat(f->env, &st, NULL), 0);
    assert_true(st.map_size >= (20u << 20));
    assert_true(st.map_size > initial);
    assert_true(st.map_used > (20u << 20));
    assert_int_equal(st.records, 40);
    /* readable now and after reopening with the small initial size (the file's size wins) */
    cache_options o = {.map_size = 1 << 20, .runner_ups = -1};
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < 40; i++) {
            test_key(&k, "g", 7, i + 1);
            cache_record r;
            cache_record_init(&r);
            assert_int_equal(cache_get(f->env, &k, 0, &r, NULL), 0);
            check_cubin(&r, big, (uint8_t)i);
            cache_record_free(&r);
        }
        reopen(f, 0, &o);
    }
}

static void test_map_growth_limit(void **state)
{
    fixture *f = *state;
    cache_options o = {.map_size = 1 << 20, .max_map_size = 2 << 20, .runner_ups = -1};
    reopen(f, 0, &o);
    cache_key k;
    int stored = 0, rc = 0;
    kt_err err = {0};
    for (int i = 0; i < 10 && rc == 0; i++) {
        test_key(&k, "g", 8, i + 1);
        cache_record r;
        test_record(&r, &k, "s", 10, 400 << 10, (uint8_t)i);
        rc = cache_put(f->env, &r, NULL, &err);
        cache_record_free(&r);
        stored += rc == 0;
    }
    assert_int_equal(rc, -ENOSPC);
    assert_non_null(strstr(err.msg, "full"));
    assert_true(stored >= 2 && stored < 10);
    cache_stats st;
    assert_int_equal(cache_stat(f->env, &st, NULL), 0);
    assert_int_equal(st.map_size, 2u << 20);
    assert_int_equal(st.records, (size_t)stored);
    for (int i = 0; i < stored; i++) { /* the failed write left the others intact */
        test_key(&k, "g", 8, i + 1);
        assert_true(time_at(f->env, &k, 0) == 10);
    }
}

/* Flips one byte in the middle of the stored value of (k, rank) with raw LMDB. */
static void corrupt_stored(fixture *f, const cache_key *k, int rank)
{
    cache_close(f->env);
    f->env = NULL;
    uint8_t key[CACHE_KEY_MAX + 1];
    size_t kl = 0;
    assert_int_equal(cache_key_encode(k, key, sizeof(key), &kl, NULL), 0);
    key[kl++] = (uint8_t)rank;
    MDB_env *e;
    MDB_txn *t;
    MDB_dbi d;
    assert_int_equal(raw_open(f->dir, &e, &t, &d, "kernels"), 0);
    MDB_val mk = {.mv_size = kl, .mv_data = key}, mv;
    assert_int_equal(mdb_get(t, d, &mk, &mv), 0);
    uint8_t *copy = malloc(mv.mv_size);
    memcpy(copy, mv.mv_data, mv.mv_size);
    copy[mv.mv_size / 2] ^= 0x20;
    mv.mv_data = copy;
    assert_int_equal(mdb_put(t, d, &mk, &mv, 0), 0);
    assert_int_equal(mdb_txn_commit(t), 0);
    mdb_env_close(e);
    free(copy);
    reopen(f, 0, NULL);
}

/* cache_gpus: one fingerprint per GPU however many records it has, drivers told apart. */
static void test_gpus_listed_once_each(void **state)
{
    fixture *f = *state;
    const char *names[] = {"gpu-a", "gpu-b", "gpu-c"};
    for (int g = 0; g < 3; g++)
        for (int m = 1; m <= 20; m++) {
            cache_key k;
            test_key(&k, names[g], (uint8_t)(m % 4), m);
            put(f->env, &k, "s1", 10 + m, 100, (uint8_t)m);
        }
    cache_key newer;
    test_key(&newer, "gpu-a", 1, 7);
    newer.gpu.driver_version = 13000;
    put(f->env, &newer, "s1", 10, 100, 1);
    cache_gpu *gpus = NULL;
    size_t n = 0;
    kt_err err = {0};
    assert_int_equal(cache_gpus(f->env, &gpus, &n, &err), 0);
    assert_int_equal(n, 4);
    int seen[3] = {0}, newer_seen = 0;
    for (size_t i = 0; i < n; i++)
        for (int g = 0; g < 3; g++)
            if (strcmp(gpus[i].name, names[g]) == 0) {
                seen[g]++;
                newer_seen += gpus[i].driver_version == 13000;
            }
    assert_int_equal(seen[0], 2);
    assert_int_equal(seen[1], 1);
    assert_int_equal(seen[2], 1);
    assert_int_equal(newer_seen, 1);
    free(gpus);
}

static void test_corrupt_record_skipped(void **state)
{
    fixture *f = *state;
    cache_key a, b;
    test_key(&a, "g", 9, 16);
    test_key(&b, "g", 9, 32);
    put(f->env, &a, "s1", 10, 1000, 1);
    put(f->env, &a, "s2", 20, 1000, 2);
    put(f->env, &b, "s1", 30, 1000, 3);
    corrupt_stored(f, &a, 0);
    cache_record r;
    cache_record_init(&r);
    kt_err err = {0};
    assert_int_equal(cache_get(f->env, &a, 0, &r, &err), -EBADMSG);
    assert_non_null(strstr(err.msg, "checksum"));
    assert_null(r.cubin); /* never served */
    assert_true(time_at(f->env, &a, 1) == 20);
    size_t corrupt = 0;
    assert_int_equal(list(f->env, NULL, 0, false, &corrupt), 2);
    assert_int_equal(corrupt, 1);
    assert_int_equal(list(f->env, NULL, 0, true, &corrupt), 1); /* b only */
    /* a later put drops the corrupt record from the ranking */
    assert_int_equal(put(f->env, &a, "s3", 15, 8, 4), 0);
    assert_true(time_at(f->env, &a, 0) == 15);
    assert_true(time_at(f->env, &a, 1) == 20);
    assert_int_equal(list(f->env, NULL, 0, false, &corrupt), 3);
    assert_int_equal(corrupt, 0);
    cache_record_free(&r);
}

static void test_record_under_wrong_key_refused(void **state)
{
    fixture *f = *state;
    cache_key a, b;
    test_key(&a, "g", 10, 16);
    test_key(&b, "g", 10, 32);
    put(f->env, &a, "s", 10, 8, 1);
    cache_close(f->env);
    f->env = NULL;
    /* copy a's (valid, checksummed) record under b's key */
    uint8_t ka[CACHE_KEY_MAX + 1], kb[CACHE_KEY_MAX + 1];
    size_t la = 0, lb = 0;
    cache_key_encode(&a, ka, sizeof(ka), &la, NULL);
    cache_key_encode(&b, kb, sizeof(kb), &lb, NULL);
    ka[la++] = 0;
    kb[lb++] = 0;
    MDB_env *e;
    MDB_txn *t;
    MDB_dbi d;
    assert_int_equal(raw_open(f->dir, &e, &t, &d, "kernels"), 0);
    MDB_val mk = {.mv_size = la, .mv_data = ka}, mv;
    assert_int_equal(mdb_get(t, d, &mk, &mv), 0);
    MDB_val mkb = {.mv_size = lb, .mv_data = kb};
    assert_int_equal(mdb_put(t, d, &mkb, &mv, 0), 0);
    assert_int_equal(mdb_txn_commit(t), 0);
    mdb_env_close(e);
    reopen(f, CACHE_RDONLY, NULL);
    assert_true(time_at(f->env, &b, 0) == -EBADMSG);
    size_t corrupt = 0;
    assert_int_equal(list(f->env, NULL, 0, false, &corrupt), 1);
    assert_int_equal(corrupt, 1);
}

/* ---- a reader in another process ---- */

typedef struct child_ctx {
    int to_parent, from_parent;
    int seen;
} child_ctx;

static int child_cb(const cache_record *r, int rank, void *ctx)
{
    child_ctx *c = ctx;
    if (c->seen++ == 0) {
        char ch = 'R';
        char in = 0;
        /* inside the read transaction: let the writer run, and wait until it has committed */
        if (write(c->to_parent, &ch, 1) != 1 || read(c->from_parent, &in, 1) != 1 || in != 'W')
            return 100;
    }
    return 0;
}

static int count_cb(const cache_record *r, int rank, void *ctx)
{
    (*(int *)ctx)++;
    return 0;
}

static int child_main(const char *dir, int to_parent, int from_parent, int before, int added)
{
    alarm(60);
    cache_env *env = NULL;
    kt_err err = {0};
    if (cache_open(dir, CACHE_RDONLY, NULL, &env, &err) != 0)
        return 10;
    child_ctx c = {to_parent, from_parent, 0};
    if (cache_list(env, NULL, 0, false, child_cb, &c, NULL, &err) != 0)
        return 11;
    if (c.seen != before) /* the snapshot did not move under us */
        return 12;
    int n = 0;
    if (cache_list(env, NULL, 0, false, count_cb, &n, NULL, &err) != 0)
        return 13;
    if (n != before + added) /* a new transaction sees the writer's commits */
        return 14;
    for (int i = 0; i < added; i++) {
        cache_key k;
        test_key(&k, "g", 12, 100 + i);
        cache_record r;
        cache_record_init(&r);
        if (cache_get(env, &k, 0, &r, &err) != 0 || r.cubin_len != (256u << 10))
            return 15;
        cache_record_free(&r);
    }
    cache_close(env);
    return 0;
}

static void test_reader_in_other_process(void **state)
{
    fixture *f = *state;
    cache_key k;
    for (int i = 0; i < 3; i++) {
        test_key(&k, "g", 11, i + 1);
        put(f->env, &k, "s", 10, 64, (uint8_t)i);
    }
    /* the child must not inherit an open environment: close ours, fork, reopen on both sides */
    cache_close(f->env);
    f->env = NULL;
    int p2c[2], c2p[2];
    assert_int_equal(pipe(p2c), 0);
    assert_int_equal(pipe(c2p), 0);
    const int added = 8;
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(p2c[1]);
        close(c2p[0]);
        _exit(child_main(f->dir, c2p[1], p2c[0], 3, added));
    }
    close(p2c[0]);
    close(c2p[1]);
    cache_options o = {.map_size = 1 << 20, .runner_ups = -1};
    reopen(f, 0, &o);
    cache_stats st;
    assert_int_equal(cache_stat(f->env, &st, NULL), 0);
    size_t before = st.map_size;
    char ch = 0;
    assert_int_equal(read(c2p[0], &ch, 1), 1);
    assert_int_equal(ch, 'R');
    /* the child holds a read transaction; these commits (and a map growth) must not block */
    for (int i = 0; i < added; i++) {
        test_key(&k, "g", 12, 100 + i);
        put(f->env, &k, "s", 10, 256 << 10, (uint8_t)i);
    }
    assert_int_equal(cache_stat(f->env, &st, NULL), 0);
    assert_true(st.map_size > before);
    ch = 'W';
    assert_int_equal(write(p2c[1], &ch, 1), 1);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    close(p2c[1]);
    close(c2p[0]);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
}

/* ---- generation ---- */

static uint64_t generation(cache_env *env)
{
    uint64_t g = 0;
    kt_err err = {0};
    if (cache_generation(env, &g, &err) != 0)
        fail_msg("cache_generation: %s", err.msg);
    return g;
}

/* The child: waits for 'G', writes one record through its own handle, answers 'D'. */
static int gen_child(const char *dir, int to_parent, int from_parent)
{
    alarm(60);
    char ch = 0;
    if (read(from_parent, &ch, 1) != 1 || ch != 'G')
        return 20;
    cache_env *env = NULL;
    kt_err err = {0};
    if (cache_open(dir, 0, NULL, &env, &err) != 0)
        return 21;
    cache_key k;
    test_key(&k, "g", 14, 7);
    cache_record r;
    test_record(&r, &k, "s", 10, 64, 1);
    int rc = cache_put(env, &r, NULL, &err);
    cache_record_free(&r);
    cache_close(env);
    if (rc != 0)
        return 22;
    ch = 'D';
    return write(to_parent, &ch, 1) == 1 ? 0 : 23;
}

static void test_generation(void **state)
{
    fixture *f = *state;
    uint64_t g = 0;
    assert_int_equal(cache_generation(NULL, &g, NULL), -EINVAL);
    assert_int_equal(cache_generation(f->env, NULL, NULL), -EINVAL);
    /* reads leave it; every commit (record, trial, journal entry, delete) raises it */
    uint64_t g0 = generation(f->env);
    cache_key k;
    test_key(&k, "g", 14, 1);
    assert_true(time_at(f->env, &k, 0) < 0);
    cache_stats st;
    assert_int_equal(cache_stat(f->env, &st, NULL), 0);
    assert_int_equal(generation(f->env), g0);
    put(f->env, &k, "s", 10, 64, 1);
    uint64_t g1 = generation(f->env);
    assert_true(g1 > g0);
    assert_true(time_at(f->env, &k, 0) > 0);
    assert_int_equal(generation(f->env), g1);
    cache_trial t = {.status = CACHE_TRIAL_OK, .time_ns = 5};
    snprintf(t.cand, sizeof(t.cand), "c1");
    assert_int_equal(cache_trial_append(f->env, &k, &t, NULL), 0);
    uint64_t g2 = generation(f->env);
    assert_true(g2 > g1);
    assert_int_equal(cache_delete(f->env, &k, NULL), 0);
    uint64_t g3 = generation(f->env);
    assert_true(g3 > g2);
    /* a failed write commits nothing */
    assert_int_equal(cache_delete(f->env, &k, NULL), -ENOENT);
    assert_int_equal(generation(f->env), g3);

    /* a commit by another process is seen through a handle opened before it */
    cache_close(f->env);
    f->env = NULL;
    int p2c[2], c2p[2];
    assert_int_equal(pipe(p2c), 0);
    assert_int_equal(pipe(c2p), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(p2c[1]);
        close(c2p[0]);
        _exit(gen_child(f->dir, c2p[1], p2c[0]));
    }
    close(p2c[0]);
    close(c2p[1]);
    cache_options o = {.map_size = 1 << 20, .runner_ups = -1};
    reopen(f, 0, &o);
    uint64_t g4 = generation(f->env);
    assert_int_equal(g4, g3);
    cache_key k2;
    test_key(&k2, "g", 14, 7);
    assert_true(time_at(f->env, &k2, 0) < 0);
    char ch = 'G';
    assert_int_equal(write(p2c[1], &ch, 1), 1);
    assert_int_equal(read(c2p[0], &ch, 1), 1);
    assert_int_equal(ch, 'D');
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    close(p2c[1]);
    close(c2p[0]);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    uint64_t g5 = generation(f->env);
    assert_true(g5 > g4);
    assert_true(time_at(f->env, &k2, 0) > 0);
    assert_int_equal(generation(f->env), g5);
}

/* ---- trials ---- */

typedef struct trials_seen {
    int n;
    char cands[8][CACHE_CAND_MAX];
} trials_seen;

static int trial_cb(const cache_trial *t, void *ctx)
{
    trials_seen *s = ctx;
    if (s->n < 8)
        snprintf(s->cands[s->n], sizeof(s->cands[0]), "%s", t->cand);
    s->n++;
    return 0;
}

static void test_trials_append_get_iterate(void **state)
{
    fixture *f = *state;
    cache_key a, b;
    test_key(&a, "g", 13, 1);
    test_key(&b, "g", 13, 10); /* shapes text extends a's */
    const char *cands[] = {"row/tpr=128", "gemm/t=64", "gemm/t=128"};
    for (int i = 0; i < 3; i++) {
        cache_trial t = {0};
        snprintf(t.cand, sizeof(t.cand), "%s", cands[i]);
        t.status = i == 2 ? CACHE_TRIAL_HANG : CACHE_TRIAL_OK;
        t.time_ns = 100 + i;
        t.ts = 1700000000 + i;
        assert_int_equal(cache_trial_append(f->env, &a, &t, NULL), 0);
    }
    cache_trial t = {.status = CACHE_TRIAL_COMPILE_ERROR, .ts = 1};
    snprintf(t.cand, sizeof(t.cand), "gemm/t=64");
    snprintf(t.detail, sizeof(t.detail), "error: too many resources");
    assert_int_equal(cache_trial_append(f->env, &b, &t, NULL), 0);

    trials_seen s = {0};
    assert_int_equal(cache_trial_foreach(f->env, &a, trial_cb, &s, NULL), 0);
    assert_int_equal(s.n, 3);
    assert_string_equal(s.cands[0], "gemm/t=128"); /* candidate-id order */
    assert_string_equal(s.cands[1], "gemm/t=64");
    assert_string_equal(s.cands[2], "row/tpr=128");
    memset(&s, 0, sizeof(s));
    assert_int_equal(cache_trial_foreach(f->env, &b, trial_cb, &s, NULL), 0);
    assert_int_equal(s.n, 1);

    cache_trial got;
    assert_int_equal(cache_trial_get(f->env, &a, "gemm/t=128", &got, NULL), 0);
    assert_int_equal(got.status, CACHE_TRIAL_HANG);
    assert_true(got.time_ns == 102);
    assert_int_equal(cache_trial_get(f->env, &b, "gemm/t=64", &got, NULL), 0);
    assert_int_equal(got.status, CACHE_TRIAL_COMPILE_ERROR);
    assert_string_equal(got.detail, "error: too many resources");
    assert_int_equal(cache_trial_get(f->env, &b, "row/tpr=128", &got, NULL), -ENOENT);
    /* a second outcome for the same candidate replaces the first */
    t.status = CACHE_TRIAL_WRONG;
    t.error = 0.5;
    assert_int_equal(cache_trial_append(f->env, &b, &t, NULL), 0);
    assert_int_equal(cache_trial_get(f->env, &b, "gemm/t=64", &got, NULL), 0);
    assert_int_equal(got.status, CACHE_TRIAL_WRONG);
    cache_stats st;
    assert_int_equal(cache_stat(f->env, &st, NULL), 0);
    assert_int_equal(st.trials, 4);
    assert_int_equal(st.jobs, 0);
    /* bad candidate ids */
    memset(t.cand, 'x', sizeof(t.cand));
    assert_int_equal(cache_trial_append(f->env, &a, &t, NULL), -EINVAL);
    assert_int_equal(cache_trial_get(f->env, &a, "", &got, NULL), -EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_open_creates_databases_and_schema, setup, teardown),
        cmocka_unit_test_setup_teardown(test_future_schema_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_schema1_migrated, setup, teardown),
        cmocka_unit_test_setup_teardown(test_open_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_put_get_roundtrip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unverified_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ranking_order_and_truncation, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ranking_runner_ups_option, setup, teardown),
        cmocka_unit_test_setup_teardown(test_same_schedule_kept_once, setup, teardown),
        cmocka_unit_test_setup_teardown(test_list_prefixes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_delete, setup, teardown),
        cmocka_unit_test_setup_teardown(test_map_grows_from_1mib, setup, teardown),
        cmocka_unit_test_setup_teardown(test_map_growth_limit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_corrupt_record_skipped, setup, teardown),
        cmocka_unit_test_setup_teardown(test_gpus_listed_once_each, setup, teardown),
        cmocka_unit_test_setup_teardown(test_record_under_wrong_key_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reader_in_other_process, setup, teardown),
        cmocka_unit_test_setup_teardown(test_trials_append_get_iterate, setup, teardown),
        cmocka_unit_test_setup_teardown(test_generation, setup, teardown),
        cmocka_unit_test_setup_teardown(test_backup, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
