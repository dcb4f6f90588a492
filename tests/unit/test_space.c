/* The search space: fusion partitions (exhaustive and rule-based), convexity, and — with the
 * real families — candidate counts, pruning tallies and cost-model ordering. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "emit_test_util.h"
#include "search/space.h"

static bool all_legal(uint64_t mask, void *ctx)
{
    (void)mask;
    (void)ctx;
    return true;
}

static bool singletons_only(uint64_t mask, void *ctx)
{
    (void)ctx;
    return (mask & (mask - 1)) == 0;
}

static int partitions(const char *json, bool (*legal)(uint64_t, void *), bool *exhaustive,
                      uint64_t *masks, int max)
{
    ops_graph *g = emit_test_graph(json, "");
    int n = srch_enumerate_partitions(g, legal, NULL, masks, max, exhaustive);
    ops_graph_free(g);
    return n;
}

static const char chain3[] =
    "{\"name\":\"c\",\"inputs\":{\"x\":{\"dtype\":\"f32\",\"shape\":[4,8]}},"
    "\"nodes\":[{\"out\":\"a\",\"op\":\"exp\",\"in\":[\"x\"]},"
    "{\"out\":\"b\",\"op\":\"neg\",\"in\":[\"a\"]},"
    "{\"out\":\"y\",\"op\":\"relu\",\"in\":[\"b\"]}],\"outputs\":[\"y\"]}";

/* a -> b, a -> c, b -> d, c -> d */
static const char diamond[] =
    "{\"name\":\"d\",\"inputs\":{\"x\":{\"dtype\":\"f32\",\"shape\":[4,8]}},"
    "\"nodes\":[{\"out\":\"a\",\"op\":\"exp\",\"in\":[\"x\"]},"
    "{\"out\":\"b\",\"op\":\"neg\",\"in\":[\"a\"]},"
    "{\"out\":\"c\",\"op\":\"abs\",\"in\":[\"a\"]},"
    "{\"out\":\"y\",\"op\":\"add\",\"in\":[\"b\",\"c\"]}],\"outputs\":[\"y\"]}";

static void test_chain_has_four_partitions(void **state)
{
    uint64_t masks[256];
    bool exhaustive = false;
    assert_int_equal(partitions(chain3, all_legal, &exhaustive, masks, 256), 4);
    assert_true(exhaustive);
}

/* Nine slices of x and a tree of eight maxima over them (max pooling of 3 x 3 windows): 16
 * edges, few enough to try every fusion, but nearly every fusion is legal, so the partitions
 * far outnumber SRCH_MAX_PARTITIONS: the rules' partitions then, not an error. */
static void test_too_many_fusions_fall_back_to_rules(void **state)
{
    (void)state;
    char json[4096];
    int len = snprintf(json, sizeof(json), "{\"name\":\"pool\",\"inputs\":{\"x\":{\"dtype\":"
                                           "\"f32\",\"shape\":[4,8]}},\"nodes\":[");
    for (int i = 0; i < 9; i++)
        len += snprintf(json + len, sizeof(json) - (size_t)len,
                        "{\"out\":\"s%d\",\"op\":\"slice\",\"in\":[\"x\"],\"shape\":[4,6],"
                        "\"start\":[0,%d],\"step\":[1,1],\"fill\":\"-inf\"},",
                        i, i - 1);
    static const char *const tree[8][3] = {
        {"m0", "s0", "s1"}, {"m1", "s2", "s3"}, {"m2", "s4", "s5"}, {"m3", "s6", "s7"},
        {"m4", "m0", "m1"}, {"m5", "m2", "m3"}, {"m6", "m4", "m5"}, {"y", "m6", "s8"}};
    for (int i = 0; i < 8; i++)
        len += snprintf(json + len, sizeof(json) - (size_t)len,
                        "{\"out\":\"%s\",\"op\":\"max\",\"in\":[\"%s\",\"%s\"]}%s", tree[i][0],
                        tree[i][1], tree[i][2], i < 7 ? "," : "");
    snprintf(json + len, sizeof(json) - (size_t)len, "],\"outputs\":[\"y\"]}");
    enum { MAX = SRCH_MAX_PARTITIONS * (OPS_GROUP_MAX_NODES + 1) };
    uint64_t *masks = malloc(MAX * sizeof(uint64_t));
    assert_non_null(masks);
    bool exhaustive = true;
    int n = partitions(json, all_legal, &exhaustive, masks, MAX);
    assert_false(exhaustive);
    assert_in_range(n, 1, 3); /* one kernel per op, the whole graph, greedy fusion */
    bool whole = false;
    for (int at = 0, p = 0; p < n; p++, at++) {
        whole |= masks[at] == (1ull << 17) - 1 && masks[at + 1] == 0;
        while (masks[at])
            at++;
    }
    assert_true(whole);
    free(masks);
}

