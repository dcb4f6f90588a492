/* Hostile names (issue 16), shared by tests/unit/test_emit_names.c and
 * tests/fuzz/fuzz_emit_names.c. Names are the client's: a graph whose graph, symbol and tensor
 * names carry comment ends, preprocessor lines, backslashes and code must emit the same program
 * as the graph whose names are those names with every byte outside [A-Za-z0-9] made '_' (which
 * gives the same identifiers, see ops_emit_identifier): the two sources are equal once their
 * comments are removed. Plain C (no cmocka): each check returns NULL or why it failed. */
#pragma once

#include "ops/family.h"
#include "ops/ops.h"
#include "ops/reference_gpu.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char names_gelu_json[] =
    "{\"name\": \"bias_gelu_tanh_scale\","
    " \"inputs\": {\"x\": {\"dtype\": \"f32\", \"shape\": [\"M\", \"N\"]},"
    "            \"bias\": {\"dtype\": \"f32\", \"shape\": [\"N\"], \"const\": true}},"
    " \"nodes\": [{\"out\": \"h\", \"op\": \"add\", \"in\": [\"x\", \"bias\"]},"
    "           {\"out\": \"g\", \"op\": \"gelu_tanh\", \"in\": [\"h\"]},"
    "           {\"out\": \"y\", \"op\": \"max\", \"in\": [\"g\", 0.5]}],"
    " \"outputs\": [\"y\"]}";

static const char names_layernorm_json[] =
    "{\"name\": \"layernorm\","
    " \"inputs\": {\"x\": {\"dtype\": \"f16\", \"shape\": [\"M\", \"N\"]},"
    "            \"weight\": {\"dtype\": \"f16\", \"shape\": [\"N\"]},"
    "            \"bias\": {\"dtype\": \"f16\", \"shape\": [\"N\"]}},"
    " \"nodes\": [{\"out\": \"y\", \"op\": \"layernorm\", \"in\": [\"x\", \"weight\", \"bias\"],"
    "            \"axis\": -1, \"eps\": 1e-5}],"
    " \"outputs\": [\"y\"]}";

static const char names_linear_softmax_json[] =
    "{\"name\": \"linear_softmax\","
    " \"inputs\": {\"x\": {\"dtype\": \"f32\", \"shape\": [\"M\", \"K\"]},"
    "            \"W\": {\"dtype\": \"f32\", \"shape\": [10, \"K\"], \"const\": true}},"
    " \"nodes\": [{\"out\": \"t\", \"op\": \"matmul\", \"in\": [\"x\", \"W\"], \"transpose_b\": "
    "true},"
    "            {\"out\": \"y\", \"op\": \"softmax\", \"in\": [\"t\"], \"axis\": -1}],"
    " \"outputs\": [\"y\"]}";

static const char names_gemm_bias_relu_json[] =
    "{\"name\": \"gemm_bias_relu\", \"inputs\": {"
    "\"A\": {\"dtype\": \"f16\", \"shape\": [\"M\", 512]},"
    "\"W\": {\"dtype\": \"f16\", \"shape\": [512, 256], \"const\": true},"
    "\"bias\": {\"dtype\": \"f16\", \"shape\": [256], \"const\": true}},"
    "\"nodes\": [{\"out\": \"t0\", \"op\": \"matmul\", \"in\": [\"A\", \"W\"]},"
    "{\"out\": \"t1\", \"op\": \"add\", \"in\": [\"t0\", \"bias\"]},"
    "{\"out\": \"Y\", \"op\": \"relu\", \"in\": [\"t1\"]}],"
    "\"outputs\": [\"Y\"]}";

static const char names_gemv_json[] =
    "{\"name\":\"gemv_epi\",\"inputs\":{"
    "\"W\":{\"dtype\":\"f32\",\"shape\":[\"M\",\"K\"]},"
    "\"x\":{\"dtype\":\"f32\",\"shape\":[\"K\",1]},"
    "\"bias\":{\"dtype\":\"f32\",\"shape\":[\"M\",1]}},"
    "\"nodes\":[{\"out\":\"t0\",\"op\":\"matmul\",\"in\":[\"W\",\"x\"]},"
    "{\"out\":\"y\",\"op\":\"add\",\"in\":[\"t0\",\"bias\"]}],"
    "\"outputs\":[\"y\"]}";

