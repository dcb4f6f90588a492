/* ops/msgpack_util: the map lookup, string comparison, integer reader and packers shared by
 * cache, search, daemon and client, at their edges (missing key, wrong type, not a map,
 * truncated input and keys, integer limits, a packer whose writes fail). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "ops/msgpack_util.h"

#include <string.h>

/* Unpacks sb's bytes into *u (the caller destroys it); asserts one whole object. */
static void unpack(const msgpack_sbuffer *sb, msgpack_unpacked *u)
{
    size_t off = 0;
    msgpack_unpacked_init(u);
    assert_int_equal(msgpack_unpack_next(u, sb->data, sb->size, &off), MSGPACK_UNPACK_SUCCESS);
    assert_int_equal(off, sb->size);
}

/* {"id": 7, "name": "x", 5: "int key", "nil": nil, "neg": -3, "id": 9} */
static void pack_sample(msgpack_sbuffer *sb)
{
    msgpack_packer pk;
    msgpack_sbuffer_init(sb);
    msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 6);
    assert_int_equal(kt_mp_pack_ku64(&pk, "id", 7), 0);
    assert_int_equal(kt_mp_pack_kstr(&pk, "name", "x"), 0);
    msgpack_pack_int(&pk, 5);
    kt_mp_pack_str(&pk, "int key");
    kt_mp_pack_str(&pk, "nil");
    msgpack_pack_nil(&pk);
    assert_int_equal(kt_mp_pack_ki64(&pk, "neg", -3), 0);
    kt_mp_pack_ku64(&pk, "id", 9);
}

static void test_get(void **state)
{
    (void)state;
    msgpack_sbuffer sb;
    msgpack_unpacked u;
    pack_sample(&sb);
    unpack(&sb, &u);
    const msgpack_object *v = kt_mp_get(&u.data, "id");
    assert_non_null(v);
    assert_int_equal(v->type, MSGPACK_OBJECT_POSITIVE_INTEGER);
    assert_int_equal(v->via.u64, 7); /* the first of two equal keys */
    v = kt_mp_get(&u.data, "name");
    assert_non_null(v);
    assert_true(kt_mp_str_is(v, "x"));
    /* present but nil: returned, the caller decides */
    v = kt_mp_get(&u.data, "nil");
    assert_non_null(v);
    assert_int_equal(v->type, MSGPACK_OBJECT_NIL);
    /* missing, and keys that are a prefix or an extension of a present one */
    assert_null(kt_mp_get(&u.data, "missing"));
    assert_null(kt_mp_get(&u.data, "i"));
    assert_null(kt_mp_get(&u.data, "idx"));
    assert_null(kt_mp_get(&u.data, ""));
    /* a key that is not a string is passed over, not matched by its text */
    assert_null(kt_mp_get(&u.data, "5"));
    assert_null(kt_mp_get(&u.data, "int key"));
    msgpack_unpacked_destroy(&u);
    msgpack_sbuffer_destroy(&sb);
}

static void test_get_not_a_map(void **state)
{
    (void)state;
    assert_null(kt_mp_get(NULL, "id"));
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    /* an array holding what would be a key and its value */
    msgpack_pack_array(&pk, 2);
    kt_mp_pack_str(&pk, "id");
    msgpack_pack_int(&pk, 1);
    msgpack_unpacked u;
    unpack(&sb, &u);
    assert_null(kt_mp_get(&u.data, "id"));
    assert_null(kt_mp_get(&u.data.via.array.ptr[0], "id")); /* a string */
    assert_null(kt_mp_get(&u.data.via.array.ptr[1], "id")); /* an integer */
    msgpack_unpacked_destroy(&u);
    msgpack_sbuffer_destroy(&sb);
}

/* A map cut anywhere before its end is no object at all: the lookup in what the unpacker left
 * finds nothing. */
static void test_truncated(void **state)
{
    (void)state;
    msgpack_sbuffer sb;
    pack_sample(&sb);
    for (size_t cut = 0; cut < sb.size; cut++) {
        msgpack_unpacked u;
        size_t off = 0;
        msgpack_unpacked_init(&u);
        assert_int_equal(msgpack_unpack_next(&u, sb.data, cut, &off), MSGPACK_UNPACK_CONTINUE);
        assert_null(kt_mp_get(&u.data, "id")); /* u.data is still nil */
        msgpack_unpacked_destroy(&u);
    }
    msgpack_sbuffer_destroy(&sb);
}

static void test_str_is(void **state)
{
    (void)state;
    msgpack_object s = {.type = MSGPACK_OBJECT_STR, .via.str = {.size = 4, .ptr = "evalX"}};
    assert_true(kt_mp_str_is(&s, "eval"));
    assert_false(kt_mp_str_is(&s, "eva"));   /* shorter */
    assert_false(kt_mp_str_is(&s, "evalX")); /* longer than the object */
    assert_false(kt_mp_str_is(&s, "Eval"));  /* byte for byte */
    msgpack_object nul = {.type = MSGPACK_OBJECT_STR, .via.str = {.size = 5, .ptr = "eval\0"}};
    assert_false(kt_mp_str_is(&nul, "eval")); /* an embedded NUL is a different string */
    msgpack_object bin = {.type = MSGPACK_OBJECT_BIN, .via.bin = {.size = 4, .ptr = "eval"}};
    assert_false(kt_mp_str_is(&bin, "eval")); /* bytes are not a string */
    msgpack_object empty = {.type = MSGPACK_OBJECT_STR, .via.str = {.size = 0, .ptr = ""}};
    assert_true(kt_mp_str_is(&empty, ""));
}

