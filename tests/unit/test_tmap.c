/* Tensor maps (ops/tmap.h) without a GPU: ops_tensor_map_check refuses each rule of
 * cuTensorMapEncodeTiled with a message naming the field and its value; the encoding arguments
 * (the driver's enum values, dims, strides, box, base alignment); the msgpack form round trips
 * and refuses malformed maps; and the GPU test's kernel (tests/gpu/tmap_copy.cu) compiles for
 * sm_90a with NVRTC. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "ops/msgpack_util.h"
#include "ops/tmap.h"
#include "search/compile.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* X [100, 200] f16 in 16 x 64 boxes: the map of the GPU test. */
static ops_tensor_map good_map(void)
{
    return (ops_tensor_map){.rank = 2,
                            .dtype = OPS_DT_F16,
                            .dims = {200, 100},
                            .strides = {400},
                            .box = {64, 16},
                            .elem_strides = {1, 1}};
}

static void expect_bad(const ops_tensor_map *m, const char *want)
{
    ops_diag d = {0};
    int rc = ops_tensor_map_check(m, &d);
    if (rc != -EINVAL || !strstr(d.msg, want))
        fail_msg("want -EINVAL with '%s', got %d '%s'", want, rc, d.msg);
}

static void test_check(void **state)
{
    (void)state;
    ops_tensor_map m = good_map();
    ops_diag d = {0};
    assert_int_equal(ops_tensor_map_check(&m, &d), 0);
    m.swizzle = 128; /* 64 f16 = 128 bytes: fits the 128-byte span */
    m.l2_promotion = 256;
    m.oob_nan = true;
    assert_int_equal(ops_tensor_map_check(&m, &d), 0);

#define BAD(stmt, want)                                                                            \
    do {                                                                                           \
        ops_tensor_map b = good_map();                                                             \
        stmt;                                                                                      \
        expect_bad(&b, want);                                                                      \
    } while (0)
    BAD(b.rank = 0, "rank = 0");
    BAD(b.rank = 6, "rank = 6");
    BAD(b.dtype = 0, "dtype = 0");
    BAD(b.dims[1] = 0, "dims[1] = 0");
    BAD(b.dims[0] = (UINT64_C(1) << 32) + 1, "dims[0] = 4294967297");
    BAD(b.strides[0] = 408, "strides[0] = 408");
    BAD(b.strides[0] = UINT64_C(1) << 40, "strides[0] = 1099511627776");
    BAD(b.box[1] = 0, "box[1] = 0");
    BAD(b.box[1] = 257, "box[1] = 257");
    BAD(b.box[0] = 4, "box[0] = 4: 8 bytes, must be a multiple of 16");
    BAD(b.elem_strides[0] = 0, "elem_strides[0] = 0");
    BAD(b.elem_strides[1] = 9, "elem_strides[1] = 9");
    BAD(b.swizzle = 32, "box[0] = 64: 128 bytes, over the 32-byte swizzle span");
    BAD(b.swizzle = 48, "swizzle = 48");
    BAD(b.l2_promotion = 32, "l2_promotion = 32");
    BAD(b.dims[2] = 7, "past rank 2");
    BAD(b.strides[1] = 16, "strides[1] = 16 set past rank 2");
#undef BAD
    /* bytes the map reaches: 200 * 2 + 99 * 400 */
    assert_int_equal(ops_tensor_map_span(&m), 200 * 2 + 99 * 400);
}

