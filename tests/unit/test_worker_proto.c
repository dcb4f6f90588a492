/* The worker protocol's encoding (search/worker_proto.c), without a GPU: requests and results
 * survive pack/unpack, malformed messages are refused with -EPROTO, and
 * srch_eval_req_for_group maps a candidate's arguments onto the group's subgraph (gemm, split-K
 * gemm with a workspace, cuBLASLt library call). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "ops/library.h"
#include "search/worker.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The canonical, bound graph of an example; fails the test on any error. */
static ops_graph *example(const char *file, const char *name, int64_t value)
{
    char path[1024];
    snprintf(path, sizeof(path), "%s/examples/%s", getenv("KTUNE_SOURCE_ROOT"), file);
    ops_graph *g = NULL, *bound = NULL, *canon = NULL;
    ops_diag d = {0};
    ops_binding b = {name, value};
    if (ops_graph_from_json_file(path, &g, &d) < 0 || ops_graph_validate(g, &d) < 0 ||
        ops_graph_bind(g, &b, 1, &bound, &d) < 0 || ops_graph_canonicalize(bound, &canon, &d) < 0)
        fail_msg("%s: %s", file, d.msg);
    ops_graph_free(g);
    ops_graph_free(bound);
    return canon;
}

static void whole_group(const ops_graph *g, ops_group *grp)
{
    ops_diag d = {0};
    if (ops_group_init(grp, g, (1ull << g->n_nodes) - 1, &d) < 0)
        fail_msg("group: %s", d.msg);
}

typedef struct pick {
    int knob;      /* knob index to test, -1 for the first schedule */
    bool want_gt1; /* knob value > 1 wanted (else == 1) */
    bool found;
    ops_schedule s;
} pick;

static int pick_cb(const ops_schedule *s, void *ctx)
{
    pick *p = ctx;
    if (p->knob >= 0 && (s->v[p->knob] > 1) != p->want_gt1)
        return 0;
    p->s = *s;
    p->found = true;
    return 1;
}

static int knob_index(const ops_family *f, const char *name)
{
    for (int k = 0; k < f->n_knobs; k++)
        if (strcmp(f->knobs[k].name, name) == 0)
            return k;
    fail_msg("family %s has no knob %s", f->name, name);
    return -1;
}

static void emit_candidate(const ops_group *grp, ops_family_id fam, const char *knob, bool gt1,
                           ops_schedule *s, ops_emitted *e)
{
    const ops_family *f = ops_family_get(fam);
    ops_device dev;
    ops_device_h100(&dev);
    pick p = {.knob = knob ? knob_index(f, knob) : -1, .want_gt1 = gt1};
    assert_true(f->matches(grp));
    ops_family_enumerate(f, grp, &dev, pick_cb, &p, NULL);
    if (!p.found)
        fail_msg("no %s schedule with %s %s 1", f->name, knob ? knob : "-", gt1 ? ">" : "==");
    ops_diag d = {0};
    if (f->emit(grp, &p.s, &dev, e, &d) < 0)
        fail_msg("emit: %s", d.msg);
    *s = p.s;
}

/* Packs r into a buffer and unpacks it again. */
static int round_trip_req(const srch_eval_req *r, srch_eval_req *out, kt_err *err)
{
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    assert_int_equal(srch_eval_req_pack(&pk, r), 0);
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    assert_int_equal(msgpack_unpack_next(&u, sb.data, sb.size, NULL), MSGPACK_UNPACK_SUCCESS);
    int rc = srch_eval_req_unpack(&u.data, out, err);
    msgpack_unpacked_destroy(&u);
    msgpack_sbuffer_destroy(&sb);
    return rc;
}

static void assert_same_launch(const ops_kernel_launch *a, const ops_kernel_launch *b)
{
    assert_string_equal(a->entry, b->entry);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(a->grid[i], b->grid[i]);
        assert_int_equal(a->block[i], b->block[i]);
    }
    assert_int_equal(a->smem_bytes, b->smem_bytes);
    assert_int_equal(a->zero_workspace, b->zero_workspace);
    assert_int_equal(a->n_args, b->n_args);
    for (int k = 0; k < a->n_args; k++) {
        assert_int_equal(a->args[k].kind, b->args[k].kind);
        if (a->args[k].kind == OPS_ARG_TENSOR)
            assert_int_equal(a->args[k].tensor, b->args[k].tensor);
        else if (a->args[k].kind == OPS_ARG_WORKSPACE)
            assert_int_equal(a->args[k].offset, b->args[k].offset);
        else {
            assert_int_equal(a->args[k].tensor, b->args[k].tensor);
            assert_int_equal(a->args[k].offset, b->args[k].offset);
            assert_true(ops_tensor_map_equal(&a->args[k].tmap, &b->args[k].tmap));
        }
    }
}

