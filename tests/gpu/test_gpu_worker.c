/* GPU test of ktune-worker, driven through its pipes exactly as the supervisor drives it:
 *   - hello: device description, CUPTI, self-test;
 *   - the fp64 GPU reference (op "reference") against ops_ref_run on the CPU, on small shapes of
 *     every example and of graphs with NaN in their reference (NaN and Inf must match), from the
 *     very inputs the worker generated (checked: stored in their dtype, never all zeros);
 *   - real candidates pass with a small error and get a time: a fused gemm, a split-K gemm
 *     (workspace, several kernels), a softmax row kernel, and cuBLASLt for the f16 gemm;
 *   - planted kernels: a wrong one (2x + 2 for 2x + 1) is "wrong", one that skips the last
 *     element is "wrong" (NaN poison), one that sums with atomics in a racy order is "race" (or
 *     passes: the race cannot be forced; reported, not failed), one that writes through a bad
 *     pointer is "fault" and the worker exits with status 3;
 *   - NaN and Inf: emitted clamp(log(x)), amax and softmax of log(x) (NaN in the reference)
 *     pass; f32 x + 1e39 (overflows everywhere) fails with "too few elements compared"; planted
 *     kernels that map NaN to -1 or write a finite value where the reference is +Inf fail;
 *   - retime and forget of loaded candidates.
 *
 * The worker is $KTUNE_WORKER, else ktune-worker next to this binary, in ../bin or ../search.
 * Exit: 0 passed, 1 failed, 77 no GPU (skipped). */
#include "search/compile.h"
#include "ops/library.h"
#include "ops/msgpack_util.h"
#include "search/worker.h"

#include "gpu_graphs.h"

#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define SKIP 77

static int failures;
static char arch[16] = "sm_90";

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            printf("  FAIL %s:%d: ", __FILE__, __LINE__);                                          \
            printf(__VA_ARGS__);                                                                   \
            printf("\n");                                                                          \
            failures++;                                                                            \
        }                                                                                          \
    } while (0)

/* ---- the worker process ---- */

typedef struct worker {
    pid_t pid;
    int to, from;
    msgpack_unpacker up;
    msgpack_unpacked msg;
} worker;

static void find_worker(char *path, size_t len)
{
    const char *env = getenv("KTUNE_WORKER");
    if (env && *env) {
        snprintf(path, len, "%s", env);
        return;
    }
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    self[n > 0 ? n : 0] = '\0';
    char *slash = strrchr(self, '/');
    if (slash)
        *slash = '\0';
    static const char *const rel[] = {"ktune-worker", "../bin/ktune-worker",
                                      "../search/ktune-worker"};
    for (size_t i = 0; i < KT_ARRAY_LEN(rel); i++) {
        snprintf(path, len, "%s/%s", self, rel[i]);
        if (access(path, X_OK) == 0)
            return;
    }
    snprintf(path, len, "ktune-worker");
}

static int worker_start(worker *w)
{
    char path[PATH_MAX + 64];
    find_worker(path, sizeof(path));
    int in[2], out[2];
    if (pipe(in) < 0 || pipe(out) < 0)
        return -errno;
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0)
        return -errno;
    if (pid == 0) {
        dup2(in[0], STDIN_FILENO);
        dup2(out[1], STDOUT_FILENO);
        close(in[0]);
        close(in[1]);
        close(out[0]);
        close(out[1]);
        execl(path, path, (char *)NULL);
        fprintf(stderr, "exec %s: %s\n", path, strerror(errno));
        _exit(127);
    }
    close(in[0]);
    close(out[1]);
    w->pid = pid;
    w->to = in[1];
    w->from = out[0];
    msgpack_unpacker_init(&w->up, 1 << 16);
    msgpack_unpacked_init(&w->msg);
    return 0;
}

/* Closes the pipes and returns the worker's exit status (-1 for a signal). */
static int worker_stop(worker *w)
{
    close(w->to);
    close(w->from);
    int st = 0;
    waitpid(w->pid, &st, 0);
    msgpack_unpacked_destroy(&w->msg);
    msgpack_unpacker_destroy(&w->up);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Sends one message and waits (up to timeout_s) for the reply, left in w->msg.data. */
static int rpc(worker *w, const msgpack_sbuffer *req, double timeout_s)
{
    for (size_t off = 0; off < req->size;) {
        ssize_t k = write(w->to, req->data + off, req->size - off);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0)
            return -errno;
        off += (size_t)k;
    }
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        msgpack_unpack_return ur = msgpack_unpacker_next(&w->up, &w->msg);
        if (ur == MSGPACK_UNPACK_SUCCESS)
            return 0;
        if (ur != MSGPACK_UNPACK_CONTINUE)
            return -EPROTO;
        struct timespec t1;
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double left =
            timeout_s - ((double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9);
        if (left <= 0)
            return -ETIMEDOUT;
        struct pollfd p = {.fd = w->from, .events = POLLIN};
        if (poll(&p, 1, (int)(left * 1000) + 1) <= 0)
            continue;
        msgpack_unpacker_reserve_buffer(&w->up, 1 << 16);
        ssize_t n = read(w->from, msgpack_unpacker_buffer(&w->up),
                         msgpack_unpacker_buffer_capacity(&w->up));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -EPIPE;
        msgpack_unpacker_buffer_consumed(&w->up, (size_t)n);
    }
}

static const msgpack_object *get(const msgpack_object *o, const char *key)
{
    if (!o || o->type != MSGPACK_OBJECT_MAP)
        return NULL;
    size_t n = strlen(key);
    for (uint32_t i = 0; i < o->via.map.size; i++) {
        const msgpack_object *k = &o->via.map.ptr[i].key;
        if (k->type == MSGPACK_OBJECT_STR && k->via.str.size == n &&
            memcmp(k->via.str.ptr, key, n) == 0)
            return &o->via.map.ptr[i].val;
    }
    return NULL;
}

static bool is_true(const msgpack_object *o)
{
    return o && o->type == MSGPACK_OBJECT_BOOLEAN && o->via.boolean;
}

static void str_of(const msgpack_object *o, char *buf, size_t len)
{
    if (o && o->type == MSGPACK_OBJECT_STR)
        snprintf(buf, len, "%.*s", (int)o->via.str.size, o->via.str.ptr);
    else
        snprintf(buf, len, "?");
}

static int simple_op(worker *w, const char *op)
{
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 1);
    kt_mp_pack_str(&pk, "op");
    kt_mp_pack_str(&pk, op);
    int rc = rpc(w, &sb, 300);
    msgpack_sbuffer_destroy(&sb);
    return rc;
}

