/* ktuned and graphs the search cannot take (docs/protocol.md, submit and lookup): a graph of more
 * than 64 nodes once canonicalised is refused by submit and lookup with the search's own reason
 * (srch_graph_admit), composites counted as what they expand into; and a client sending the
 * largest graphs the parsers accept (4 095 nodes), pipelined, does not hold up another client's
 * requests: their work runs off the loop thread (daemon/prep.c). */
#include "daemon_harness.h"

#include "ops/ops.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <string.h>

#include <cmocka.h>

static dh_daemon daemon_;
static const dh_shape shapes[1] = {{"M", 256}};

static int setup(void **state)
{
    (void)state;
    if (dh_init(&daemon_, "large") < 0)
        return -1;
    dh_opts o = {.gpus = "0"};
    if (dh_start(&daemon_, &o, 30.0 * dh_scale()) < 0)
        return -1;
    dh_conn c; /* lookups answer EBUSY while the GPU starts */
    if (dh_connect(&c, daemon_.sock) < 0)
        return -1;
    int rc = dh_wait_gpus_started(&c, 30.0 * dh_scale());
    dh_close(&c);
    return rc < 0 ? -1 : 0;
}

static int teardown(void **state)
{
    (void)state;
    dh_cleanup(&daemon_);
    return 0;
}

static void graph_or_fail(int rc, const char *what)
{
    if (rc < 0)
        fail_msg("generating %s: %d", what, rc);
}

/* Sends op (submit or lookup) with graph and shapes M=256; the reply in *rep. */
static void call_graph(dh_conn *c, const char *op, const void *mp, size_t len,
                       const msgpack_object **rep)
{
    dh_req r;
    dh_req_begin(&r, c, op, 2);
    dh_req_raw(&r, "graph", mp, len);
    dh_req_key(&r, "shapes");
    dh_req_shapes(&r, shapes, 1);
    int rc = dh_call(c, &r, 30.0 * dh_scale(), rep);
    if (rc < 0)
        fail_msg("%s: no reply (%d)", op, rc);
}

/* op refuses the graph with EINVAL and the search's reason, naming its canonical node count. */
static void expect_refused(dh_conn *c, const char *op, const void *mp, size_t len, int nodes)
{
    const msgpack_object *rep;
    call_graph(c, op, mp, len, &rep);
    char desc[400], msg[300], want[128];
    dh_describe(rep, desc, sizeof(desc));
    dh_str(rep, "error.msg", msg, sizeof(msg));
    snprintf(want, sizeof(want), "graph has %d nodes after canonicalisation; the search handles 64",
             nodes);
    if (dh_ok(rep) || !dh_is_str(rep, "error.code", "EINVAL") || !strstr(msg, want))
        fail_msg("%s of a graph of %d canonical nodes: expected EINVAL '%s', got %s", op, nodes,
                 want, desc);
}

static void test_refused_at_submit_and_lookup(void **state)
{
    (void)state;
    dh_conn c;
    assert_int_equal(dh_connect(&c, daemon_.sock), 0);
    void *mp;
    size_t len;
    /* 13 softmaxes are 13 nodes as sent and 65 once canonicalised (5 primitives each) */
    graph_or_fail(dh_chain_graph("softmax", 13, &mp, &len), "13 softmaxes");
    expect_refused(&c, "submit", mp, len, 65);
    expect_refused(&c, "lookup", mp, len, 65);
    free(mp);
    /* the largest graph the parsers take */
    graph_or_fail(dh_chain_graph("relu", OPS_MAX_GRAPH_TENSORS - 1, &mp, &len), "4 095 relus");
    expect_refused(&c, "submit", mp, len, OPS_MAX_GRAPH_TENSORS - 1);
    expect_refused(&c, "lookup", mp, len, OPS_MAX_GRAPH_TENSORS - 1);
    free(mp);
    /* 64 canonical nodes are taken: a lookup answers (nothing is cached), a submit queues */
    graph_or_fail(dh_chain_graph("relu", 64, &mp, &len), "64 relus");
    bool found = true;
    assert_int_equal(dh_lookup(&c, mp, len, shapes, 1, 30.0 * dh_scale(), &found, NULL), 0);
    assert_false(found);
    dh_submit_args a = {
        .graph = mp, .graph_len = len, .shapes = shapes, .n_shapes = 1, .budget_s = 1, .gpu = -1};
    dh_job job;
    assert_int_equal(dh_submit(&c, &a, 30.0 * dh_scale(), &job, NULL), 0);
    free(mp);
    dh_close(&c);
}