static void assert_same_req(const srch_eval_req *a, const srch_eval_req *b)
{
    assert_int_equal(a->id, b->id);
    assert_true(ops_graph_equal(a->sub, b->sub));
    assert_int_equal(a->n_bindings, b->n_bindings);
    for (int i = 0; i < a->n_bindings; i++) {
        assert_string_equal(a->bindings[i].name, b->bindings[i].name);
        assert_int_equal(a->bindings[i].value, b->bindings[i].value);
    }
    assert_int_equal(a->precision, b->precision);
    assert_true(a->tolerance == b->tolerance);
    assert_int_equal(a->seeds, b->seeds);
    assert_int_equal(a->seed0, b->seed0);
    assert_int_equal(a->verify, b->verify);
    assert_int_equal(a->time, b->time);
    assert_int_equal(a->timing.cold, b->timing.cold);
    assert_true(a->timing.budget_s == b->timing.budget_s);
    assert_true(a->timing.warmup_s == b->timing.warmup_s);
    assert_true(a->timing.target_rel == b->timing.target_rel);
    assert_int_equal(a->timing.min_reps, b->timing.min_reps);
    assert_int_equal(a->timing.max_reps, b->timing.max_reps);
    assert_int_equal(a->library, b->library);
    assert_int_equal(a->cubin_len, b->cubin_len);
    if (a->cubin_len)
        assert_memory_equal(a->cubin, b->cubin, a->cubin_len);
    assert_int_equal(a->record, b->record);
    assert_int_equal(a->n_kernels, b->n_kernels);
    for (int k = 0; k < a->n_kernels; k++) {
        assert_same_launch(&a->kernels[k], &b->kernels[k]);
        assert_int_equal(a->zero_offset[k], b->zero_offset[k]);
        assert_int_equal(a->zero_bytes[k], b->zero_bytes[k]);
    }
    assert_int_equal(a->workspace_bytes, b->workspace_bytes);
    if (a->library)
        assert_memory_equal(&a->lt, &b->lt, sizeof(a->lt)); /* plain data, no padding holes
                                                                written differently: both
                                                                memset before filling */
}

/* Every tensor argument of the request names the same tensor (by name) as the emitted one. */
static void assert_args_mapped(const ops_group *grp, const ops_emitted *e, const srch_eval_req *r)
{
    assert_int_equal(r->n_kernels, e->n_kernels);
    for (int k = 0; k < e->n_kernels; k++)
        for (int a = 0; a < e->kernels[k].n_args; a++) {
            const ops_arg *ea = &e->kernels[k].args[a], *ra = &r->kernels[k].args[a];
            assert_int_equal(ea->kind, ra->kind);
            if (ea->kind != OPS_ARG_TENSOR) {
                assert_int_equal(ea->offset, ra->offset);
                continue;
            }
            assert_string_equal(grp->g->tensors[ea->tensor].name, r->sub->tensors[ra->tensor].name);
            const ops_tensor *t = &r->sub->tensors[ra->tensor];
            assert_true(t->producer < 0 || t->is_output);
        }
}

static void test_gemm_request(void **state)
{
    (void)state;
    ops_graph *g = example("gemm_bias_relu.json", "M", 1000);
    ops_group grp;
    whole_group(g, &grp);
    ops_schedule s;
    ops_emitted e = {0};
    emit_candidate(&grp, OPS_FAM_GEMM, "splitk", false, &s, &e);
    static const uint8_t cubin[] = {0x7f, 'E', 'L', 'F', 1, 2, 3, 0, 9};
    srch_eval_req r, back;
    ops_diag d = {0};
    kt_err err = {0};
    if (srch_eval_req_for_group(&grp, &e, cubin, sizeof(cubin), &r, &d) < 0)
        fail_msg("for_group: %s", d.msg);
    assert_false(r.library);
    assert_int_equal(r.n_bindings, 1);
    assert_string_equal(r.bindings[0].name, "M");
    assert_int_equal(r.bindings[0].value, 1000);
    assert_true(r.seeds >= 2);
    assert_true(r.cubin != cubin); /* copied */
    assert_memory_equal(r.cubin, cubin, sizeof(cubin));
    assert_args_mapped(&grp, &e, &r);
    /* The same group gives the same seed (one reference for all its candidates). */
    srch_eval_req r2;
    assert_int_equal(srch_eval_req_for_group(&grp, &e, cubin, sizeof(cubin), &r2, &d), 0);
    assert_int_equal(r.seed0, r2.seed0);
    srch_eval_req_free(&r2);

    r.id = 42;
    r.tolerance = 1e-3;
    r.timing.cold = true;
    r.timing.budget_s = 0.25;
    r.timing.min_reps = 7;
    r.precision = OPS_PREC_TF32;
    if (round_trip_req(&r, &back, &err) < 0)
        fail_msg("unpack: %s", err.msg);
    assert_same_req(&r, &back);
    /* Tensor numbering survives the trip: names agree index by index. */
    for (int t = 0; t < r.sub->n_tensors; t++)
        assert_string_equal(r.sub->tensors[t].name, back.sub->tensors[t].name);
    srch_eval_req_free(&back);
    srch_eval_req_free(&r);
    srch_eval_req_free(&r); /* idempotent */
    ops_emitted_free(&e);
    ops_graph_free(g);
}

static void test_splitk_request(void **state)
{
    (void)state;
    ops_graph *g = example("gemm_bias_relu.json", "M", 1000);
    ops_group grp;
    whole_group(g, &grp);
    ops_schedule s;
    ops_emitted e = {0};
    emit_candidate(&grp, OPS_FAM_GEMM, "splitk", true, &s, &e);
    assert_true(e.workspace_bytes > 0 || e.n_kernels > 1);
    static const uint8_t cubin[] = {1, 2, 3, 4};
    srch_eval_req r, back;
    ops_diag d = {0};
    kt_err err = {0};
    if (srch_eval_req_for_group(&grp, &e, cubin, sizeof(cubin), &r, &d) < 0)
        fail_msg("for_group: %s", d.msg);
    assert_int_equal(r.workspace_bytes, e.workspace_bytes);
    assert_args_mapped(&grp, &e, &r);
    bool saw_ws = false;
    for (int k = 0; k < r.n_kernels; k++)
        for (int a = 0; a < r.kernels[k].n_args; a++)
            saw_ws |= r.kernels[k].args[a].kind == OPS_ARG_WORKSPACE;
    if (e.workspace_bytes > 0)
        assert_true(saw_ws);
    if (round_trip_req(&r, &back, &err) < 0)
        fail_msg("unpack: %s", err.msg);
    assert_same_req(&r, &back);
    srch_eval_req_free(&back);
    srch_eval_req_free(&r);
    ops_emitted_free(&e);
    ops_graph_free(g);
}

