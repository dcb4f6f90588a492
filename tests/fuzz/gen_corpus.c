/* Writes the seed corpora of fuzz_record and fuzz_request (tests/fuzz/README.md):
 *   gen_corpus SOURCE_ROOT OUT_ROOT
 * fuzz_record: stored records (the unit tests' test_record), trials of every status, and jobs
 * of every state (with and without a graph). fuzz_request: a read-size byte, then requests of
 * every op as clients send them, with graphs from examples/ as maps and as bin. */
/* clang-format off: cmocka needs these first; test_cache_util.h uses its asserts */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
/* clang-format on */
#include "../unit/test_cache_util.h"

#include "cache/job.c"
#include "cache/record.h"

#include <errno.h>
#include <msgpack.h>

static int write_file(const char *root, const char *target, const char *name, const void *buf,
                      size_t len)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s/%s", root, target, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(buf, 1, len, f) != len || fclose(f) != 0) {
        fprintf(stderr, "%s: %s\n", path, strerror(errno));
        return -1;
    }
    return 0;
}

static int gen_records(const char *out)
{
    kt_err err = {0};
    char name[64];
    for (int i = 0; i < 3; i++) {
        cache_key k;
        cache_record r;
        test_key(&k, i == 2 ? "NVIDIA A100" : "NVIDIA H100 80GB HBM3", (uint8_t)(0x10 + i), 64 << i);
        test_record(&r, &k, i == 1 ? "tile=128x64;stages=3" : "tile=64x64", 1234.5 * (i + 1),
                    (size_t)(i * 40), (uint8_t)i);
        if (i == 2)
            r.verified = false;
        uint8_t *buf;
        size_t len;
        if (cache_record_encode(&r, &buf, &len, &err) < 0) {
            fprintf(stderr, "record: %s\n", err.msg);
            return -1;
        }
        snprintf(name, sizeof(name), "record_%d", i);
        int rc = write_file(out, "fuzz_record", name, buf, len);
        free(buf);
        cache_record_free(&r);
        if (rc < 0)
            return rc;
    }
    for (int s = 0; s < CACHE_TRIAL_STATUS_COUNT; s++) {
        cache_trial t = {.status = (cache_trial_status)s, .ts = 1700000000 + s};
        snprintf(t.cand, sizeof(t.cand), "gemm/tile=64x%d", 32 << s);
        if (s <= CACHE_TRIAL_WRONG) {
            t.time_ns = 1000.25 * (s + 1);
            t.error = s ? 0.5 : 1e-5;
        }
        if (s >= CACHE_TRIAL_FAULT)
            snprintf(t.detail, sizeof(t.detail), "%s", s == CACHE_TRIAL_COMPILE_ERROR ?
                     "error: identifier \"x\" is undefined" : "cudaErrorIllegalAddress");
        uint8_t *buf;
        size_t len;
        if (cache_trial_encode(&t, &buf, &len, &err) < 0) {
            fprintf(stderr, "trial: %s\n", err.msg);
            return -1;
        }
        snprintf(name, sizeof(name), "trial_%s", cache_trial_status_name(t.status));
        int rc = write_file(out, "fuzz_record", name, buf, len);
        free(buf);
        if (rc < 0)
            return rc;
    }
    return 0;
}

static int gen_jobs(const char *out, const void *graph, size_t graph_len)
{
    kt_err err = {0};
    for (int s = 0; s < CACHE_JOB_STATE_COUNT; s++) {
        cache_job j;
        memset(&j, 0, sizeof(j));
        j.id = (uint64_t)s + 1;
        j.state = (cache_job_state)s;
        j.priority = s * 10 - 20;
        j.gpu = s - 1;
        snprintf(j.name, sizeof(j.name), "job-%d", s);
        memset(j.sig, 0x40 + s, sizeof(j.sig));
        j.n_shapes = 1;
        snprintf(j.shapes[0].name, sizeof(j.shapes[0].name), "N");
        j.shapes[0].value = 1024;
        j.precision = OPS_PREC_EXACT;
        j.budget_s = 60;
        j.tolerance = s == 2 ? 1e-3 : 0;
        if (s % 2 == 0 && graph) {
            j.graph = malloc(graph_len);
            memcpy(j.graph, graph, graph_len);
            j.graph_len = graph_len;
        }
        j.submitted = 1700000000;
        if (s >= 1)
            j.started = 1700000005;
        if (s >= 2) {
            j.finished = 1700000065;
            j.elapsed_s = 60;
            j.trials = 120;
            j.measured = 100;
            j.best_ns = 5120.5;
            j.baseline_ns = 9000;
            j.err_norm = 1e-5;
            snprintf(j.family, sizeof(j.family), "gemm");
            snprintf(j.schedule, sizeof(j.schedule), "tile=128x64");
            j.record = s == 2;
            j.n_failures = 2;
            snprintf(j.failures[0].name, sizeof(j.failures[0].name), "wrong");
            j.failures[0].count = 3;
            snprintf(j.failures[1].name, sizeof(j.failures[1].name), "compile_error");
            j.failures[1].count = 1;
            j.compile_s = 12.5;
            j.measure_s = 40.25;
        }
        if (s >= 3)
            snprintf(j.error, sizeof(j.error), "%s", s == 3 ? "no candidate verified" : "cancelled");
        uint8_t *buf;
        size_t len;
        if (encode_job(&j, &buf, &len, &err) < 0) {
            fprintf(stderr, "job: %s\n", err.msg);
            cache_job_free(&j);
            return -1;
        }
        char name[64];
        snprintf(name, sizeof(name), "job_%s", cache_job_state_name(j.state));
        int rc = write_file(out, "fuzz_record", name, buf, len);
        free(buf);
        cache_job_free(&j);
        if (rc < 0)
            return rc;
    }
    return 0;
}