static const char names_conv_json[] =
    "{\"name\": \"conv_relu\", \"inputs\": {"
    "  \"X\": {\"dtype\": \"f32\", \"shape\": [\"B\", 8, 16, 16]},"
    "  \"W\": {\"dtype\": \"f32\", \"shape\": [16, 8, 3, 3], \"const\": true}},"
    " \"nodes\": ["
    "  {\"out\": \"c\", \"op\": \"conv2d\", \"in\": [\"X\", \"W\"], \"padding\": [1, 1]},"
    "  {\"out\": \"Y\", \"op\": \"relu\", \"in\": [\"c\"]}],"
    " \"outputs\": [\"Y\"]}";

static const char names_attention_json[] =
    "{\"name\":\"attn_epilogue\",\"inputs\":{"
    "\"q\":{\"dtype\":\"f16\",\"shape\":[\"B\",333,64]},"
    "\"k\":{\"dtype\":\"f16\",\"shape\":[\"B\",777,64]},"
    "\"v\":{\"dtype\":\"f16\",\"shape\":[\"B\",777,96]},"
    "\"bias\":{\"dtype\":\"f16\",\"shape\":[96]}},"
    "\"nodes\":[{\"out\":\"o\",\"op\":\"attention\",\"in\":[\"q\",\"k\",\"v\"],\"causal\":true,"
    "\"scale\":0.3},"
    "{\"out\":\"y\",\"op\":\"add\",\"in\":[\"o\",\"bias\"]}],"
    "\"outputs\":[\"y\"]}";

static const char names_cumsum_json[] =
    "{\"name\":\"cumsum_rows\",\"inputs\":{\"x\":{\"dtype\":\"f32\",\"shape\":[\"M\",3000]}},"
    "\"nodes\":[{\"out\":\"y\",\"op\":\"cumsum\",\"in\":[\"x\"],\"axis\":1}],"
    "\"outputs\":[\"y\"]}";

/* A graph for every family, with the one test_emit_names compiles it with. */
static const struct {
    const char *json, *shapes;
    ops_family_id fam;
} names_graphs[] = {
    {names_gelu_json, "M=64,N=128", OPS_FAM_POINTWISE},
    {names_layernorm_json, "M=64,N=1000", OPS_FAM_ROW},
    {names_linear_softmax_json, "M=64,K=32", OPS_FAM_ROW},
    {names_gemm_bias_relu_json, "M=256", OPS_FAM_GEMM},
    {names_gemv_json, "M=256,K=128", OPS_FAM_GEMV},
    {names_conv_json, "B=2", OPS_FAM_CONV},
    {names_attention_json, "B=3", OPS_FAM_ATTENTION},
    {names_cumsum_json, "M=7", OPS_FAM_SCAN},
};

#define NAMES_N_GRAPHS ((int)(sizeof(names_graphs) / sizeof(names_graphs[0])))

/* names_graphs[i] parsed, validated, bound and canonicalised; NULL on failure. */
static inline ops_graph *names_graph(int i)
{
    ops_graph *g = NULL, *bound = NULL, *canon = NULL;
    ops_diag d = {0};
    ops_binding b[4];
    int n = 0;
    char shapes[64];
    snprintf(shapes, sizeof(shapes), "%s", names_graphs[i].shapes);
    for (char *save = NULL, *tok = strtok_r(shapes, ",", &save); tok && n < 4;
         tok = strtok_r(NULL, ",", &save)) {
        kt_err err = {0};
        if (ops_binding_parse(tok, &b[n++], &err) < 0)
            return NULL;
    }
    const char *json = names_graphs[i].json;
    if (ops_graph_from_json(json, strlen(json), &g, &d) == 0 && ops_graph_validate(g, &d) == 0 &&
        ops_graph_bind(g, b, n, &bound, &d) == 0)
        ops_graph_canonicalize(bound, &canon, &d);
    ops_graph_free(g);
    ops_graph_free(bound);
    return canon;
}