static void test_library_request(void **state)
{
    (void)state;
    ops_graph *g = example("gemm_bias_relu.json", "M", 1000);
    ops_group grp;
    whole_group(g, &grp);
    ops_schedule s;
    ops_emitted e = {0};
    emit_candidate(&grp, OPS_FAM_LIBRARY, NULL, false, &s, &e);
    assert_int_equal(e.n_kernels, 0);
    ops_lt_desc lt;
    ops_diag d = {0};
    kt_err err = {0};
    if (ops_library_describe(&grp, &s, &lt, &d) < 0)
        fail_msg("describe: %s", d.msg);
    srch_eval_req r, back;
    if (srch_eval_req_for_group(&grp, &e, NULL, 0, &r, &d) < 0 ||
        srch_eval_req_set_lt(&r, &grp, &lt, &d) < 0)
        fail_msg("for_group: %s", d.msg);
    assert_true(r.library);
    assert_string_equal(r.sub->tensors[r.lt.a_tensor].name, "W"); /* cuBLASLt's A: the weight */
    assert_string_equal(r.sub->tensors[r.lt.b_tensor].name, "A");
    assert_string_equal(r.sub->tensors[r.lt.c_tensor].name, "Y");
    assert_string_equal(r.sub->tensors[r.lt.bias_tensor].name, "bias");
    assert_int_equal(r.workspace_bytes, lt.workspace_bytes);
    if (round_trip_req(&r, &back, &err) < 0)
        fail_msg("unpack: %s", err.msg);
    assert_same_req(&r, &back);
    srch_eval_req_free(&back);
    srch_eval_req_free(&r);
    ops_emitted_free(&e);
    ops_graph_free(g);
}

static void test_result_round_trip(void **state)
{
    (void)state;
    for (int st = 0; st < SRCH_STATUS_COUNT; st++) {
        srch_eval_result r = {.id = 1000 + (uint64_t)st, .status = (srch_status)st};
        snprintf(r.msg, sizeof(r.msg), "status %s", srch_status_str(r.status));
        r.err_norm = st == SRCH_WRONG ? INFINITY : 1.5e-6;
        r.err_max = 0.25;
        r.time = (srch_time_stats){.median_ns = 1234.5,
                                   .p10_ns = 1200,
                                   .p90_ns = 1300,
                                   .rel_spread = 0.004,
                                   .reps = 77,
                                   .kernels_per_rep = 2,
                                   .cold = true,
                                   .sm_clock_khz_before = 1980000,
                                   .sm_clock_khz_after = 1755000};
        msgpack_sbuffer sb;
        msgpack_sbuffer_init(&sb);
        msgpack_packer pk;
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        assert_int_equal(srch_eval_result_pack(&pk, &r), 0);
        msgpack_unpacked u;
        msgpack_unpacked_init(&u);
        assert_int_equal(msgpack_unpack_next(&u, sb.data, sb.size, NULL), MSGPACK_UNPACK_SUCCESS);
        srch_eval_result b;
        kt_err err = {0};
        if (srch_eval_result_unpack(&u.data, &b, &err) < 0)
            fail_msg("%s", err.msg);
        assert_int_equal(b.id, r.id);
        assert_int_equal(b.status, r.status);
        assert_string_equal(b.msg, r.msg);
        assert_true(b.err_norm == r.err_norm);
        assert_true(b.err_max == r.err_max);
        assert_memory_equal(&b.time, &r.time, sizeof(r.time));
        msgpack_unpacked_destroy(&u);
        msgpack_sbuffer_destroy(&sb);
    }
    assert_string_equal(srch_status_str(SRCH_RACE), "race");
    assert_string_equal(srch_status_str(SRCH_STATUS_COUNT), "unknown");
}

/* ---- malformed messages ---- */

/* A valid request, re-packed by hand with one key changed, dropped or added. */
typedef struct mutation {
    const char *name;
    const char *drop;    /* key left out */
    const char *replace; /* key whose value is replaced by `with` */
    void (*with)(msgpack_packer *pk);
    const char *add; /* extra key, value nil */
} mutation;

