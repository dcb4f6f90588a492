/* ktuned's framing (daemon/frame.c): message boundaries found byte by byte, every msgpack format,
 * the depth cap, bad bytes, and the envelope peek of an oversized message. */
#include "daemon/frame.h"
#include "ops/msgpack_util.h"

#include <msgpack.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

/* A map using every msgpack format family, with nested containers. */
static void pack_everything(msgpack_sbuffer *sb)
{
    msgpack_packer pk;
    msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
    static char big[70000];
    memset(big, 'x', sizeof(big));
    msgpack_pack_map(&pk, 9);
    kt_mp_pack_str(&pk, "v");
    msgpack_pack_uint64(&pk, 1);
    kt_mp_pack_str(&pk, "id");
    msgpack_pack_uint64(&pk, 70000);
    kt_mp_pack_str(&pk, "ints");
    msgpack_pack_array(&pk, 8);
    msgpack_pack_int64(&pk, -1);
    msgpack_pack_int64(&pk, -100);
    msgpack_pack_int64(&pk, -30000);
    msgpack_pack_int64(&pk, -3000000000ll);
    msgpack_pack_uint64(&pk, 200);
    msgpack_pack_uint64(&pk, 60000);
    msgpack_pack_uint64(&pk, 4000000000ull);
    msgpack_pack_uint64(&pk, 1ull << 40);
    kt_mp_pack_str(&pk, "floats");
    msgpack_pack_array(&pk, 2);
    msgpack_pack_float(&pk, 1.5f);
    msgpack_pack_double(&pk, 2.5);
    kt_mp_pack_str(&pk, "misc");
    msgpack_pack_array(&pk, 4);
    msgpack_pack_nil(&pk);
    msgpack_pack_true(&pk);
    msgpack_pack_false(&pk);
    msgpack_pack_array(&pk, 0);
    kt_mp_pack_str(&pk, "big string");
    msgpack_pack_str_with_body(&pk, big, sizeof(big));
    kt_mp_pack_str(&pk, "bin");
    msgpack_pack_bin_with_body(&pk, big, 300);
    kt_mp_pack_str(&pk, "ext");
    msgpack_pack_array(&pk, 3);
    msgpack_pack_ext_with_body(&pk, big, 1, 7);
    msgpack_pack_ext_with_body(&pk, big, 16, 7);
    msgpack_pack_ext_with_body(&pk, big, 1000, 7);
    kt_mp_pack_str(&pk, "nested");
    msgpack_pack_map(&pk, 1);
    kt_mp_pack_str(&pk, "a");
    msgpack_pack_map(&pk, 20); /* map16 is 16 or more pairs */
    for (int i = 0; i < 20; i++) {
        msgpack_pack_int(&pk, i);
        msgpack_pack_array(&pk, 1);
        msgpack_pack_map(&pk, 0);
    }
}

static void test_boundaries_byte_by_byte(void **state)
{
    (void)state;
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    pack_everything(&sb);
    size_t one = sb.size;
    pack_everything(&sb); /* a second message right behind */
    const uint8_t *buf = (const uint8_t *)sb.data;
    assert_true(kd_frame_is_map(buf[0]));
    kd_scan s = {0};
    size_t len = 0;
    kd_scan_rc rc = KD_SCAN_MORE;
    while (rc == KD_SCAN_MORE && len < sb.size)
        rc = kd_scan_step(&s, buf, ++len);
    assert_int_equal(rc, KD_SCAN_DONE);
    assert_int_equal(s.pos, one);
    assert_int_equal(len, one); /* found exactly when its last byte arrived */
    /* all at once, with the second message behind it */
    kd_scan_reset(&s);
    assert_int_equal(kd_scan_step(&s, buf, sb.size), KD_SCAN_DONE);
    assert_int_equal(s.pos, one);
    kd_scan_reset(&s);
    assert_int_equal(kd_scan_step(&s, buf + one, sb.size - one), KD_SCAN_DONE);
    assert_int_equal(s.pos, sb.size - one);
    uint64_t id = 0;
    assert_true(kd_frame_peek_id(buf, one, &id));
    assert_int_equal(id, 70000);
    msgpack_sbuffer_destroy(&sb);
}

static void test_depth_cap(void **state)
{
    (void)state;
    uint8_t buf[64];
    /* a map holding 31 nested one-element arrays holding nil: depth 32, accepted */
    size_t n = 0;
    buf[n++] = 0x81;
    buf[n++] = 0xa1;
    buf[n++] = 'k';
    for (int i = 0; i < KD_MAX_DEPTH - 1; i++)
        buf[n++] = 0x91;
    buf[n++] = 0xc0;
    kd_scan s = {0};
    assert_int_equal(kd_scan_step(&s, buf, n), KD_SCAN_DONE);
    assert_int_equal(s.pos, n);
    /* one more level: refused as soon as the 33rd container opens */
    n = 0;
    buf[n++] = 0x81;
    buf[n++] = 0xa1;
    buf[n++] = 'k';
    for (int i = 0; i < KD_MAX_DEPTH; i++)
        buf[n++] = 0x91;
    kd_scan_reset(&s);
    assert_int_equal(kd_scan_step(&s, buf, n), KD_SCAN_DEEP);
}

