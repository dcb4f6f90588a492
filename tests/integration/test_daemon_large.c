/* ktuned and graphs the search cannot take (docs/protocol.md, submit and lookup): a graph of more
 * than 64 nodes once canonicalised is refused by submit and lookup with the search's own reason
 * (srch_graph_admit), composites counted as what they expand into; and a client sending the
 * largest graphs the parsers accept (4 095 nodes), pipelined, does not hold up another client's
 * requests: their work runs off the loop thread (daemon/prep.c). */
#include "daemon_harness.h"

#include "ops/ops.h"

#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
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
    return dh_start(&daemon_, &o, 30.0 * dh_scale());
}

static int teardown(void **state)
{
    (void)state;
    dh_cleanup(&daemon_);
    return 0;
}

/* x[M, 64] f32, then n nodes of op, each on the previous one's output; the last is the output.
 * Its msgpack form in *mp (free it). */
static void chain(int n, ops_op op, void **mp, size_t *len)
{
    ops_graph *g = ops_graph_new("chain");
    assert_non_null(g);
    ops_shape s = {.rank = 2, .d = {{.size = -1, .sym = ops_graph_sym(g, "M")}, {64, OPS_NO_SYM}}};
    int prev = ops_graph_add_input(g, "x", OPS_DT_F32, &s, false);
    assert_true(prev >= 0);
    for (int i = 0; i < n; i++) {
        char name[32];
        snprintf(name, sizeof(name), "t%d", i);
        int ni = ops_graph_add_node(g, op, name, NULL);
        assert_true(ni >= 0);
        g->nodes[ni].n_in = 1;
        g->nodes[ni].in[0].tensor = prev;
        prev = g->nodes[ni].out;
    }
    assert_int_equal(ops_graph_mark_output(g, prev), 0);
    ops_diag d = {0};
    if (ops_graph_validate(g, &d) < 0)
        fail_msg("chain of %d: %s", n, d.msg);
    assert_int_equal(ops_graph_to_msgpack(g, mp, len), 0);
    ops_graph_free(g);
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
    chain(13, OPS_SOFTMAX, &mp, &len);
    expect_refused(&c, "submit", mp, len, 65);
    expect_refused(&c, "lookup", mp, len, 65);
    free(mp);
    /* the largest graph the parsers take */
    chain(OPS_MAX_GRAPH_TENSORS - 1, OPS_RELU, &mp, &len);
    expect_refused(&c, "submit", mp, len, OPS_MAX_GRAPH_TENSORS - 1);
    expect_refused(&c, "lookup", mp, len, OPS_MAX_GRAPH_TENSORS - 1);
    free(mp);
    /* 64 canonical nodes are taken: a lookup answers (nothing is cached), a submit queues */
    chain(64, OPS_RELU, &mp, &len);
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_refused_at_submit_and_lookup),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