static void pack_nil(msgpack_packer *pk)
{
    msgpack_pack_nil(pk);
}
static void pack_bad_str(msgpack_packer *pk)
{
    msgpack_pack_str(pk, 5);
    msgpack_pack_str_body(pk, "fancy", 5);
}
static void pack_neg(msgpack_packer *pk)
{
    msgpack_pack_int(pk, -3);
}
static void pack_empty_map(msgpack_packer *pk)
{
    msgpack_pack_map(pk, 0);
}
static void pack_bad_kernels(msgpack_packer *pk)
{
    /* argument tensor 99: no such tensor */
    msgpack_pack_array(pk, 1);
    msgpack_pack_map(pk, 6);
    const char *k[] = {"entry", "grid", "block", "smem", "zero_ws", "args"};
    msgpack_pack_str(pk, strlen(k[0]));
    msgpack_pack_str_body(pk, k[0], strlen(k[0]));
    msgpack_pack_str(pk, 1);
    msgpack_pack_str_body(pk, "f", 1);
    for (int i = 1; i <= 2; i++) {
        msgpack_pack_str(pk, strlen(k[i]));
        msgpack_pack_str_body(pk, k[i], strlen(k[i]));
        msgpack_pack_array(pk, 3);
        for (int j = 0; j < 3; j++)
            msgpack_pack_int(pk, 1);
    }
    msgpack_pack_str(pk, strlen(k[3]));
    msgpack_pack_str_body(pk, k[3], strlen(k[3]));
    msgpack_pack_int(pk, 0);
    msgpack_pack_str(pk, strlen(k[4]));
    msgpack_pack_str_body(pk, k[4], strlen(k[4]));
    msgpack_pack_false(pk);
    msgpack_pack_str(pk, strlen(k[5]));
    msgpack_pack_str_body(pk, k[5], strlen(k[5]));
    msgpack_pack_array(pk, 1);
    msgpack_pack_array(pk, 2);
    msgpack_pack_int(pk, 0);
    msgpack_pack_int(pk, 99);
}
static void pack_intermediate_arg(msgpack_packer *pk)
{
    /* argument tensor 3 is t0, an intermediate of the fused group: no buffer for it */
    msgpack_pack_array(pk, 1);
    msgpack_pack_map(pk, 6);
    const char *k[] = {"entry", "grid", "block", "smem", "zero_ws", "args"};
    for (int i = 0; i < 6; i++) {
        msgpack_pack_str(pk, strlen(k[i]));
        msgpack_pack_str_body(pk, k[i], strlen(k[i]));
        if (i == 0) {
            msgpack_pack_str(pk, 1);
            msgpack_pack_str_body(pk, "f", 1);
        } else if (i <= 2) {
            msgpack_pack_array(pk, 3);
            for (int j = 0; j < 3; j++)
                msgpack_pack_int(pk, 1);
        } else if (i == 3) {
            msgpack_pack_int(pk, 0);
        } else if (i == 4) {
            msgpack_pack_false(pk);
        } else {
            msgpack_pack_array(pk, 1);
            msgpack_pack_array(pk, 2);
            msgpack_pack_int(pk, 0);
            msgpack_pack_int(pk, 3);
        }
    }
}
static void pack_bad_bindings(msgpack_packer *pk)
{
    msgpack_pack_map(pk, 1);
    msgpack_pack_str(pk, 1);
    msgpack_pack_str_body(pk, "Q", 1);
    msgpack_pack_int(pk, 5);
}
static void pack_zero_binding(msgpack_packer *pk)
{
    msgpack_pack_map(pk, 1);
    msgpack_pack_str(pk, 1);
    msgpack_pack_str_body(pk, "M", 1);
    msgpack_pack_int(pk, 0);
}
static void pack_bad_timing(msgpack_packer *pk)
{
    msgpack_pack_map(pk, 1);
    msgpack_pack_str(pk, 4);
    msgpack_pack_str_body(pk, "cold", 4);
    msgpack_pack_int(pk, 1);
}
static void pack_bad_graph(msgpack_packer *pk)
{
    msgpack_pack_map(pk, 1);
    msgpack_pack_str(pk, 4);
    msgpack_pack_str_body(pk, "name", 4);
    msgpack_pack_int(pk, 7);
}
static void pack_true(msgpack_packer *pk)
{
    msgpack_pack_true(pk);
}

static const mutation mutations[] = {
    {"no id", "id", NULL, NULL, NULL},
    {"no sub", "sub", NULL, NULL, NULL},
    {"no cubin", "cubin", NULL, NULL, NULL},
    {"no bindings (M unbound)", "bindings", NULL, NULL, NULL},
    {"unknown key", NULL, NULL, NULL, "colour"},
    {"id not an integer", NULL, "id", pack_bad_str, NULL},
    {"negative id", NULL, "id", pack_neg, NULL},
    {"unknown precision", NULL, "precision", pack_bad_str, NULL},
    {"seeds negative", NULL, "seeds", pack_neg, NULL},
    {"verify not a bool", NULL, "verify", pack_nil, NULL},
    {"kernel arg tensor out of range", NULL, "kernels", pack_bad_kernels, NULL},
    {"kernel arg on an intermediate", NULL, "kernels", pack_intermediate_arg, NULL},
    {"no kernels", NULL, "kernels", pack_empty_map, NULL},
    {"unknown symbol", NULL, "bindings", pack_bad_bindings, NULL},
    {"zero binding", NULL, "bindings", pack_zero_binding, NULL},
    {"timing cold not a bool", NULL, "timing", pack_bad_timing, NULL},
    {"sub not a graph", NULL, "sub", pack_bad_graph, NULL},
    {"library without lt", NULL, "library", pack_true, NULL},
    {"op not eval", NULL, "op", pack_bad_str, NULL},
};