/* Starts a worker and checks its hello. Returns 0, SKIP without a GPU, or 1. */
static int start_and_hello(worker *w, bool report)
{
    if (worker_start(w) < 0)
        return 1;
    int rc = simple_op(w, "hello");
    if (rc < 0) {
        printf("  FAIL hello: no reply (%s)\n", strerror(-rc));
        return 1;
    }
    const msgpack_object *r = &w->msg.data;
    char buf[512];
    if (!is_true(get(r, "ok"))) {
        str_of(get(get(r, "error"), "code"), buf, sizeof(buf));
        bool nodev = strcmp(buf, "ENODEV") == 0;
        str_of(get(get(r, "error"), "msg"), buf, sizeof(buf));
        printf("%s: %s\n", nodev ? "skip" : "FAIL hello", buf);
        return nodev ? SKIP : 1;
    }
    const msgpack_object *gpu = get(r, "gpu");
    str_of(get(gpu, "arch"), arch, sizeof(arch));
    str_of(get(r, "selftest"), buf, sizeof(buf));
    if (report) {
        char name[128];
        str_of(get(gpu, "name"), name, sizeof(name));
        const msgpack_object *sm = get(gpu, "sm_count"), *dv = get(gpu, "driver_version");
        printf("hello: %s, %s, %llu SMs, driver %llu, cupti %d, cublaslt %d, selftest %s\n", name,
               arch, sm ? (unsigned long long)sm->via.u64 : 0ull,
               dv ? (unsigned long long)dv->via.u64 : 0ull, is_true(get(r, "cupti")),
               is_true(get(r, "cublaslt")), buf);
        CHECK(is_true(get(r, "cupti")), "CUPTI not available");
    }
    CHECK(strcmp(buf, "ok") == 0, "self-test: %s", buf);
    return 0;
}

/* ---- graphs ---- */

static ops_graph *example(const char *file, const char *shapes, ops_binding *b, int *nb, char *keep,
                          size_t keep_len)
{
    char path[1024];
    snprintf(path, sizeof(path), "%s/%s%s",
             getenv("KTUNE_SOURCE_ROOT") ? getenv("KTUNE_SOURCE_ROOT") : ".",
             strchr(file, '/') ? "" : "examples/", file);
    ops_graph *g = NULL, *bound = NULL, *canon = NULL;
    ops_diag d = {0};
    snprintf(keep, keep_len, "%s", shapes);
    *nb = 0;
    for (char *save = NULL, *tok = strtok_r(keep, ",", &save); tok && *nb < 8;
         tok = strtok_r(NULL, ",", &save))
        ops_binding_parse(tok, &b[(*nb)++], NULL);
    if (ops_graph_from_json_file(path, &g, &d) < 0 || ops_graph_validate(g, &d) < 0 ||
        ops_graph_bind(g, b, *nb, &bound, &d) < 0 ||
        ops_graph_canonicalize(bound, &canon, &d) < 0) {
        printf("  FAIL %s %s: %s\n", file, shapes, d.msg);
        failures++;
    }
    ops_graph_free(g);
    ops_graph_free(bound);
    return canon;
}

/* x [rows, cols] f32 -> y [rows] = sum over the last axis. */
static ops_graph *rowsum_graph(int64_t rows, int64_t cols)
{
    ops_graph *g = ops_graph_new("rowsum");
    ops_shape s = {.rank = 2, .d = {{rows, OPS_NO_SYM}, {cols, OPS_NO_SYM}}};
    int x = ops_graph_add_input(g, "x", OPS_DT_F32, &s, false);
    ops_attrs a;
    ops_attrs_default(OPS_REDUCE_SUM, &a);
    a.n_axes = 1;
    a.axes[0] = 1;
    a.keepdim = false;
    int n0 = ops_graph_add_node(g, OPS_REDUCE_SUM, "y", &a);
    g->nodes[n0].n_in = 1;
    g->nodes[n0].in[0] = (ops_operand){.tensor = x};
    ops_graph_mark_output(g, g->nodes[n0].out);
    ops_diag d = {0};
    if (ops_graph_validate(g, &d) < 0)
        printf("  FAIL rowsum graph: %s\n", d.msg);
    return g;
}

/* ---- reference vs CPU ---- */