static void test_encode_args(void **state)
{
    (void)state;
    ops_tensor_map m = good_map();
    ops_tmap_encode e;
    ops_diag d = {0};
    assert_int_equal(ops_tensor_map_encode_args(&m, 0x10000, &e, &d), 0);
    assert_int_equal(e.data_type, 6); /* CU_TENSOR_MAP_DATA_TYPE_FLOAT16 */
    assert_int_equal(e.rank, 2);
    assert_int_equal(e.global_address, 0x10000);
    assert_int_equal(e.global_dim[0], 200);
    assert_int_equal(e.global_dim[1], 100);
    assert_int_equal(e.global_strides[0], 400);
    assert_int_equal(e.box_dim[0], 64);
    assert_int_equal(e.box_dim[1], 16);
    assert_int_equal(e.element_strides[0], 1);
    assert_int_equal(e.element_strides[1], 1);
    assert_int_equal(e.interleave, 0);
    assert_int_equal(e.swizzle, 0);
    assert_int_equal(e.l2_promotion, 0);
    assert_int_equal(e.oob_fill, 0);
    static const struct {
        int dtype, swizzle, l2, want_dt, want_sw, want_l2;
    } enums[] = {
        {OPS_DT_BF16, 32, 64, 9, 1, 1},
        {OPS_DT_F32, 64, 128, 7, 2, 2},
        {OPS_DT_F16, 128, 256, 6, 3, 3},
    };
    for (size_t i = 0; i < sizeof(enums) / sizeof(enums[0]); i++) {
        m = good_map();
        m.dtype = enums[i].dtype;
        m.box[0] = (uint32_t)(enums[i].swizzle / ops_dtype_size(enums[i].dtype));
        m.swizzle = enums[i].swizzle;
        m.l2_promotion = enums[i].l2;
        m.oob_nan = true;
        assert_int_equal(ops_tensor_map_encode_args(&m, 0x10000, &e, &d), 0);
        assert_int_equal(e.data_type, enums[i].want_dt);
        assert_int_equal(e.swizzle, enums[i].want_sw);
        assert_int_equal(e.l2_promotion, enums[i].want_l2);
        assert_int_equal(e.oob_fill, 1); /* CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA */
    }
    /* the base must be 16-byte aligned; a bad map is refused before */
    m = good_map();
    assert_int_equal(ops_tensor_map_encode_args(&m, 0x10008, &e, &d), -EINVAL);
    assert_non_null(strstr(d.msg, "base address 0x10008"));
    m.box[1] = 300;
    assert_int_equal(ops_tensor_map_encode_args(&m, 0x10000, &e, &d), -EINVAL);
    assert_non_null(strstr(d.msg, "box[1] = 300"));
}

/* Packs m and unpacks it into back. */
static int round_trip(const ops_tensor_map *m, ops_tensor_map *back, ops_diag *d)
{
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    assert_int_equal(ops_tensor_map_pack(&pk, m), 0);
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    assert_int_equal(msgpack_unpack_next(&u, sb.data, sb.size, NULL), MSGPACK_UNPACK_SUCCESS);
    int rc = ops_tensor_map_unpack(&u.data, back, d);
    msgpack_unpacked_destroy(&u);
    msgpack_sbuffer_destroy(&sb);
    return rc;
}

/* Unpacks a hand-packed map: fn packs it. */
static int unpack_packed(void (*fn)(msgpack_packer *), ops_diag *d)
{
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    fn(&pk);
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    assert_int_equal(msgpack_unpack_next(&u, sb.data, sb.size, NULL), MSGPACK_UNPACK_SUCCESS);
    ops_tensor_map back;
    int rc = ops_tensor_map_unpack(&u.data, &back, d);
    msgpack_unpacked_destroy(&u);
    msgpack_sbuffer_destroy(&sb);
    return rc;
}

