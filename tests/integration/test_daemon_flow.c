/* ktuned's lookup memo, fairness between connections, and backpressure, over its socket with the
 * fake worker (one daemon for the whole group; one tuning job gives the cache a record):
 *   - the memo never hides a cache write: records written by the daemon's own job, and records
 *     written, replaced and deleted by another process (this one, through the cache API, as
 *     `ktune tune --local` or a merge would), are seen by the very next lookup; the source
 *     comes exactly when asked for;
 *   - a client pipelining 500 lookups (each a different key, so each reads the cache) delays
 *     another connection's hello by a few ms, not by the whole batch, and gets its replies in
 *     request order;
 *   - a client that sends 40k lookups with source and reads nothing: the daemon stops reading it
 *     instead of queueing replies (its RSS grows by a few MiB at most), keeps serving others,
 *     does not close it, and once it reads it gets all 40k replies in order;
 *   - `ktune gpus` while a GPU's worker is still saying hello prints that, not a row of blanks,
 *     and a lookup for that GPU is EBUSY. */
#include "daemon_harness.h"

#include "cache/cache.h"
#include "ops/ops.h"

#include <errno.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#define MIB (1024.0 * 1024.0)

static dh_daemon daemon_;
static void *graph;
static size_t graph_len;
static const int64_t TUNED_M = 256, TUNED_N = 512; /* the shapes the group's job tunes */

/* ---- requests ---- */

/* Packs a lookup of graph g (msgpack form; NULL: the example graph) with shapes M, N into r
 * (ids from c). */
static void lookup_req_of(dh_req *r, dh_conn *c, const void *g, size_t g_len, int64_t m, int64_t n,
                          bool source)
{
    dh_req_begin(r, c, "lookup", source ? 4 : 3);
    dh_req_raw(r, "graph", g ? g : graph, g ? g_len : graph_len);
    dh_req_key(r, "shapes");
    const dh_shape s[2] = {{"M", m}, {"N", n}};
    dh_req_shapes(r, s, 2);
    dh_req_str(r, "precision", "exact");
    if (source)
        dh_req_bool(r, "source", true);
}

static void lookup_req(dh_req *r, dh_conn *c, int64_t m, int64_t n, bool source)
{
    lookup_req_of(r, c, NULL, 0, m, n, source);
}

/* The example graph under another name: the same signature (names take no part in it), so the
 * same cache key, but other bytes, so the memo cannot answer it. *out is malloc'd. */
static void renamed_graph(const char *name, void **out, size_t *len)
{
    ops_graph *g = NULL;
    ops_diag diag = {0};
    if (ops_graph_from_msgpack(graph, graph_len, &g, &diag) < 0)
        fail_msg("graph: %s", diag.msg);
    free(g->name);
    g->name = strdup(name);
    assert_non_null(g->name);
    assert_int_equal(ops_graph_to_msgpack(g, out, len), 0);
    ops_graph_free(g);
}

typedef struct lookup_rep {
    bool found, has_source;
    double time_ns;
    size_t source_len;
} lookup_rep;

static lookup_rep lookup(dh_conn *c, int64_t m, int64_t n, bool source)
{
    dh_req r;
    lookup_req(&r, c, m, n, source);
    const msgpack_object *rep;
    int rc = dh_call(c, &r, 10.0 * dh_scale(), &rep);
    if (rc < 0)
        fail_msg("lookup M=%lld: %s", (long long)m, strerror(-rc));
    if (!dh_ok(rep)) {
        char d[300];
        dh_describe(rep, d, sizeof(d));
        fail_msg("lookup M=%lld: %s", (long long)m, d);
    }
    lookup_rep out = {.found = dh_bool(rep, "found", false),
                      .time_ns = dh_num(rep, "record.time_ns", -1)};
    const msgpack_object *src = dh_get(rep, "source");
    out.has_source = src != NULL;
    if (src && src->type == MSGPACK_OBJECT_STR)
        out.source_len = src->via.str.size;
    return out;
}

static void connect_or_fail(dh_conn *c)
{
    int rc = dh_connect(c, daemon_.sock);
    if (rc < 0)
        fail_msg("connect: %s", strerror(-rc));
}

