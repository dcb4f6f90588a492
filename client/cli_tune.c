/* ktune tune --local: runs the search (search/tune.h) in this process, with a ktune-worker child
 * on the GPU, and writes the winner to the cache. The daemon path (without --local) arrives with
 * ktuned. */
#include "cli.h"
#include "search/tune.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CACHE_DEFAULT_DIR "/var/lib/ktune/cache"

static const char tune_help[] =
    "usage: ktune tune GRAPH.json --shape NAME=VALUE ... --local [--budget 60s]\n"
    "                  [--precision exact|tf32|reduced] [--tolerance X] [--cache DIR]\n"
    "                  [--gpu N] [--worker PATH] [--jobs N] [--json]\n"
    "\n"
    "Tunes the graph at the given shapes on one GPU: enumerates candidate kernels, compiles them\n"
    "with NVRTC, verifies each against the fp64 reference and times the survivors in a\n"
    "ktune-worker process, and stores the fastest verified kernel (with runner-ups) in the\n"
    "cache. Every trial is logged: running the same job again resumes and re-measures nothing.\n"
    "\n"
    "options:\n"
    "  --local          run the search in this process (required until ktuned exists)\n"
    "  --budget T       wall-clock budget: 90, 90s, 2m (default 60s)\n"
    "  --precision P    exact (default), tf32 or reduced\n"
    "  --tolerance X    normwise error bound (default: per dtype and precision, MEASURE.md)\n"
    "  --cache DIR      the cache (default: $KTUNE_CACHE, else " CACHE_DEFAULT_DIR ");\n"
    "                   compiled cubins are kept in DIR/cubins\n"
    "  --gpu N          the GPU to use (CUDA_VISIBLE_DEVICES of the worker; default 0)\n"
    "  --worker PATH    the ktune-worker executable (default: $KTUNE_WORKER, else next to\n"
    "                   ktune, ../search/ (build tree) or ../libexec/ (installed))\n"
    "  --jobs N         compile processes (default: one per CPU)\n"
    "  --json           one JSON object: winner, baseline_ns, speedup, trials, failures, ...\n"
    "  -h, --help       show this help\n"
    "\n"
    "Exits 1 when no candidate verified, or on any failure (the reason on stderr).\n";

typedef struct tune_args {
    bool local;
    double budget_s, tolerance;
    long gpu, jobs;
    const char *cache_dir, *worker;
} tune_args;

/* "90", "90s", "1.5m", "2h" -> seconds; -1 when malformed. */
static double parse_duration(const char *s)
{
    char *end = NULL;
    double v = strtod(s, &end);
    if (end == s || !(v > 0) || !isfinite(v))
        return -1;
    if (*end == '\0' || strcmp(end, "s") == 0)
        return v;
    if (strcmp(end, "m") == 0 || strcmp(end, "min") == 0)
        return v * 60;
    if (strcmp(end, "h") == 0)
        return v * 3600;
    return -1;
}

static int tune_extra(void *ctx, const char *opt, const char *value)
{
    tune_args *a = ctx;
    if (strcmp(opt, "--local") == 0) {
        a->local = true;
        return 1;
    }
    static const char *const valued[] = {"--budget", "--tolerance", "--cache",
                                         "--gpu",    "--worker",    "--jobs"};
    bool known = false;
    for (size_t i = 0; i < KT_ARRAY_LEN(valued); i++)
        known |= strcmp(opt, valued[i]) == 0;
    if (!known)
        return 0;
    if (!value) {
        cli_usage_error("tune", "%s needs a value", opt);
        return -CLI_USAGE;
    }
    if (strcmp(opt, "--budget") == 0) {
        if ((a->budget_s = parse_duration(value)) <= 0) {
            cli_usage_error("tune", "--budget takes a duration like 60s or 2m, not '%s'", value);
            return -CLI_USAGE;
        }
    } else if (strcmp(opt, "--tolerance") == 0) {
        char *end = NULL;
        a->tolerance = strtod(value, &end);
        if (end == value || *end || !(a->tolerance > 0) || !isfinite(a->tolerance)) {
            cli_usage_error("tune", "--tolerance takes a positive number, not '%s'", value);
            return -CLI_USAGE;
        }
    } else if (strcmp(opt, "--cache") == 0) {
        a->cache_dir = value;
    } else if (strcmp(opt, "--worker") == 0) {
        a->worker = value;
    } else if (strcmp(opt, "--gpu") == 0) {
        char *end = NULL;
        a->gpu = strtol(value, &end, 10);
        if (end == value || *end || a->gpu < 0) {
            cli_usage_error("tune", "--gpu takes a device number, not '%s'", value);
            return -CLI_USAGE;
        }
    } else {
        if ((a->jobs = cli_parse_count("tune", opt, value)) < 0)
            return -CLI_USAGE;
    }
    return 2;
}

static void fmt_ns(double ns, char *buf, size_t len)
{
    if (ns <= 0)
        snprintf(buf, len, "-");
    else if (ns < 1e3)
        snprintf(buf, len, "%.0f ns", ns);
    else if (ns < 1e6)
        snprintf(buf, len, "%.2f us", ns / 1e3);
    else
        snprintf(buf, len, "%.3f ms", ns / 1e6);
}

