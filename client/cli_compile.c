/* ktune compile: emits candidates of a graph's space and compiles them with the NVRTC pool,
 * reporting failures, spills and time. Needs no GPU. */
#include "cli.h"
#include "search/compile.h"
#include "search/space.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static const char compile_help[] =
    "usage: ktune compile GRAPH.json --shape NAME=VALUE ... [--limit N] [--jobs N]\n"
    "                     [--emit DIR] [--store DIR] [--arch ARCH] [--timeout S]\n"
    "                     [--precision P] [--quiet] [--json]\n"
    "\n"
    "Emits the candidates of the graph's space (all of them, or with --limit a deterministic\n"
    "spread of N over every family) and compiles them with NVRTC in a pool of processes.\n"
    "Reports how many compiled, failed and spill registers, and the wall time. Library\n"
    "(cuBLASLt) candidates have no kernel to compile and are counted as described.\n"
    "\n"
    "options:\n"
    "  --limit N      compile a spread of N candidates instead of all\n"
    "  --jobs N       compile processes (default: one per CPU)\n"
    "  --emit DIR     write each candidate's CUDA source (and the log of failures) to DIR\n"
    "  --store DIR    content-addressed cubin store: what was compiled once is reused\n"
    "  --arch ARCH    NVRTC target (default sm_90a)\n"
    "  --timeout S    per-compile timeout in seconds (default 60)\n"
    "  --precision P  exact (default), tf32 or reduced\n"
    "  --quiet        no progress line on stderr (compiled so far, time left estimated)\n"
    "  --json         one JSON object: compiled, failed, spilled, described, seconds, ...\n"
    "  -h, --help     show this help\n"
    "\n"
    "Exits 1 when any candidate fails to compile.\n";

typedef struct compile_opts {
    long limit, jobs;
    double timeout_s;
    const char *emit_dir, *store_dir, *arch;
    bool quiet;
} compile_opts;

static int compile_extra(void *ctx, const char *opt, const char *value)
{
    compile_opts *o = ctx;
    if (strcmp(opt, "--quiet") == 0) {
        o->quiet = true;
        return 1;
    }
    if (strcmp(opt, "--limit") == 0 || strcmp(opt, "--jobs") == 0 ||
        strcmp(opt, "--timeout") == 0) {
        long n = cli_parse_count("compile", opt, value);
        if (n < 0)
            return -CLI_USAGE;
        if (opt[2] == 'l')
            o->limit = n;
        else if (opt[2] == 'j')
            o->jobs = n;
        else
            o->timeout_s = (double)n;
        return 2;
    }
    const char **dst = strcmp(opt, "--emit") == 0    ? &o->emit_dir
                       : strcmp(opt, "--store") == 0 ? &o->store_dir
                       : strcmp(opt, "--arch") == 0  ? &o->arch
                                                     : NULL;
    if (!dst)
        return 0;
    if (!value) {
        cli_usage_error("compile", "%s needs a value", opt);
        return -CLI_USAGE;
    }
    *dst = value;
    return 2;
}

typedef struct tally {
    int64_t compiled, failed, spilled, described, from_store;
    double compile_seconds;
    int max_registers;
    int64_t per_family[OPS_FAM_COUNT][3]; /* compiled, failed, spilled */
} tally;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void write_text(const char *dir, int64_t i, const char *family, const char *ext,
                       const char *text)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/cand-%05lld-%s%s", dir, (long long)i, family, ext);
    /* Replaces only a regular file: a FIFO left at that name would block an fopen forever. */
    kt_err err = {0};
    if (kt_write_file(path, text, strlen(text), 0644, &err) < 0)
        kt_log_warn("compile", "%s", err.msg);
}

static void first_line(const char *text, char *buf, size_t len)
{
    /* The first line that says "error", else the first line. */
    const char *err = strstr(text, "error");
    const char *start = err ? err : text;
    while (err && start > text && start[-1] != '\n')
        start--;
    size_t n = strcspn(start, "\n");
    snprintf(buf, len, "%.*s", (int)(n < len ? n : len - 1), start);
}