/* Seconds a hello on c takes to be answered. */
static double hello_s(dh_conn *c)
{
    double t0 = dh_now();
    int rc = dh_hello(c, 10.0 * dh_scale(), NULL);
    if (rc < 0)
        fail_msg("hello: %s", strerror(-rc));
    return dh_now() - t0;
}

/* ---- the group ---- */

static int group_setup(void **state)
{
    (void)state;
    if (dh_example_graph("gelu_tanh_chain", &graph, &graph_len) < 0 ||
        dh_init(&daemon_, "flow") < 0)
        return -1;
    dh_opts o = {.gpus = "0"};
    if (dh_start(&daemon_, &o, 30.0) < 0)
        return -1;
    /* one record in the cache */
    dh_conn c = {.fd = -1};
    if (dh_connect(&c, daemon_.sock) < 0)
        return -1;
    const dh_shape s[2] = {{"M", TUNED_M}, {"N", TUNED_N}};
    dh_submit_args a = {.graph = graph,
                        .graph_len = graph_len,
                        .shapes = s,
                        .n_shapes = 2,
                        .budget_s = 2,
                        .gpu = -1};
    dh_job job;
    int rc = dh_submit(&c, &a, 10.0, &job, NULL);
    if (rc == 0)
        rc = dh_wait_job(&c, job.id, NULL, 240.0 * dh_scale(), 0.1, &job);
    dh_close(&c);
    if (rc < 0 || strcmp(job.state, "done") != 0 || !job.record) {
        fprintf(stderr, "setup: the tuning job did not end with a record (%s: %s)\n", job.state,
                job.error);
        dh_dump_log(&daemon_, 3000);
        return -1;
    }
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    int wstatus = 0;
    int rc = daemon_.pid > 0 ? dh_stop(&daemon_, SIGTERM, 15.0 * dh_scale(), &wstatus) : 0;
    if (rc == 0 && !(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0)) {
        /* a clean stop exits 0 (a sanitizer build: no leak or error report) */
        fprintf(stderr, "teardown: ktuned ended with wait status %#x\n", wstatus);
        dh_dump_log(&daemon_, 3000);
        rc = -1;
    }
    dh_cleanup(&daemon_);
    free(graph);
    return rc < 0 ? -1 : 0;
}

/* ---- the memo and cache writes ---- */

typedef struct first_key {
    cache_key key;
    bool seen;
} first_key;

static int key_cb(const cache_record *rec, int rank, void *ctx)
{
    first_key *f = ctx;
    if (rank == 0 && !f->seen) {
        f->key = rec->key;
        f->seen = true;
    }
    return 0;
}

/* Rebinds a record to M = m: its shapes, and the problem digest and slots that key it. */
static void set_m(cache_record *r, int64_t m)
{
    for (int i = 0; i < r->key.n_shapes; i++)
        if (strcmp(r->key.shapes[i].name, "M") == 0)
            r->key.shapes[i].value = m;
    ops_graph *g = NULL, *bound = NULL;
    ops_diag d = {0};
    kt_err err = {0};
    ops_binding b[2] = {{"M", m}, {"N", TUNED_N}};
    if (ops_graph_from_msgpack(graph, graph_len, &g, &d) < 0 ||
        ops_graph_bind(g, b, 2, &bound, &d) < 0)
        fail_msg("binding the graph at M=%lld: %s", (long long)m, d.msg);
    if (cache_record_set_problem(r, bound, &err) < 0)
        fail_msg("set_problem: %s", err.msg);
    ops_graph_free(bound);
    ops_graph_free(g);
}