static void check_reference(worker *w, const char *file, const char *shapes)
{
    ops_binding b[8];
    int nb = 0;
    char keep[128];
    ops_graph *g = example(file, shapes, b, &nb, keep, sizeof(keep));
    if (!g)
        return;
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 6);
    kt_mp_pack_str(&pk, "op");
    kt_mp_pack_str(&pk, "reference");
    kt_mp_pack_str(&pk, "id");
    msgpack_pack_uint64(&pk, 1);
    kt_mp_pack_str(&pk, "sub");
    ops_graph_pack(&pk, g);
    kt_mp_pack_str(&pk, "bindings");
    msgpack_pack_map(&pk, (size_t)nb);
    for (int i = 0; i < nb; i++) {
        kt_mp_pack_str(&pk, b[i].name);
        msgpack_pack_int64(&pk, b[i].value);
    }
    kt_mp_pack_str(&pk, "seed0");
    msgpack_pack_uint64(&pk, 12345);
    kt_mp_pack_str(&pk, "seeds");
    msgpack_pack_int(&pk, 2);
    int rc = rpc(w, &sb, 300);
    msgpack_sbuffer_destroy(&sb);
    const msgpack_object *r = &w->msg.data;
    if (rc < 0 || !is_true(get(r, "ok"))) {
        char m[400];
        str_of(get(get(r, "error"), "msg"), m, sizeof(m));
        printf("  FAIL reference %s %s: %s\n", file, shapes, rc < 0 ? strerror(-rc) : m);
        failures++;
        ops_graph_free(g);
        return;
    }
    const msgpack_object *ins = get(r, "inputs"), *outs = get(r, "outputs");
    int n_in = 0;
    while (n_in < g->n_tensors && g->tensors[n_in].producer < 0)
        n_in++;
    double worst = 0;
    bool ok = ins && outs && ins->type == MSGPACK_OBJECT_ARRAY && ins->via.array.size == 2 &&
              outs->type == MSGPACK_OBJECT_ARRAY && outs->via.array.size == 2;
    for (uint32_t s = 0; ok && s < 2; s++) {
        const msgpack_object *si = &ins->via.array.ptr[s], *so = &outs->via.array.ptr[s];
        double *in[OPS_GROUP_MAX_IO] = {0}, *cpu[OPS_GROUP_MAX_IO] = {0};
        ok = si->type == MSGPACK_OBJECT_ARRAY && si->via.array.size == (uint32_t)n_in &&
             so->type == MSGPACK_OBJECT_ARRAY && so->via.array.size == (uint32_t)g->n_outputs;
        for (int i = 0; ok && i < n_in; i++) {
            const ops_tensor *t = &g->tensors[i];
            int64_t n = ops_shape_numel(&t->shape);
            size_t es = ops_dtype_size(t->dtype);
            const msgpack_object *bin = &si->via.array.ptr[i];
            ok = bin->type == MSGPACK_OBJECT_BIN && bin->via.bin.size == (size_t)n * es;
            if (!ok)
                break;
            in[i] = malloc((size_t)n * sizeof(double));
            int64_t nonzero = 0;
            for (int64_t k = 0; k < n; k++) {
                in[i][k] = ops_dtype_load(t->dtype, bin->via.bin.ptr + (size_t)k * es);
                nonzero += in[i][k] != 0;
            }
            CHECK(nonzero > n / 2, "%s input '%s' seed %u: %lld of %lld nonzero", file, t->name, s,
                  (long long)nonzero, (long long)n);
        }
        for (int j = 0; ok && j < g->n_outputs; j++)
            cpu[j] =
                malloc((size_t)ops_shape_numel(&g->tensors[g->outputs[j]].shape) * sizeof(double));
        ops_diag d = {0};
        if (ok && ops_ref_run(g, (const double *const *)in, cpu, &d) < 0) {
            printf("  FAIL %s: CPU reference: %s\n", file, d.msg);
            ok = false;
        }
        for (int j = 0; ok && j < g->n_outputs; j++) {
            int64_t n = ops_shape_numel(&g->tensors[g->outputs[j]].shape);
            const msgpack_object *bin = &so->via.array.ptr[j];
            ok = bin->type == MSGPACK_OBJECT_BIN && bin->via.bin.size == (size_t)n * sizeof(double);
            if (!ok)
                break;
            double num = 0, den = 0;
            for (int64_t k = 0; k < n; k++) {
                double gv;
                memcpy(&gv, bin->via.bin.ptr + (size_t)k * sizeof(double), sizeof(gv));
                /* NaN where the CPU has NaN, the same infinity where it has one */
                if (isnan(cpu[j][k]) != isnan(gv) ||
                    ((isinf(cpu[j][k]) || isinf(gv)) && cpu[j][k] != gv)) {
                    num = INFINITY;
                    continue;
                }
                if (!isfinite(gv))
                    continue;
                num += (gv - cpu[j][k]) * (gv - cpu[j][k]);
                den += cpu[j][k] * cpu[j][k];
            }
            double e = den > 0 ? sqrt(num / den) : sqrt(num);
            if (e > worst)
                worst = e;
        }
        for (int i = 0; i < OPS_GROUP_MAX_IO; i++) {
            free(in[i]);
            free(cpu[i]);
        }
    }
    bool pass = ok && worst <= 1e-10;
    printf("  reference %-22s %-16s GPU fp64 vs CPU fp64: %s (%.2e)\n", file, shapes,
           pass ? "ok" : "FAIL", worst);
    if (!pass)
        failures++;
    ops_graph_free(g);
}

/* A softmax split as [max, sub, exp] | [sum, div]: the "reference" request for [sum, div] with
 * "full" feeds it exp outputs (in (0, 1], 1 at each row's maximum), not random values, and its
 * reference outputs are then rows of a softmax (summing to 1). */
static void check_full_inputs(worker *w)
{
    ops_binding b[8];
    int nb = 0;
    char keep[128];
    ops_graph *g = example("softmax.json", "M=33,N=77", b, &nb, keep, sizeof(keep));
    if (!g)
        return;
    uint64_t mask = 0;
    const char *names[] = {"y.sum", "y"};
    for (int i = 0; i < 2; i++) {
        int t = ops_graph_find_tensor(g, names[i]);
        if (t >= 0 && g->tensors[t].producer >= 0)
            mask |= 1ull << g->tensors[t].producer;
    }
    ops_group grp;
    ops_graph *sub = NULL;
    ops_diag d = {0};
    if (ops_group_init(&grp, g, mask, &d) < 0 || ops_group_subgraph(&grp, &sub, &d) < 0) {
        printf("  FAIL full inputs: group: %s\n", d.msg);
        failures++;
        ops_graph_free(g);
        return;
    }
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 7);
    kt_mp_pack_str(&pk, "op");
    kt_mp_pack_str(&pk, "reference");
    kt_mp_pack_str(&pk, "id");
    msgpack_pack_uint64(&pk, 1);
    kt_mp_pack_str(&pk, "sub");
    ops_graph_pack(&pk, sub);
    for (int k = 0; k < 2; k++) {
        if (k == 1) {
            kt_mp_pack_str(&pk, "full");
            msgpack_pack_map(&pk, 2);
            kt_mp_pack_str(&pk, "graph");
            ops_graph_pack(&pk, g);
        }
        kt_mp_pack_str(&pk, "bindings"); /* of sub, then of full: the same symbols */
        msgpack_pack_map(&pk, (size_t)nb);
        for (int i = 0; i < nb; i++) {
            kt_mp_pack_str(&pk, b[i].name);
            msgpack_pack_int64(&pk, b[i].value);
        }
    }
    kt_mp_pack_str(&pk, "seed0");
    msgpack_pack_uint64(&pk, 777);
    kt_mp_pack_str(&pk, "seeds");
    msgpack_pack_int(&pk, 2);
    int rc = rpc(w, &sb, 300);
    msgpack_sbuffer_destroy(&sb);
    const msgpack_object *r = &w->msg.data;
    if (rc < 0 || !is_true(get(r, "ok"))) {
        char m[400];
        str_of(get(get(r, "error"), "msg"), m, sizeof(m));
        printf("  FAIL full inputs: %s\n", rc < 0 ? strerror(-rc) : m);
        failures++;
        ops_graph_free(sub);
        ops_graph_free(g);
        return;
    }
    const msgpack_object *ins = get(r, "inputs"), *outs = get(r, "outputs");
    int64_t rows = 33, cols = 77;
    bool ok = ins && outs && ins->type == MSGPACK_OBJECT_ARRAY && ins->via.array.size == 2 &&
              outs->type == MSGPACK_OBJECT_ARRAY && outs->via.array.size == 2 &&
              sub->n_outputs == 1 && ops_shape_numel(&sub->tensors[0].shape) == rows * cols &&
              sub->tensors[0].dtype == OPS_DT_F32;
    double worst_sum = 0;
    int bad_rows = 0;
    for (uint32_t s = 0; ok && s < 2; s++) {
        const msgpack_object *si = &ins->via.array.ptr[s], *so = &outs->via.array.ptr[s];
        ok = si->type == MSGPACK_OBJECT_ARRAY && si->via.array.size == 1 &&
             si->via.array.ptr[0].type == MSGPACK_OBJECT_BIN &&
             si->via.array.ptr[0].via.bin.size == (size_t)(rows * cols) * 4 &&
             so->type == MSGPACK_OBJECT_ARRAY && so->via.array.size == 1 &&
             so->via.array.ptr[0].type == MSGPACK_OBJECT_BIN &&
             so->via.array.ptr[0].via.bin.size == (size_t)(rows * cols) * 8;
        if (!ok)
            break;
        const char *in = si->via.array.ptr[0].via.bin.ptr, *out = so->via.array.ptr[0].via.bin.ptr;
        for (int64_t i = 0; i < rows; i++) {
            float mx = 0;
            double sum = 0;
            bool in_range = true;
            for (int64_t j = 0; j < cols; j++) {
                float v;
                double o;
                memcpy(&v, in + (size_t)(i * cols + j) * 4, 4);
                memcpy(&o, out + (size_t)(i * cols + j) * 8, 8);
                in_range = in_range && v > 0 && v <= 1;
                mx = v > mx ? v : mx;
                sum += o;
            }
            if (!in_range || mx != 1.0f)
                bad_rows++;
            if (fabs(sum - 1) > worst_sum)
                worst_sum = fabs(sum - 1);
        }
    }
    bool pass = ok && bad_rows == 0 && worst_sum <= 1e-12;
    printf("  full inputs softmax [sum,div] M=33,N=77: %s (rows not exp outputs %d, worst |row "
           "sum - 1| %.2e)\n",
           pass ? "ok" : "FAIL", bad_rows, worst_sum);
    if (!pass)
        failures++;
    ops_graph_free(sub);
    ops_graph_free(g);
}