static void test_bad_and_incomplete(void **state)
{
    (void)state;
    kd_scan s = {0};
    const uint8_t bad[] = {0x82, 0xa1, 'a', 0xc1};
    assert_int_equal(kd_scan_step(&s, bad, sizeof(bad)), KD_SCAN_BAD);
    /* a huge map header with no body: more, never done */
    const uint8_t huge[] = {0xdf, 0xff, 0xff, 0xff, 0xff};
    kd_scan_reset(&s);
    assert_int_equal(kd_scan_step(&s, huge, sizeof(huge)), KD_SCAN_MORE);
    /* a str32 announcing 4 GiB: more, and its header is re-read each time */
    const uint8_t str[] = {0x81, 0xa1, 'g', 0xdb, 0xff, 0xff, 0xff, 0xf0, 'x', 'y'};
    kd_scan_reset(&s);
    assert_int_equal(kd_scan_step(&s, str, sizeof(str)), KD_SCAN_MORE);
    assert_int_equal(s.pos, 3);
    assert_false(kd_frame_is_map(0x93));
    assert_false(kd_frame_is_map(0xa3));
    assert_true(kd_frame_is_map(0xde));
}

static void test_peek_id(void **state)
{
    (void)state;
    /* {"v": 1, "id": 300, "op": "submit", "graph": <str32 of 5 MiB, truncated>} */
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 4);
    kt_mp_pack_str(&pk, "v");
    msgpack_pack_int(&pk, 1);
    kt_mp_pack_str(&pk, "id");
    msgpack_pack_uint64(&pk, 300);
    kt_mp_pack_str(&pk, "op");
    kt_mp_pack_str(&pk, "submit");
    kt_mp_pack_str(&pk, "graph");
    msgpack_pack_str(&pk, 5u << 20);
    uint64_t id = 0;
    assert_true(kd_frame_peek_id((const uint8_t *)sb.data, sb.size, &id));
    assert_int_equal(id, 300);
    /* the id after the truncated body cannot be read */
    msgpack_sbuffer_clear(&sb);
    msgpack_pack_map(&pk, 2);
    kt_mp_pack_str(&pk, "graph");
    msgpack_pack_str(&pk, 5u << 20);
    assert_false(kd_frame_peek_id((const uint8_t *)sb.data, sb.size, &id));
    /* an id that is not an unsigned integer */
    msgpack_sbuffer_clear(&sb);
    msgpack_pack_map(&pk, 1);
    kt_mp_pack_str(&pk, "id");
    msgpack_pack_int(&pk, -4);
    assert_false(kd_frame_peek_id((const uint8_t *)sb.data, sb.size, &id));
    /* a non-negative id in a signed encoding (int 8/16/32/64) is the same id to msgpack-c */
    static const uint8_t signed_ids[][13] = {
        {0x81, 0xa2, 'i', 'd', 0xd0, 0x05},
        {0x81, 0xa2, 'i', 'd', 0xd1, 0x01, 0x2c},
        {0x81, 0xa2, 'i', 'd', 0xd2, 0x00, 0x00, 0x01, 0x2c},
        {0x81, 0xa2, 'i', 'd', 0xd3, 0, 0, 0, 0, 0, 0, 0x01, 0x2c},
    };
    static const size_t signed_len[] = {6, 7, 9, 13};
    static const uint64_t signed_want[] = {5, 300, 300, 300};
    for (int i = 0; i < 4; i++) {
        id = 0;
        assert_true(kd_frame_peek_id(signed_ids[i], signed_len[i], &id));
        assert_int_equal(id, signed_want[i]);
    }
    static const uint8_t neg64[] = {0x81, 0xa2, 'i', 'd', 0xd3, 0xff, 0, 0, 0, 0, 0, 0, 1};
    assert_false(kd_frame_peek_id(neg64, sizeof(neg64), &id));
    static const uint8_t neg16[] = {0x81, 0xa2, 'i', 'd', 0xd1, 0x80, 0x00};
    assert_false(kd_frame_peek_id(neg16, sizeof(neg16), &id));
    msgpack_sbuffer_destroy(&sb);
}

