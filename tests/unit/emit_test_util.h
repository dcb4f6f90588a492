/* Shared by the emitter tests: build a canonical bound graph from JSON, compile emitted CUDA
 * with NVRTC (no GPU needed), and compare emitted source with golden files. Include after
 * <cmocka.h>. */
#pragma once

#include "ops/devlib.h"
#include "ops/family.h"
#include "search/compile.h"
#include "search/space.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Parses, validates, binds ("M=4,N=8" or "") and canonicalises; fails the test on any error. */
static inline ops_graph *emit_test_graph(const char *json, const char *shapes)
{
    ops_graph *g = NULL, *bound = NULL, *canon = NULL;
    ops_diag d = {0};
    if (ops_graph_from_json(json, strlen(json), &g, &d) < 0 || ops_graph_validate(g, &d) < 0)
        fail_msg("graph: %s", d.msg);
    ops_binding b[16];
    int n = 0;
    char *copy = strdup(shapes);
    for (char *save = NULL, *tok = strtok_r(copy, ",", &save); tok && n < 16;
         tok = strtok_r(NULL, ",", &save)) {
        kt_err err = {0};
        if (ops_binding_parse(tok, &b[n++], &err) < 0)
            fail_msg("shape %s: %s", tok, err.msg);
    }
    if (ops_graph_bind(g, b, n, &bound, &d) < 0 || ops_graph_canonicalize(bound, &canon, &d) < 0)
        fail_msg("bind/canonicalize: %s", d.msg);
    free(copy);
    ops_graph_free(g);
    ops_graph_free(bound);
    return canon;
}

/* The group of every node of g. */
/* The candidate space of the graph file at `file` (relative to $KTUNE_SOURCE_ROOT) with shapes
 * bound, for an H100 and precision p; fails the test on any error. */
static inline srch_space *emit_test_space(const char *file, const char *shapes, ops_precision p)
{
    char path[1024];
    snprintf(path, sizeof(path), "%s/%s", getenv("KTUNE_SOURCE_ROOT"), file);
    char *json = NULL;
    kt_err err = {0};
    if (kt_read_file(path, OPS_MAX_GRAPH_BYTES, &json, NULL, &err) < 0)
        fail_msg("%s: %s", path, err.msg);
    ops_graph *canon = emit_test_graph(json, shapes);
    free(json);
    ops_device dev;
    ops_device_h100(&dev);
    srch_space *s = NULL;
    ops_diag d = {0};
    if (srch_space_build(canon, &dev, p, &s, &d) < 0)
        fail_msg("%s %s: %s", file, shapes, d.msg);
    ops_graph_free(canon);
    return s;
}

static inline void emit_test_whole_group(const ops_graph *g, ops_group *grp)
{
    ops_diag d = {0};
    uint64_t mask = g->n_nodes == 64 ? ~0ull : (1ull << g->n_nodes) - 1;
    if (ops_group_init(grp, g, mask, &d) < 0)
        fail_msg("group: %s", d.msg);
}

/* The emitted code after the shared prelude (all of src when it has none). */
static inline const char *emit_test_body(const char *src)
{
    const char *end = strstr(src, "---- end of prelude ----");
    return end ? end : src;
}

/* Fails when emitted kernels call fmaxf or fminf, which return the other operand when one is
 * NaN: relu, max/min, clamp, hardtanh and max/min reductions must propagate NaN as PyTorch does,
 * through the prelude's kt_max / kt_min. */
static inline void emit_test_nan_safe(const char *src)
{
    const char *body = emit_test_body(src);
    const char *bad = strstr(body, "fmaxf(");
    if (!bad)
        bad = strstr(body, "fminf(");
    if (bad)
        fail_msg("emitted code drops NaN (fmaxf/fminf; use kt_max/kt_min) at: %.80s\n---- source "
                 "----\n%s",
                 bad, src);
}

/* True when src, with the device library headers it includes inlined (as records store it),
 * holds text: the PTX of a wrapper the emitted code calls. */
static inline bool emit_test_has(const char *src, const char *text)
{
    char *flat = NULL;
    kt_err err = {0};
    if (ops_devlib_inline(src, &flat, &err) < 0)
        fail_msg("inlining the device library: %s", err.msg);
    bool has = strstr(flat, text) != NULL;
    free(flat);
    return has;
}

/* Fails when src has an #include after its prelude: device library headers belong before it,
 * at file scope, where a partition module keeps each group's text before the prelude (the rest
 * goes into a namespace, search/link.c). */
static inline void emit_test_includes_first(const char *src)
{
    const char *prelude = strstr(src, "/* ---- ktune prelude");
    const char *inc = prelude ? strstr(prelude, "#include") : NULL;
    if (inc)
        fail_msg("an #include after the prelude at: %.80s\n---- source ----\n%s", inc, src);
}