/* s with every byte outside [A-Za-z0-9] made '_'; malloc'd, NULL on ENOMEM. */
static inline char *names_plain(const char *s)
{
    char *p = strdup(s);
    for (char *q = p; q && *q; q++) {
        char c = *q;
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')))
            *q = '_';
    }
    return p;
}

static inline int names_set(char **slot, const char *prefix, int k, const char *payload, bool plain)
{
    size_t len = strlen(prefix) + 16 + strlen(payload);
    char *s = malloc(len);
    if (!s)
        return -1;
    /* the alphanumeric prefix keeps names distinct whatever the payloads, plain or not */
    snprintf(s, len, "%s%02d%s", prefix, k, payload);
    if (plain) {
        char *p = names_plain(s);
        free(s);
        if (!(s = p))
            return -1;
    }
    free(*slot);
    *slot = s;
    return 0;
}

/* Renames g in place: the graph to payloads[0], symbol i to "s<i>" + payloads[...], tensor i to
 * "t<i>" + payloads[...] (cycling through the n > 0 payloads); with plain, each new name made
 * plain by names_plain. 0, or -1 on ENOMEM. */
static inline int names_rename(ops_graph *g, const char *const *payloads, int n, bool plain)
{
    if (names_set(&g->name, "g", 0, payloads[0], plain) < 0)
        return -1;
    for (int i = 0; i < g->n_syms; i++)
        if (names_set(&g->syms[i], "s", i, payloads[(i + 1) % n], plain) < 0)
            return -1;
    for (int i = 0; i < g->n_tensors; i++)
        if (names_set(&g->tensors[i].name, "t", i, payloads[(i + 2) % n], plain) < 0)
            return -1;
    return 0;
}

/* src with its lines spliced (backslash-newline removed, as a C compiler does before it looks
 * for comments) and every comment replaced by one space (string and character literals kept as
 * they are); malloc'd, NULL on ENOMEM. */
static inline char *names_strip_comments(const char *text)
{
    size_t n = 0;
    char *src = malloc(strlen(text) + 1);
    if (!src)
        return NULL;
    for (const char *p = text; *p; p++)
        if (!(p[0] == '\\' && p[1] == '\n'))
            src[n++] = *p;
        else
            p++;
    src[n] = '\0';
    char *out = malloc(n + 1), *o = out;
    if (!out) {
        free(src);
        return NULL;
    }
    for (size_t i = 0; i < n;) {
        if (src[i] == '/' && src[i + 1] == '*') {
            const char *end = strstr(src + i + 2, "*/");
            i = end ? (size_t)(end - src) + 2 : n;
            *o++ = ' ';
        } else if (src[i] == '/' && src[i + 1] == '/') {
            while (i < n && src[i] != '\n')
                i++;
            *o++ = ' ';
        } else if (src[i] == '"' || src[i] == '\'') {
            char q = src[i];
            *o++ = src[i++];
            while (i < n && src[i] != q && src[i] != '\n') {
                if (src[i] == '\\' && i + 1 < n)
                    *o++ = src[i++];
                *o++ = src[i++];
            }
            if (i < n)
                *o++ = src[i++];
        } else {
            *o++ = src[i++];
        }
    }
    *o = '\0';
    free(src);
    return out;
}

/* NULL when a and b are equal without their comments; otherwise a static message naming the
 * first difference. */
static inline const char *names_same_code(const char *a, const char *b)
{
    static char why[512];
    char *sa = names_strip_comments(a), *sb = names_strip_comments(b);
    const char *res = NULL;
    if (!sa || !sb) {
        res = "out of memory";
    } else if (strcmp(sa, sb) != 0) {
        size_t i = 0;
        while (sa[i] && sa[i] == sb[i])
            i++;
        size_t from = i > 60 ? i - 60 : 0;
        snprintf(why, sizeof(why),
                 "code differs without comments:\n  hostile: %.160s\n  plain:   %.160s", sa + from,
                 sb + from);
        res = why;
    }
    free(sa);
    free(sb);
    return res;
}