typedef struct progress_ctx {
    bool tty;
    bool drawn;
} progress_ctx;

/* One status line, redrawn in place: phase, trials, failures by class, best, speed-up. */
static void on_progress(const srch_tune_progress *p, void *ctx)
{
    progress_ctx *pc = ctx;
    if (!pc->tty)
        return;
    char best[32], base[32], fails[160] = "";
    fmt_ns(p->best_ns, best, sizeof(best));
    fmt_ns(p->baseline_ns, base, sizeof(base));
    size_t off = 0;
    for (int s = 1; s < SRCH_STATUS_COUNT && off < sizeof(fails); s++)
        if (p->failures[s])
            off += (size_t)snprintf(fails + off, sizeof(fails) - off, " %s %d",
                                    srch_status_str((srch_status)s), p->failures[s]);
    fprintf(stderr, "\r\033[K[%5.1fs] %-6s trials %d (%d measured, %d from log)%s%s  best %s",
            p->elapsed_s, p->phase ? p->phase : "", p->trials, p->measured, p->resumed,
            fails[0] ? "  failed:" : "", fails, best);
    if (p->baseline_ns > 0 && p->best_ns > 0)
        fprintf(stderr, "  cuBLASLt %s (%.2fx)", base, p->baseline_ns / p->best_ns);
    fflush(stderr);
    pc->drawn = true;
}

static json_t *result_json(const cli_graph_args *ga, const srch_tune_result *r)
{
    json_t *o = json_object();
    char sig[2 * OPS_SIG_BYTES + 1];
    kt_hex(r->sig, OPS_SIG_BYTES, sig);
    json_object_set_new(o, "graph", json_string(ga->path));
    json_object_set_new(o, "signature", json_string(sig));
    json_object_set_new(o, "gpu", json_string(r->gpu.name));
    json_object_set_new(o, "precision", json_string(ops_precision_name(ga->precision)));
    if (r->found) {
        json_t *groups = json_array();
        for (int k = 0; k < r->n_picks; k++) {
            const srch_tune_pick *p = &r->picks[k];
            json_t *gj =
                json_pack("{s:s, s:s, s:s, s:f, s:f, s:f, s:i, s:b, s:f, s:f, s:f}", "nodes",
                          p->nodes, "family", ops_family_get(p->family)->name, "schedule",
                          p->schedule, "time_ns", p->time.median_ns, "p10_ns", p->time.p10_ns,
                          "p90_ns", p->time.p90_ns, "reps", p->time.reps, "retimed", p->retimed,
                          "err", p->err_norm, "err_max", p->err_max, "baseline_ns", p->baseline_ns);
            /* The best generated kernel, to compare with cuBLASLt even when a library call won. */
            if (gj && p->own_ns > 0) {
                json_object_set_new(gj, "own_ns", json_real(p->own_ns));
                json_object_set_new(gj, "own_schedule", json_string(p->own_schedule));
            }
            json_array_append_new(groups, gj);
        }
        const srch_tune_pick *p0 = &r->picks[0];
        json_t *w = json_pack("{s:s, s:s, s:f, s:f, s:f, s:f, s:i}", "family",
                              r->n_picks == 1 ? ops_family_get(p0->family)->name : "partition",
                              "schedule", r->n_picks == 1 ? p0->schedule : "(see groups)",
                              "time_ns", r->time_ns, "p10_ns", r->p10_ns, "p90_ns", r->p90_ns,
                              "err", r->err_norm, "kernels", r->n_picks);
        json_object_set_new(w, "groups", groups);
        json_object_set_new(o, "winner", w);
    } else {
        json_object_set_new(o, "winner", json_null());
    }
    json_object_set_new(o, "baseline_ns",
                        r->baseline_ns > 0 ? json_real(r->baseline_ns) : json_null());
    json_object_set_new(o, "speedup", r->speedup > 0 ? json_real(r->speedup) : json_null());
    json_object_set_new(o, "trials", json_integer(r->trials));
    json_object_set_new(o, "measured", json_integer(r->measured));
    json_object_set_new(o, "resumed", json_integer(r->resumed));
    json_object_set_new(o, "worker_restarts", json_integer(r->restarts));
    json_t *f = json_object(), *ex = json_object();
    for (int s = 1; s < SRCH_STATUS_COUNT; s++)
        if (r->failures[s]) {
            json_object_set_new(f, srch_status_str((srch_status)s), json_integer(r->failures[s]));
            json_object_set_new(ex, srch_status_str((srch_status)s),
                                json_string(r->failure_example[s]));
        }
    json_object_set_new(o, "failures", f);
    json_object_set_new(o, "failure_examples", ex);
    json_object_set_new(o, "budget_hit", json_boolean(r->budget_hit));
    json_object_set_new(o, "cache_rank", json_integer(r->rank));
    json_object_set_new(o, "records", json_integer(r->records));
    if (r->record_note[0])
        json_object_set_new(o, "record_note", json_string(r->record_note));
    json_object_set_new(o, "seconds", json_real(r->seconds));
    return o;
}