/* Compiles src for arch; fails the test with the NVRTC log on error or on any register spill. */
static inline void emit_test_compile(const char *src, const char *arch)
{
    emit_test_nan_safe(src);
    emit_test_includes_first(src);
    srch_compile_result r = {0};
    if (srch_nvrtc_compile(src, arch, &r) < 0)
        fail_msg("NVRTC failed to run");
    if (r.status != SRCH_COMPILE_OK)
        fail_msg("compile for %s failed:\n%s\n---- source ----\n%s", arch, r.log, src);
    for (int k = 0; k < r.n_kernels; k++)
        if (r.kernels[k].spill_store_bytes || r.kernels[k].spill_load_bytes)
            fail_msg("kernel %s spills (%d/%d bytes) for %s:\n%s", r.kernels[k].name,
                     r.kernels[k].spill_store_bytes, r.kernels[k].spill_load_bytes, arch, src);
    srch_compile_result_release(&r);
}

/* Compares text with tests/golden/<name>; with KTUNE_UPDATE_GOLDEN=1 rewrites the file. */
static inline void emit_test_golden(const char *name, const char *text)
{
    emit_test_nan_safe(text);
    char path[1024];
    snprintf(path, sizeof(path), "%s/tests/golden/%s", getenv("KTUNE_SOURCE_ROOT"), name);
    const char *update = getenv("KTUNE_UPDATE_GOLDEN");
    if (update && strcmp(update, "1") == 0) {
        FILE *f = fopen(path, "w");
        assert_non_null(f);
        fputs(text, f);
        fclose(f);
        return;
    }
    char *want = NULL;
    kt_err err = {0};
    if (kt_read_file(path, (size_t)1 << 30, &want, NULL, &err) < 0)
        fail_msg("%s: %s (run with KTUNE_UPDATE_GOLDEN=1 to create it)", path, err.msg);
    if (strcmp(want, text) != 0)
        fail_msg("emitted source differs from %s (KTUNE_UPDATE_GOLDEN=1 updates it after "
                 "review):\n%s",
                 path, text);
    free(want);
}

/* A growable list of schedules, filled by ops_family_enumerate through emit_test_collect. */
typedef struct emit_test_list {
    int n, cap;
    ops_schedule *s;
} emit_test_list;

static inline int emit_test_collect(const ops_schedule *s, void *ctx)
{
    emit_test_list *l = ctx;
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 64;
        l->s = realloc(l->s, (size_t)l->cap * sizeof(*l->s));
        assert_non_null(l->s);
    }
    l->s[l->n++] = *s;
    return 0;
}

/* Parses, binds, canonicalises and takes every node as one group. */
static inline ops_graph *emit_test_make(const char *json, const char *shapes, ops_group *grp)
{
    ops_graph *g = emit_test_graph(json, shapes);
    emit_test_whole_group(g, grp);
    return g;
}

/* Compiles every k-th schedule of c (at most `max`) through a 2-process pool, emitting each with
 * emit (which may assert family specifics); fails on any compile error or spill. Returns how
 * many compiled. */
static inline int
emit_test_compile_spread(const ops_group *grp, const emit_test_list *c, int max, const char *arch,
                         void (*emit)(const ops_group *, const ops_schedule *, ops_emitted *))
{
    srch_pool *pool = NULL;
    kt_err err = {0};
    srch_pool_opts o = {.arch = arch, .jobs = 2, .timeout_s = 120};
    if (srch_pool_new(&o, &pool, &err) < 0)
        fail_msg("pool: %s", err.msg);
    int step = c->n > max ? (c->n + max - 1) / max : 1;
    int submitted = 0;
    KT_REQUIRE(c->n >= 0);
    char **srcs = calloc((size_t)c->n + 1, sizeof(char *));
    for (int i = 0; i < c->n; i += step) {
        ops_emitted e = {0};
        emit(grp, &c->s[i], &e);
        emit_test_nan_safe(e.source);
        assert_int_equal(srch_pool_submit(pool, e.source, (uint64_t)i), 0);
        srcs[i] = e.source;
        e.source = NULL;
        ops_emitted_free(&e);
        submitted++;
    }
    for (int k = 0; k < submitted; k++) {
        srch_compile_result r = {0};
        assert_int_equal(srch_pool_next(pool, &r, &err), 0);
        if (r.status != SRCH_COMPILE_OK)
            fail_msg("compile for %s failed:\n%s\n---- source ----\n%s", arch, r.log, srcs[r.tag]);
        for (int j = 0; j < r.n_kernels; j++)
            if (r.kernels[j].spill_store_bytes || r.kernels[j].spill_load_bytes)
                fail_msg("kernel %s spills (%d regs) for %s:\n%s", r.kernels[j].name,
                         r.kernels[j].registers, arch, srcs[r.tag]);
        srch_compile_result_release(&r);
    }
    for (int i = 0; i < c->n; i++)
        free(srcs[i]);
    free(srcs);
    srch_pool_free(pool);
    return submitted;
}