/* The good map's keys, with "box" of the given length and values, and an extra key or not. */
static void pack_map(msgpack_packer *pk, int n_box, uint32_t box0, const char *extra)
{
    msgpack_pack_map(pk, extra ? 10 : 9);
    kt_mp_pack_ki64(pk, "rank", 2);
    kt_mp_pack_kstr(pk, "dtype", "f16");
    kt_mp_pack_str(pk, "dims");
    msgpack_pack_array(pk, 2);
    msgpack_pack_uint64(pk, 200);
    msgpack_pack_uint64(pk, 100);
    kt_mp_pack_str(pk, "strides");
    msgpack_pack_array(pk, 1);
    msgpack_pack_uint64(pk, 400);
    kt_mp_pack_str(pk, "box");
    msgpack_pack_array(pk, (size_t)n_box);
    for (int i = 0; i < n_box; i++)
        msgpack_pack_uint32(pk, i ? 16 : box0);
    kt_mp_pack_str(pk, "elem_strides");
    msgpack_pack_array(pk, 2);
    msgpack_pack_uint32(pk, 1);
    msgpack_pack_uint32(pk, 1);
    kt_mp_pack_ki64(pk, "swizzle", 0);
    kt_mp_pack_ki64(pk, "l2", 0);
    kt_mp_pack_kbool(pk, "oob_nan", false);
    if (extra)
        kt_mp_pack_ki64(pk, extra, 1);
}
static void pack_good(msgpack_packer *pk)
{
    pack_map(pk, 2, 64, NULL);
}
static void pack_short_box(msgpack_packer *pk)
{
    pack_map(pk, 1, 64, NULL);
}
static void pack_big_box(msgpack_packer *pk)
{
    pack_map(pk, 2, 300, NULL);
}
static void pack_extra_key(msgpack_packer *pk)
{
    pack_map(pk, 2, 64, "interleave");
}
static void pack_not_map(msgpack_packer *pk)
{
    msgpack_pack_int(pk, 7);
}

static void test_msgpack(void **state)
{
    (void)state;
    ops_tensor_map m = good_map(), back;
    m.swizzle = 128;
    m.l2_promotion = 64;
    m.oob_nan = true;
    ops_diag d = {0};
    assert_int_equal(round_trip(&m, &back, &d), 0);
    assert_true(ops_tensor_map_equal(&m, &back));
    /* rank 5, every field used */
    ops_tensor_map m5 = {.rank = 5,
                         .dtype = OPS_DT_BF16,
                         .dims = {64, 3, 5, 7, 11},
                         .strides = {128, 384, 1920, 13440},
                         .box = {8, 1, 2, 3, 4},
                         .elem_strides = {1, 2, 3, 4, 8},
                         .swizzle = 0};
    assert_int_equal(round_trip(&m5, &back, &d), 0);
    assert_true(ops_tensor_map_equal(&m5, &back));
    back.box[4] = 5;
    assert_false(ops_tensor_map_equal(&m5, &back));

    assert_int_equal(unpack_packed(pack_good, &d), 0);
    assert_int_equal(unpack_packed(pack_short_box, &d), -EINVAL);
    assert_non_null(strstr(d.msg, "'box': expected an array of 2"));
    assert_int_equal(unpack_packed(pack_big_box, &d), -EINVAL);
    assert_non_null(strstr(d.msg, "box[0] = 300"));
    assert_int_equal(unpack_packed(pack_extra_key, &d), -EINVAL);
    assert_non_null(strstr(d.msg, "tensor map"));
    assert_int_equal(unpack_packed(pack_not_map, &d), -EINVAL);
}

/* The GPU test's kernel compiles for sm_90a (TMA, mbarrier) with the device library, takes one
 * entry point, and fits (no spills). */
static void test_kernel_compiles(void **state)
{
    (void)state;
    const char *root = getenv("KTUNE_SOURCE_ROOT");
    assert_non_null(root);
    char path[4096];
    snprintf(path, sizeof(path), "%s/tests/gpu/tmap_copy.cu", root);
    char *text = NULL;
    kt_err err = {0};
    if (kt_read_file(path, 1 << 20, &text, NULL, &err) < 0)
        fail_msg("%s", err.msg);
    srch_compile_result r = {0};
    assert_int_equal(srch_nvrtc_compile(text, "sm_90a", &r), 0);
    if (r.status != SRCH_COMPILE_OK)
        fail_msg("tmap_copy.cu does not compile for sm_90a:\n%s", r.log);
    assert_int_equal(r.n_kernels, 1);
    assert_non_null(r.cubin);
    assert_string_equal(r.kernels[0].name, "tmap_copy");
    assert_int_equal(r.kernels[0].spill_store_bytes, 0);
    srch_compile_result_release(&r);
    free(text);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_check),
        cmocka_unit_test(test_encode_args),
        cmocka_unit_test(test_msgpack),
        cmocka_unit_test(test_kernel_compiles),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
