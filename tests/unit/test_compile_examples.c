/* For every example graph: a deterministic spread of up to 50 candidates per family compiles
 * for sm_90a with zero failures, and no candidate the pruner kept spills registers. The slowest
 * test in CI: it compiles in a pool of one process per CPU. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "emit_test_util.h"
#include "search/space.h"

#define PER_FAMILY 50

typedef struct example {
    const char *file, *shapes;
} example;

static const example examples[] = {
    {"gemm_bias_relu.json", "M=1024"},
    {"softmax.json", "M=4096,N=8192"},
    {"layernorm.json", "M=4096"},
    {"rmsnorm.json", "M=8192"},
    {"gelu_tanh_chain.json", "M=2000,N=2000"},
    {"conv2d.json", "N=128"},
    {"attention.json", "B=4,H=48,S=2048"},
    {"sum_lastaxis.json", "M=16,N=256"},
    {"gemv_bias_relu.json", "M=7680,K=2560"},
};

static void compile_example(const example *ex)
{
    char file[300];
    snprintf(file, sizeof(file), "examples/%s", ex->file);
    srch_space *s = emit_test_space(file, ex->shapes, OPS_PREC_EXACT);
    kt_err err = {0};
    ops_diag d = {0};
    ops_device dev;
    ops_device_h100(&dev);
    srch_candidate *cand = NULL;
    int64_t n = 0;
    assert_int_equal(srch_space_candidates(s, &cand, &n), 0);
    int n_families = 0;
    bool present[OPS_FAM_COUNT] = {false};
    for (int64_t i = 0; i < n; i++) {
        n_families += !present[cand[i].schedule.family];
        present[cand[i].schedule.family] = true;
    }
    int64_t *pick = malloc((size_t)(n + 1) * sizeof(int64_t));
    int64_t n_pick = srch_spread(cand, n, s, (int64_t)PER_FAMILY * n_families, pick);

    srch_pool *pool = NULL;
    srch_pool_opts po = {.arch = "sm_90a", .timeout_s = 120};
    assert_int_equal(srch_pool_new(&po, &pool, &err), 0);
    int64_t per_family[OPS_FAM_COUNT] = {0}, submitted = 0;
    for (int64_t i = 0; i < n_pick; i++) {
        const srch_candidate *c = &cand[pick[i]];
        const ops_family *f = ops_family_get(c->schedule.family);
        ops_emitted e = {0};
        if (f->emit(&s->groups[c->group].group, &c->schedule, &dev, &e, &d) < 0)
            fail_msg("%s: emit %s: %s", ex->file, f->name, d.msg);
        per_family[f->id]++;
        if (e.n_kernels > 0) {
            assert_int_equal(srch_pool_submit(pool, e.source, (uint64_t)i), 0);
            submitted++;
        }
        ops_emitted_free(&e);
    }
    int64_t ok = 0;
    for (;;) {
        srch_compile_result r = {0};
        int rc = srch_pool_next(pool, &r, &err);
        if (rc == -EAGAIN)
            break;
        assert_int_equal(rc, 0);
        char sched[256];
        ops_schedule_format(&cand[pick[r.tag]].schedule, sched, sizeof(sched));
        if (r.status != SRCH_COMPILE_OK)
            fail_msg("%s: %s: %s:\n%s", ex->file, sched, srch_status_name(r.status), r.log);
        for (int k = 0; k < r.n_kernels; k++)
            if (r.kernels[k].spill_store_bytes || r.kernels[k].spill_load_bytes)
                fail_msg("%s: %s: kernel %s spills %d/%d bytes", ex->file, sched, r.kernels[k].name,
                         r.kernels[k].spill_store_bytes, r.kernels[k].spill_load_bytes);
        ok++;
        srch_compile_result_release(&r);
    }
    assert_int_equal(ok, submitted);
    /* Every family present got its share: PER_FAMILY, or all it had. */
    for (int f = 0; f < OPS_FAM_COUNT; f++) {
        int64_t have = 0;
        for (int64_t i = 0; i < n; i++)
            have += cand[i].schedule.family == (ops_family_id)f;
        int64_t want = have < PER_FAMILY ? have : PER_FAMILY;
        if (per_family[f] < want)
            fail_msg("%s: %s got %lld of %lld", ex->file, ops_family_get((ops_family_id)f)->name,
                     (long long)per_family[f], (long long)want);
    }
    printf("%s %s: compiled %lld candidates\n", ex->file, ex->shapes, (long long)ok);
    srch_pool_free(pool);
    free(pick);
    free(cand);
    srch_space_free(s);
}

#define EXAMPLE_TEST(i)                                                                            \
    static void test_example_##i(void **state)                                                     \
    {                                                                                              \
        compile_example(&examples[i]);                                                             \
    }
EXAMPLE_TEST(0)
EXAMPLE_TEST(1)
EXAMPLE_TEST(2)
EXAMPLE_TEST(3)
EXAMPLE_TEST(4)
EXAMPLE_TEST(5)
EXAMPLE_TEST(6)
EXAMPLE_TEST(7)

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_example_0), cmocka_unit_test(test_example_1),
        cmocka_unit_test(test_example_2), cmocka_unit_test(test_example_3),
        cmocka_unit_test(test_example_4), cmocka_unit_test(test_example_5),
        cmocka_unit_test(test_example_6), cmocka_unit_test(test_example_7),
    };
    return cmocka_run_group_tests_name("compile every example", tests, NULL, NULL);
}