/* NULL when every comment of src is free of the text names could smuggle in (payloads that must
 * only ever appear escaped): an unescaped payload inside a comment is harmless only by luck. */
static inline const char *names_escaped(const char *src, const char *const *payloads, int n)
{
    for (int k = 0; k < n; k++)
        if ((strchr(payloads[k], '*') || strchr(payloads[k], '/') || strchr(payloads[k], '\\')) &&
            strstr(src, payloads[k]))
            return "a name with '*', '/' or a backslash appears unescaped in the source";
    return NULL;
}

typedef struct names_sched_list {
    int n, cap;
    ops_schedule *s;
} names_sched_list;

static inline int names_collect(const ops_schedule *s, void *ctx)
{
    names_sched_list *l = ctx;
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 64;
        ops_schedule *ns = realloc(l->s, (size_t)cap * sizeof(*ns));
        if (!ns)
            return -1;
        l->s = ns;
        l->cap = cap;
    }
    l->s[l->n++] = *s;
    return 0;
}

/* Emits schedules of family f for both groups (the same nodes of the hostile graph and of its
 * plain twin) and compares them: about max legal schedules spread over the space; with
 * payloads, also checks names_escaped. *emitted receives how many were compared. NULL, or why
 * not. */
static inline const char *names_compare_family(const ops_family *f, const ops_group *hostile,
                                               const ops_group *plain, const ops_device *dev,
                                               int max, const char *const *payloads, int n_payloads,
                                               int *emitted)
{
    static char why[1024];
    *emitted = 0;
    if (!f->matches(hostile) || !f->matches(plain))
        return f->matches(hostile) == f->matches(plain) ? NULL : "matches() depends on names";
    names_sched_list l = {0};
    if (ops_family_enumerate(f, hostile, dev, names_collect, &l, NULL) != 0) {
        free(l.s);
        return "enumeration failed";
    }
    const char *res = NULL;
    int step = l.n > max ? l.n / max : 1;
    for (int i = 0; i < l.n && !res; i += step) {
        ops_emitted eh = {0}, ep = {0};
        ops_diag dh = {0}, dp = {0};
        int rh = f->emit(hostile, &l.s[i], dev, &eh, &dh);
        int rp = f->emit(plain, &l.s[i], dev, &ep, &dp);
        if ((rh < 0) != (rp < 0)) {
            res = "emit succeeds for one name set only";
        } else if (rh == 0) {
            const char *d = names_same_code(eh.source, ep.source);
            if (!d)
                d = names_escaped(eh.source, payloads, n_payloads);
            if (d) {
                char sched[256];
                ops_schedule_format(&l.s[i], sched, sizeof(sched));
                snprintf(why, sizeof(why), "%s: %s", sched, d);
                res = why;
            }
            for (int k = 0; !res && k < eh.n_kernels; k++)
                if (strcmp(eh.kernels[k].entry, ep.kernels[k].entry) != 0)
                    res = "entry names depend on names";
            (*emitted)++;
        }
        ops_emitted_free(&eh);
        ops_emitted_free(&ep);
    }
    free(l.s);
    return res;
}

/* The fp64 reference program of the whole graph, hostile and plain. NULL, or why not. */
static inline const char *names_compare_reference(const ops_graph *hostile, const ops_graph *plain)
{
    ops_ref_program ph = {0}, pp = {0};
    ops_diag dh = {0}, dp = {0};
    int rh = ops_emit_reference_graph(hostile, &ph, &dh);
    int rp = ops_emit_reference_graph(plain, &pp, &dp);
    const char *res = NULL;
    if ((rh < 0) != (rp < 0))
        res = "reference emit succeeds for one name set only";
    else if (rh == 0)
        res = names_same_code(ph.source, pp.source);
    if (rh == 0)
        ops_ref_program_free(&ph);
    if (rp == 0)
        ops_ref_program_free(&pp);
    return res;
}
