/* The worker's verification inputs (srch_random_input): deterministic, chunked across threads
 * without changing what a single stream gives for the first chunk, in range, never all zeros. */
#include "search/worker.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

static ops_tensor tensor(ops_dtype dt, int64_t rows, int64_t cols)
{
    ops_tensor t;
    memset(&t, 0, sizeof(t));
    t.dtype = dt;
    t.shape.rank = 2;
    t.shape.d[0].size = rows;
    t.shape.d[1].size = cols;
    return t;
}

/* The sequential stream the worker used before chunking: chunk 0 must still match it. */
static double sequential(uint64_t *st)
{
    uint64_t z = (*st += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (double)(z >> 11) / 4503599627370496.0 - 1.0;
}

static void test_deterministic_and_chunked(void **state)
{
    (void)state;
    /* 3.5 chunks of 2^20 elements: several threads, a ragged last chunk. */
    ops_tensor t = tensor(OPS_DT_F32, 7, (1 << 19) + 3);
    int64_t n = 7 * ((1 << 19) + 3);
    float *a = (float *)srch_random_input(&t, 42, 0, 1, false);
    float *b = (float *)srch_random_input(&t, 42, 0, 1, false);
    float *c = (float *)srch_random_input(&t, 43, 0, 1, false);
    assert_non_null(a);
    assert_non_null(b);
    assert_non_null(c);
    assert_memory_equal(a, b, (size_t)n * sizeof(float));
    assert_memory_not_equal(a, c, (size_t)n * sizeof(float));
    uint64_t st = 42 * 0xD1B54A32D192ED03ull + 1;
    for (int64_t k = 0; k < 1000; k++)
        assert_true(a[k] == (float)sequential(&st));
    /* every chunk written, uniform in [-1, 1], chunks differ from each other */
    double sum = 0;
    for (int64_t k = 0; k < n; k++) {
        assert_true(a[k] >= -1.0f && a[k] <= 1.0f);
        sum += fabs(a[k]);
    }
    assert_true(sum / (double)n > 0.45 && sum / (double)n < 0.55);
    assert_memory_not_equal(a, a + (1 << 20), 4096);
    assert_memory_not_equal(a + (1 << 20), a + (2 << 20), 4096);
    free(a);
    free(b);
    free(c);
}

static void test_mixed_magnitudes_in_dtype(void **state)
{
    (void)state;
    ops_tensor t = tensor(OPS_DT_BF16, 3, (1 << 20) + 5);
    int64_t n = 3 * ((1 << 20) + 5);
    uint16_t *h = (uint16_t *)srch_random_input(&t, 7, 1, 0, false); /* odd seed: mixed */
    assert_non_null(h);
    double lo = INFINITY, hi = 0;
    int64_t zeros = 0;
    for (int64_t k = 0; k < n; k++) {
        double v = fabs(ops_dtype_load(OPS_DT_BF16, h + k));
        zeros += v == 0;
        if (v > 0 && v < lo)
            lo = v;
        if (v > hi)
            hi = v;
    }
    assert_true(zeros < n / 1000);
    assert_true(hi <= 8.0 && hi > 4.0); /* up to 2^3 */
    assert_true(lo < 1.0 / 64);         /* down to 2^-6 and below */
    free(h);
}

/* An input of log or sqrt draws the magnitudes of the same values; other inputs stay signed. */
static void test_positive_domain(void **state)
{
    (void)state;
    ops_tensor t = tensor(OPS_DT_F32, 5, 1001);
    for (int s = 0; s < 2; s++) { /* uniform and mixed seeds */
        float *v = (float *)srch_random_input(&t, 9, s, 0, false);
        float *p = (float *)srch_random_input(&t, 9, s, 0, true);
        assert_non_null(v);
        assert_non_null(p);
        int64_t negative = 0;
        for (int64_t k = 0; k < 5 * 1001; k++) {
            assert_true(p[k] > 0.0f);
            assert_true(p[k] == fabsf(v[k]));
            negative += v[k] < 0;
        }
        assert_true(negative > 2000);
        free(v);
        free(p);
    }
    const char *json = "{\"name\":\"kl\",\"inputs\":{\"p\":{\"dtype\":\"f32\",\"shape\":[4]},"
                       "\"q\":{\"dtype\":\"f32\",\"shape\":[4]}},\"nodes\":["
                       "{\"out\":\"l\",\"op\":\"log\",\"in\":[\"p\"]},"
                       "{\"out\":\"y\",\"op\":\"mul\",\"in\":[\"l\",\"q\"]}],\"outputs\":[\"y\"]}";
    ops_graph *g = NULL;
    ops_diag d = {0};
    assert_int_equal(ops_graph_from_json(json, strlen(json), &g, &d), 0);
    assert_true(ops_graph_needs_positive(g, ops_graph_find_tensor(g, "p")));
    assert_false(ops_graph_needs_positive(g, ops_graph_find_tensor(g, "q")));
    assert_false(ops_graph_needs_positive(g, ops_graph_find_tensor(g, "l")));
    ops_graph_free(g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_deterministic_and_chunked),
        cmocka_unit_test(test_mixed_magnitudes_in_dtype),
        cmocka_unit_test(test_positive_domain),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
