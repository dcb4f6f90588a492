/* ktuned's lookup memo (daemon/memo.c): hits only for the same key bytes, variant and cache
 * generation; chains compared in full; least-recently-used eviction by entry count and by bytes;
 * entries too large refused; clearing. */
#include "daemon/kd.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

static void put(kd_memo *m, const char *key, int variant, uint64_t gen, const char *val,
                uint32_t nf)
{
    assert_int_equal(kd_memo_put(m, (const uint8_t *)key, strlen(key), variant, gen,
                                 (const uint8_t *)val, strlen(val), nf),
                     0);
}

/* The value of (key, variant) at gen, or NULL; *nf its field count. */
static const char *get(kd_memo *m, const char *key, int variant, uint64_t gen, uint32_t *nf)
{
    static char buf[256];
    const uint8_t *v = NULL;
    size_t len = 0;
    uint32_t n = 0;
    if (!kd_memo_get(m, (const uint8_t *)key, strlen(key), variant, gen, &v, &len, &n))
        return NULL;
    assert_true(len < sizeof(buf));
    memcpy(buf, v, len);
    buf[len] = '\0';
    if (nf)
        *nf = n;
    return buf;
}

static void test_bad_arguments(void **state)
{
    kd_memo *m = NULL;
    assert_int_equal(kd_memo_new(0, 1024, &m), -EINVAL);
    assert_int_equal(kd_memo_new(4, 0, &m), -EINVAL);
    kd_memo_free(NULL);
    kd_memo_clear(NULL);
}

static void test_hits_need_same_key_variant_generation(void **state)
{
    kd_memo *m = NULL;
    assert_int_equal(kd_memo_new(16, 1 << 20, &m), 0);
    uint32_t nf = 0;
    assert_null(get(m, "graph-a", 0, 7, NULL));
    put(m, "graph-a", 0, 7, "found=false", 1);
    assert_string_equal(get(m, "graph-a", 0, 7, &nf), "found=false");
    assert_int_equal(nf, 1);
    /* other variant, other key bytes (prefix, extension, one byte changed) */
    assert_null(get(m, "graph-a", 1, 7, NULL));
    assert_null(get(m, "graph-", 0, 7, NULL));
    assert_null(get(m, "graph-aa", 0, 7, NULL));
    assert_null(get(m, "graph-b", 0, 7, NULL));
    /* both variants of one entry */
    put(m, "graph-a", 1, 7, "found=false+src", 1);
    assert_string_equal(get(m, "graph-a", 0, 7, NULL), "found=false");
    assert_string_equal(get(m, "graph-a", 1, 7, NULL), "found=false+src");
    /* another generation: never a hit, and the entry is gone */
    assert_null(get(m, "graph-a", 0, 8, NULL));
    assert_null(get(m, "graph-a", 0, 7, NULL));
    /* a put at a new generation replaces both variants */
    put(m, "graph-a", 0, 9, "found=true", 2);
    put(m, "graph-a", 1, 9, "found=true+src", 3);
    put(m, "graph-a", 0, 10, "found=true v10", 2);
    assert_string_equal(get(m, "graph-a", 0, 10, &nf), "found=true v10");
    assert_null(get(m, "graph-a", 1, 10, NULL));
    kd_memo_stats st;
    kd_memo_stat(m, &st);
    assert_int_equal(st.entries, 1);
    assert_true(st.hits >= 4);
    assert_true(st.stale >= 1);
    kd_memo_free(m);
}

static void test_chains_compare_keys(void **state)
{
    /* 64 keys in 128 buckets: some chains hold several */
    kd_memo *m = NULL;
    assert_int_equal(kd_memo_new(64, 1 << 20, &m), 0);
    char key[32], val[32];
    for (int i = 0; i < 64; i++) {
        snprintf(key, sizeof(key), "k%d", i);
        snprintf(val, sizeof(val), "v%d", i);
        put(m, key, i & 1, 1, val, (uint32_t)i);
    }
    for (int i = 0; i < 64; i++) {
        uint32_t nf = 0;
        snprintf(key, sizeof(key), "k%d", i);
        snprintf(val, sizeof(val), "v%d", i);
        assert_string_equal(get(m, key, i & 1, 1, &nf), val);
        assert_int_equal(nf, (uint32_t)i);
        assert_null(get(m, key, !(i & 1), 1, NULL));
    }
    /* binary keys with NUL bytes, equal but for one byte */
    uint8_t a[100] = {0}, b[100] = {0};
    b[99] = 1;
    assert_int_equal(kd_memo_put(m, a, sizeof(a), 0, 1, (const uint8_t *)"A", 1, 1), 0);
    const uint8_t *v;
    size_t len;
    uint32_t nf;
    assert_false(kd_memo_get(m, b, sizeof(b), 0, 1, &v, &len, &nf));
    assert_true(kd_memo_get(m, a, sizeof(a), 0, 1, &v, &len, &nf));
    assert_int_equal(len, 1);
    assert_memory_equal(v, "A", 1);
    kd_memo_free(m);
}