static void test_i64(void **state)
{
    (void)state;
    int64_t v = 42;
    msgpack_object o = {.type = MSGPACK_OBJECT_POSITIVE_INTEGER, .via.u64 = INT64_MAX};
    assert_true(kt_mp_i64(&o, &v));
    assert_true(v == INT64_MAX);
    o.via.u64 = (uint64_t)INT64_MAX + 1; /* does not fit: refused, v untouched */
    v = 42;
    assert_false(kt_mp_i64(&o, &v));
    assert_int_equal(v, 42);
    o = (msgpack_object){.type = MSGPACK_OBJECT_NEGATIVE_INTEGER, .via.i64 = INT64_MIN};
    assert_true(kt_mp_i64(&o, &v));
    assert_true(v == INT64_MIN);
    v = 42;
    o = (msgpack_object){.type = MSGPACK_OBJECT_FLOAT64, .via.f64 = 3.0};
    assert_false(kt_mp_i64(&o, &v)); /* a float, even a whole one */
    o = (msgpack_object){.type = MSGPACK_OBJECT_BOOLEAN, .via.boolean = true};
    assert_false(kt_mp_i64(&o, &v));
    o = (msgpack_object){.type = MSGPACK_OBJECT_STR, .via.str = {.size = 1, .ptr = "1"}};
    assert_false(kt_mp_i64(&o, &v));
    o = (msgpack_object){.type = MSGPACK_OBJECT_NIL};
    assert_false(kt_mp_i64(&o, &v));
    assert_int_equal(v, 42);
}

/* The packers write what msgpack-c's own calls write. */
static void test_pack_bytes(void **state)
{
    (void)state;
    msgpack_sbuffer a, b;
    msgpack_packer pa, pb;
    msgpack_sbuffer_init(&a);
    msgpack_sbuffer_init(&b);
    msgpack_packer_init(&pa, &a, msgpack_sbuffer_write);
    msgpack_packer_init(&pb, &b, msgpack_sbuffer_write);
    static const uint8_t bin[3] = {0, 1, 2};
    kt_mp_pack_kstr(&pa, "k", "value");
    kt_mp_pack_ki64(&pa, "i", -5);
    kt_mp_pack_ku64(&pa, "u", UINT64_MAX);
    kt_mp_pack_kf64(&pa, "f", 0.5);
    kt_mp_pack_kbool(&pa, "t", true);
    kt_mp_pack_kbool(&pa, "f", false);
    kt_mp_pack_kbin(&pa, "b", bin, sizeof(bin));
    kt_mp_pack_str(&pa, NULL); /* "" */
    msgpack_pack_str(&pb, 1), msgpack_pack_str_body(&pb, "k", 1);
    msgpack_pack_str(&pb, 5), msgpack_pack_str_body(&pb, "value", 5);
    msgpack_pack_str(&pb, 1), msgpack_pack_str_body(&pb, "i", 1);
    msgpack_pack_int64(&pb, -5);
    msgpack_pack_str(&pb, 1), msgpack_pack_str_body(&pb, "u", 1);
    msgpack_pack_uint64(&pb, UINT64_MAX);
    msgpack_pack_str(&pb, 1), msgpack_pack_str_body(&pb, "f", 1);
    msgpack_pack_double(&pb, 0.5);
    msgpack_pack_str(&pb, 1), msgpack_pack_str_body(&pb, "t", 1);
    msgpack_pack_true(&pb);
    msgpack_pack_str(&pb, 1), msgpack_pack_str_body(&pb, "f", 1);
    msgpack_pack_false(&pb);
    msgpack_pack_str(&pb, 1), msgpack_pack_str_body(&pb, "b", 1);
    msgpack_pack_bin(&pb, 3), msgpack_pack_bin_body(&pb, bin, 3);
    msgpack_pack_str(&pb, 0);
    assert_int_equal(a.size, b.size);
    assert_memory_equal(a.data, b.data, a.size);
    msgpack_sbuffer_destroy(&a);
    msgpack_sbuffer_destroy(&b);
}

static int failing_write(void *data, const char *buf, size_t len)
{
    (void)data, (void)buf, (void)len;
    return -1;
}

/* A write that fails (an sbuffer out of memory) is reported by every packer. */
static void test_pack_failure(void **state)
{
    (void)state;
    msgpack_packer pk;
    msgpack_packer_init(&pk, NULL, failing_write);
    assert_int_not_equal(kt_mp_pack_str(&pk, "x"), 0);
    assert_int_not_equal(kt_mp_pack_bool(&pk, true), 0);
    assert_int_not_equal(kt_mp_pack_kstr(&pk, "k", "v"), 0);
    assert_int_not_equal(kt_mp_pack_ki64(&pk, "k", 1), 0);
    assert_int_not_equal(kt_mp_pack_ku64(&pk, "k", 1), 0);
    assert_int_not_equal(kt_mp_pack_kf64(&pk, "k", 1.0), 0);
    assert_int_not_equal(kt_mp_pack_kbool(&pk, "k", false), 0);
    assert_int_not_equal(kt_mp_pack_kbin(&pk, "k", "v", 1), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_get),          cmocka_unit_test(test_get_not_a_map),
        cmocka_unit_test(test_truncated),    cmocka_unit_test(test_str_is),
        cmocka_unit_test(test_i64),          cmocka_unit_test(test_pack_bytes),
        cmocka_unit_test(test_pack_failure),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
