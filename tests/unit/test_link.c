/* A partition's groups linked into one module from their emitters' pieces (search/link.h): the
 * module of a 3-group partition (GEMM, row, conv and gemv groups beside pointwise ones; attention
 * graphs are one group) compiles with NVRTC for sm_90a and defines exactly the kernels
 * the record names (each group's launches, under the suffixed entry names its emitter wrote),
 * even where two groups emit the same kernel; and the link refuses pieces that break the
 * contract. No GPU needed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "emit_test_util.h"
#include "search/link.h"
#include "search/space.h"

typedef struct linked {
    int n;
    ops_emitted em[3];
} linked;

/* The cheapest generated candidate of group gi whose schedule holds every space-separated token
 * of want ("splitk=2 splitk_mode=parallel"; "" for the cheapest), or -1. */
static int64_t pick(const srch_candidate *c, int64_t n, int gi, const char *want)
{
    for (int64_t i = 0; i < n; i++) {
        if (c[i].group != gi || c[i].schedule.family == OPS_FAM_LIBRARY)
            continue;
        char sched[260] = " ", tokens[128];
        ops_schedule_format(&c[i].schedule, sched + 1, sizeof(sched) - 2);
        strcat(sched, " ");
        snprintf(tokens, sizeof(tokens), "%s", want);
        bool all = true;
        for (char *save = NULL, *t = strtok_r(tokens, " ", &save); t && all;
             t = strtok_r(NULL, " ", &save)) {
            char tok[130];
            snprintf(tok, sizeof(tok), " %s ", t);
            all = strstr(sched, tok) != NULL;
        }
        if (all)
            return i;
    }
    return -1;
}

/* The first 3-group partition of s whose group k has a candidate matching want[k], each group
 * emitted as group k of a linked partition (with its entry suffix), in launch order. */
static void emit_partition(const srch_space *s, const char *const want[3], linked *l)
{
    srch_candidate *c = NULL;
    int64_t n = 0;
    assert_int_equal(srch_space_candidates(s, &c, &n), 0);
    int64_t chosen[3] = {-1, -1, -1};
    for (int p = 0; p < s->n_partitions && chosen[2] < 0; p++) {
        const srch_partition *part = &s->partitions[p];
        if (part->n_groups != 3)
            continue;
        for (int k = 0; k < 3; k++)
            if ((chosen[k] = pick(c, n, part->groups[k], want[k])) < 0)
                break;
    }
    if (chosen[2] < 0)
        fail_msg("no 3-group partition with candidates '%s' | '%s' | '%s'", want[0], want[1],
                 want[2]);
    l->n = 3;
    for (int k = 0; k < 3; k++) {
        const srch_candidate *ck = &c[chosen[k]];
        ops_group grp = s->groups[ck->group].group;
        srch_link_suffix(k, &grp);
        ops_diag d = {0};
        const ops_family *f = ops_family_get(ck->schedule.family);
        if (f->emit(&grp, &ck->schedule, &s->dev, &l->em[k], &d) < 0)
            fail_msg("group %d: %s", ck->group, d.msg);
    }
    free(c);
}

static void linked_free(linked *l)
{
    for (int k = 0; k < l->n; k++)
        ops_emitted_free(&l->em[k]);
}

/* NULL when the kernels src defines (compiled for sm_90a) are exactly the launches of l, each
 * once; else what differs. */
static const char *entries_mismatch(const char *src, const linked *l, char *why, size_t len)
{
    srch_compile_result r = {0};
    if (srch_nvrtc_compile(src, "sm_90a", &r) < 0)
        fail_msg("NVRTC failed to run");
    if (r.status != SRCH_COMPILE_OK)
        fail_msg("the linked module does not compile for sm_90a:\n%s\n---- source ----\n%s", r.log,
                 src);
    int named = 0;
    why[0] = '\0';
    for (int k = 0; k < l->n; k++) {
        for (int j = 0; j < l->em[k].n_kernels; j++) {
            const char *entry = l->em[k].kernels[j].entry;
            int defined = 0;
            for (int i = 0; i < r.n_kernels; i++)
                defined += strcmp(r.kernels[i].name, entry) == 0;
            if (defined != 1 && !why[0])
                snprintf(why, len, "group %d launches '%s', which the module defines %d times", k,
                         entry, defined);
            named++;
        }
    }
    if (!why[0] && named != r.n_kernels)
        snprintf(why, len, "the module defines %d kernels, the record names %d", r.n_kernels,
                 named);
    srch_compile_result_release(&r);
    return why[0] ? why : NULL;
}

static char *link_ok(const linked *l)
{
    char *src = NULL;
    size_t len = 0;
    kt_err err = {0};
    if (srch_link_partition(l->em, l->n, &src, &len, &err) < 0)
        fail_msg("link: %s", err.msg);
    assert_int_equal(len, strlen(src));
    return src;
}

static void check_module(const char *file, const char *shapes, const char *const want[3],
                         int min_kernels)
{
    srch_space *s = emit_test_space(file, shapes, OPS_PREC_EXACT);
    linked l;
    emit_partition(s, want, &l);
    int kernels = 0;
    for (int k = 0; k < l.n; k++) {
        kernels += l.em[k].n_kernels;
        print_message("%s group %d: %d kernel(s), first %s\n", file, k, l.em[k].n_kernels,
                      l.em[k].kernels[0].entry);
    }
    assert_true(kernels >= min_kernels);
    char *src = link_ok(&l);
    char why[256];
    if (entries_mismatch(src, &l, why, sizeof(why)))
        fail_msg("%s %s: %s\n---- source ----\n%s", file, shapes, why, src);
    free(src);
    linked_free(&l);
    srch_space_free(s);
}

