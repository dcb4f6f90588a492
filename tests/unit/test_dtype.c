/* Host-side f16/bf16/f32 storage conversions (round to nearest even). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "ops/graph.h"

#include <math.h>
#include <string.h>

static uint16_t bits(ops_dtype dt, double v)
{
    uint16_t h;
    ops_dtype_store(dt, v, &h);
    return h;
}

static void test_f16_known_values(void **state)
{
    assert_int_equal(bits(OPS_DT_F16, 1.0), 0x3c00);
    assert_int_equal(bits(OPS_DT_F16, -2.0), 0xc000);
    assert_int_equal(bits(OPS_DT_F16, 0.1), 0x2e66);     /* 0.0999755859375 */
    assert_int_equal(bits(OPS_DT_F16, 65504.0), 0x7bff); /* largest finite */
    assert_int_equal(bits(OPS_DT_F16, 65519.0), 0x7bff); /* below the halfway point */
    assert_int_equal(bits(OPS_DT_F16, 65520.0), 0x7c00); /* halfway rounds to even: inf */
    assert_int_equal(bits(OPS_DT_F16, 1e9), 0x7c00);
    assert_int_equal(bits(OPS_DT_F16, ldexp(1, -24)), 0x0001); /* smallest subnormal */
    assert_int_equal(bits(OPS_DT_F16, ldexp(1, -26)), 0x0000); /* underflow */
    assert_int_equal(bits(OPS_DT_F16, ldexp(1, -14)), 0x0400); /* smallest normal */
    assert_int_equal(bits(OPS_DT_F16, -0.0), 0x8000);
    assert_int_equal(bits(OPS_DT_F16, 1.0 + ldexp(1, -11)), 0x3c00);     /* tie to even: down */
    assert_int_equal(bits(OPS_DT_F16, 1.0 + 3 * ldexp(1, -11)), 0x3c02); /* tie to even: up */
    uint16_t nan = bits(OPS_DT_F16, NAN);
    assert_int_equal(nan & 0x7c00, 0x7c00);
    assert_int_not_equal(nan & 0x3ff, 0);
}

static void test_bf16_known_values(void **state)
{
    assert_int_equal(bits(OPS_DT_BF16, 1.0), 0x3f80);
    assert_int_equal(bits(OPS_DT_BF16, -1.5), 0xbfc0);
    assert_int_equal(bits(OPS_DT_BF16, 1.0 + ldexp(1, -8)), 0x3f80);     /* tie: even, down */
    assert_int_equal(bits(OPS_DT_BF16, 1.0 + 3 * ldexp(1, -8)), 0x3f82); /* tie: even, up */
    assert_int_equal(bits(OPS_DT_BF16, INFINITY), 0x7f80);
    assert_true((bits(OPS_DT_BF16, NAN) & 0x7fff) > 0x7f80);
}

static void test_round_trips(void **state)
{
    /* Every finite f16 and bf16 value loads and stores back to itself. */
    for (uint32_t h = 0; h < 0x10000; h++) {
        uint16_t x = (uint16_t)h, y;
        if ((x & 0x7c00) != 0x7c00) {
            ops_dtype_store(OPS_DT_F16, ops_dtype_load(OPS_DT_F16, &x), &y);
            assert_int_equal(x, y);
        }
        if ((x & 0x7f80) != 0x7f80) {
            ops_dtype_store(OPS_DT_BF16, ops_dtype_load(OPS_DT_BF16, &x), &y);
            assert_int_equal(x, y);
        }
    }
    float f;
    ops_dtype_store(OPS_DT_F32, 0.1, &f);
    assert_true(f == 0.1f);
    double d;
    ops_dtype_store(OPS_DT_F64, 0.1, &d);
    assert_true(ops_dtype_load(OPS_DT_F64, &d) == 0.1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_f16_known_values),
        cmocka_unit_test(test_bf16_known_values),
        cmocka_unit_test(test_round_trips),
    };
    return cmocka_run_group_tests_name("dtype conversions", tests, NULL, NULL);
}