static void test_memo_sees_every_write(void **state)
{
    (void)state;
    dh_conn c;
    connect_or_fail(&c);

    /* the tuned record; the source only when asked for, whichever variant came first */
    lookup_rep a = lookup(&c, TUNED_M, TUNED_N, false);
    assert_true(a.found);
    assert_false(a.has_source);
    lookup_rep b = lookup(&c, TUNED_M, TUNED_N, true);
    assert_true(b.found && b.has_source && b.source_len > 0);
    assert_true(b.time_ns == a.time_ns);
    assert_false(lookup(&c, TUNED_M, TUNED_N, false).has_source);
    assert_true(lookup(&c, TUNED_M, TUNED_N, true).has_source);

    /* a record written by the daemon's own job after "not found" was answered (twice) */
    const int64_t m_job = 64;
    assert_false(lookup(&c, m_job, TUNED_N, false).found);
    assert_false(lookup(&c, m_job, TUNED_N, true).found);
    const dh_shape s[2] = {{"M", m_job}, {"N", TUNED_N}};
    dh_submit_args sa = {.graph = graph,
                         .graph_len = graph_len,
                         .shapes = s,
                         .n_shapes = 2,
                         .budget_s = 1,
                         .gpu = -1};
    dh_job job;
    assert_int_equal(dh_submit(&c, &sa, 10.0, &job, NULL), 0);
    assert_int_equal(dh_wait_job(&c, job.id, NULL, 240.0 * dh_scale(), 0.05, &job), 0);
    assert_string_equal(job.state, "done");
    assert_true(job.record);
    assert_true(lookup(&c, m_job, TUNED_N, false).found);
    assert_true(lookup(&c, m_job, TUNED_N, true).has_source);

    /* records written by another process: this one, through its own cache handle */
    cache_env *env = NULL;
    kt_err err = {0};
    if (cache_open(daemon_.cache, 0, NULL, &env, &err) < 0)
        fail_msg("cache_open %s: %s", daemon_.cache, err.msg);
    first_key fk = {0};
    assert_int_equal(cache_list(env, NULL, 0, true, key_cb, &fk, NULL, &err), 0);
    assert_true(fk.seen);
    cache_record rec;
    cache_record_init(&rec);
    rec.key = fk.key;
    set_m(&rec, TUNED_M);
    fk.key = rec.key;
    cache_record_free(&rec);
    if (cache_get(env, &fk.key, 0, &rec, &err) < 0)
        fail_msg("cache_get: %s", err.msg);
    for (int i = 0; i < 40; i++) {
        int64_t m = 1000 + i;
        bool src = i & 1;
        assert_false(lookup(&c, m, TUNED_N, src).found);
        assert_false(lookup(&c, m, TUNED_N, src).found); /* now from the memo */
        set_m(&rec, m);
        rec.time_ns = 5000.0 + i;
        if (cache_put(env, &rec, NULL, &err) < 0)
            fail_msg("cache_put: %s", err.msg);
        /* the very next lookup sees it */
        lookup_rep r = lookup(&c, m, TUNED_N, src);
        if (!r.found)
            fail_msg("round %d: a record written by another process was not found", i);
        assert_true(r.time_ns == 5000.0 + i);
        assert_true(r.has_source == src);
    }
    /* a better record replaces a found one; a deleted one is gone */
    const int64_t m_repl = 1000;
    assert_true(lookup(&c, m_repl, TUNED_N, false).time_ns == 5000.0);
    set_m(&rec, m_repl);
    rec.time_ns = 100.0;
    free(rec.schedule);
    rec.schedule = strdup("a better schedule");
    assert_non_null(rec.schedule);
    assert_int_equal(cache_put(env, &rec, NULL, &err), 0);
    assert_true(lookup(&c, m_repl, TUNED_N, false).time_ns == 100.0);
    assert_int_equal(cache_delete(env, &rec.key, &err), 0);
    assert_false(lookup(&c, m_repl, TUNED_N, false).found);
    assert_false(lookup(&c, m_repl, TUNED_N, true).found);
    cache_record_free(&rec);
    cache_close(env);
    dh_close(&c);
}

/* ---- fairness ---- */