/* ---- candidates ---- */

/* Sends an eval and unpacks the result. Returns 0, or a negative errno (an error reply or no
 * reply: the message is printed). */
static int eval(worker *w, const srch_eval_req *req, srch_eval_result *res, double timeout_s)
{
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    int rc = srch_eval_req_pack(&pk, req);
    if (rc == 0)
        rc = rpc(w, &sb, timeout_s);
    msgpack_sbuffer_destroy(&sb);
    if (rc < 0) {
        printf("  no reply: %s\n", strerror(-rc));
        return rc;
    }
    const msgpack_object *r = &w->msg.data;
    if (!is_true(get(r, "ok"))) {
        char m[400];
        str_of(get(get(r, "error"), "msg"), m, sizeof(m));
        printf("  error reply: %s\n", m);
        return -EIO;
    }
    kt_err err = {0};
    if ((rc = srch_eval_result_unpack(r, res, &err)) < 0)
        printf("  bad result: %s\n", err.msg);
    return rc;
}

static void print_result(const char *what, const srch_eval_result *res)
{
    printf("  %-44s %-8s err %.2e (elem %.2f)  %8.2f us p10 %.2f p90 %.2f (%d reps, %d "
           "kernels)%s%s\n",
           what, srch_status_str(res->status), res->err_norm, res->err_max,
           res->time.median_ns / 1e3, res->time.p10_ns / 1e3, res->time.p90_ns / 1e3,
           res->time.reps, res->time.kernels_per_rep, res->msg[0] ? "  " : "", res->msg);
}

typedef struct pick {
    int knob;
    bool gt1;
    bool found;
    ops_schedule s;
} pick;

static int pick_cb(const ops_schedule *s, void *ctx)
{
    pick *p = ctx;
    if (p->knob >= 0 && (s->v[p->knob] > 1) != p->gt1)
        return 0;
    p->s = *s;
    p->found = true;
    return 1;
}

/* The first schedule (in enumeration order) of family fam for the group, optionally
 * restricted to knob > 1 or == 1. */
static bool best_schedule(const ops_group *grp, ops_family_id fam, const char *knob, bool gt1,
                          ops_schedule *out)
{
    const ops_family *f = ops_family_get(fam);
    ops_device dev;
    ops_device_h100(&dev);
    if (!f->matches(grp))
        return false;
    int k = -1;
    for (int i = 0; knob && i < f->n_knobs; i++)
        if (strcmp(f->knobs[i].name, knob) == 0)
            k = i;
    pick p = {.knob = k, .gt1 = gt1};
    ops_family_enumerate(f, grp, &dev, pick_cb, &p, NULL);
    *out = p.s;
    return p.found;
}

static void timing_fast(srch_eval_req *r)
{
    r->timing.budget_s = 0.05;
    r->timing.max_reps = 200;
}

/* Emits, compiles and evaluates one candidate of the whole-graph group of an example (a file of
 * examples/, or a path from the source root). With want_msg, the result's message must contain
 * it. */