static void test_map_values(void **state)
{
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 6);
    kt_mp_pack_str(&pk, "id");
    msgpack_pack_uint64(&pk, 5);
    msgpack_pack_uint64(&pk, 9); /* a key that is not a string */
    kt_mp_pack_str(&pk, "graph");
    kt_mp_pack_str(&pk, "graph");
    size_t graph_at = sb.size;
    msgpack_pack_map(&pk, 1);
    kt_mp_pack_str(&pk, "ops");
    msgpack_pack_array(&pk, 2);
    msgpack_pack_int(&pk, 1);
    kt_mp_pack_str(&pk, "x");
    size_t graph_end = sb.size;
    /* "graph" again, as str8: the first pair wins */
    static const char str8_graph[] = {(char)0xd9, 5, 'g', 'r', 'a', 'p', 'h'};
    msgpack_sbuffer_write(&sb, str8_graph, sizeof(str8_graph));
    msgpack_pack_nil(&pk);
    /* a key in str8 form is found like a fixstr one */
    static const char str8_shapes[] = {(char)0xd9, 6, 's', 'h', 'a', 'p', 'e', 's'};
    msgpack_sbuffer_write(&sb, str8_shapes, sizeof(str8_shapes));
    size_t shapes_at = sb.size;
    msgpack_pack_map(&pk, 1);
    kt_mp_pack_str(&pk, "M");
    msgpack_pack_uint64(&pk, 256);
    kt_mp_pack_str(&pk, "gpu");
    msgpack_pack_int(&pk, 0);

    const char *const keys[] = {"graph", "shapes", "precision"};
    const uint8_t *v[3];
    size_t n[3];
    const uint8_t *buf = (const uint8_t *)sb.data;
    assert_true(kd_frame_map_values(buf, sb.size, keys, 3, v, n));
    assert_ptr_equal(v[0], buf + graph_at);
    assert_int_equal(n[0], graph_end - graph_at);
    assert_ptr_equal(v[1], buf + shapes_at);
    assert_int_equal(n[1], 1 + 2 + 3); /* fixmap 1, "M", uint16 256 */
    assert_null(v[2]);
    assert_int_equal(n[2], 0);
    /* truncated, or not a map: false */
    assert_false(kd_frame_map_values(buf, sb.size - 1, keys, 3, v, n));
    assert_false(kd_frame_map_values(buf + graph_at + 1, 3, keys, 3, v, n));
    msgpack_sbuffer_destroy(&sb);
}

/* How large a graph is, from its bytes (prep.c): inputs plus nodes, as a map or inside a bin. */
static void test_graph_tensors(void **state)
{
    (void)state;
    msgpack_sbuffer sb;
    msgpack_packer pk;
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 3);
    kt_mp_pack_str(&pk, "name");
    kt_mp_pack_str(&pk, "g");
    kt_mp_pack_str(&pk, "inputs");
    msgpack_pack_map(&pk, 2);
    for (int i = 0; i < 2; i++) {
        kt_mp_pack_str(&pk, i ? "y" : "x");
        msgpack_pack_nil(&pk);
    }
    kt_mp_pack_str(&pk, "nodes");
    msgpack_pack_array(&pk, 20); /* array16 */
    for (int i = 0; i < 20; i++)
        msgpack_pack_nil(&pk);
    const uint8_t *g = (const uint8_t *)sb.data;
    assert_int_equal(kd_frame_graph_tensors(g, sb.size), 22);
    assert_int_equal(kd_frame_graph_tensors(g, sb.size - 1), -1); /* cut short */
    /* the same inside a bin */
    msgpack_sbuffer bin;
    msgpack_packer bk;
    msgpack_sbuffer_init(&bin);
    msgpack_packer_init(&bk, &bin, msgpack_sbuffer_write);
    msgpack_pack_bin_with_body(&bk, sb.data, sb.size);
    assert_int_equal(kd_frame_graph_tensors((const uint8_t *)bin.data, bin.size), 22);
    /* without nodes; not a map */
    msgpack_sbuffer_clear(&sb);
    msgpack_pack_map(&pk, 1);
    kt_mp_pack_str(&pk, "inputs");
    msgpack_pack_map(&pk, 0);
    assert_int_equal(kd_frame_graph_tensors((const uint8_t *)sb.data, sb.size), -1);
    const uint8_t five = 0x05;
    assert_int_equal(kd_frame_graph_tensors(&five, 1), -1);
    assert_true(kd_frame_is_str((const uint8_t *)"\xa6submit", 7, "submit"));
    assert_false(kd_frame_is_str((const uint8_t *)"\xa6submit", 7, "lookup"));
    assert_false(kd_frame_is_str((const uint8_t *)"\xc4\x06submit", 8, "submit")); /* bin */
    msgpack_sbuffer_destroy(&bin);
    msgpack_sbuffer_destroy(&sb);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_boundaries_byte_by_byte),
        cmocka_unit_test(test_depth_cap),
        cmocka_unit_test(test_bad_and_incomplete),
        cmocka_unit_test(test_peek_id),
        cmocka_unit_test(test_map_values),
        cmocka_unit_test(test_graph_tensors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
