/* The job journal (cache/job.c): round trip of every field, refusal of bad jobs, a corrupt entry
 * reported and skipped, an entry written before compile_s / measure_s existed, the next id, and
 * the walk in id order. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "test_cache_util.h"

#include "cache/internal.h" /* cache_value_unpack / cache_value_finish: writing an old entry */

typedef struct fixture {
    char *dir;
    cache_env *env;
} fixture;

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof(*f));
    f->dir = tmpdir_new();
    kt_err err = {0};
    if (!f->dir || cache_open(f->dir, 0, NULL, &f->env, &err) < 0) {
        print_error("setup: %s\n", err.msg);
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

static void fill_job(cache_job *j, uint64_t id, cache_job_state st)
{
    memset(j, 0, sizeof(*j));
    j->id = id;
    j->state = st;
    j->priority = -7;
    j->gpu = 1;
    snprintf(j->name, sizeof(j->name), "gemm_bias_relu_%llu", (unsigned long long)id);
    for (int i = 0; i < OPS_SIG_BYTES; i++)
        j->sig[i] = (uint8_t)(i * 7 + id);
    j->n_shapes = 2;
    snprintf(j->shapes[0].name, sizeof(j->shapes[0].name), "M");
    j->shapes[0].value = 1024;
    snprintf(j->shapes[1].name, sizeof(j->shapes[1].name), "N");
    j->shapes[1].value = 512;
    j->precision = OPS_PREC_TF32;
    j->tolerance = 1e-3;
    j->budget_s = 90.5;
    j->graph_len = 300;
    j->graph = malloc(j->graph_len);
    for (size_t i = 0; i < j->graph_len; i++)
        j->graph[i] = (uint8_t)(i ^ id);
    j->submitted = 1795000000;
    j->started = 1795000003;
    j->finished = 1795000063;
    j->elapsed_s = 60.25;
    j->trials = 40;
    j->measured = 38;
    j->resumed = 2;
    j->best_ns = 5980.5;
    j->baseline_ns = 3780;
    j->err_norm = 1.2e-4;
    snprintf(j->family, sizeof(j->family), "gemm");
    snprintf(j->schedule, sizeof(j->schedule), "gemm mma=f16 tile=128x128x32 stages=3");
    j->record = true;
    j->error[0] = '\0';
    j->n_failures = 2;
    snprintf(j->failures[0].name, sizeof(j->failures[0].name), "wrong");
    j->failures[0].count = 1;
    snprintf(j->failures[1].name, sizeof(j->failures[1].name), "compile_error");
    j->failures[1].count = 2;
    j->compile_s = 12.5;
    j->measure_s = 30.75;
    j->owner = 1000 + (uint32_t)id;
    j->elapsed_at_ms = 1795000000123;
    j->trials_since_ms = 1795000000042;
    j->floor_ns = 2140.5;
}

static void assert_job_equal(const cache_job *a, const cache_job *b)
{
    assert_int_equal(a->id, b->id);
    assert_int_equal(a->state, b->state);
    assert_int_equal(a->priority, b->priority);
    assert_int_equal(a->gpu, b->gpu);
    assert_string_equal(a->name, b->name);
    assert_memory_equal(a->sig, b->sig, OPS_SIG_BYTES);
    assert_int_equal(a->n_shapes, b->n_shapes);
    for (int i = 0; i < a->n_shapes; i++) {
        assert_string_equal(a->shapes[i].name, b->shapes[i].name);
        assert_int_equal(a->shapes[i].value, b->shapes[i].value);
    }
    assert_int_equal(a->precision, b->precision);
    assert_true(a->tolerance == b->tolerance && a->budget_s == b->budget_s);
    assert_int_equal(a->graph_len, b->graph_len);
    assert_memory_equal(a->graph, b->graph, a->graph_len);
    assert_int_equal(a->submitted, b->submitted);
    assert_int_equal(a->started, b->started);
    assert_int_equal(a->finished, b->finished);
    assert_true(a->elapsed_s == b->elapsed_s);
    assert_int_equal(a->trials, b->trials);
    assert_int_equal(a->measured, b->measured);
    assert_int_equal(a->resumed, b->resumed);
    assert_true(a->best_ns == b->best_ns && a->baseline_ns == b->baseline_ns);
    assert_true(a->err_norm == b->err_norm);
    assert_string_equal(a->family, b->family);
    assert_string_equal(a->schedule, b->schedule);
    assert_int_equal(a->record, b->record);
    assert_string_equal(a->error, b->error);
    assert_int_equal(a->n_failures, b->n_failures);
    for (int i = 0; i < a->n_failures; i++) {
        assert_string_equal(a->failures[i].name, b->failures[i].name);
        assert_int_equal(a->failures[i].count, b->failures[i].count);
    }
    assert_true(a->compile_s == b->compile_s && a->measure_s == b->measure_s);
    assert_int_equal(a->owner, b->owner);
    assert_int_equal(a->elapsed_at_ms, b->elapsed_at_ms);
    assert_int_equal(a->trials_since_ms, b->trials_since_ms);
    assert_true(a->floor_ns == b->floor_ns);
}

static void test_state_names(void **state)
{
    (void)state;
    for (int s = 0; s < CACHE_JOB_STATE_COUNT; s++) {
        cache_job_state back = CACHE_JOB_STATE_COUNT;
        assert_int_equal(cache_job_state_from_name(cache_job_state_name(s), &back), 0);
        assert_int_equal(back, s);
    }
    cache_job_state x;
    assert_null(cache_job_state_name(CACHE_JOB_STATE_COUNT));
    assert_int_equal(cache_job_state_from_name("paused", &x), -EINVAL);
}

static void test_round_trip(void **state)
{
    fixture *f = *state;
    cache_job j, back;
    kt_err err = {0};
    fill_job(&j, 17, CACHE_JOB_RUNNING);
    assert_int_equal(cache_job_put(f->env, &j, &err), 0);
    assert_int_equal(cache_job_get(f->env, 17, &back, &err), 0);
    assert_job_equal(&j, &back);
    cache_job_free(&back);

    /* replace: the latest state wins, and a job without a graph round-trips too */
    j.state = CACHE_JOB_DONE;
    j.priority = 100;
    free(j.graph);
    j.graph = NULL;
    j.graph_len = 0;
    j.n_failures = 0;
    snprintf(j.error, sizeof(j.error), "no candidate verified in 40 trials");
    assert_int_equal(cache_job_put(f->env, &j, &err), 0);
    assert_int_equal(cache_job_get(f->env, 17, &back, &err), 0);
    assert_job_equal(&j, &back);
    cache_job_free(&back);
    assert_null(back.graph);

    /* survives a reopen */
    cache_close(f->env);
    assert_int_equal(cache_open(f->dir, 0, NULL, &f->env, &err), 0);
    assert_int_equal(cache_job_get(f->env, 17, &back, &err), 0);
    assert_job_equal(&j, &back);
    cache_job_free(&back);
    cache_job_free(&j);

    assert_int_equal(cache_job_get(f->env, 18, &back, &err), -ENOENT);
    cache_stats st;
    assert_int_equal(cache_stat(f->env, &st, &err), 0);
    assert_int_equal(st.jobs, 1);
}

static void test_refuses_bad_jobs(void **state)
{
    fixture *f = *state;
    cache_job j;
    kt_err err = {0};
    fill_job(&j, 0, CACHE_JOB_QUEUED);
    assert_int_equal(cache_job_put(f->env, &j, &err), -EINVAL);
    j.id = 3;
    j.priority = 101;
    assert_int_equal(cache_job_put(f->env, &j, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "priority"));
    j.priority = 0;
    j.state = CACHE_JOB_STATE_COUNT;
    assert_int_equal(cache_job_put(f->env, &j, &err), -EINVAL);
    j.state = CACHE_JOB_QUEUED;
    j.budget_s = -1;
    assert_int_equal(cache_job_put(f->env, &j, &err), -EINVAL);
    j.budget_s = 10;
    j.n_shapes = CACHE_MAX_SHAPES + 1;
    assert_int_equal(cache_job_put(f->env, &j, &err), -EINVAL);
    j.n_shapes = 0;
    j.n_failures = -1;
    assert_int_equal(cache_job_put(f->env, &j, &err), -EINVAL);
    j.n_failures = 0;
    j.compile_s = -1;
    assert_int_equal(cache_job_put(f->env, &j, &err), -EINVAL);
    j.compile_s = 0;
    j.measure_s = NAN;
    assert_int_equal(cache_job_put(f->env, &j, &err), -EINVAL);
    cache_job_free(&j);
    uint64_t next = 0;
    assert_int_equal(cache_job_next_id(f->env, &next, &err), 0);
    assert_int_equal(next, 1); /* nothing was written */
}

typedef struct walk {
    uint64_t ids[16];
    int n;
} walk;

static int walk_cb(const cache_job *j, void *ctx)
{
    walk *w = ctx;
    w->ids[w->n++] = j->id;
    return j->id == 300 ? 42 : 0;
}

static void test_foreach_order_and_next_id(void **state)
{
    fixture *f = *state;
    kt_err err = {0};
    uint64_t next = 0;
    assert_int_equal(cache_job_next_id(f->env, &next, &err), 0);
    assert_int_equal(next, 1);
    /* written out of order, with ids across byte boundaries: the walk goes by id */
    const uint64_t ids[] = {256, 2, 70000, 1, 255};
    for (size_t i = 0; i < KT_ARRAY_LEN(ids); i++) {
        cache_job j;
        fill_job(&j, ids[i], CACHE_JOB_QUEUED);
        assert_int_equal(cache_job_put(f->env, &j, &err), 0);
        cache_job_free(&j);
    }
    walk w = {0};
    size_t corrupt = 9;
    assert_int_equal(cache_job_foreach(f->env, walk_cb, &w, &corrupt, &err), 0);
    assert_int_equal(corrupt, 0);
    assert_int_equal(w.n, 5);
    const uint64_t want[] = {1, 2, 255, 256, 70000};
    for (int i = 0; i < 5; i++)
        assert_int_equal(w.ids[i], want[i]);
    assert_int_equal(cache_job_next_id(f->env, &next, &err), 0);
    assert_int_equal(next, 70001);

    /* a non-zero callback return stops the walk and is returned */
    cache_job j;
    fill_job(&j, 300, CACHE_JOB_QUEUED);
    assert_int_equal(cache_job_put(f->env, &j, &err), 0);
    cache_job_free(&j);
    memset(&w, 0, sizeof(w));
    assert_int_equal(cache_job_foreach(f->env, walk_cb, &w, NULL, &err), 42);
    assert_int_equal(w.n, 5); /* 1, 2, 255, 256, then 300 stopped it before 70000 */
}

/* Flips one byte of job id's stored value with raw LMDB. */
static void corrupt_job(fixture *f, uint64_t id)
{
    cache_close(f->env);
    f->env = NULL;
    uint8_t key[8];
    for (int i = 0; i < 8; i++)
        key[i] = (uint8_t)(id >> (8 * (7 - i)));
    MDB_env *e;
    MDB_txn *t;
    MDB_dbi d;
    assert_int_equal(raw_open(f->dir, &e, &t, &d, "jobs"), 0);
    MDB_val mk = {.mv_size = 8, .mv_data = key}, mv;
    assert_int_equal(mdb_get(t, d, &mk, &mv), 0);
    uint8_t *copy = malloc(mv.mv_size);
    memcpy(copy, mv.mv_data, mv.mv_size);
    copy[mv.mv_size / 2] ^= 0x20;
    mv.mv_data = copy;
    assert_int_equal(mdb_put(t, d, &mk, &mv, 0), 0);
    assert_int_equal(mdb_txn_commit(t), 0);
    mdb_env_close(e);
    free(copy);
    kt_err err = {0};
    assert_int_equal(cache_open(f->dir, 0, NULL, &f->env, &err), 0);
}

/* Rewrites job id's stored value with raw LMDB: its map re-packed with every key but drop (NULL:
 * none) and with value of key change (NULL: none) replaced by the string to (to_len bytes), under
 * a fresh checksum. */
static void rewrite_job_to(fixture *f, uint64_t id, const char *const *drop, int n_drop,
                           const char *change, const char *to, size_t to_len)
{
    cache_close(f->env);
    f->env = NULL;
    uint8_t key[8];
    for (int i = 0; i < 8; i++)
        key[i] = (uint8_t)(id >> (8 * (7 - i)));
    MDB_env *e;
    MDB_txn *t;
    MDB_dbi d;
    assert_int_equal(raw_open(f->dir, &e, &t, &d, "jobs"), 0);
    MDB_val mk = {.mv_size = 8, .mv_data = key}, mv;
    assert_int_equal(mdb_get(t, d, &mk, &mv), 0);
    msgpack_unpacked res;
    msgpack_unpacked_init(&res);
    cache_dec dec = {.doc = "job", .err = NULL};
    assert_int_equal(cache_value_unpack(mv.mv_data, mv.mv_size, &res, NULL, &dec), 0);
    const msgpack_object_map *m = &res.data.via.map;
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    uint32_t keep = 0;
    bool dropped[64] = {false};
    for (uint32_t i = 0; i < m->size; i++) {
        for (int k = 0; k < n_drop; k++)
            if (kt_mp_str_is(&m->ptr[i].key, drop[k]))
                dropped[i] = true;
        keep += !dropped[i];
    }
    assert_int_equal(keep, m->size - (uint32_t)n_drop);
    msgpack_pack_map(&pk, keep);
    for (uint32_t i = 0; i < m->size; i++) {
        if (dropped[i])
            continue;
        msgpack_pack_object(&pk, m->ptr[i].key);
        if (change && kt_mp_str_is(&m->ptr[i].key, change)) {
            msgpack_pack_str(&pk, to_len);
            msgpack_pack_str_body(&pk, to, to_len);
        } else {
            msgpack_pack_object(&pk, m->ptr[i].val);
        }
    }
    uint8_t *buf = NULL;
    size_t len = 0;
    assert_int_equal(cache_value_finish(&sb, &buf, &len), 0);
    msgpack_unpacked_destroy(&res);
    mv.mv_data = buf;
    mv.mv_size = len;
    assert_int_equal(mdb_put(t, d, &mk, &mv, 0), 0);
    assert_int_equal(mdb_txn_commit(t), 0);
    mdb_env_close(e);
    free(buf);
    kt_err err = {0};
    assert_int_equal(cache_open(f->dir, 0, NULL, &f->env, &err), 0);
}

static void rewrite_job(fixture *f, uint64_t id, const char *const *drop, int n_drop,
                        const char *change)
{
    rewrite_job_to(f, id, drop, n_drop, change, "slow", 4);
}

/* A journal written before names were checked may hold a name with a newline, an ESC or bytes
 * that are not UTF-8: the entry still decodes, the name escaped (so neither a log, a terminal nor
 * a strict msgpack decoder of a `jobs` reply ever sees it raw), and it can be written back. */
static void test_entry_with_bad_name(void **state)
{
    fixture *f = *state;
    kt_err err = {0};
    cache_job j, back;
    fill_job(&j, 1, CACHE_JOB_FAILED);
    assert_int_equal(cache_job_put(f->env, &j, &err), 0);
    cache_job_free(&j);
    static const char name[] = "x\n<0>emerg forged\x1b[2J\xff";
    rewrite_job_to(f, 1, NULL, 0, "name", name, sizeof(name) - 1);
    static const char error[] = "cannot compile 'y\r\n'";
    rewrite_job_to(f, 1, NULL, 0, "error", error, sizeof(error) - 1);
    assert_int_equal(cache_job_get(f->env, 1, &back, &err), 0);
    assert_string_equal(back.name, "x\\x0a<0>emerg forged\\x1b[2J\\xff");
    assert_string_equal(back.error, "cannot compile 'y\\x0d\\x0a'");
    assert_true(kt_text_clean(back.name, strlen(back.name)));
    /* what decodes can be saved again (the daemon saves a job when it changes) */
    assert_int_equal(cache_job_put(f->env, &back, &err), 0);
    cache_job_free(&back);
    /* a name the encoder is handed raw is refused */
    fill_job(&j, 2, CACHE_JOB_DONE);
    snprintf(j.name, sizeof(j.name), "a\nb");
    assert_int_equal(cache_job_put(f->env, &j, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "a\\x0ab"));
    cache_job_free(&j);
}

/* A journal written before the tuning cost was kept: its entries still decode, with 0 for both;
 * a present key is still checked. */
static void test_entry_without_cost(void **state)
{
    fixture *f = *state;
    kt_err err = {0};
    cache_job j, back;
    for (uint64_t id = 1; id <= 3; id++) {
        fill_job(&j, id, CACHE_JOB_DONE);
        assert_int_equal(cache_job_put(f->env, &j, &err), 0);
        cache_job_free(&j);
    }
    const char *const both[] = {"compile_s", "measure_s"};
    rewrite_job(f, 1, both, 2, NULL);
    rewrite_job(f, 2, both + 1, 1, "compile_s");
    rewrite_job(f, 3, NULL, 0, NULL); /* untouched, re-packed: the rewrite itself is sound */
    assert_int_equal(cache_job_get(f->env, 1, &back, &err), 0);
    assert_true(back.compile_s == 0 && back.measure_s == 0);
    fill_job(&j, 1, CACHE_JOB_DONE);
    j.compile_s = j.measure_s = 0;
    j.owner = (uint32_t)(1000 + 1);
    assert_job_equal(&j, &back);
    cache_job_free(&back);
    assert_int_equal(cache_job_get(f->env, 2, &back, &err), -EBADMSG);
    assert_non_null(strstr(err.msg, "compile_s"));
    assert_int_equal(cache_job_get(f->env, 3, &back, &err), 0);
    assert_true(back.compile_s == 12.5 && back.measure_s == 30.75);
    cache_job_free(&back);
    cache_job_free(&j);
    /* a required key is still required */
    fill_job(&j, 4, CACHE_JOB_DONE);
    assert_int_equal(cache_job_put(f->env, &j, &err), 0);
    cache_job_free(&j);
    const char *const trials[] = {"trials"};
    rewrite_job(f, 4, trials, 1, NULL);
    assert_int_equal(cache_job_get(f->env, 4, &back, &err), -EBADMSG);
    assert_non_null(strstr(err.msg, "'trials' is missing"));
}

/* A journal written before jobs had owners (issue 16): its entries decode as root's (owner 0, so
 * only root or the admin group may cancel them) with no elapsed_at_ms (no time is added from
 * the trial log on resume); a present owner is still checked. */
static void test_entry_without_owner(void **state)
{
    fixture *f = *state;
    kt_err err = {0};
    cache_job j, back;
    for (uint64_t id = 1; id <= 2; id++) {
        fill_job(&j, id, CACHE_JOB_QUEUED);
        assert_int_equal(cache_job_put(f->env, &j, &err), 0);
        cache_job_free(&j);
    }
    const char *const later[] = {"owner", "elapsed_at_ms", "trials_since_ms", "floor_ns"};
    rewrite_job(f, 1, later, 4, NULL);
    rewrite_job(f, 2, NULL, 0, "owner"); /* a string where a uid belongs */
    assert_int_equal(cache_job_get(f->env, 1, &back, &err), 0);
    fill_job(&j, 1, CACHE_JOB_QUEUED);
    j.owner = 0;
    j.elapsed_at_ms = 0;
    j.trials_since_ms = 0; /* remeasures nothing */
    j.floor_ns = 0;        /* not known */
    assert_job_equal(&j, &back);
    cache_job_free(&back);
    cache_job_free(&j);
    assert_int_equal(cache_job_get(f->env, 2, &back, &err), -EBADMSG);
    assert_non_null(strstr(err.msg, "owner"));
    /* refused on the way in too: what the decoder refuses is never written */
    fill_job(&j, 3, CACHE_JOB_QUEUED);
    j.elapsed_at_ms = -1;
    assert_int_equal(cache_job_put(f->env, &j, &err), -EINVAL);
    cache_job_free(&j);
}

static void test_corrupt_entry_skipped(void **state)
{
    fixture *f = *state;
    kt_err err = {0};
    for (uint64_t id = 1; id <= 3; id++) {
        cache_job j;
        fill_job(&j, id, CACHE_JOB_DONE);
        assert_int_equal(cache_job_put(f->env, &j, &err), 0);
        cache_job_free(&j);
    }
    corrupt_job(f, 2);
    corrupt_job(f, 3);
    walk w = {0};
    size_t corrupt = 0;
    assert_int_equal(cache_job_foreach(f->env, walk_cb, &w, &corrupt, &err), 0);
    assert_int_equal(corrupt, 2);
    assert_int_equal(w.n, 1);
    assert_int_equal(w.ids[0], 1);
    cache_job back;
    assert_int_equal(cache_job_get(f->env, 2, &back, &err), -EBADMSG);
    assert_non_null(strstr(err.msg, "checksum"));
    assert_null(back.graph);
    /* the corrupt last entry still reserves its id */
    uint64_t next = 0;
    assert_int_equal(cache_job_next_id(f->env, &next, &err), 0);
    assert_int_equal(next, 4);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_state_names),
        cmocka_unit_test_setup_teardown(test_round_trip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_refuses_bad_jobs, setup, teardown),
        cmocka_unit_test_setup_teardown(test_foreach_order_and_next_id, setup, teardown),
        cmocka_unit_test_setup_teardown(test_corrupt_entry_skipped, setup, teardown),
        cmocka_unit_test_setup_teardown(test_entry_with_bad_name, setup, teardown),
        cmocka_unit_test_setup_teardown(test_entry_without_cost, setup, teardown),
        cmocka_unit_test_setup_teardown(test_entry_without_owner, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