static void eval_family(worker *w, const char *file, const char *shapes, ops_family_id fam,
                        const char *knob, bool gt1, uint64_t id, srch_status want,
                        const char *want_msg)
{
    ops_binding b[8];
    int nb = 0;
    char keep[128], what[160];
    ops_graph *g = example(file, shapes, b, &nb, keep, sizeof(keep));
    if (!g)
        return;
    ops_group grp;
    ops_diag d = {0};
    ops_schedule s;
    ops_emitted e = {0};
    srch_compile_result cr = {0};
    srch_eval_req req = {0};
    srch_eval_result res = {0};
    ops_device dev;
    ops_device_h100(&dev);
    char sched[200];
    if (ops_group_init(&grp, g, (1ull << g->n_nodes) - 1, &d) < 0 ||
        !best_schedule(&grp, fam, knob, gt1, &s)) {
        printf("  FAIL %s: no %s schedule\n", file, ops_family_get(fam)->name);
        failures++;
        goto out;
    }
    ops_schedule_format(&s, sched, sizeof(sched));
    snprintf(what, sizeof(what), "%s %s %.60s", file, shapes, sched);
    if (ops_family_get(fam)->emit(&grp, &s, &dev, &e, &d) < 0) {
        printf("  FAIL %s: emit: %s\n", what, d.msg);
        failures++;
        goto out;
    }
    if (e.n_kernels > 0 &&
        (srch_nvrtc_compile(e.source, dev.arch, &cr) < 0 || cr.status != SRCH_COMPILE_OK)) {
        printf("  FAIL %s: compile: %.300s\n", what, cr.log ? cr.log : "");
        failures++;
        goto out;
    }
    if (srch_eval_req_for_group(&grp, &e, cr.cubin, cr.cubin_len, &req, &d) < 0) {
        printf("  FAIL %s: request: %s\n", what, d.msg);
        failures++;
        goto out;
    }
    if (fam == OPS_FAM_LIBRARY) {
        ops_lt_desc lt;
        if (ops_library_describe(&grp, &s, &lt, &d) < 0 ||
            srch_eval_req_set_lt(&req, &grp, &lt, &d) < 0) {
            printf("  FAIL %s: library: %s\n", what, d.msg);
            failures++;
            goto out;
        }
    }
    req.id = id;
    timing_fast(&req);
    if (eval(w, &req, &res, 300) < 0) {
        failures++;
        goto out;
    }
    print_result(what, &res);
    CHECK(res.status == want, "%s: status %s, want %s", what, srch_status_str(res.status),
          srch_status_str(want));
    CHECK(!want_msg || strstr(res.msg, want_msg), "%s: message '%s' lacks '%s'", what, res.msg,
          want_msg ? want_msg : "");
    if (want == SRCH_OK) {
        CHECK(res.time.median_ns > 0 && res.time.reps > 0, "%s: no time", what);
        CHECK(res.err_max <= 1, "%s: elementwise %.3g", what, res.err_max);
    }
out:
    srch_eval_req_free(&req);
    srch_compile_result_release(&cr);
    ops_emitted_free(&e);
    ops_graph_free(g);
}

/* A hand-written candidate for graph g (whose input 0 and output 0 are the kernel's
 * parameters, in that order, for every kernel). */
static srch_status eval_planted(worker *w, ops_graph *g, const char *what, const char *src,
                                int n_kernels, const char *const *entries, const uint32_t *grids,
                                const uint32_t *grids_y, uint32_t block, uint64_t id,
                                srch_eval_result *res)
{
    srch_compile_result cr = {0};
    srch_eval_req req = {0};
    srch_status st = SRCH_STATUS_COUNT;
    if (srch_nvrtc_compile(src, arch, &cr) < 0 || cr.status != SRCH_COMPILE_OK) {
        printf("  FAIL %s: compile: %.300s\n", what, cr.log ? cr.log : "");
        failures++;
        goto out;
    }
    req.id = id;
    req.sub = g;
    /* the bound symbols of g (the message carries sub symbolic, with its bindings) */
    for (int t = 0; t < g->n_tensors; t++)
        for (int i = 0; g->tensors[t].producer < 0 && i < g->tensors[t].shape.rank; i++) {
            const ops_dim *dim = &g->tensors[t].shape.d[i];
            bool seen = dim->sym < 0;
            for (int j = 0; j < req.n_bindings && !seen; j++)
                seen = strcmp(req.bindings[j].name, g->syms[dim->sym]) == 0;
            if (!seen && req.n_bindings < SRCH_MAX_BINDINGS) {
                srch_binding *b = &req.bindings[req.n_bindings++];
                snprintf(b->name, sizeof(b->name), "%s", g->syms[dim->sym]);
                b->value = dim->size;
            }
        }
    req.seeds = 2;
    req.seed0 = 99;
    req.verify = req.time = true;
    timing_fast(&req);
    req.cubin = cr.cubin;
    req.cubin_len = cr.cubin_len;
    req.n_kernels = n_kernels;
    for (int k = 0; k < n_kernels; k++) {
        ops_kernel_launch *l = &req.kernels[k];
        snprintf(l->entry, sizeof(l->entry), "%s", entries[k]);
        l->grid[0] = grids[k];
        l->grid[1] = grids_y ? grids_y[k] : 1;
        l->grid[2] = 1;
        l->block[0] = block;
        l->block[1] = l->block[2] = 1;
        l->n_args = 2;
        l->args[0] = (ops_arg){.kind = OPS_ARG_TENSOR, .tensor = 0};
        l->args[1] = (ops_arg){.kind = OPS_ARG_TENSOR, .tensor = g->outputs[0]};
    }
    if (eval(w, &req, res, 120) == 0) {
        print_result(what, res);
        st = res->status;
    }
out:
    srch_compile_result_release(&cr);
    return st;
}

#define AFFINE_N 258741 /* 333 * 777: not a multiple of any block */

static void planted(worker *w)
{
    ops_graph *g = gpu_affine_graph("affine", AFFINE_N, &failures);
    const char *entries[] = {"k"};
    uint32_t grid[] = {(AFFINE_N + 255) / 256};
    srch_eval_result res;
    char src[1024];

    snprintf(src, sizeof(src),
             "extern \"C\" __global__ void k(const float *x, float *y) {\n"
             "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
             "  if (i < %d) y[i] = x[i] * 2.0f + 1.0f;\n}\n",
             AFFINE_N);
    srch_status st =
        eval_planted(w, g, "planted correct 2x+1", src, 1, entries, grid, NULL, 256, 101, &res);
    CHECK(st == SRCH_OK, "correct planted kernel: %s", srch_status_str(st));

    snprintf(src, sizeof(src),
             "extern \"C\" __global__ void k(const float *x, float *y) {\n"
             "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
             "  if (i < %d) y[i] = x[i] * 2.0f + 2.0f;\n}\n",
             AFFINE_N);
    st = eval_planted(w, g, "planted wrong 2x+2", src, 1, entries, grid, NULL, 256, 102, &res);
    CHECK(st == SRCH_WRONG, "wrong kernel: %s", srch_status_str(st));

    snprintf(src, sizeof(src),
             "extern \"C\" __global__ void k(const float *x, float *y) {\n"
             "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
             "  if (i < %d - 1) y[i] = x[i] * 2.0f + 1.0f;\n}\n",
             AFFINE_N);
    st = eval_planted(w, g, "planted unwritten last element", src, 1, entries, grid, NULL, 256, 103,
                      &res);
    CHECK(st == SRCH_WRONG && strstr(res.msg, "NaN"), "unwritten element: %s %s",
          srch_status_str(st), res.msg);
    ops_graph_free(g);

    /* Row sums by float atomics: the order the blocks land in changes the rounding. */
    enum { ROWS = 64, COLS = 65536, CHUNK = 256 };
    g = rowsum_graph(ROWS, COLS);
    snprintf(src, sizeof(src),
             "extern \"C\" __global__ void zero(const float *x, float *y) {\n"
             "  if (threadIdx.x < %d) y[threadIdx.x] = 0.0f;\n}\n"
             "extern \"C\" __global__ void acc(const float *x, float *y) {\n"
             "  __shared__ float s[%d];\n"
             "  const float *row = x + (size_t)blockIdx.y * %d + blockIdx.x * %d;\n"
             "  s[threadIdx.x] = row[threadIdx.x];\n"
             "  __syncthreads();\n"
             "  for (int h = %d / 2; h > 0; h /= 2) {\n"
             "    if (threadIdx.x < h) s[threadIdx.x] += s[threadIdx.x + h];\n"
             "    __syncthreads();\n"
             "  }\n"
             "  if (threadIdx.x == 0) atomicAdd(&y[blockIdx.y], s[0]);\n}\n",
             ROWS, CHUNK, COLS, CHUNK, CHUNK);
    const char *racy_entries[] = {"zero", "acc"};
    uint32_t racy_grid[] = {1, COLS / CHUNK}, racy_grid_y[] = {1, ROWS};
    st = eval_planted(w, g, "planted racy atomic row sum", src, 2, racy_entries, racy_grid,
                      racy_grid_y, CHUNK, 104, &res);
    CHECK(st == SRCH_RACE || st == SRCH_OK, "racy kernel: %s", srch_status_str(st));
    if (st == SRCH_OK)
        printf("  note: the racy kernel happened to agree bitwise twice in every seed\n");
    ops_graph_free(g);
}

