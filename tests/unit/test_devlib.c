/* The device library (ops/device/ktune/): tests/devlib/<family>.cu, a small kernel calling every
 * wrapper of one family, compiled with NVRTC (no GPU needed) for sm_90a and sm_80 with the
 * embedded headers; run as `test_devlib <family>`, one meson test per family. The family
 * "inline" checks ops_devlib_inline: every test kernel made self-contained compiles the same,
 * and an unknown ktune/ header is refused. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "ops/devlib.h"
#include "search/compile.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *family;

static const char *const families[] = {"arch",       "cp_async", "ldmatrix", "mma",      "memory",
                                       "swizzle",    "reduce",   "cluster",  "mbarrier", "tma",
                                       "setmaxnreg", "wgmma",    "math",     "barrier"};

static char *read_kernel(const char *fam)
{
    char path[1024];
    snprintf(path, sizeof(path), "%s/tests/devlib/%s.cu", getenv("KTUNE_SOURCE_ROOT"), fam);
    char *text = NULL;
    kt_err err = {0};
    if (kt_read_file(path, (size_t)1 << 20, &text, NULL, &err) < 0)
        fail_msg("%s: %s", path, err.msg);
    return text;
}

/* Compiles src for arch with KT_EXPECT_SM90A defined first (tests/devlib/arch.cu checks the
 * library's own guard against it); fails the test with NVRTC's log. Returns the kernel count. */
static int compile(const char *fam, const char *src, const char *arch)
{
    kt_buf b = {0};
    kt_buf_printf(&b, "#define KT_EXPECT_SM90A %d\n%s", strcmp(arch, "sm_90a") == 0, src);
    assert_int_equal(kt_buf_status(&b), 0);
    srch_compile_result r = {0};
    if (srch_nvrtc_compile(b.data, arch, &r) < 0)
        fail_msg("NVRTC failed to run");
    if (r.status != SRCH_COMPILE_OK)
        fail_msg("%s for %s does not compile:\n%s\n---- source ----\n%s", fam, arch, r.log, b.data);
    int n = r.n_kernels;
    srch_compile_result_release(&r);
    kt_buf_free(&b);
    return n;
}

static void test_family(void **state)
{
    (void)state;
    char *src = read_kernel(family);
    char inc[64];
    snprintf(inc, sizeof(inc), "#include \"ktune/%s.cuh\"", family);
    if (!strstr(src, inc))
        fail_msg("tests/devlib/%s.cu does not include ktune/%s.cuh", family, family);
    assert_int_equal(compile(family, src, "sm_90a"), 1);
    assert_int_equal(compile(family, src, "sm_80"), 1);
    free(src);
}

static void test_inline(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(families) / sizeof(families[0]); i++) {
        char *src = read_kernel(families[i]), *flat = NULL;
        kt_err err = {0};
        assert_int_equal(ops_devlib_inline(src, &flat, &err), 0);
        if (strstr(flat, "#include") || strstr(flat, "#pragma once"))
            fail_msg("%s: inlined source still includes:\n%s", families[i], flat);
        /* arch.cuh, included by most headers, appears once */
        const char *first = strstr(flat, "__device__ __forceinline__ unsigned kt_smem_u32(");
        if (first && strstr(first + 1, "__device__ __forceinline__ unsigned kt_smem_u32("))
            fail_msg("%s: a header inlined twice:\n%s", families[i], flat);
        assert_int_equal(compile(families[i], flat, "sm_90a"), 1);
        assert_int_equal(compile(families[i], flat, "sm_80"), 1);
        free(src);
        free(flat);
    }
    char *flat = NULL;
    kt_err err = {0};
    assert_int_equal(ops_devlib_inline("#include \"ktune/nope.cuh\"\n", &flat, &err), -ENOENT);
    assert_null(flat);
    assert_non_null(strstr(err.msg, "ktune/nope.cuh"));
    /* other includes and text pass through unchanged */
    const char *plain = "#include <cuda_fp16.h>\nint x;\n/* #include \"ktune/mma.cuh\" */";
    assert_int_equal(ops_devlib_inline(plain, &flat, &err), 0);
    assert_string_equal(flat, plain);
    free(flat);
}

/* Every header in ops/device/ktune/ has a kernel here (a new family needs its test). */
static void test_every_header_tested(void **state)
{
    (void)state;
    for (int i = 0; i < ops_devlib_count; i++) {
        const char *name = ops_devlib_names[i] + strlen("ktune/");
        bool found = strcmp(name, "regs.cuh") == 0; /* tested with arch.cuh */
        for (size_t k = 0; k < sizeof(families) / sizeof(families[0]) && !found; k++)
            found = strncmp(name, families[k], strlen(families[k])) == 0 &&
                    strcmp(name + strlen(families[k]), ".cuh") == 0;
        if (!found)
            fail_msg("%s has no test kernel in tests/devlib/ (and tests/meson.build)",
                     ops_devlib_names[i]);
    }
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: test_devlib FAMILY|inline\n");
        return 2;
    }
    family = argv[1];
    const struct CMUnitTest fam[] = {cmocka_unit_test(test_family)};
    const struct CMUnitTest inl[] = {cmocka_unit_test(test_inline),
                                     cmocka_unit_test(test_every_header_tested)};
    if (strcmp(family, "inline") == 0)
        return cmocka_run_group_tests_name("device library: inlining", inl, NULL, NULL);
    return cmocka_run_group_tests_name(family, fam, NULL, NULL);
}
