/* Names never reach generated source unescaped (issue 16): graph, symbol and tensor names that
 * carry comment ends, #include and #define lines, backslashes, trigraphs and code. Every family
 * emits, for a graph with such names, the same code as for the graph with plain names (equal
 * sources once comments are removed); NVRTC compiles the hostile sources without reading the
 * file a name #includes, to the same cubin bytes as the plain ones. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "emit_test_util.h"
#include "tests/emit_names.h"

#include <unistd.h>

/* A file no kernel may read: NVRTC stops at its #error if a name's #include reaches code. */
static char probe_path[64];
static char include_payload[128];

static const char *payloads[] = {
    include_payload, /* the graph's name (names_rename) */
    "y */ #define kt_max(a, b) (a) /* ",
    " */ } extern \"C\" __global__ void ktune_planted(float *p) { p[0] = 1.0f; } /* ",
    "a\\",                   /* a backslash at the end of a // comment splices the next line */
    "b*\\\n/ int spliced;",  /* star, backslash-newline, slash: a comment end after splicing */
    "c?\?/\n int trigraph;", /* "??/": a backslash where trigraphs are on */
    " // rest of line \\",
    "%2A%2F escapes é ünïcode \x01\x7f",
    "*/*/*/*/*/*/*/*/*/*/*/*/*/*/*/*/*/*/*/*/*/*/*/*/*/*/*/*/*/*/*/*/*/*/*/*/*/*/*/*/*/*/*/*/*/*/"
    "*/*/*/*/*/*/*/*/*/*/*/*/*/*/*/*/*/*/*/*/*/*/*/*/*/*/*/*/*/*/*/*/*/*/*/*/*/*/*/*/*/*/*/*/*/*/",
};
#define N_PAYLOADS ((int)(sizeof(payloads) / sizeof(payloads[0])))

static int setup(void **state)
{
    (void)state;
    snprintf(probe_path, sizeof(probe_path), "/tmp/ktune-names-probe-XXXXXX");
    int fd = mkstemp(probe_path);
    if (fd < 0)
        return -1;
    static const char body[] = "#error ktune names probe: a name's #include was read\n";
    if (write(fd, body, sizeof(body) - 1) != (ssize_t)(sizeof(body) - 1)) {
        close(fd);
        return -1;
    }
    close(fd);
    snprintf(include_payload, sizeof(include_payload), " */\n#include \"%s\"\n/* ", probe_path);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    unlink(probe_path);
    return 0;
}

/* The canonical graph renamed with the payloads (hostile) or their plain twins. */
static ops_graph *named_graph(int i, bool plain)
{
    ops_graph *g = emit_test_graph(names_graphs[i].json, names_graphs[i].shapes);
    assert_int_equal(names_rename(g, payloads, N_PAYLOADS, plain), 0);
    return g;
}

static void test_comment_text(void **state)
{
    (void)state;
    char out[OPS_EMIT_COMMENT_MAX];
    assert_string_equal(ops_emit_comment_text("y.max", out, sizeof(out)), "y.max");
    assert_string_equal(ops_emit_comment_text("a */ b", out, sizeof(out)), "a %2A%2F b");
    assert_string_equal(ops_emit_comment_text("p%2A\\?\n", out, sizeof(out)), "p%252A%5C%3F%0A");
    assert_string_equal(ops_emit_comment_text(NULL, out, sizeof(out)), "");
    /* every byte: what comes out can neither end, open nor splice a comment */
    for (int c = 1; c < 256; c++) {
        char in[3] = {(char)c, (char)c, 0};
        ops_emit_comment_text(in, out, sizeof(out));
        for (const char *p = out; *p; p++)
            assert_true(*p >= 0x20 && *p <= 0x7e && !strchr("*/\\?", *p));
        bool kept = c >= 0x20 && c <= 0x7e && !strchr("*/\\?%", c);
        assert_int_equal(strlen(out), kept ? 2 : 6);
    }
    /* long text is cut at a whole escape and marked, within len - 1 bytes */
    char big[600];
    memset(big, '*', sizeof(big) - 1);
    big[sizeof(big) - 1] = 0;
    for (size_t len = 4; len < 40; len++) {
        char small[40];
        ops_emit_comment_text(big, small, len);
        assert_true(strlen(small) <= len - 1);
        assert_non_null(strstr(small, "..."));
        assert_int_equal(strlen(small) % 3, 0);
    }
    ops_emit_comment_text("abcdef", out, 7);
    assert_string_equal(out, "abcdef");
    ops_emit_comment_text("abcdefg", out, 7);
    assert_string_equal(out, "abc...");
}

/* Every family that matches each graph: hostile and plain names give the same code. */
static void test_same_code(void **state)
{
    (void)state;
    ops_device dev;
    ops_device_h100(&dev);
    int fams_seen = 0;
    for (size_t i = 0; i < NAMES_N_GRAPHS; i++) {
        ops_graph *gh = named_graph((int)i, false), *gp = named_graph((int)i, true);
        ops_group hh, hp;
        emit_test_whole_group(gh, &hh);
        emit_test_whole_group(gp, &hp);
        int any = 0;
        for (int f = 0; f < OPS_FAM_COUNT; f++) {
            int n = 0;
            const char *why = names_compare_family(ops_family_get((ops_family_id)f), &hh, &hp, &dev,
                                                   24, payloads, N_PAYLOADS, &n);
            if (why)
                fail_msg("graph %zu, family %s: %s", i, ops_family_get((ops_family_id)f)->name,
                         why);
            any += n;
            fams_seen |= n ? 1 << f : 0;
        }
        if (any == 0)
            fail_msg("graph %zu: no family emitted it", i);
        const char *why = names_compare_reference(gh, gp);
        if (why)
            fail_msg("graph %zu, reference program: %s", i, why);
        ops_graph_free(gh);
        ops_graph_free(gp);
    }
    /* every family was exercised (the reference family takes single-node groups) */
    assert_int_equal(fams_seen | 1 << OPS_FAM_REFERENCE, (1 << OPS_FAM_COUNT) - 1);
}