/* ---- NaN and Inf: every element is judged ---- */

#define NAN_N 258741 /* 333 x 777 */

/* Graphs where the reference is NaN or overflows (tests/gpu/): clamp(log(x), -1, 1) is NaN for
 * the negative half of the inputs, and PyTorch's clamp keeps NaN; amax and softmax over rows of
 * 4 of log(x) are NaN in the rows with a negative x (15 in 16), the others compared; f32
 * x + 1e39 overflows at every element, so nothing can be compared and any kernel fails. Then
 * planted kernels: NaN mapped to -1 (what fminf/fmaxf do) and a finite value where the
 * reference overflows to +Inf fail with the element named; one that keeps NaN passes. */
static void nan_inf(worker *w)
{
    eval_family(w, "tests/gpu/clamp_log.json", "M=333,N=777", OPS_FAM_POINTWISE, NULL, false, 301,
                SRCH_OK, NULL);
    eval_family(w, "tests/gpu/amax_log.json", "M=333,N=4", OPS_FAM_ROW, NULL, false, 302, SRCH_OK,
                NULL);
    eval_family(w, "tests/gpu/softmax_log.json", "M=333,N=4", OPS_FAM_ROW, NULL, false, 303,
                SRCH_OK, NULL);
    eval_family(w, "tests/gpu/add_overflow.json", "N=258741", OPS_FAM_POINTWISE, NULL, false, 304,
                SRCH_WRONG, "too few elements compared");

    ops_binding b[8];
    int nb = 0;
    char keep[128], src[1024];
    const char *entries[] = {"k"};
    uint32_t grid[] = {(NAN_N + 255) / 256};
    srch_eval_result res;
    ops_graph *g = example("tests/gpu/clamp_log.json", "M=333,N=777", b, &nb, keep, sizeof(keep));
    if (g) {
        snprintf(src, sizeof(src),
                 "extern \"C\" __global__ void k(const float *x, float *y) {\n"
                 "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                 "  if (i < %d) y[i] = fminf(fmaxf(logf(x[i]), -1.0f), 1.0f);\n}\n",
                 NAN_N);
        srch_status st = eval_planted(w, g, "planted clamp(log) with NaN -> -1", src, 1, entries,
                                      grid, NULL, 256, 311, &res);
        CHECK(st == SRCH_WRONG && strstr(res.msg, "differ in NaN/Inf") &&
                  strstr(res.msg, "got -1, reference NaN"),
              "NaN mapped to -1: %s %s", srch_status_str(st), res.msg);
        snprintf(src, sizeof(src),
                 "extern \"C\" __global__ void k(const float *x, float *y) {\n"
                 "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                 "  if (i >= %d) return;\n"
                 "  float l = logf(x[i]);\n"
                 "  y[i] = l != l ? l : fminf(fmaxf(l, -1.0f), 1.0f);\n}\n",
                 NAN_N);
        st = eval_planted(w, g, "planted clamp(log) keeping NaN", src, 1, entries, grid, NULL, 256,
                          312, &res);
        CHECK(st == SRCH_OK, "clamp(log) keeping NaN: %s %s", srch_status_str(st), res.msg);
    }
    ops_graph_free(g);

    g = example("tests/gpu/add_overflow.json", "N=258741", b, &nb, keep, sizeof(keep));
    if (g) {
        snprintf(src, sizeof(src),
                 "extern \"C\" __global__ void k(const float *x, float *y) {\n"
                 "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                 "  if (i < %d) y[i] = 3.0e38f;\n}\n",
                 NAN_N);
        srch_status st = eval_planted(w, g, "planted finite where the reference is +Inf", src, 1,
                                      entries, grid, NULL, 256, 313, &res);
        CHECK(st == SRCH_WRONG && strstr(res.msg, "differ in NaN/Inf") &&
                  strstr(res.msg, "got 3e+38, reference 1e+39"),
              "finite for +Inf: %s %s", srch_status_str(st), res.msg);
        snprintf(src, sizeof(src),
                 "extern \"C\" __global__ void k(const float *x, float *y) {\n"
                 "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                 "  if (i < %d) y[i] = x[i] + __int_as_float(0x7f800000);\n}\n",
                 NAN_N);
        st = eval_planted(w, g, "planted x + Inf for x + 1e39", src, 1, entries, grid, NULL, 256,
                          314, &res);
        CHECK(st == SRCH_WRONG && strstr(res.msg, "too few elements compared"),
              "nothing compared: %s %s", srch_status_str(st), res.msg);
    }
    ops_graph_free(g);
}

