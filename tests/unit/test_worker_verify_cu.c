/* The GPU worker's comparison kernels (search/worker_verify.cu): the copy embedded at build time
 * is the file's bytes, and NVRTC compiles it on its own for sm_90a and sm_80 into a cubin with
 * every entry point the worker loads (search/worker_verify.c, srch_wk_cmp_init). No GPU needed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "search/compile.h"
#include "search/srch_embedded.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The entry points srch_wk_cmp_init looks up. */
static const char *const entries[] = {
    "kt_cmp_f32",      "kt_cmp_f16",      "kt_cmp_bf16",      "kt_cmp_f64",
    "kt_refstats_f32", "kt_refstats_f16", "kt_refstats_bf16", "kt_refstats_f64",
    "kt_copy",         "kt_widen_f32",    "kt_widen_f16",     "kt_widen_bf16",
    "kt_diff_1",       "kt_diff_2",       "kt_diff_4",        "kt_diff_8",
};

static void test_embedded_is_the_file(void **state)
{
    (void)state;
    const char *root = getenv("KTUNE_SOURCE_ROOT");
    assert_non_null(root);
    char path[4096];
    snprintf(path, sizeof(path), "%s/search/worker_verify.cu", root);
    char *text = NULL;
    size_t len = 0;
    kt_err err = {0};
    assert_int_equal(kt_read_file(path, 1 << 20, &text, &len, &err), 0);
    assert_int_equal(SRCH_EMBEDDED_COUNT, 1);
    assert_string_equal(srch_embedded_names[SRCH_EMBEDDED_WORKER_VERIFY_CU], "worker_verify.cu");
    const char *data = srch_embedded_data[SRCH_EMBEDDED_WORKER_VERIFY_CU];
    size_t elen = srch_embedded_lens[SRCH_EMBEDDED_WORKER_VERIFY_CU];
    assert_int_equal(elen, len);
    assert_int_equal(strlen(data), elen); /* NUL-terminated, no NUL inside */
    assert_memory_equal(data, text, len);
    free(text);
}

static void compile_for(const char *arch)
{
    srch_compile_result r = {0};
    int rc = srch_nvrtc_compile(srch_embedded_data[SRCH_EMBEDDED_WORKER_VERIFY_CU], arch, &r);
    if (rc < 0 || r.status != SRCH_COMPILE_OK)
        fail_msg("worker_verify.cu does not compile for %s (%d): %s", arch, rc, r.log ? r.log : "");
    assert_non_null(r.cubin);
    for (size_t i = 0; i < sizeof(entries) / sizeof(entries[0]); i++)
        if (!memmem(r.cubin, r.cubin_len, entries[i], strlen(entries[i]) + 1))
            fail_msg("the %s cubin has no entry %s", arch, entries[i]);
    srch_compile_result_release(&r);
}

static void test_compiles_sm90a(void **state)
{
    (void)state;
    compile_for("sm_90a");
}

static void test_compiles_sm80(void **state)
{
    (void)state;
    compile_for("sm_80");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_embedded_is_the_file),
        cmocka_unit_test(test_compiles_sm90a),
        cmocka_unit_test(test_compiles_sm80),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