static void compile_same(const char *what, const char *hostile, const char *plain, const char *arch)
{
    srch_compile_result rh = {0}, rp = {0};
    assert_int_equal(srch_nvrtc_compile(hostile, arch, &rh), 0);
    if (rh.status != SRCH_COMPILE_OK)
        fail_msg("%s: the hostile source does not compile:\n%s", what, rh.log);
    assert_int_equal(srch_nvrtc_compile(plain, arch, &rp), 0);
    assert_int_equal(rp.status, SRCH_COMPILE_OK);
    if (rh.cubin_len != rp.cubin_len || memcmp(rh.cubin, rp.cubin, rh.cubin_len) != 0)
        fail_msg("%s: hostile and plain names give different cubins", what);
    srch_compile_result_release(&rh);
    srch_compile_result_release(&rp);
}

/* NVRTC: each graph's first legal schedule of its family, and one reference program, compile
 * with hostile names (the #include'd probe would stop them) to the plain names' cubin. */
static void test_nvrtc(void **state)
{
    (void)state;
    ops_device dev;
    ops_device_h100(&dev);
    for (size_t i = 0; i < NAMES_N_GRAPHS; i++) {
        ops_graph *gh = named_graph((int)i, false), *gp = named_graph((int)i, true);
        ops_group hh, hp;
        emit_test_whole_group(gh, &hh);
        emit_test_whole_group(gp, &hp);
        const ops_family *fam = ops_family_get(names_graphs[i].fam);
        if (!fam->matches(&hh))
            fail_msg("graph %zu: family %s does not match", i, fam->name);
        names_sched_list l = {0};
        assert_int_equal(ops_family_enumerate(fam, &hh, &dev, names_collect, &l, NULL), 0);
        assert_true(l.n > 0);
        ops_emitted eh = {0}, ep = {0};
        ops_diag d = {0};
        assert_int_equal(fam->emit(&hh, &l.s[0], &dev, &eh, &d), 0);
        assert_int_equal(fam->emit(&hp, &l.s[0], &dev, &ep, &d), 0);
        char what[128];
        snprintf(what, sizeof(what), "graph %zu, family %s", i, fam->name);
        compile_same(what, eh.source, ep.source, dev.arch);
        ops_emitted_free(&eh);
        ops_emitted_free(&ep);
        free(l.s);
        if (i == 0) {
            ops_ref_program rh = {0}, rp = {0};
            assert_int_equal(ops_emit_reference_graph(gh, &rh, &d), 0);
            assert_int_equal(ops_emit_reference_graph(gp, &rp, &d), 0);
            compile_same("reference program", rh.source, rp.source, dev.arch);
            ops_ref_program_free(&rh);
            ops_ref_program_free(&rp);
        }
        ops_graph_free(gh);
        ops_graph_free(gp);
    }
}

/* Attribute values reach code as literals: an attention scale of 2 is "2.0f" ("2f" does not
 * compile), in the schedules that do not fold log2(e) into it. */
static void test_attribute_literal(void **state)
{
    (void)state;
    static const char json[] =
        "{\"name\":\"attn\",\"inputs\":{\"q\":{\"dtype\":\"f16\",\"shape\":[2,64,64]},"
        "\"k\":{\"dtype\":\"f16\",\"shape\":[2,64,64]},\"v\":{\"dtype\":\"f16\",\"shape\":[2,"
        "64,64]}},\"nodes\":[{\"out\":\"y\",\"op\":\"attention\",\"in\":[\"q\",\"k\",\"v\"],"
        "\"scale\":2.0}],\"outputs\":[\"y\"]}";
    ops_graph *g = emit_test_graph(json, "");
    ops_group grp;
    emit_test_whole_group(g, &grp);
    ops_device dev;
    ops_device_h100(&dev);
    const ops_family *fam = ops_family_get(OPS_FAM_ATTENTION);
    names_sched_list l = {0};
    assert_int_equal(ops_family_enumerate(fam, &grp, &dev, names_collect, &l, NULL), 0);
    bool found = false;
    for (int i = 0; i < l.n && !found; i++) {
        ops_emitted e = {0};
        ops_diag d = {0};
        assert_int_equal(fam->emit(&grp, &l.s[i], &dev, &e, &d), 0);
        if (strstr(e.source, "constexpr float SCALE = 2")) {
            found = true;
            assert_non_null(strstr(e.source, "constexpr float SCALE = 2.0f;"));
            emit_test_compile(e.source, dev.arch);
        }
        ops_emitted_free(&e);
    }
    assert_true(found);
    free(l.s);
    ops_graph_free(g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_comment_text),
        cmocka_unit_test(test_same_code),
        cmocka_unit_test(test_nvrtc),
        cmocka_unit_test(test_attribute_literal),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