static void test_malformed_requests(void **state)
{
    (void)state;
    ops_graph *g = example("gemm_bias_relu.json", "M", 1000);
    ops_group grp;
    whole_group(g, &grp);
    ops_schedule s;
    ops_emitted e = {0};
    emit_candidate(&grp, OPS_FAM_GEMM, "splitk", false, &s, &e);
    static const uint8_t cubin[] = {1, 2, 3};
    srch_eval_req r;
    ops_diag d = {0};
    assert_int_equal(srch_eval_req_for_group(&grp, &e, cubin, sizeof(cubin), &r, &d), 0);
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    assert_int_equal(srch_eval_req_pack(&pk, &r), 0);
    msgpack_unpacked good;
    msgpack_unpacked_init(&good);
    assert_int_equal(msgpack_unpack_next(&good, sb.data, sb.size, NULL), MSGPACK_UNPACK_SUCCESS);
    const msgpack_object *m = &good.data;
    assert_int_equal(m->type, MSGPACK_OBJECT_MAP);

    for (size_t i = 0; i < KT_ARRAY_LEN(mutations); i++) {
        const mutation *mu = &mutations[i];
        msgpack_sbuffer out;
        msgpack_sbuffer_init(&out);
        msgpack_packer op;
        msgpack_packer_init(&op, &out, msgpack_sbuffer_write);
        uint32_t n = m->via.map.size - (mu->drop ? 1 : 0) + (mu->add ? 1 : 0);
        msgpack_pack_map(&op, n);
        for (uint32_t k = 0; k < m->via.map.size; k++) {
            const msgpack_object_kv *kv = &m->via.map.ptr[k];
            size_t kl = kv->key.via.str.size;
            const char *ks = kv->key.via.str.ptr;
            if (mu->drop && strlen(mu->drop) == kl && memcmp(ks, mu->drop, kl) == 0)
                continue;
            msgpack_pack_object(&op, kv->key);
            if (mu->replace && strlen(mu->replace) == kl && memcmp(ks, mu->replace, kl) == 0)
                mu->with(&op);
            else
                msgpack_pack_object(&op, kv->val);
        }
        if (mu->add) {
            msgpack_pack_str(&op, strlen(mu->add));
            msgpack_pack_str_body(&op, mu->add, strlen(mu->add));
            msgpack_pack_nil(&op);
        }
        msgpack_unpacked u;
        msgpack_unpacked_init(&u);
        assert_int_equal(msgpack_unpack_next(&u, out.data, out.size, NULL), MSGPACK_UNPACK_SUCCESS);
        srch_eval_req back;
        kt_err err = {0};
        int rc = srch_eval_req_unpack(&u.data, &back, &err);
        if (rc != -EPROTO)
            fail_msg("%s: got %d, want -EPROTO", mu->name, rc);
        assert_true(err.msg[0] != '\0');
        assert_null(back.sub); /* nothing left to free */
        assert_null(back.cubin);
        msgpack_unpacked_destroy(&u);
        msgpack_sbuffer_destroy(&out);
    }

    /* Not a map at all, and results with a bad status or a missing id. */
    msgpack_object arr = {.type = MSGPACK_OBJECT_ARRAY};
    srch_eval_req back;
    srch_eval_result res;
    assert_int_equal(srch_eval_req_unpack(&arr, &back, NULL), -EPROTO);
    assert_int_equal(srch_eval_result_unpack(&arr, &res, NULL), -EPROTO);
    msgpack_sbuffer rb;
    msgpack_sbuffer_init(&rb);
    msgpack_packer rp;
    msgpack_packer_init(&rp, &rb, msgpack_sbuffer_write);
    msgpack_pack_map(&rp, 2);
    msgpack_pack_str(&rp, 2);
    msgpack_pack_str_body(&rp, "id", 2);
    msgpack_pack_int(&rp, 1);
    msgpack_pack_str(&rp, 6);
    msgpack_pack_str_body(&rp, "status", 6);
    msgpack_pack_str(&rp, 5);
    msgpack_pack_str_body(&rp, "great", 5);
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    assert_int_equal(msgpack_unpack_next(&u, rb.data, rb.size, NULL), MSGPACK_UNPACK_SUCCESS);
    assert_int_equal(srch_eval_result_unpack(&u.data, &res, NULL), -EPROTO);
    msgpack_unpacked_destroy(&u);
    msgpack_sbuffer_destroy(&rb);

    msgpack_unpacked_destroy(&good);
    msgpack_sbuffer_destroy(&sb);
    srch_eval_req_free(&r);
    ops_emitted_free(&e);
    ops_graph_free(g);
}

/* ---- "full": the whole graph a group was cut from ---- */

/* softmax.json, bound to M x N and canonical: x -> y.max, y.sub, y.exp, y.sum, y. */
static ops_graph *softmax_graph(int64_t m, int64_t n)
{
    char path[1024];
    snprintf(path, sizeof(path), "%s/examples/softmax.json", getenv("KTUNE_SOURCE_ROOT"));
    ops_graph *g = NULL, *bound = NULL, *canon = NULL;
    ops_diag d = {0};
    ops_binding b[2] = {{"M", m}, {"N", n}};
    if (ops_graph_from_json_file(path, &g, &d) < 0 || ops_graph_validate(g, &d) < 0 ||
        ops_graph_bind(g, b, 2, &bound, &d) < 0 || ops_graph_canonicalize(bound, &canon, &d) < 0)
        fail_msg("softmax.json: %s", d.msg);
    ops_graph_free(g);
    ops_graph_free(bound);
    return canon;
}

/* The group of the nodes whose outputs are named in names (NULL-terminated). */
static void named_group(const ops_graph *g, const char *const *names, ops_group *grp)
{
    uint64_t mask = 0;
    for (int i = 0; names[i]; i++) {
        int t = ops_graph_find_tensor(g, names[i]);
        assert_true(t >= 0 && g->tensors[t].producer >= 0);
        mask |= 1ull << g->tensors[t].producer;
    }
    ops_diag d = {0};
    if (ops_group_init(grp, g, mask, &d) < 0)
        fail_msg("group: %s", d.msg);
}

/* A one-kernel candidate reading the group's inputs and writing its outputs (its cubin is not
 * loaded here, only encoded). */