static void retime_and_forget(worker *w, const uint64_t *ids, int n)
{
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 4);
    kt_mp_pack_str(&pk, "op");
    kt_mp_pack_str(&pk, "retime");
    kt_mp_pack_str(&pk, "ids");
    msgpack_pack_array(&pk, (size_t)n);
    for (int i = 0; i < n; i++)
        msgpack_pack_uint64(&pk, ids[i]);
    kt_mp_pack_str(&pk, "rounds");
    msgpack_pack_int(&pk, 20);
    kt_mp_pack_str(&pk, "cold");
    msgpack_pack_true(&pk);
    int rc = rpc(w, &sb, 300);
    const msgpack_object *r = &w->msg.data, *times = get(r, "times");
    CHECK(rc == 0 && is_true(get(r, "ok")) && times && times->type == MSGPACK_OBJECT_ARRAY &&
              times->via.array.size == (uint32_t)n,
          "retime failed");
    for (uint32_t i = 0; times && i < times->via.array.size; i++) {
        const msgpack_object *t = &times->via.array.ptr[i], *m = get(t, "median_ns");
        double med = m ? m->via.f64 : 0;
        printf("  retime cold, interleaved: id %llu median %.2f us\n",
               (unsigned long long)get(t, "id")->via.u64, med / 1e3);
        CHECK(med > 0, "retime: no median for id %llu", (unsigned long long)ids[i]);
    }
    msgpack_sbuffer_clear(&sb);
    msgpack_pack_map(&pk, 2);
    kt_mp_pack_str(&pk, "op");
    kt_mp_pack_str(&pk, "forget");
    kt_mp_pack_str(&pk, "ids");
    msgpack_pack_array(&pk, (size_t)n);
    for (int i = 0; i < n; i++)
        msgpack_pack_uint64(&pk, ids[i]);
    rc = rpc(w, &sb, 60);
    CHECK(rc == 0 && is_true(get(&w->msg.data, "ok")), "forget failed");
    /* Forgotten: a retime of it is refused. */
    msgpack_sbuffer_clear(&sb);
    msgpack_pack_map(&pk, 2);
    kt_mp_pack_str(&pk, "op");
    kt_mp_pack_str(&pk, "retime");
    kt_mp_pack_str(&pk, "ids");
    msgpack_pack_array(&pk, 1);
    msgpack_pack_uint64(&pk, ids[0]);
    rc = rpc(w, &sb, 60);
    CHECK(rc == 0 && !is_true(get(&w->msg.data, "ok")), "retime of a forgotten id succeeded");
    msgpack_sbuffer_destroy(&sb);
}

static void fault(void)
{
    worker w;
    if (start_and_hello(&w, false) != 0) {
        failures++;
        return;
    }
    ops_graph *g = gpu_affine_graph("affine", AFFINE_N, &failures);
    const char *entries[] = {"k"};
    uint32_t grid[] = {(AFFINE_N + 255) / 256};
    srch_eval_result res;
    const char *src = "extern \"C\" __global__ void k(const float *x, float *y) {\n"
                      "  float *bad = (float *)0x10;\n"
                      "  bad[blockIdx.x * blockDim.x + threadIdx.x] = x[0];\n}\n";
    srch_status st =
        eval_planted(&w, g, "planted illegal address", src, 1, entries, grid, NULL, 256, 201, &res);
    CHECK(st == SRCH_FAULT, "illegal address: %s", srch_status_str(st));
    int code = worker_stop(&w);
    printf("  worker exit status after the fault: %d\n", code);
    CHECK(code == 3, "worker exit status %d after a fault, want 3", code);
    ops_graph_free(g);
}

/* ---- tensor maps ---- */

/* tests/gpu/tmap_copy.cu's problem: X [100, 200] f16 -> Y = 2 X, S = sum of X over axis 1. */
#define TMAP_M 100
#define TMAP_N 200

static ops_graph *tmap_graph(void)
{
    ops_graph *g = ops_graph_new("tmap_copy");
    ops_shape sh = {.rank = 2, .d = {{TMAP_M, OPS_NO_SYM}, {TMAP_N, OPS_NO_SYM}}};
    int x = ops_graph_add_input(g, "x", OPS_DT_F16, &sh, false);
    int n0 = ops_graph_add_node(g, OPS_MUL, "y", NULL);
    g->nodes[n0].n_in = 2;
    g->nodes[n0].in[0] = (ops_operand){.tensor = x};
    g->nodes[n0].in[1] = (ops_operand){.tensor = OPS_SCALAR, .scalar = 2};
    ops_graph_mark_output(g, g->nodes[n0].out);
    ops_attrs a;
    ops_attrs_default(OPS_REDUCE_SUM, &a);
    a.n_axes = 1;
    a.axes[0] = 1;
    a.keepdim = false;
    int n1 = ops_graph_add_node(g, OPS_REDUCE_SUM, "s", &a);
    g->nodes[n1].n_in = 1;
    g->nodes[n1].in[0] = (ops_operand){.tensor = x};
    ops_graph_mark_output(g, g->nodes[n1].out);
    ops_diag d = {0};
    if (ops_graph_validate(g, &d) < 0) {
        printf("  FAIL tmap graph: %s\n", d.msg);
        failures++;
    }
    return g;
}

/* Evaluates tmap_copy with x passed as a tensor map (or, with as_pointer, wrongly as a
 * pointer) over X; oob_nan fills the box past X with NaN instead of zeros. */
static srch_status eval_tmap(worker *w, ops_graph *g, const srch_compile_result *cr,
                             const char *what, bool oob_nan, bool as_pointer, uint64_t id,
                             srch_eval_result *res)
{
    srch_eval_req req = {0};
    req.id = id;
    req.sub = g;
    req.seeds = 2;
    req.seed0 = 19;
    req.verify = req.time = true;
    timing_fast(&req);
    req.cubin = cr->cubin;
    req.cubin_len = cr->cubin_len;
    req.n_kernels = 1;
    ops_kernel_launch *l = &req.kernels[0];
    snprintf(l->entry, sizeof(l->entry), "tmap_copy");
    l->grid[0] = (TMAP_M + 15) / 16; /* BR = 16 rows per CTA */
    l->grid[1] = l->grid[2] = 1;
    l->block[0] = 128;
    l->block[1] = l->block[2] = 1;
    l->n_args = 3;
    l->args[0] = (ops_arg){.kind = OPS_ARG_TENSOR_MAP,
                           .tensor = 0,
                           .tmap = {.rank = 2,
                                    .dtype = OPS_DT_F16,
                                    .dims = {TMAP_N, TMAP_M},
                                    .strides = {TMAP_N * 2},
                                    .box = {64, 16},
                                    .elem_strides = {1, 1},
                                    .oob_nan = oob_nan}};
    if (as_pointer)
        l->args[0] = (ops_arg){.kind = OPS_ARG_TENSOR, .tensor = 0};
    l->args[1] = (ops_arg){.kind = OPS_ARG_TENSOR, .tensor = g->outputs[0]};
    l->args[2] = (ops_arg){.kind = OPS_ARG_TENSOR, .tensor = g->outputs[1]};
    srch_status st = SRCH_STATUS_COUNT;
    if (eval(w, &req, res, 120) == 0) {
        print_result(what, res);
        st = res->status;
    }
    return st;
}