static void print_table(const srch_tune_result *r)
{
    char t[32], p10[32], p90[32], base[32];
    printf("gpu        %s\n", r->gpu.name);
    printf("trials     %d (%d measured, %d from the trial log), %d worker restarts, %.1f s%s\n",
           r->trials, r->measured, r->resumed, r->restarts, r->seconds,
           r->budget_hit ? " (budget spent)" : "");
    if (r->found) {
        fmt_ns(r->time_ns, t, sizeof(t));
        fmt_ns(r->p10_ns, p10, sizeof(p10));
        fmt_ns(r->p90_ns, p90, sizeof(p90));
        printf("winner     %s (p10 %s, p90 %s), %d kernel%s, error %.2e\n", t, p10, p90, r->n_picks,
               r->n_picks == 1 ? "" : "s", r->err_norm);
        if (r->baseline_ns > 0) {
            fmt_ns(r->baseline_ns, base, sizeof(base));
            printf("baseline   cuBLASLt %s: speed-up %.2fx\n", base, r->speedup);
        }
        printf("\n%-10s %-52s %10s %10s %10s %10s %9s\n", "family", "schedule", "time", "p10",
               "p90", "cuBLASLt", "error");
        for (int k = 0; k < r->n_picks; k++) {
            const srch_tune_pick *p = &r->picks[k];
            fmt_ns(p->time.median_ns, t, sizeof(t));
            fmt_ns(p->time.p10_ns, p10, sizeof(p10));
            fmt_ns(p->time.p90_ns, p90, sizeof(p90));
            fmt_ns(p->baseline_ns, base, sizeof(base));
            const char *sched = p->schedule;
            const char *sp = strchr(sched, ' '); /* the family is its own column */
            printf("%-10s %-52s %10s %10s %10s %10s %9.2e\n", ops_family_get(p->family)->name,
                   sp ? sp + 1 : sched, t, p10, p90, base, p->err_norm);
            printf("           %s\n", p->nodes);
        }
    } else {
        printf("winner     none: no candidate verified\n");
    }
    bool header = false;
    for (int s = 1; s < SRCH_STATUS_COUNT; s++) {
        if (!r->failures[s])
            continue;
        if (!header)
            printf("\nrejected\n");
        header = true;
        printf("  %-14s %5d  e.g. %s\n", srch_status_str((srch_status)s), r->failures[s],
               r->failure_example[s]);
    }
    if (r->rank >= 0)
        printf("\ncached     rank %d, %d record%s written\n", r->rank, r->records,
               r->records == 1 ? "" : "s");
    else if (r->record_note[0])
        printf("\ncached     no record: %s\n", r->record_note);
}

int cli_tune(int argc, char **argv)
{
    tune_args ta = {.budget_s = 60};
    cli_graph_args a = {.sub = "tune", .help = tune_help};
    int rc = cli_parse_graph_args(argc, argv, &a, tune_extra, &ta);
    if (rc != CLI_OK)
        return rc;
    if (!ta.local)
        return cli_usage_error("tune", "tuning through ktuned is not available yet: pass --local");
    if (!ta.cache_dir)
        ta.cache_dir = getenv("KTUNE_CACHE") && getenv("KTUNE_CACHE")[0] ? getenv("KTUNE_CACHE")
                                                                         : CACHE_DEFAULT_DIR;
    ops_graph *g = NULL, *bound = NULL;
    if ((rc = cli_load_graph(&a, &g, &bound)) != CLI_OK)
        return rc;
    cache_env *cache = NULL;
    kt_err err = {0};
    char store[4096];
    snprintf(store, sizeof(store), "%s/cubins", ta.cache_dir);
    if (cache_open(ta.cache_dir, 0, NULL, &cache, &err) < 0) {
        rc = cli_error("cache %s: %s", ta.cache_dir, err.msg);
        goto out;
    }
    progress_ctx pc = {.tty = !a.json && isatty(2)};
    srch_tune_opts o = {
        .precision = a.precision,
        .tolerance = ta.tolerance,
        .budget_s = ta.budget_s,
        .worker_exe = ta.worker,
        .gpu = (int)ta.gpu,
        .compile_jobs = (int)ta.jobs,
        .store_dir = store,
        .progress = on_progress,
        .progress_ctx = &pc,
    };
    srch_tune_result r;
    int trc = srch_tune(g, a.bindings, a.n_bindings, cache, &o, &r, &err);
    if (pc.drawn)
        fputc('\n', stderr);
    if (trc < 0) {
        rc = trc == -ENODEV ? cli_error("no GPU: %s", err.msg) : cli_error("%s", err.msg);
        goto out;
    }
    if (a.json)
        rc = cli_print_json(result_json(&a, &r));
    else
        print_table(&r);
    if (rc == CLI_OK && !r.found)
        rc = cli_error("no candidate verified in %d trials (see the rejected classes)", r.trials);
out:
    cache_close(cache);
    ops_graph_free(bound);
    ops_graph_free(g);
    return rc;
}