static void fake_candidate(const ops_group *grp, ops_emitted *e)
{
    memset(e, 0, sizeof(*e));
    e->n_kernels = 1;
    ops_kernel_launch *k = &e->kernels[0];
    snprintf(k->entry, sizeof(k->entry), "f");
    for (int i = 0; i < 3; i++)
        k->grid[i] = k->block[i] = 1;
    for (int i = 0; i < grp->n_in; i++)
        k->args[k->n_args++] = (ops_arg){.kind = OPS_ARG_TENSOR, .tensor = grp->in[i]};
    for (int j = 0; j < grp->n_out; j++)
        k->args[k->n_args++] = (ops_arg){.kind = OPS_ARG_TENSOR, .tensor = grp->out[j]};
}

static void assert_same_full(const srch_eval_req *a, const srch_eval_req *b)
{
    assert_int_equal(a->full != NULL, b->full != NULL);
    if (!a->full)
        return;
    assert_true(ops_graph_equal(a->full, b->full));
    assert_int_equal(a->n_full_bindings, b->n_full_bindings);
    for (int i = 0; i < a->n_full_bindings; i++) {
        assert_string_equal(a->full_bindings[i].name, b->full_bindings[i].name);
        assert_int_equal(a->full_bindings[i].value, b->full_bindings[i].value);
    }
}

/* Packs m (a map) again with the value of "full" replaced by with(ctx) (NULL: key dropped), and
 * unpacks it. */
static int unpack_with_full(const msgpack_object *m, void (*with)(msgpack_packer *, const void *),
                            const void *ctx, srch_eval_req *out, kt_err *err)
{
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    bool has = false;
    for (uint32_t k = 0; k < m->via.map.size; k++) {
        const msgpack_object *key = &m->via.map.ptr[k].key;
        if (key->via.str.size == 4 && memcmp(key->via.str.ptr, "full", 4) == 0)
            has = true;
    }
    assert_true(has);
    msgpack_pack_map(&pk, m->via.map.size - (with ? 0 : 1));
    for (uint32_t k = 0; k < m->via.map.size; k++) {
        const msgpack_object_kv *kv = &m->via.map.ptr[k];
        bool is_full = kv->key.via.str.size == 4 && memcmp(kv->key.via.str.ptr, "full", 4) == 0;
        if (is_full && !with)
            continue;
        msgpack_pack_object(&pk, kv->key);
        if (is_full)
            with(&pk, ctx);
        else
            msgpack_pack_object(&pk, kv->val);
    }
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    assert_int_equal(msgpack_unpack_next(&u, sb.data, sb.size, NULL), MSGPACK_UNPACK_SUCCESS);
    int rc = srch_eval_req_unpack(&u.data, out, err);
    msgpack_unpacked_destroy(&u);
    msgpack_sbuffer_destroy(&sb);
    return rc;
}

static void pk_str(msgpack_packer *pk, const char *s)
{
    msgpack_pack_str(pk, strlen(s));
    msgpack_pack_str_body(pk, s, strlen(s));
}

/* A "full" value: graph g (NULL: key left out), bindings M and N (N < 0: N left out), and an
 * extra key when extra. */
typedef struct full_spec {
    const ops_graph *g;
    int64_t m, n;
    bool extra, graph_nil;
} full_spec;

static void pack_full_spec(msgpack_packer *pk, const void *ctx)
{
    const full_spec *f = ctx;
    msgpack_pack_map(pk, (f->g || f->graph_nil ? 1u : 0u) + 1u + (f->extra ? 1u : 0u));
    if (f->g || f->graph_nil) {
        pk_str(pk, "graph");
        if (f->graph_nil)
            msgpack_pack_nil(pk);
        else
            assert_int_equal(ops_graph_pack(pk, f->g), 0);
    }
    pk_str(pk, "bindings");
    msgpack_pack_map(pk, f->n > 0 ? 2 : 1);
    pk_str(pk, "M");
    msgpack_pack_int64(pk, f->m);
    if (f->n > 0) {
        pk_str(pk, "N");
        msgpack_pack_int64(pk, f->n);
    }
    if (f->extra) {
        pk_str(pk, "colour");
        msgpack_pack_nil(pk);
    }
}

/* An assembled record over a whole graph (search/tune_record.c): the graph itself as the subgraph,
 * more kernels than a group candidate may have, each clearing its own workspace slot. */
/* A 64 x 16 box map over [rows, cols] f16 (cols * 2 a multiple of 16). */
static ops_tensor_map f16_map(uint64_t rows, uint64_t cols)
{
    return (ops_tensor_map){.rank = 2,
                            .dtype = OPS_DT_F16,
                            .dims = {cols, rows},
                            .strides = {cols * 2},
                            .box = {64, 16},
                            .elem_strides = {1, 1},
                            .swizzle = 128};
}

/* Packs r, unpacks it, and expects -EPROTO with want in the message. */
static void expect_refused(const srch_eval_req *r, const char *want)
{
    srch_eval_req back;
    kt_err err = {0};
    int rc = round_trip_req(r, &back, &err);
    if (rc != -EPROTO || !strstr(err.msg, want))
        fail_msg("want -EPROTO with '%s', got %d '%s'", want, rc, err.msg);
    assert_null(back.sub);
}

/* Tensor-map arguments: one over a graph input (A [1000, 512] f16), renumbered onto the
 * subgraph like a pointer, and one over the workspace; both round trip. A malformed map (box
 * over 256), one over a tensor with an offset, and one reaching past its buffer are refused. */