/* A hand-written sm_90a kernel (tests/gpu/tmap_copy.cu) reads a ragged f16 matrix through TMA
 * 2-D tile copies of a tensor map the worker encodes: every element must arrive (Y = 2X, each
 * element verified), and the box past the matrix must read as zeros (the row sums S add whole
 * boxes). The same map with NaN fill must fail, and the kernel launched with a pointer for its
 * tensor-map parameter must be refused at load (parameter sizes). */
static void tensor_maps(worker *w)
{
    char path[1024];
    snprintf(path, sizeof(path), "%s/tests/gpu/tmap_copy.cu",
             getenv("KTUNE_SOURCE_ROOT") ? getenv("KTUNE_SOURCE_ROOT") : ".");
    char *src = NULL;
    kt_err err = {0};
    srch_compile_result cr = {0};
    srch_eval_result res;
    if (kt_read_file(path, 1 << 20, &src, NULL, &err) < 0) {
        CHECK(0, "%s", err.msg);
        return;
    }
    if (strncmp(arch, "sm_9", 4) != 0 && strncmp(arch, "sm_1", 4) != 0) {
        printf("  skip: TMA needs sm_90 (this GPU is %s)\n", arch);
        free(src);
        return;
    }
    if (srch_nvrtc_compile(src, "sm_90a", &cr) < 0 || cr.status != SRCH_COMPILE_OK) {
        CHECK(0, "tmap_copy.cu: compile: %.300s", cr.log ? cr.log : "");
        goto out;
    }
    ops_graph *g = tmap_graph();
    srch_status st = eval_tmap(w, g, &cr, "tmap 2-D copy, zero fill", false, false, 190, &res);
    CHECK(st == SRCH_OK, "tensor-map copy: %s %s", srch_status_str(st), res.msg);
    CHECK(st != SRCH_OK || res.err_max <= 1, "tensor-map copy: elementwise %.3g", res.err_max);
    st = eval_tmap(w, g, &cr, "tmap 2-D copy, NaN fill (must fail)", true, false, 191, &res);
    CHECK(st == SRCH_WRONG, "NaN-filled box: %s %s, want wrong", srch_status_str(st), res.msg);
    st = eval_tmap(w, g, &cr, "tmap kernel given a pointer (refused)", false, true, 192, &res);
    CHECK(st == SRCH_LOAD_ERROR && strstr(res.msg, "parameter 0 is 128 bytes"),
          "pointer for a tensor map: %s %s", srch_status_str(st), res.msg);
    ops_graph_free(g);
out:
    srch_compile_result_release(&cr);
    free(src);
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    signal(SIGPIPE, SIG_IGN);
    worker w;
    int rc = start_and_hello(&w, true);
    if (rc == SKIP) {
        worker_stop(&w);
        return SKIP;
    }
    if (rc != 0) {
        worker_stop(&w);
        return 1;
    }
    /* `test_gpu_worker tmap` (the meson test gpu_tmap): the tensor-map part alone */
    bool only_tmap = argc > 1 && strcmp(argv[1], "tmap") == 0;
    if (only_tmap) {
        printf("== tensor maps\n");
        tensor_maps(&w);
        CHECK(simple_op(&w, "quit") == 0, "quit");
        CHECK(worker_stop(&w) == 0, "worker exit status after quit");
        printf("\n%s (%d failures)\n", failures ? "FAILED" : "passed", failures);
        return failures ? 1 : 0;
    }

    printf("== fp64 GPU reference vs CPU reference (small, ragged shapes)\n");
    check_reference(&w, "softmax.json", "M=33,N=77");
    check_reference(&w, "gemm_bias_relu.json", "M=37");
    check_reference(&w, "layernorm.json", "M=5");
    check_reference(&w, "rmsnorm.json", "M=3");
    check_reference(&w, "gelu_tanh_chain.json", "M=33,N=77");
    check_reference(&w, "sum_lastaxis.json", "M=33,N=77");
    check_reference(&w, "conv2d.json", "N=1");
    check_reference(&w, "attention.json", "B=1,H=2,S=37");
    /* NaN where log(x) is NaN, kept by clamp, amax and softmax as on the CPU */
    check_reference(&w, "tests/gpu/clamp_log.json", "M=33,N=77");
    check_reference(&w, "tests/gpu/amax_log.json", "M=33,N=4");
    check_reference(&w, "tests/gpu/softmax_log.json", "M=33,N=4");
    check_full_inputs(&w);

    printf("== candidates\n");
    eval_family(&w, "gemm_bias_relu.json", "M=1000", OPS_FAM_GEMM, "splitk", false, 1, SRCH_OK,
                NULL);
    eval_family(&w, "gemm_bias_relu.json", "M=1000", OPS_FAM_GEMM, "splitk", true, 2, SRCH_OK,
                NULL);
    eval_family(&w, "gemm_bias_relu.json", "M=1000", OPS_FAM_LIBRARY, NULL, false, 3, SRCH_OK,
                NULL);
    eval_family(&w, "softmax.json", "M=333,N=777", OPS_FAM_ROW, NULL, false, 4, SRCH_OK, NULL);

    printf("== planted kernels\n");
    planted(&w);

    printf("== tensor maps\n");
    tensor_maps(&w);

    printf("== NaN and Inf\n");
    nan_inf(&w);

    printf("== retime and forget\n");
    const uint64_t ids[] = {1, 3};
    retime_and_forget(&w, ids, 2);

    CHECK(simple_op(&w, "quit") == 0 && is_true(get(&w.msg.data, "ok")), "quit");
    int code = worker_stop(&w);
    CHECK(code == 0, "worker exit status %d after quit", code);

    printf("== fault\n");
    fault();

    printf("\n%s (%d failures)\n", failures ? "FAILED" : "passed", failures);
    return failures ? 1 : 0;
}