/* ---- another client's latency while one sends the costliest graphs ---- */

#define LOAD_SECONDS 3.0
#define LOAD_DEPTH   4 /* requests the loader keeps in flight */

typedef struct loader {
    void *chain, *branches; /* 4 095 relus (refused), 64 interchangeable branches (taken) */
    size_t chain_len, branches_len;
    int sent, replies, refused;
    atomic_int stop;
    int err;
} loader;

/* One submit of the chain or the branches, alternately, without waiting for the reply. */
static int send_one(dh_conn *c, loader *l)
{
    bool chain = l->sent % 2 == 0;
    dh_req r;
    dh_req_begin(&r, c, "submit", 3);
    dh_req_raw(&r, "graph", chain ? l->chain : l->branches, chain ? l->chain_len : l->branches_len);
    dh_req_key(&r, "shapes");
    dh_req_shapes(&r, shapes, 1);
    dh_req_num(&r, "budget_s", 1);
    int rc = dh_send(c, r.sb.data, r.sb.size);
    dh_req_free(&r);
    l->sent++;
    return rc;
}

/* Keeps LOAD_DEPTH submits in flight until told to stop, then takes the replies still due. */
static void *load_main(void *arg)
{
    loader *l = arg;
    dh_conn c;
    if ((l->err = dh_connect(&c, daemon_.sock)) < 0)
        return NULL;
    for (int i = 0; i < LOAD_DEPTH && l->err == 0; i++)
        l->err = send_one(&c, l);
    while (l->err == 0 && l->replies < l->sent) {
        const msgpack_object *m;
        if ((l->err = dh_recv(&c, 60.0 * dh_scale(), &m)) < 0)
            break;
        if (!dh_get(m, "ok")) /* an event of the job: not a reply */
            continue;
        l->replies++;
        l->refused += !dh_ok(m);
        if (!l->stop)
            l->err = send_one(&c, l);
    }
    dh_close(&c);
    return NULL;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* While one client pipelines submits of a 4 095-node graph (refused) and of 64 interchangeable
 * branches (a signature search of ~0.2 s), another's hello round trips stay prompt: their work
 * is done off the loop. Before, each such request held the loop for 0.2 to 2 s. The bound is
 * looser than the 50 ms target (docs/RELIABILITY.md has the figure): this box is shared. */
static void test_other_client_latency(void **state)
{
    (void)state;
    loader l = {0};
    graph_or_fail(dh_chain_graph("relu", OPS_MAX_GRAPH_TENSORS - 1, &l.chain, &l.chain_len),
                  "4 095 relus");
    graph_or_fail(dh_branches_graph(64, &l.branches, &l.branches_len), "64 branches");
    dh_conn by;
    assert_int_equal(dh_connect(&by, daemon_.sock), 0);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, load_main, &l), 0);
    enum { MAX_SAMPLES = 4096 };
    static double lat[MAX_SAMPLES];
    int n = 0;
    double t_end = dh_now() + LOAD_SECONDS;
    while (dh_now() < t_end && n < MAX_SAMPLES) {
        double t0 = dh_now();
        int rc = dh_hello(&by, 30.0 * dh_scale(), NULL);
        if (rc < 0) {
            l.stop = 1;
            pthread_join(th, NULL);
            fail_msg("hello during the load: %d", rc);
        }
        lat[n++] = dh_now() - t0;
        usleep(5000);
    }
    l.stop = 1;
    pthread_join(th, NULL);
    dh_close(&by);
    free(l.chain);
    free(l.branches);
    if (l.err < 0)
        fail_msg("the loading client failed: %d after %d replies", l.err, l.replies);
    qsort(lat, (size_t)n, sizeof(double), cmp_double);
    double p50 = lat[n / 2], p99 = lat[(n * 99) / 100], max = lat[n - 1];
    print_message("bystander hello: %d round trips, p50 %.2f ms, p99 %.2f ms, max %.2f ms; "
                  "loader: %d replies (%d refused) in %.1f s\n",
                  n, p50 * 1e3, p99 * 1e3, max * 1e3, l.replies, l.refused, LOAD_SECONDS);
    if (p99 > 0.1 * dh_scale())
        fail_msg("another client's p99 latency %.1f ms while large graphs are submitted (max "
                 "%.1f ms): their work holds the loop",
                 p99 * 1e3, max * 1e3);
    assert_true(l.replies >= 2); /* the load was there */
    assert_true(l.refused >= 1); /* the 4 095-node graph is refused */
}