static void test_tmap_request(void **state)
{
    (void)state;
    ops_graph *g = example("gemm_bias_relu.json", "M", 1000);
    ops_group grp;
    whole_group(g, &grp);
    ops_emitted e = {0};
    fake_candidate(&grp, &e);
    int a_t = ops_graph_find_tensor(g, "A");
    assert_true(a_t >= 0);
    ops_kernel_launch *k = &e.kernels[0];
    k->args[k->n_args++] =
        (ops_arg){.kind = OPS_ARG_TENSOR_MAP, .tensor = a_t, .tmap = f16_map(1000, 512)};
    ops_tensor_map ws_map = f16_map(32, 64);
    ws_map.oob_nan = true;
    ws_map.l2_promotion = 128;
    k->args[k->n_args++] =
        (ops_arg){.kind = OPS_ARG_TENSOR_MAP, .tensor = -1, .offset = 256, .tmap = ws_map};
    e.workspace_bytes = 256 + 32 * 64 * 2;
    static const uint8_t cubin[] = {0x7f, 'E', 'L', 'F', 2};
    srch_eval_req r, back;
    ops_diag d = {0};
    kt_err err = {0};
    if (srch_eval_req_for_group(&grp, &e, cubin, sizeof(cubin), &r, &d) < 0)
        fail_msg("for_group: %s", d.msg);
    const ops_arg *ra = &r.kernels[0].args[k->n_args - 2];
    assert_int_equal(ra->kind, OPS_ARG_TENSOR_MAP);
    assert_string_equal(r.sub->tensors[ra->tensor].name, "A");
    assert_true(ops_tensor_map_equal(&ra->tmap, &k->args[k->n_args - 2].tmap));
    if (round_trip_req(&r, &back, &err) < 0)
        fail_msg("unpack: %s", err.msg);
    assert_same_req(&r, &back);
    srch_eval_req_free(&back);

    ops_arg *ta = &r.kernels[0].args[k->n_args - 2], *wa = &r.kernels[0].args[k->n_args - 1];
    ta->tmap.box[1] = 300;
    expect_refused(&r, "box[1] = 300");
    ta->tmap.box[1] = 16;
    ta->offset = 64;
    expect_refused(&r, "with an offset");
    ta->offset = 0;
    ta->tmap.dims[1] = 1001; /* one row more than A holds */
    expect_refused(&r, "spans 1025024 bytes, its buffer holds 1024000");
    ta->tmap.dims[1] = 1000;
    wa->offset = 512; /* the map now ends 256 bytes past the workspace */
    expect_refused(&r, "its buffer holds 3840");
    wa->offset = 256;
    if (round_trip_req(&r, &back, &err) < 0)
        fail_msg("unpack after the repairs: %s", err.msg);
    srch_eval_req_free(&back);
    srch_eval_req_free(&r);
    ops_graph_free(g);
}

static void test_record_request(void **state)
{
    (void)state;
    ops_graph *g = softmax_graph(64, 96);
    srch_eval_req r, back;
    ops_diag d = {0};
    kt_err err = {0};
    if (srch_eval_req_for_graph(g, &r, &d) < 0)
        fail_msg("for_graph: %s", d.msg);
    assert_true(r.record && r.verify && !r.time);
    assert_true(r.sub != g && ops_graph_equal(r.sub, g));
    assert_int_equal(r.n_bindings, 2);
    /* The graph inputs the groups verified through "full" saw: the same seed. */
    static const char *const head[] = {"y.max", "y.sub", "y.exp", NULL};
    ops_group grp;
    named_group(g, head, &grp);
    ops_emitted e;
    fake_candidate(&grp, &e);
    static const uint8_t cubin[] = {0x7f, 'E', 'L', 'F', 5};
    srch_eval_req gr;
    assert_int_equal(srch_eval_req_for_group(&grp, &e, cubin, sizeof(cubin), &gr, &d), 0);
    assert_int_equal(srch_eval_req_set_full(&gr, g, &d), 0);
    assert_int_equal(r.seed0, gr.seed0);
    srch_eval_req_free(&gr);

    int out = g->outputs[0];
    r.cubin = malloc(sizeof(cubin));
    assert_non_null(r.cubin);
    memcpy(r.cubin, cubin, sizeof(cubin));
    r.cubin_len = sizeof(cubin);
    r.workspace_bytes = 4096;
    r.n_kernels = OPS_MAX_KERNELS + 2;
    for (int k = 0; k < r.n_kernels; k++) {
        ops_kernel_launch *l = &r.kernels[k];
        snprintf(l->entry, sizeof(l->entry), "ktune_k_g%d", k);
        for (int i = 0; i < 3; i++)
            l->grid[i] = l->block[i] = (uint32_t)(k + 1);
        l->args[l->n_args++] = (ops_arg){.kind = OPS_ARG_TENSOR, .tensor = 0};
        l->args[l->n_args++] = (ops_arg){.kind = OPS_ARG_WORKSPACE, .offset = 256 * k};
        l->args[l->n_args++] = (ops_arg){.kind = OPS_ARG_TENSOR, .tensor = out};
        l->zero_workspace = k % 2 == 0;
        r.zero_offset[k] = l->zero_workspace ? 256 * k : 0;
        r.zero_bytes[k] = l->zero_workspace ? 256 : 0;
    }
    r.kernels[0].zero_workspace = true; /* the whole workspace, as a group candidate's */
    r.zero_offset[0] = r.zero_bytes[0] = 0;
    if (round_trip_req(&r, &back, &err) < 0)
        fail_msg("unpack: %s", err.msg);
    assert_same_req(&r, &back);
    srch_eval_req_free(&back);

    /* A clear beyond the workspace is refused, naming the kernel. */
    r.zero_offset[2] = 4000;
    assert_int_equal(round_trip_req(&r, &back, &err), -EPROTO);
    assert_non_null(strstr(err.msg, "ktune_k_g2"));
    assert_null(back.sub);
    r.zero_offset[2] = 512;
    /* Beyond a record's capacity: not packed. */
    r.n_kernels = SRCH_REQ_MAX_KERNELS + 1;
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    assert_int_equal(srch_eval_req_pack(&pk, &r), -EINVAL);
    msgpack_sbuffer_destroy(&sb);
    r.n_kernels = OPS_MAX_KERNELS + 2;
    srch_eval_req_free(&r);
    ops_graph_free(g);
}