static void test_diamond_partitions_are_convex(void **state)
{
    uint64_t masks[1024];
    bool exhaustive = false;
    /* By hand: 4 singletons; ab, ac, bd, cd pairs; ab|cd; ac|bd; abc|d; a|bcd; abcd. abd and
     * acd are not convex (a path leaves through c or b and comes back). */
    int n = partitions(diamond, all_legal, &exhaustive, masks, 1024);
    assert_int_equal(n, 10);
    for (int at = 0, p = 0; p < n; p++, at++) {
        for (; masks[at]; at++) {
            assert_int_not_equal(masks[at], 0xb); /* {a, b, d} */
            assert_int_not_equal(masks[at], 0xd); /* {a, c, d} */
        }
    }
}

static void test_partition_groups_cover_nodes_once_in_order(void **state)
{
    uint64_t masks[1024];
    bool exhaustive;
    int n = partitions(diamond, all_legal, &exhaustive, masks, 1024);
    for (int at = 0, p = 0; p < n; p++, at++) {
        uint64_t seen = 0;
        for (; masks[at]; at++) {
            assert_int_equal(seen & masks[at], 0);
            /* topological: a group never holds a producer of an earlier group */
            if (seen && (masks[at] & 1))
                fail_msg("node a after its consumers in partition %d", p);
            seen |= masks[at];
        }
        assert_int_equal(seen, 0xf);
    }
}

static void test_legality_predicate_respected(void **state)
{
    uint64_t masks[256];
    bool exhaustive;
    assert_int_equal(partitions(diamond, singletons_only, &exhaustive, masks, 256), 1);
    assert_int_equal(masks[4], 0); /* four singleton groups then the terminator */
}

static void test_long_chain_uses_rules(void **state)
{
    /* 20 pointwise ops in a chain: 19 edges, beyond exhaustive enumeration. */
    char json[8192];
    int len = snprintf(json, sizeof(json),
                       "{\"name\":\"long\",\"inputs\":{\"x\":{\"dtype\":\"f32\","
                       "\"shape\":[4,8]}},\"nodes\":[");
    for (int i = 0; i < 20; i++) {
        char operand[16];
        snprintf(operand, sizeof(operand), i ? "t%d" : "x", i - 1);
        len += snprintf(json + len, sizeof(json) - (size_t)len,
                        "%s{\"out\":\"t%d\",\"op\":\"neg\",\"in\":[\"%s\"]}", i ? "," : "", i,
                        operand);
    }
    snprintf(json + len, sizeof(json) - (size_t)len, "],\"outputs\":[\"t19\"]}");
    uint64_t masks[4096];
    bool exhaustive = true;
    int n = partitions(json, all_legal, &exhaustive, masks, 4096);
    assert_false(exhaustive);
    /* one per op, and fully fused (greedy fusion gives the same fully fused partition) */
    assert_int_equal(n, 2);
}

static void test_group_subgraph(void **state)
{
    ops_graph *g = emit_test_graph(diamond, "");
    ops_group grp;
    ops_diag d = {0};
    /* nodes b, c, d: reads a (an intermediate of the full graph), writes y */
    assert_int_equal(ops_group_init(&grp, g, 0xe, &d), 0);
    assert_int_equal(grp.n_in, 1);
    assert_string_equal(g->tensors[grp.in[0]].name, "a");
    assert_int_equal(grp.n_out, 1);
    ops_graph *sub = NULL;
    assert_int_equal(ops_group_subgraph(&grp, &sub, &d), 0);
    assert_true(sub->validated);
    assert_int_equal(sub->n_nodes, 3);
    assert_int_equal(sub->n_outputs, 1);
    assert_string_equal(sub->tensors[0].name, "a");
    assert_int_equal(sub->tensors[0].producer, -1);
    const ops_tensor *y = &sub->tensors[sub->outputs[0]];
    assert_string_equal(y->name, "y");
    assert_int_equal(y->shape.rank, 2);
    assert_int_equal(y->shape.d[0].size, 4);
    assert_int_equal(y->shape.d[1].size, 8);
    /* the group {a, b} writes a (read by c outside) and b (read by d outside) */
    assert_int_equal(ops_group_init(&grp, g, 0x3, &d), 0);
    assert_int_equal(grp.n_out, 2);
    ops_graph_free(sub);
    ops_graph_free(g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chain_has_four_partitions),
        cmocka_unit_test(test_too_many_fusions_fall_back_to_rules),
        cmocka_unit_test(test_diamond_partitions_are_convex),
        cmocka_unit_test(test_partition_groups_cover_nodes_once_in_order),
        cmocka_unit_test(test_legality_predicate_respected),
        cmocka_unit_test(test_long_chain_uses_rules),
        cmocka_unit_test(test_group_subgraph),
    };
    return cmocka_run_group_tests_name("search space", tests, NULL, NULL);
}