/* mm | add | relu: a split-K GEMM and its reduction, then two pointwise kernels of one schedule
 * (the same kernel but for its suffix: without suffixes the module would define it twice). */
static void test_gemm_pointwise_pointwise(void **state)
{
    (void)state;
    static const char *const want[3] = {"splitk=2 splitk_mode=parallel", "", ""};
    check_module("examples/gemm_bias_relu.json", "M=1024", want, 4);
}

/* mm | add | relu in f32: the wgmma tf32x3 GEMM with its A-splitting kernel. */
static void test_wgmma_split(void **state)
{
    (void)state;
    static const char *const want[3] = {"mma=wgmma_split", "", ""};
    check_module("bench/cases/kb_l2_gemm_add_relu.json", "B=128", want, 4);
}

/* softmax as max | sub | exp+sum+div: a row reduction split over kernels, pointwise, a row
 * reduction over a thread-block cluster. */
static void test_row_split(void **state)
{
    (void)state;
    static const char *const want[3] = {"strategy=split_row", "", "strategy=split_cluster"};
    check_module("bench/cases/kb_l1_softmax.json", "B=16,D=16384", want, 4);
}

/* conv | relu | add, with each of the conv family's kernels. */
static void test_conv(void **state)
{
    (void)state;
    static const char *const algos[] = {"algo=direct", "algo=tiled", "algo=implicit_gemm"};
    for (int i = 0; i < 3; i++) {
        const char *const want[3] = {algos[i], "", ""};
        check_module("bench/cases/kb_l2_conv2d_relu_biasadd.json", "N=128", want, 3);
    }
}

/* conv | softmax | relu, the row kernel keeping its rows in dynamic shared memory: every kernel
 * declares that memory inside an extern "C" function, where one name is one entity in all the
 * groups' namespaces; with each conv kernel, whose declarations must agree with the row's
 * (float4 against unsigned char failed to compile on KernelBench's conv + norm graphs). */
static void test_conv_row_shared_memory(void **state)
{
    (void)state;
    static const char *const algos[] = {"algo=direct", "algo=tiled", "algo=implicit_gemm"};
    for (int i = 0; i < 3; i++) {
        const char *const want[3] = {algos[i], "storage=shared", ""};
        check_module("tests/gpu/conv_softmax_relu.json", "N=4", want, 3);
    }
}

/* gemv | add | relu */
static void test_gemv(void **state)
{
    (void)state;
    static const char *const want[3] = {"gemv", "", ""};
    check_module("examples/gemv_bias_relu.json", "M=7680,K=2560", want, 3);
}

/* What breaks the contract is refused by the link, or (an entry the code does not define, which
 * the link cannot see without reading the code) found by the module's compile. */
static void test_contract_breaks(void **state)
{
    (void)state;
    srch_space *s = emit_test_space("examples/gemm_bias_relu.json", "M=1024", OPS_PREC_EXACT);
    static const char *const want[3] = {"", "", ""};
    linked l;
    emit_partition(s, want, &l);
    char *src = NULL, why[256];
    size_t len = 0;
    kt_err err = {0};

    /* a launch named without the group's suffix */
    ops_kernel_launch saved = l.em[1].kernels[0];
    size_t el = strlen(saved.entry);
    l.em[1].kernels[0].entry[el - 3] = '\0'; /* drop "_g1" */
    assert_int_equal(srch_link_partition(l.em, l.n, &src, &len, &err), -EINVAL);
    assert_null(src);
    assert_non_null(strstr(err.msg, "group 1's kernel 0"));
    l.em[1].kernels[0] = saved;

    /* source without marked pieces */
    size_t code_at = l.em[2].code_at;
    l.em[2].code_at = 0;
    assert_int_equal(srch_link_partition(l.em, l.n, &src, &len, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "group 2's emitter marked no pieces"));
    l.em[2].code_at = code_at;

    /* a prelude unlike group 0's */
    l.em[1].source[l.em[1].prelude_at + 5] ^= 1;
    assert_int_equal(srch_link_partition(l.em, l.n, &src, &len, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "group 1's prelude differs"));
    l.em[1].source[l.em[1].prelude_at + 5] ^= 1;

    /* a launch of a kernel the group's code does not define: linked, caught by the check */
    snprintf(l.em[2].kernels[0].entry, sizeof(l.em[2].kernels[0].entry), "ktune_undefined_g2");
    src = link_ok(&l);
    const char *m = entries_mismatch(src, &l, why, sizeof(why));
    assert_non_null(m);
    print_message("caught: %s\n", m);
    free(src);

    linked_free(&l);
    srch_space_free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gemm_pointwise_pointwise),
        cmocka_unit_test(test_wgmma_split),
        cmocka_unit_test(test_row_split),
        cmocka_unit_test(test_conv),
        cmocka_unit_test(test_gemv),
        cmocka_unit_test(test_conv_row_shared_memory),
        cmocka_unit_test(test_contract_breaks),
    };
    return cmocka_run_group_tests_name("partition modules linked from emitted pieces", tests, NULL,
                                       NULL);
}