/* Replies keep their order on a connection whose requests are handled partly off the loop and
 * partly on it, pipelined: large submit, hello, large lookup, hello, small lookup. */
static void test_order_kept(void **state)
{
    (void)state;
    void *big, *small;
    size_t big_len, small_len;
    graph_or_fail(dh_branches_graph(64, &big, &big_len), "64 branches");
    graph_or_fail(dh_chain_graph("relu", 2, &small, &small_len), "2 relus");
    dh_conn c;
    assert_int_equal(dh_connect(&c, daemon_.sock), 0);
    const char *ops[] = {"submit", "hello", "lookup", "hello", "lookup"};
    const void *graphs[] = {big, NULL, big, NULL, small};
    size_t lens[] = {big_len, 0, big_len, 0, small_len};
    enum { N = sizeof(ops) / sizeof(ops[0]) };
    uint64_t ids[N];
    for (int i = 0; i < N; i++) {
        dh_req r;
        dh_req_begin(&r, &c, ops[i], graphs[i] ? 3 : 0);
        if (graphs[i]) {
            dh_req_raw(&r, "graph", graphs[i], lens[i]);
            dh_req_key(&r, "shapes");
            dh_req_shapes(&r, shapes, 1);
            dh_req_num(&r, "budget_s", 1);
        }
        ids[i] = r.id;
        assert_int_equal(dh_send(&c, r.sb.data, r.sb.size), 0);
        dh_req_free(&r);
    }
    for (int i = 0; i < N;) {
        const msgpack_object *m;
        int rc = dh_recv(&c, 30.0 * dh_scale(), &m);
        if (rc < 0)
            fail_msg("reply %d of %d: %d", i + 1, N, rc);
        if (!dh_get(m, "ok")) /* an event */
            continue;
        char desc[300];
        dh_describe(m, desc, sizeof(desc));
        if ((uint64_t)dh_int(m, "id", -1) != ids[i] || !dh_ok(m))
            fail_msg("reply %d (%s, id %llu expected): %s", i + 1, ops[i],
                     (unsigned long long)ids[i], desc);
        i++;
    }
    dh_close(&c);
    free(big);
    free(small);
}

/* Clients that send a large request and hang up before its reply: the connection is freed when
 * the work ends (under ASan a use after free would show), and the daemon keeps answering. */
static void test_close_while_busy(void **state)
{
    (void)state;
    void *big;
    size_t big_len;
    graph_or_fail(dh_branches_graph(64, &big, &big_len), "64 branches");
    for (int i = 0; i < 20; i++) {
        dh_conn c;
        assert_int_equal(dh_connect(&c, daemon_.sock), 0);
        dh_req r;
        dh_req_begin(&r, &c, i % 2 ? "lookup" : "submit", 2);
        dh_req_raw(&r, "graph", big, big_len);
        dh_req_key(&r, "shapes");
        dh_req_shapes(&r, shapes, 1);
        (void)dh_send(&c, r.sb.data, r.sb.size);
        dh_req_free(&r);
        dh_close(&c);
    }
    free(big);
    dh_conn c;
    assert_int_equal(dh_connect(&c, daemon_.sock), 0);
    assert_int_equal(dh_hello(&c, 30.0 * dh_scale(), NULL), 0);
    dh_close(&c);
    assert_true(dh_alive(&daemon_));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_refused_at_submit_and_lookup),
        cmocka_unit_test(test_other_client_latency),
        cmocka_unit_test(test_order_kept),
        cmocka_unit_test(test_close_while_busy),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
