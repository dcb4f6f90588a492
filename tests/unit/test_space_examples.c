/* The candidate space of every example graph with the real families: the acceptance counts of
 * the "Candidates" issue, and cost-model orderings that must hold. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "emit_test_util.h"
#include "search/space.h"

static int64_t family_total(const srch_space *s, ops_family_id f)
{
    int64_t n = 0;
    for (int gi = 0; gi < s->n_groups; gi++)
        for (int k = 0; s->groups[gi].in_partition && k < s->groups[gi].n_families; k++)
            if (s->groups[gi].fam[k].family == f)
                n += s->groups[gi].fam[k].counts.kept;
    return n;
}

static void test_gemm_bias_relu_space(void **state)
{
    srch_space *s = emit_test_space("examples/gemm_bias_relu.json", "M=1024", OPS_PREC_EXACT);
    assert_true(s->exhaustive);
    assert_int_equal(s->n_partitions, 4); /* fused, mm|add+relu, mm+add|relu, mm|add|relu */
    if (s->candidates < 500)
        fail_msg("gemm_bias_relu M=1024: %lld candidates, want >= 500", (long long)s->candidates);
    assert_true(family_total(s, OPS_FAM_GEMM) > 0);
    assert_true(family_total(s, OPS_FAM_LIBRARY) > 0);
    assert_true(family_total(s, OPS_FAM_POINTWISE) > 0);
    assert_true(s->pruned > 0);
    /* The fully fused partition needs no workspace; the three-kernel one passes two
     * intermediates of 1024x256 f16 each. */
    for (int p = 0; p < s->n_partitions; p++) {
        const srch_partition *part = &s->partitions[p];
        if (part->n_groups == 1)
            assert_int_equal(part->workspace_bytes, 0);
        if (part->n_groups == 3)
            assert_int_equal(part->workspace_bytes, 2 * 1024 * 256 * 2);
    }
    srch_space_free(s);
}

static void test_row_spaces(void **state)
{
    srch_space *s = emit_test_space("examples/softmax.json", "M=4096,N=8192", OPS_PREC_EXACT);
    if (family_total(s, OPS_FAM_ROW) < 50)
        fail_msg("softmax: %lld row candidates", (long long)family_total(s, OPS_FAM_ROW));
    srch_space_free(s);
    s = emit_test_space("examples/layernorm.json", "M=4096", OPS_PREC_EXACT);
    if (family_total(s, OPS_FAM_ROW) < 50)
        fail_msg("layernorm: %lld row candidates", (long long)family_total(s, OPS_FAM_ROW));
    srch_space_free(s);
}

static void test_pointwise_space(void **state)
{
    srch_space *s =
        emit_test_space("examples/gelu_tanh_chain.json", "M=2000,N=2000", OPS_PREC_EXACT);
    if (family_total(s, OPS_FAM_POINTWISE) < 30)
        fail_msg("gelu chain: %lld pointwise candidates",
                 (long long)family_total(s, OPS_FAM_POINTWISE));
    srch_space_free(s);
}

static void test_conv_and_attention_spaces(void **state)
{
    srch_space *s = emit_test_space("examples/conv2d.json", "N=128", OPS_PREC_EXACT);
    if (family_total(s, OPS_FAM_CONV) < 50)
        fail_msg("conv2d: %lld conv candidates", (long long)family_total(s, OPS_FAM_CONV));
    srch_space_free(s);
    s = emit_test_space("examples/attention.json", "B=4,H=48,S=2048", OPS_PREC_EXACT);
    if (family_total(s, OPS_FAM_ATTENTION) < 50)
        fail_msg("attention: %lld candidates", (long long)family_total(s, OPS_FAM_ATTENTION));
    srch_space_free(s);
}

/* The fused partition of gemm+bias+relu is estimated cheaper than three kernels. */
static void test_cost_model_prefers_fusion(void **state)
{
    srch_space *s = emit_test_space("examples/gemm_bias_relu.json", "M=1024", OPS_PREC_EXACT);
    const srch_partition *best = &s->partitions[0], *worst = NULL;
    for (int p = 0; p < s->n_partitions; p++)
        if (s->partitions[p].n_groups == 3)
            worst = &s->partitions[p];
    assert_non_null(worst);
    assert_true(best->est_seconds < worst->est_seconds);
    assert_true(best->n_groups < 3);
    srch_space_free(s);
}

/* Every group's best estimate is positive and no slower than the roofline floor. */
static void test_estimates_above_roofline(void **state)
{
    static const char *const files[][2] = {
        {"gemm_bias_relu.json", "M=1024"},
        {"softmax.json", "M=4096,N=8192"},
        {"layernorm.json", "M=4096"},
        {"rmsnorm.json", "M=8192"},
        {"conv2d.json", "N=128"},
        {"attention.json", "B=4,H=48,S=2048"},
        {"sum_lastaxis.json", "M=16,N=256"},
        {"gelu_tanh_chain.json", "M=2000,N=2000"},
        {"gemv_bias_relu.json", "M=7680,K=2560"},
        {"maxpool2d.json", "N=256"},
        {"cumsum.json", "M=4096,N=8192"},
    };
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        char file[300];
        snprintf(file, sizeof(file), "examples/%s", files[i][0]);
        srch_space *s = emit_test_space(file, files[i][1], OPS_PREC_EXACT);
        for (int gi = 0; gi < s->n_groups; gi++) {
            for (int k = 0; k < s->groups[gi].n_families; k++) {
                const srch_family_space *fs = &s->groups[gi].fam[k];
                if (!fs->counts.kept)
                    continue;
                double floor_s = fs->best_est.bytes / s->dev.dram_bytes_per_s;
                if (!(fs->best_est.seconds > 0) || fs->best_est.seconds < floor_s * 0.999)
                    fail_msg("%s: %s estimate %g s below its byte floor %g s", files[i][0],
                             ops_family_get(fs->family)->name, fs->best_est.seconds, floor_s);
            }
        }
        srch_space_free(s);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gemm_bias_relu_space),
        cmocka_unit_test(test_row_spaces),
        cmocka_unit_test(test_pointwise_space),
        cmocka_unit_test(test_conv_and_attention_spaces),
        cmocka_unit_test(test_cost_model_prefers_fusion),
        cmocka_unit_test(test_estimates_above_roofline),
    };
    return cmocka_run_group_tests_name("space of the examples", tests, NULL, NULL);
}