static void test_pipelining_client_does_not_starve_others(void **state)
{
    (void)state;
    const int n = 500, rounds = 3;
    double worst = 0, batch_s = 0;
    dh_conn a, b;
    connect_or_fail(&a);
    connect_or_fail(&b);
    hello_s(&b);
    for (int round = 0; round < rounds; round++) {
        /* n lookups that find the record under graph bytes never sent before: each decodes,
         * validates and signs the graph, and reads and checks the record */
        msgpack_sbuffer all;
        msgpack_sbuffer_init(&all);
        uint64_t first_id = a.next_id;
        for (int i = 0; i < n; i++) {
            char name[32];
            snprintf(name, sizeof(name), "flow-%d-%d", round, i);
            void *g;
            size_t g_len;
            renamed_graph(name, &g, &g_len);
            dh_req r;
            lookup_req_of(&r, &a, g, g_len, TUNED_M, TUNED_N, false);
            msgpack_sbuffer_write(&all, r.sb.data, r.sb.size);
            dh_req_free(&r);
            free(g);
        }
        double t0 = dh_now();
        assert_int_equal(dh_send(&a, all.data, all.size), 0);
        msgpack_sbuffer_destroy(&all);
        usleep(2000); /* the batch is being handled */
        double h = hello_s(&b);
        for (int i = 0; i < n; i++) {
            const msgpack_object *rep;
            int rc = dh_recv(&a, 30.0 * dh_scale(), &rep);
            if (rc < 0)
                fail_msg("reply %d of %d: %s", i, n, strerror(-rc));
            assert_true(dh_ok(rep));
            assert_int_equal(dh_int(rep, "id", -1), (int64_t)(first_id + (uint64_t)i));
            assert_true(dh_bool(rep, "found", false));
        }
        double batch = dh_now() - t0;
        printf("round %d: hello answered in %.2f ms while %d pipelined lookups took %.1f ms\n",
               round, 1e3 * h, n, 1e3 * batch);
        if (h > worst)
            worst = h;
        batch_s += batch / rounds;
    }
    dh_close(&a);
    dh_close(&b);
    /* a turn is KD_BURST lookups (~16 x 0.15 ms); allow scheduling noise on a loaded machine */
    if (worst > 0.025 * dh_scale())
        fail_msg("a hello waited %.1f ms behind a pipelining client (batch: %.1f ms)", 1e3 * worst,
                 1e3 * batch_s);
}

/* ---- backpressure ---- */