static void pack_full_nil(msgpack_packer *pk, const void *ctx)
{
    (void)ctx;
    msgpack_pack_nil(pk);
}

static void test_full_request(void **state)
{
    (void)state;
    ops_graph *g = softmax_graph(64, 96);
    static const char *const sum_div[] = {"y.sum", "y", NULL};
    static const char *const head[] = {"y.max", "y.sub", "y.exp", NULL};
    ops_group grp, first;
    named_group(g, sum_div, &grp);
    named_group(g, head, &first);
    assert_true(srch_group_reads_intermediates(&grp)); /* y.exp */
    assert_false(srch_group_reads_intermediates(&first));
    ops_emitted e;
    fake_candidate(&grp, &e);
    static const uint8_t cubin[] = {0x7f, 'E', 'L', 'F'};
    srch_eval_req r, back, r2;
    ops_diag d = {0};
    kt_err err = {0};
    if (srch_eval_req_for_group(&grp, &e, cubin, sizeof(cubin), &r, &d) < 0)
        fail_msg("for_group: %s", d.msg);
    assert_null(r.full);
    uint64_t sub_seed = r.seed0;
    if (srch_eval_req_set_full(&r, g, &d) < 0)
        fail_msg("set_full: %s", d.msg);
    assert_non_null(r.full);
    assert_true(r.full != g); /* copied */
    assert_true(ops_graph_equal(r.full, g));
    assert_int_equal(r.n_full_bindings, 2);
    assert_true(r.seed0 != sub_seed);
    /* Every group of the graph gets the same seed (the same graph inputs). */
    ops_emitted e2;
    fake_candidate(&first, &e2);
    assert_int_equal(srch_eval_req_for_group(&first, &e2, cubin, sizeof(cubin), &r2, &d), 0);
    assert_int_equal(srch_eval_req_set_full(&r2, g, &d), 0);
    assert_int_equal(r.seed0, r2.seed0);
    srch_eval_req_free(&r2);
    assert_null(r2.full);

    if (round_trip_req(&r, &back, &err) < 0)
        fail_msg("unpack: %s", err.msg);
    assert_same_req(&r, &back);
    assert_same_full(&r, &back);
    /* The subgraph input y.exp is an intermediate of full, found by name. */
    int t = ops_graph_find_tensor(back.full, back.sub->tensors[0].name);
    assert_true(t >= 0 && back.full->tensors[t].producer >= 0);
    srch_eval_req_free(&back);

    /* The packed form, for the variants below. */
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    assert_int_equal(srch_eval_req_pack(&pk, &r), 0);
    msgpack_unpacked good;
    msgpack_unpacked_init(&good);
    assert_int_equal(msgpack_unpack_next(&good, sb.data, sb.size, NULL), MSGPACK_UNPACK_SUCCESS);

    /* Without "full": accepted, as before. */
    assert_int_equal(unpack_with_full(&good.data, NULL, NULL, &back, &err), 0);
    assert_null(back.full);
    srch_eval_req_free(&back);
    /* Re-packed by hand, same bindings: accepted. */
    full_spec ok = {.g = g, .m = 64, .n = 96};
    assert_int_equal(unpack_with_full(&good.data, pack_full_spec, &ok, &back, &err), 0);
    assert_same_full(&r, &back);
    srch_eval_req_free(&back);

    ops_graph *other = example("gemm_bias_relu.json", "M", 64);
    const full_spec bad[] = {
        {.g = NULL, .m = 64, .n = 96},                    /* no graph */
        {.g = g, .m = 64, .n = 96, .extra = true},        /* unknown key */
        {.g = g, .m = 64, .n = -1},                       /* N unbound */
        {.g = g, .m = 64, .n = 32},                       /* y.exp [64, 32] vs [64, 96] */
        {.g = other, .m = 64, .n = 96},                   /* no y.exp; N unknown */
        {.g = NULL, .m = 64, .n = 96, .graph_nil = true}, /* graph not a graph */
    };
    for (size_t i = 0; i < KT_ARRAY_LEN(bad); i++) {
        int rc = unpack_with_full(&good.data, pack_full_spec, &bad[i], &back, &err);
        if (rc != -EPROTO)
            fail_msg("full variant %zu: got %d, want -EPROTO", i, rc);
        assert_true(err.msg[0] != '\0');
        assert_null(back.sub);
        assert_null(back.full);
    }
    assert_int_equal(unpack_with_full(&good.data, pack_full_nil, NULL, &back, &err), -EPROTO);
    assert_null(back.full);
    /* A full graph without the group's input: set_full refuses it too. */
    assert_true(srch_eval_req_set_full(&r, other, &d) < 0);
    ops_graph_free(other);

    msgpack_unpacked_destroy(&good);
    msgpack_sbuffer_destroy(&sb);
    srch_eval_req_free(&r);
    assert_null(r.full);
    ops_graph_free(g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gemm_request),       cmocka_unit_test(test_splitk_request),
        cmocka_unit_test(test_library_request),    cmocka_unit_test(test_result_round_trip),
        cmocka_unit_test(test_malformed_requests), cmocka_unit_test(test_full_request),
        cmocka_unit_test(test_record_request),     cmocka_unit_test(test_tmap_request),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