static void test_lru_by_count(void **state)
{
    kd_memo *m = NULL;
    assert_int_equal(kd_memo_new(3, 1 << 20, &m), 0);
    put(m, "a", 0, 1, "A", 1);
    put(m, "b", 0, 1, "B", 1);
    put(m, "c", 0, 1, "C", 1);
    assert_non_null(get(m, "a", 0, 1, NULL)); /* a is now the most recent; b the least */
    put(m, "d", 0, 1, "D", 1);
    assert_null(get(m, "b", 0, 1, NULL));
    assert_string_equal(get(m, "a", 0, 1, NULL), "A");
    assert_string_equal(get(m, "c", 0, 1, NULL), "C");
    assert_string_equal(get(m, "d", 0, 1, NULL), "D");
    kd_memo_stats st;
    kd_memo_stat(m, &st);
    assert_int_equal(st.entries, 3);
    assert_int_equal(st.evictions, 1);
    kd_memo_clear(m);
    kd_memo_stat(m, &st);
    assert_int_equal(st.entries, 0);
    assert_int_equal(st.bytes, 0);
    assert_null(get(m, "a", 0, 1, NULL));
    put(m, "e", 0, 1, "E", 1);
    assert_string_equal(get(m, "e", 0, 1, NULL), "E");
    kd_memo_free(m);
}

static void test_byte_budget(void **state)
{
    const size_t budget = 64 << 10;
    kd_memo *m = NULL;
    assert_int_equal(kd_memo_new(4096, budget, &m), 0);
    static uint8_t big[8 << 10];
    memset(big, 'x', sizeof(big));
    /* larger than a sixteenth of the budget: refused */
    assert_int_equal(kd_memo_put(m, (const uint8_t *)"k", 1, 0, 1, big, budget / 16, 1), -E2BIG);
    /* 3 KiB values: the budget holds about 20; 100 puts keep it bounded, the newest kept */
    char key[16];
    for (int i = 0; i < 100; i++) {
        snprintf(key, sizeof(key), "k%d", i);
        assert_int_equal(kd_memo_put(m, (const uint8_t *)key, strlen(key), 0, 1, big, 3 << 10, 1),
                         0);
        kd_memo_stats st;
        kd_memo_stat(m, &st);
        assert_true(st.bytes <= budget);
    }
    kd_memo_stats st;
    kd_memo_stat(m, &st);
    assert_true(st.entries >= 10 && st.entries <= 21);
    assert_true(st.evictions >= 79);
    const uint8_t *v;
    size_t len;
    uint32_t nf;
    assert_true(kd_memo_get(m, (const uint8_t *)"k99", 3, 0, 1, &v, &len, &nf));
    assert_int_equal(len, 3 << 10);
    assert_false(kd_memo_get(m, (const uint8_t *)"k0", 2, 0, 1, &v, &len, &nf));
    kd_memo_free(m);
}

static void test_hash(void **state)
{
    const char *s = "the same bytes";
    assert_true(kd_memo_hash(s, strlen(s), 1) == kd_memo_hash(s, strlen(s), 1));
    assert_true(kd_memo_hash(s, strlen(s), 1) != kd_memo_hash(s, strlen(s), 2));
    assert_true(kd_memo_hash(s, strlen(s), 1) != kd_memo_hash(s, strlen(s) - 1, 1));
    /* every single-bit change of a 24-byte input changes the hash */
    uint8_t buf[24] = {0};
    uint64_t h0 = kd_memo_hash(buf, sizeof(buf), 3);
    for (int bit = 0; bit < 24 * 8; bit++) {
        buf[bit / 8] ^= (uint8_t)(1u << (bit % 8));
        assert_true(kd_memo_hash(buf, sizeof(buf), 3) != h0);
        buf[bit / 8] ^= (uint8_t)(1u << (bit % 8));
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_arguments),
        cmocka_unit_test(test_hits_need_same_key_variant_generation),
        cmocka_unit_test(test_chains_compare_keys),
        cmocka_unit_test(test_lru_by_count),
        cmocka_unit_test(test_byte_budget),
        cmocka_unit_test(test_hash),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