static void test_client_that_never_reads(void **state)
{
    (void)state;
    const int n = 40000;
    dh_conn a, b;
    connect_or_fail(&a);
    connect_or_fail(&b);
    /* warm: the memo holds the answer, the daemon's allocator has served a few replies */
    size_t src_len = lookup(&a, TUNED_M, TUNED_N, true).source_len;
    assert_true(src_len > 0);
    msgpack_sbuffer all;
    msgpack_sbuffer_init(&all);
    uint64_t first_id = a.next_id;
    for (int i = 0; i < n; i++) {
        dh_req r;
        lookup_req(&r, &a, TUNED_M, TUNED_N, true);
        msgpack_sbuffer_write(&all, r.sb.data, r.sb.size);
        dh_req_free(&r);
    }
    usleep(200 * 1000);
    int64_t rss0 = dh_rss_bytes(daemon_.pid), peak = rss0;

    /* send until the daemon stops taking bytes for 2 s */
    size_t off = 0;
    double idle_since = dh_now();
    while (off < all.size && dh_now() - idle_since < 2.0) {
        ssize_t w = send(a.fd, all.data + off, all.size - off, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (w > 0) {
            off += (size_t)w;
            idle_since = dh_now();
        } else if (w < 0 && errno != EAGAIN && errno != EINTR) {
            fail_msg("send after %zu of %zu bytes: %s", off, all.size, strerror(errno));
        } else {
            struct pollfd p = {.fd = a.fd, .events = POLLOUT};
            poll(&p, 1, 50);
        }
        int64_t rss = dh_rss_bytes(daemon_.pid);
        if (rss > peak)
            peak = rss;
    }
    assert_true(off < all.size); /* it stopped reading: 40k replies with source are far more */
    /* still serving others meanwhile */
    double h = hello_s(&b);
    int64_t rss = dh_rss_bytes(daemon_.pid);
    if (rss > peak)
        peak = rss;
    printf("a client that does not read: %zu of %zu request bytes taken (replies %zu bytes of "
           "source each); ktuned VmRSS %.1f -> peak %.1f MiB; another client's hello %.2f ms\n",
           off, all.size, src_len, rss0 / MIB, peak / MIB, 1e3 * h);
    assert_true(h < 0.1 * dh_scale());
    if (peak - rss0 > (int64_t)(12 * MIB * dh_scale()))
        fail_msg("ktuned grew by %.1f MiB for a client that does not read", (peak - rss0) / MIB);

    /* now it reads: every reply comes, in order, while the rest is sent */
    int got = 0;
    double t_end = dh_now() + 120.0 * dh_scale();
    while (got < n) {
        if (dh_now() > t_end)
            fail_msg("only %d of %d replies (connection closed?)", got, n);
        struct pollfd p = {.fd = a.fd, .events = POLLIN | (off < all.size ? POLLOUT : 0)};
        if (poll(&p, 1, 1000) <= 0)
            continue;
        if ((p.revents & POLLOUT) && off < all.size) {
            ssize_t w = send(a.fd, all.data + off, all.size - off, MSG_DONTWAIT | MSG_NOSIGNAL);
            if (w > 0)
                off += (size_t)w;
        }
        if (!(p.revents & (POLLIN | POLLHUP | POLLERR)))
            continue;
        const msgpack_object *rep;
        int rc = dh_recv(&a, 1.0, &rep);
        while (rc == 0) {
            if (!dh_ok(rep) || dh_int(rep, "id", -1) != (int64_t)(first_id + (uint64_t)got) ||
                !dh_get(rep, "source")) {
                char d[300];
                dh_describe(rep, d, sizeof(d));
                fail_msg("reply %d: %s", got, d);
            }
            got++;
            rc = dh_recv(&a, 0, &rep); /* what is already buffered */
        }
        if (rc != -ETIMEDOUT)
            fail_msg("after %d replies: %s", got, strerror(-rc));
    }
    msgpack_sbuffer_destroy(&all);
    assert_true(dh_alive(&daemon_));
    hello_s(&a);
    dh_close(&a);
    dh_close(&b);
}

/* ---- a GPU whose worker is still saying hello ---- */

static void test_gpus_while_starting(void **state)
{
    (void)state;
    const char *ktune = getenv("KTUNE_BIN"), *fake = getenv("KTUNE_FAKE_WORKER");
    if (!ktune || !fake) {
        printf("KTUNE_BIN is not set: skipped\n");
        skip();
    }
    dh_daemon d2;
    assert_int_equal(dh_init(&d2, "starting"), 0);
    /* a worker that takes 20 s to say hello */
    char slow[400], fake_copy[300];
    snprintf(fake_copy, sizeof(fake_copy), "%s", fake);
    snprintf(slow, sizeof(slow), "%s/slow_worker", d2.root);
    FILE *f = fopen(slow, "w");
    assert_non_null(f);
    fprintf(f, "#!/bin/sh\nsleep 20\nexec '%s' \"$@\"\n", fake_copy);
    fclose(f);
    assert_int_equal(chmod(slow, 0755), 0);
    setenv("KTUNE_FAKE_WORKER", slow, 1);
    dh_opts o = {.gpus = "0"};
    int rc = dh_start(&d2, &o, 30.0);
    setenv("KTUNE_FAKE_WORKER", fake_copy, 1);
    assert_int_equal(rc, 0);

    char cmd[1200], out[2048] = "";
    snprintf(cmd, sizeof(cmd), "'%s' gpus --socket '%s' 2>&1", ktune, d2.sock);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t len = fread(out, 1, sizeof(out) - 1, p);
    out[len] = '\0';
    int status = pclose(p);
    printf("ktune gpus while the worker starts:\n%s", out);
    assert_int_equal(status, 0);
    assert_non_null(strstr(out, "\n  0  (starting: the worker is saying hello)\n"));
    /* lookups wait for the fingerprint */
    dh_conn c;
    assert_int_equal(dh_connect(&c, d2.sock), 0);
    dh_req r;
    lookup_req(&r, &c, TUNED_M, TUNED_N, false);
    const msgpack_object *rep;
    assert_int_equal(dh_call(&c, &r, 10.0, &rep), 0);
    assert_false(dh_ok(rep));
    assert_true(dh_is_str(rep, "error.code", "EBUSY"));
    dh_close(&c);
    dh_stop(&d2, SIGKILL, 10.0, NULL);
    dh_cleanup(&d2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_memo_sees_every_write),
        cmocka_unit_test(test_pipelining_client_does_not_starve_others),
        cmocka_unit_test(test_client_that_never_reads),
        cmocka_unit_test(test_gpus_while_starting),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