int cli_compile(int argc, char **argv)
{
    compile_opts o = {.timeout_s = 60};
    cli_graph_args a = {.sub = "compile", .help = compile_help};
    int rc = cli_parse_graph_args(argc, argv, &a, compile_extra, &o);
    if (rc != CLI_OK)
        return rc;
    if (o.emit_dir && mkdir(o.emit_dir, 0755) != 0 && errno != EEXIST)
        return cli_error("--emit %s: %s", o.emit_dir, strerror(errno));

    ops_graph *g = NULL, *bound = NULL;
    if ((rc = cli_load_graph(&a, &g, &bound)) != CLI_OK)
        return rc;
    ops_device dev;
    ops_device_h100(&dev);
    if (o.arch)
        snprintf(dev.arch, sizeof(dev.arch), "%s", o.arch);
    srch_space *s = NULL;
    srch_candidate *cand = NULL;
    int64_t n_cand = 0, n_pick = 0, *pick = NULL;
    srch_pool *pool = NULL;
    ops_diag d = {0};
    kt_err err = {0};
    tally t = {0};
    json_t *failures = json_array();
    double t0 = now_s();
    if (srch_space_build(bound, &dev, a.precision, &s, &d) < 0) {
        rc = cli_error("%s: %s", a.path, d.msg);
        goto out;
    }
    if (srch_space_candidates(s, &cand, &n_cand) < 0 ||
        !(pick = malloc((size_t)(n_cand + 1) * sizeof(int64_t)))) {
        rc = cli_error("out of memory listing candidates");
        goto out;
    }
    if (o.limit && o.limit < n_cand) {
        n_pick = srch_spread(cand, n_cand, s, o.limit, pick);
    } else {
        for (int64_t i = 0; i < n_cand; i++)
            pick[i] = i;
        n_pick = n_cand;
    }
    double t_compile = now_s();
    srch_pool_opts po = {
        .arch = dev.arch, .jobs = (int)o.jobs, .timeout_s = o.timeout_s, .store_dir = o.store_dir};
    if (srch_pool_new(&po, &pool, &err) < 0) {
        rc = cli_error("%s", err.msg);
        goto out;
    }
    for (int64_t i = 0; i < n_pick; i++) {
        const srch_candidate *c = &cand[pick[i]];
        const ops_family *f = ops_family_get(c->schedule.family);
        ops_emitted e = {0};
        ops_diag ed = {0};
        char sched[256];
        ops_schedule_format(&c->schedule, sched, sizeof(sched));
        if (f->emit(&s->groups[c->group].group, &c->schedule, &dev, &e, &ed) < 0) {
            t.failed++;
            t.per_family[f->id][1]++;
            json_array_append_new(failures, json_pack("{s:s, s:s, s:s}", "schedule", sched,
                                                      "status", "emit_error", "message", ed.msg));
            continue;
        }
        if (o.emit_dir && e.source)
            write_text(o.emit_dir, i, f->name, ".cu", e.source);
        if (e.n_kernels == 0) {
            t.described++;
        } else if (srch_pool_submit(pool, e.source, (uint64_t)i) < 0) {
            ops_emitted_free(&e);
            rc = cli_error("out of memory queueing compiles");
            goto out;
        }
        ops_emitted_free(&e);
    }
    cli_progress bar;
    cli_progress_init(&bar, !a.json && !o.quiet);
    int64_t total = srch_pool_pending(pool), done = 0;
    for (;;) {
        srch_compile_result r = {0};
        int prc = srch_pool_next(pool, &r, &err);
        if (prc == -EAGAIN)
            break;
        if (prc < 0) {
            rc = cli_error("compile pool: %s", err.msg);
            goto out;
        }
        done++;
        const srch_candidate *c = &cand[pick[r.tag]];
        ops_family_id fam = c->schedule.family;
        if (r.status == SRCH_COMPILE_OK) {
            t.compiled++;
            t.per_family[fam][0]++;
            t.from_store += r.from_store;
            bool spills = false;
            for (int k = 0; k < r.n_kernels; k++) {
                spills |= r.kernels[k].spill_store_bytes || r.kernels[k].spill_load_bytes;
                if (r.kernels[k].registers > t.max_registers)
                    t.max_registers = r.kernels[k].registers;
            }
            t.spilled += spills;
            t.per_family[fam][2] += spills;
        } else {
            char sched[256], line[512];
            ops_schedule_format(&c->schedule, sched, sizeof(sched));
            first_line(r.log ? r.log : "", line, sizeof(line));
            t.failed++;
            t.per_family[fam][1]++;
            json_array_append_new(failures,
                                  json_pack("{s:s, s:s, s:s}", "schedule", sched, "status",
                                            srch_status_name(r.status), "message", line));
            if (o.emit_dir && r.log)
                write_text(o.emit_dir, (int64_t)r.tag, ops_family_get(fam)->name, ".log", r.log);
        }
        t.compile_seconds += r.seconds;
        srch_compile_result_release(&r);
        /* the time left estimated from the rate so far */
        double el = now_s() - t_compile;
        cli_progress_show(&bar, done == total, el, done ? el * (double)total / (double)done : 0,
                          "compiled %lld/%lld  failed %lld  spilled %lld", (long long)done,
                          (long long)total, (long long)t.failed, (long long)t.spilled);
    }
    cli_progress_end(&bar);
    double seconds = now_s() - t0, compile_wall = now_s() - t_compile;

    if (a.json) {
        json_t *fams = json_object();
        for (int f = 0; f < OPS_FAM_COUNT; f++)
            if (t.per_family[f][0] + t.per_family[f][1])
                json_object_set_new(fams, ops_family_get((ops_family_id)f)->name,
                                    json_pack("{s:I, s:I, s:I}", "compiled",
                                              (json_int_t)t.per_family[f][0], "failed",
                                              (json_int_t)t.per_family[f][1], "spilled",
                                              (json_int_t)t.per_family[f][2]));
        json_t *o_json = json_object();
        json_object_set_new(o_json, "graph", json_string(s->g->name));
        json_object_set_new(o_json, "arch", json_string(dev.arch));
        json_object_set_new(o_json, "space", json_integer(n_cand));
        json_object_set_new(o_json, "selected", json_integer(n_pick));
        json_object_set_new(o_json, "compiled", json_integer(t.compiled));
        json_object_set_new(o_json, "failed", json_integer(t.failed));
        json_object_set_new(o_json, "spilled", json_integer(t.spilled));
        json_object_set_new(o_json, "described", json_integer(t.described));
        json_object_set_new(o_json, "from_store", json_integer(t.from_store));
        json_object_set_new(o_json, "seconds", json_real(seconds));
        json_object_set_new(o_json, "space_seconds", json_real(seconds - compile_wall));
        json_object_set_new(o_json, "compile_wall_seconds", json_real(compile_wall));
        json_object_set_new(o_json, "compile_seconds", json_real(t.compile_seconds));
        json_object_set_new(o_json, "jobs",
                            json_integer(o.jobs ? o.jobs : sysconf(_SC_NPROCESSORS_ONLN)));
        json_object_set_new(o_json, "max_registers", json_integer(t.max_registers));
        json_object_set_new(o_json, "families", fams);
        json_object_set(o_json, "failures", failures);
        rc = cli_print_json(o_json);
    } else {
        printf("selected   %lld of %lld candidates (%s)\n", (long long)n_pick, (long long)n_cand,
               n_pick < n_cand ? "spread over every family" : "all");
        printf("compiled   %lld (%lld from the store) for %s in %.2f s (%.2f s building the "
               "space, %.2f s emitting and compiling; %.1f s of compiler time)\n",
               (long long)t.compiled, (long long)t.from_store, dev.arch, seconds,
               seconds - compile_wall, compile_wall, t.compile_seconds);
        printf("failed     %lld\n", (long long)t.failed);
        printf("spilled    %lld\n", (long long)t.spilled);
        printf("described  %lld (library candidates: no kernel)\n", (long long)t.described);
        for (int f = 0; f < OPS_FAM_COUNT; f++)
            if (t.per_family[f][0] + t.per_family[f][1])
                printf("  %-10s compiled %lld, failed %lld, spilled %lld\n",
                       ops_family_get((ops_family_id)f)->name, (long long)t.per_family[f][0],
                       (long long)t.per_family[f][1], (long long)t.per_family[f][2]);
        for (size_t i = 0; i < json_array_size(failures) && i < 10; i++) {
            json_t *x = json_array_get(failures, i);
            printf("  failed: %s: %s: %s\n", json_string_value(json_object_get(x, "schedule")),
                   json_string_value(json_object_get(x, "status")),
                   json_string_value(json_object_get(x, "message")));
        }
        rc = CLI_OK;
    }
    if (rc == CLI_OK && t.failed)
        rc = cli_error("%lld of %lld candidates failed to compile%s", (long long)t.failed,
                       (long long)n_pick, o.emit_dir ? " (logs in --emit dir)" : "");
out:
    json_decref(failures);
    srch_pool_free(pool);
    free(pick);
    free(cand);
    srch_space_free(s);
    ops_graph_free(bound);
    ops_graph_free(g);
    return rc;
}