static void pk_str(msgpack_packer *pk, const char *s)
{
    msgpack_pack_str_with_body(pk, s, strlen(s));
}

/* Starts a request {id, v: 1, op, ...}: the map header for n_extra more pairs. */
static void pk_req(msgpack_packer *pk, uint64_t id, const char *op, uint32_t n_extra)
{
    msgpack_pack_map(pk, 3 + n_extra);
    pk_str(pk, "id");
    msgpack_pack_uint64(pk, id);
    pk_str(pk, "v");
    msgpack_pack_uint64(pk, 1);
    pk_str(pk, "op");
    pk_str(pk, op);
}

static int gen_requests(const char *out, const char *root)
{
    static const char *const graphs[] = {"gemm_bias_relu", "softmax", "layernorm", "conv2d",
                                         "attention", "broken/bad_broadcast"};
    char name[64], path[4096];
    for (size_t gi = 0; gi < sizeof(graphs) / sizeof(graphs[0]); gi++) {
        ops_graph *g = NULL;
        ops_diag d = {0};
        snprintf(path, sizeof(path), "%s/examples/%s.json", root, graphs[gi]);
        if (ops_graph_from_json_file(path, &g, &d) < 0) {
            fprintf(stderr, "%s: %s\n", path, d.msg);
            return -1;
        }
        void *gb;
        size_t gl;
        if (ops_graph_to_msgpack(g, &gb, &gl) < 0) {
            ops_graph_free(g);
            return -1;
        }
        ops_graph_free(g);
        for (int form = 0; form < 3; form++) {
            msgpack_sbuffer sb;
            msgpack_sbuffer_init(&sb);
            msgpack_sbuffer_write(&sb, form == 2 ? "\x00" : "\x0f", 1); /* read size 1 or 16 */
            msgpack_packer pk;
            msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
            const char *op = form == 1 ? "submit" : "lookup";
            pk_req(&pk, 7 + gi, op, form == 1 ? 4 : 3);
            pk_str(&pk, "graph");
            if (form == 2) {
                msgpack_pack_bin_with_body(&pk, gb, gl);
            } else {
                msgpack_sbuffer_write(&sb, gb, gl); /* the map itself */
            }
            pk_str(&pk, "shapes");
            msgpack_pack_map(&pk, 1);
            pk_str(&pk, "N");
            msgpack_pack_uint64(&pk, 4096);
            pk_str(&pk, form == 1 ? "budget_s" : "gpu");
            msgpack_pack_uint64(&pk, form == 1 ? 30 : 0);
            if (form == 1) {
                pk_str(&pk, "precision");
                pk_str(&pk, "tf32");
            }
            /* a second message on the same stream */
            pk_req(&pk, 100 + gi, "status", 1);
            pk_str(&pk, "job");
            msgpack_pack_uint64(&pk, 3);
            snprintf(name, sizeof(name), "%s_%s_%d", op, strchr(graphs[gi], '/') ?
                     "broken" : graphs[gi], form);
            int rc = write_file(out, "fuzz_request", name, sb.data, sb.size);
            msgpack_sbuffer_destroy(&sb);
            if (rc < 0) {
                free(gb);
                return rc;
            }
        }
        if (gi == 0) {
            int rc = gen_jobs(out, gb, gl);
            free(gb);
            if (rc < 0)
                return rc;
        } else {
            free(gb);
        }
    }
    /* ops without a graph, pipelined; then envelope errors */
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_sbuffer_write(&sb, "\x03", 1);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    pk_req(&pk, 1, "hello", 1);
    pk_str(&pk, "client");
    pk_str(&pk, "fuzz");
    pk_req(&pk, 2, "jobs", 2);
    pk_str(&pk, "state");
    msgpack_pack_array(&pk, 2);
    pk_str(&pk, "queued");
    pk_str(&pk, "running");
    pk_str(&pk, "limit");
    msgpack_pack_int64(&pk, 10);
    pk_req(&pk, 3, "watch", 1);
    pk_str(&pk, "job");
    msgpack_pack_uint64(&pk, 1);
    pk_req(&pk, 4, "cancel", 1);
    pk_str(&pk, "job");
    msgpack_pack_uint64(&pk, 1);
    pk_req(&pk, 5, "stats", 0);
    pk_req(&pk, 6, "gpus", 0);
    msgpack_pack_map(&pk, 2); /* no id */
    pk_str(&pk, "v");
    msgpack_pack_uint64(&pk, 1);
    pk_str(&pk, "op");
    pk_str(&pk, "stats");
    pk_req(&pk, 8, "no_such_op", 0);
    int rc = write_file(out, "fuzz_request", "ops_pipelined", sb.data, sb.size);
    msgpack_sbuffer_destroy(&sb);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: %s SOURCE_ROOT OUT_ROOT (writes OUT_ROOT/fuzz_record, ...)\n",
                argv[0]);
        return 2;
    }
    if (gen_records(argv[2]) < 0 || gen_requests(argv[2], argv[1]) < 0)
        return 1;
    return 0;
}
