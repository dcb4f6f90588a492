/* ktune tune: submits a tuning job to ktuned (the default) and, with --wait, follows it to its
 * result; or, with --local, runs the search (search/tune.h) in this process, with a ktune-worker
 * child on the GPU, and writes the winner to the cache. */
#include "cli.h"
#include "client/libktune_internal.h"
#include "ktune_config.h"
#if KTUNE_HAVE_NVRTC
#include "search/tune.h"
#endif

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CACHE_DEFAULT_DIR "/var/lib/ktune/cache"

static const char tune_help[] =
    "usage: ktune tune GRAPH.json --shape NAME=VALUE ... [--budget 60s] [--precision P]\n"
    "                  [--tolerance X] [--priority N] [--gpu I] [--name NAME] [--wait]\n"
    "                  [--retune | --remeasure] [--socket PATH] [--quiet] [--json]\n"
    "       ktune tune GRAPH.json --shape NAME=VALUE ... --local [--budget 60s]\n"
    "                  [--precision P] [--tolerance X] [--cache DIR] [--gpu N] [--worker PATH]\n"
    "                  [--jobs N] [--only PATTERN] [--remeasure] [--quiet] [--json]\n"
    "\n"
    "Tunes the graph at the given shapes on one GPU: enumerates candidate kernels, compiles them\n"
    "with NVRTC, verifies each against the fp64 reference and times the survivors in a\n"
    "ktune-worker process, and stores the fastest verified kernel (with runner-ups) in the\n"
    "cache. Every trial is logged: running the same job again resumes and re-measures nothing.\n"
    "\n"
    "By default the job goes to ktuned, which queues it and runs it on one of its GPUs; ktune\n"
    "prints the job id (or the id of the identical job it joined) and, with --wait, follows it\n"
    "and prints the result. With --local the search runs in this process instead.\n"
    "\n"
    "options:\n"
    "  --budget T       wall-clock budget: 90, 90s, 2m, 1.5h (default 60s); a decimal\n"
    "                   number of at least 1 ms (through ktuned 1s to 24h)\n"
    "  --precision P    exact (default), tf32 or reduced\n"
    "  --tolerance X    normwise error bound (default: per dtype and precision, "
    "docs/evaluation.md)\n"
    "  --remeasure      measure again the candidates the trial log holds from before (a\n"
    "                   changed machine, driver or clocks); through ktuned, a --retune that\n"
    "                   does so\n"
    "  --gpu N          the GPU to use (through ktuned: its GPU index, default any; with\n"
    "                   --local: CUDA_VISIBLE_DEVICES of the worker, default 0)\n"
    "  --quiet          no progress line on stderr (it shows elapsed time, the budget's time\n"
    "                   left, phase, trials, best so far against cuBLASLt)\n"
    "  --json           one JSON object (through ktuned: the job, with floor_ns and\n"
    "                   roofline_fraction; with --local: winner, baseline_ns, speedup,\n"
    "                   roofline, trials, failures, ...)\n"
    "  -h, --help       show this help\n"
    "through ktuned:\n"
    "  --priority N     -100..100, higher runs first (default 0)\n"
    "  --name NAME      the job's name (default: the graph's)\n"
    "  --retune         a new job even when an identical one is done (by default the\n"
    "                   submission joins it): with more --budget, or after a ktune upgrade\n"
    "                   brought new candidates; only candidates not in the trial log are\n"
    "                   measured (an identical queued or running job is still joined)\n"
    "  --wait           follow the job (progress on stderr) and print its result; Ctrl-C\n"
    "                   stops following, not the job (`ktune cancel JOB` stops it)\n"
    "  --socket PATH    ktuned's socket (default: $KTUNE_SOCKET, else /run/ktune/ktuned.sock)\n"
    "in this process:\n"
    "  --local          run the search here, without ktuned\n"
    "  --cache DIR      the cache (default: $KTUNE_CACHE, else " CACHE_DEFAULT_DIR ");\n"
    "                   compiled cubins are kept in DIR/cubins\n"
    "  --worker PATH    the ktune-worker executable (default: $KTUNE_WORKER, else next to\n"
    "                   ktune, ../search/ (build tree) or ../libexec/ (installed))\n"
    "  --jobs N         compile processes (default: one per CPU)\n"
    "  --only PATTERN   an ablation: try only the schedules holding every '&'-separated part\n"
    "                   (\"splitk_mode=stream&bm=128 \"; `ktune space --list` prints them); the\n"
    "                   record written is the best of those\n"
    "\n"
    "Exits 1 when no candidate verified (with --local or --wait), or on any failure (the reason\n"
    "on stderr); 2 on a usage error.\n";

typedef struct tune_args {
    bool local, wait, quiet, retune, remeasure;
    double budget_s, tolerance;
    long gpu, jobs, priority;
    const char *cache_dir, *worker, *socket, *name, *only;
    const char *local_only, *daemon_only; /* an option given that needs --local / ktuned */
} tune_args;

/* The options of tune that take a value. */
static const char *const tune_valued[] = {"--budget", "--tolerance", "--cache",    "--gpu",
                                          "--worker", "--jobs",      "--priority", "--socket",
                                          "--name",   "--only"};

static int tune_extra(void *ctx, const char *arg, const char *value)
{
    tune_args *a = ctx;
    const char *opt = arg; /* "--opt=value" arrives split (client/ktune.c) */
    if (strcmp(opt, "--local") == 0) {
        a->local = true;
        return 1;
    }
    if (strcmp(opt, "--wait") == 0) {
        a->wait = true;
        return 1;
    }
    if (strcmp(opt, "--quiet") == 0) {
        a->quiet = true;
        return 1;
    }
    if (strcmp(opt, "--retune") == 0) {
        a->retune = true;
        a->daemon_only = "--retune"; /* --local tunes every time anyway */
        return 1;
    }
    if (strcmp(opt, "--remeasure") == 0) {
        a->remeasure = true;
        return 1;
    }
    bool known = false;
    for (size_t i = 0; i < KT_ARRAY_LEN(tune_valued); i++)
        if (strcmp(opt, tune_valued[i]) == 0) {
            known = true;
            opt = tune_valued[i]; /* static storage: local_only/daemon_only keep it */
        }
    if (!known)
        return 0;
    if (!value) {
        cli_usage_error("tune", "%s needs a value", opt);
        return -CLI_USAGE;
    }
    if (strcmp(opt, "--cache") == 0 || strcmp(opt, "--worker") == 0 || strcmp(opt, "--jobs") == 0 ||
        strcmp(opt, "--only") == 0)
        a->local_only = opt;
    if (strcmp(opt, "--priority") == 0 || strcmp(opt, "--name") == 0)
        a->daemon_only = opt; /* --socket is harmless with --local: ignored */
    if (strcmp(opt, "--budget") == 0) {
        if ((a->budget_s = cli_parse_duration(value)) <= 0) {
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
    } else if (strcmp(opt, "--only") == 0) {
        if (!value[0]) {
            cli_usage_error("tune", "--only takes a pattern like 'splitk_mode=stream&bm=128 '");
            return -CLI_USAGE;
        }
        a->only = value;
    } else if (strcmp(opt, "--socket") == 0) {
        a->socket = value;
    } else if (strcmp(opt, "--name") == 0) {
        if (!value[0] || strlen(value) > 63) {
            cli_usage_error("tune", "--name takes 1 to 63 bytes");
            return -CLI_USAGE;
        }
        a->name = value;
    } else if (strcmp(opt, "--priority") == 0) {
        char *end = NULL;
        a->priority = strtol(value, &end, 10);
        if (end == value || *end || a->priority < -100 || a->priority > 100) {
            cli_usage_error("tune", "--priority takes an integer in -100..100, not '%s'", value);
            return -CLI_USAGE;
        }
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

#if KTUNE_HAVE_NVRTC
typedef struct progress_ctx {
    cli_progress line;
    double budget_s;
    const char *phase; /* the last one shown */
} progress_ctx;

/* The progress line: phase, trials, failures by class, best, speed-up. */
static void on_progress(const srch_tune_progress *p, void *ctx)
{
    progress_ctx *pc = ctx;
    char best[32], base[32], fails[160] = "", speedup[64] = "";
    cli_fmt_ns(p->best_ns, best, sizeof(best));
    cli_fmt_ns(p->baseline_ns, base, sizeof(base));
    size_t off = 0;
    for (int s = 1; s < SRCH_STATUS_COUNT && off < sizeof(fails); s++)
        if (p->failures[s])
            off += (size_t)snprintf(fails + off, sizeof(fails) - off, " %s %d",
                                    srch_status_str((srch_status)s), p->failures[s]);
    if (p->baseline_ns > 0 && p->best_ns > 0)
        snprintf(speedup, sizeof(speedup), "  cuBLASLt %s (%.2fx)", base,
                 p->baseline_ns / p->best_ns);
    bool changed = p->phase != pc->phase;
    pc->phase = p->phase;
    cli_progress_show(&pc->line, changed, p->elapsed_s, pc->budget_s,
                      "%-6s trials %d (%d measured, %d from log)%s%s  best %s%s",
                      p->phase ? p->phase : "", p->trials, p->measured, p->resumed,
                      fails[0] ? "  failed:" : "", fails, best, speedup);
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
                json_object_set_new(gj, "own_retimed", json_boolean(p->own_retimed));
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
    json_object_set_new(o, "roofline",
                        r->roofline.floor_ns > 0
                            ? cli_roofline_json(r->found ? r->time_ns : 0, &r->roofline)
                            : json_null());
    json_object_set_new(o, "trials", json_integer(r->trials));
    json_object_set_new(o, "measured", json_integer(r->measured));
    json_object_set_new(o, "resumed", json_integer(r->resumed));
    json_object_set_new(o, "worker_restarts", json_integer(r->restarts));
    json_object_set_new(o, "finalists_reloaded", json_integer(r->reloads));
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
    /* Records are evaluated as assembled before they are stored (docs/evaluation.md). */
    json_object_set_new(o, "assembled",
                        json_pack("{s:i, s:i, s:i}", "evaluated", r->assembled, "resumed",
                                  r->assembled_resumed, "failed", r->assembled_failed));
    if (r->record_fallback[0])
        json_object_set_new(o, "record_fallback", json_string(r->record_fallback));
    json_object_set_new(o, "seconds", json_real(r->seconds));
    json_object_set_new(o, "compile_s", json_real(r->compile_s));
    json_object_set_new(o, "measure_s", json_real(r->measure_s));
    return o;
}

static void print_table(const srch_tune_result *r)
{
    char t[32], p10[32], p90[32], base[32];
    printf("gpu        %s\n", r->gpu.name);
    printf("trials     %d (%d measured, %d from the trial log), %d worker restarts, %.1f s%s\n",
           r->trials, r->measured, r->resumed, r->restarts, r->seconds,
           r->budget_hit ? " (budget spent)" : "");
    printf("cost       compile %.1f s (NVRTC, summed over the pool), measure %.1f s\n",
           r->compile_s, r->measure_s);
    if (r->found) {
        cli_fmt_ns(r->time_ns, t, sizeof(t));
        cli_fmt_ns(r->p10_ns, p10, sizeof(p10));
        cli_fmt_ns(r->p90_ns, p90, sizeof(p90));
        printf("winner     %s (p10 %s, p90 %s), %d kernel%s, error %.2e\n", t, p10, p90, r->n_picks,
               r->n_picks == 1 ? "" : "s", r->err_norm);
        if (r->baseline_ns > 0) {
            cli_fmt_ns(r->baseline_ns, base, sizeof(base));
            printf("baseline   cuBLASLt %s: speed-up %.2fx\n", base, r->speedup);
        }
        if (r->roofline.floor_ns > 0) {
            char line[256];
            cli_roofline_text(r->time_ns, &r->roofline, line, sizeof(line));
            printf("roofline   %s\n", line);
        }
        printf("\n%-10s %-52s %10s %10s %10s %10s %9s\n", "family", "schedule", "time", "p10",
               "p90", "cuBLASLt", "error");
        for (int k = 0; k < r->n_picks; k++) {
            const srch_tune_pick *p = &r->picks[k];
            cli_fmt_ns(p->time.median_ns, t, sizeof(t));
            cli_fmt_ns(p->time.p10_ns, p10, sizeof(p10));
            cli_fmt_ns(p->time.p90_ns, p90, sizeof(p90));
            cli_fmt_ns(p->baseline_ns, base, sizeof(base));
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
    if (r->record_fallback[0])
        printf("           %s\n", r->record_fallback);
}

/* The search in this process (unchanged from before ktuned existed). */
static int tune_local(cli_graph_args *pa, tune_args *pta)
{
    cli_graph_args a = *pa;
    tune_args ta = *pta;
    int rc;
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
        rc = cli_error("%s", err.msg); /* cache_open names the directory */
        goto out;
    }
    progress_ctx pc = {.budget_s = ta.budget_s > 0 ? ta.budget_s : SRCH_DEFAULT_BUDGET_S};
    cli_progress_init(&pc.line, !a.json && !ta.quiet);
    srch_tune_opts o = {
        .precision = a.precision,
        .tolerance = ta.tolerance,
        .budget_s = ta.budget_s,
        .worker_exe = ta.worker,
        .gpu = ta.gpu < 0 ? 0 : (int)ta.gpu,
        .compile_jobs = (int)ta.jobs,
        .store_dir = store,
        .only = ta.only,
        .trials_since_ms = ta.remeasure ? kt_wall_ms() : 0,
        .progress = on_progress,
        .progress_ctx = &pc,
    };
    srch_tune_result r;
    int trc = srch_tune(g, a.bindings, a.n_bindings, cache, &o, &r, &err);
    cli_progress_end(&pc.line);
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
#endif /* KTUNE_HAVE_NVRTC */

/* Checks every symbolic dimension is bound and wraps the graph for libktune. */
static int load_for_daemon(const cli_graph_args *a, ktune_graph **out)
{
    ops_graph *g = NULL, *bound = NULL;
    int rc = cli_load_graph(a, &g, &bound);
    if (rc != CLI_OK)
        return rc;
    const char *unbound = ops_graph_first_unbound(bound);
    if (unbound) {
        rc = cli_usage_error(a->sub, "%s: dimension '%s' needs a value (--shape %s=...)", a->path,
                             unbound, unbound);
        ops_graph_free(bound);
        ops_graph_free(g);
        return rc;
    }
    ops_graph_free(bound);
    ktune_error err;
    if (ktune_graph_wrap(g, a->path, out, &err) < 0)
        return cli_error("%s", err.msg);
    return CLI_OK;
}

/* Submits the job to ktuned; with --wait follows it to its end. */
static int tune_daemon(const cli_graph_args *a, const tune_args *ta)
{
    if (ta->local_only)
        return cli_usage_error("tune", "%s only applies with --local", ta->local_only);
    if (ta->budget_s < 1 || ta->budget_s > 86400) /* what ktuned accepts (docs/protocol.md) */
        return cli_usage_error("tune", "--budget through ktuned is at least 1s and at most 24h");
    ktune_graph *g = NULL;
    ktune_client *c = NULL;
    int rc = load_for_daemon(a, &g);
    if (rc != CLI_OK)
        return rc;
    if ((rc = cli_connect(ta->socket, &c)) != CLI_OK)
        goto out;
    ktune_shape shapes[CLI_MAX_BINDINGS];
    for (int i = 0; i < a->n_bindings; i++)
        shapes[i] = (ktune_shape){a->bindings[i].name, a->bindings[i].value};
    ktune_submit_opts o = KTUNE_SUBMIT_OPTS_INIT;
    o.precision = ops_precision_name(a->precision);
    o.budget_s = ta->budget_s;
    o.tolerance = ta->tolerance;
    o.priority = (int)ta->priority;
    o.gpu = (int)ta->gpu;
    o.name = ta->name;
    ktune_job j;
    bool joined = false;
    ktune_error err;
    unsigned flags = (ta->retune ? KTUNE_SUBMIT_RETUNE : 0) | (ta->remeasure ? KTUNE_SUBMIT_REMEASURE : 0);
    if (ktune_submit2(c, g, shapes, a->n_bindings, &o, flags, &j, &joined, &err) < 0) {
        rc = cli_client_error(NULL, &err);
        goto out;
    }
    if (!ta->wait) {
        if (a->json) {
            json_t *v = cli_job_json(&j);
            if (v)
                json_object_set_new(v, "joined", json_boolean(joined));
            rc = cli_print_json(v);
        } else if (joined) {
            printf("joined job %" PRIu64 " (%s)\n", j.id, ktune_job_state_name(j.state));
        } else {
            printf("job %" PRIu64 " submitted (%s)\n", j.id, ktune_job_state_name(j.state));
        }
        goto out;
    }
    if (!a->json)
        fprintf(stderr, "%s %" PRIu64 "\n", joined ? "joined job" : "job", j.id);
    if ((rc = cli_follow_job(c, j.id, !a->json && !ta->quiet, &j)) != CLI_OK)
        goto out;
    if (a->json) {
        json_t *v = cli_job_json(&j);
        if (v)
            json_object_set_new(v, "joined", json_boolean(joined));
        rc = cli_print_json(v);
    } else {
        cli_print_job_result(&j);
    }
    if (rc == CLI_OK)
        rc = cli_job_exit(&j);
out:
    ktune_disconnect(c);
    ktune_graph_free(g);
    return rc;
}

int cli_tune(int argc, char **argv)
{
    tune_args ta = {.budget_s = 60, .gpu = -1};
    cli_graph_args a = {.sub = "tune", .help = tune_help};
    int rc = cli_parse_graph_args(argc, argv, &a, tune_extra, &ta);
    if (rc != CLI_OK)
        return rc;
    if (!ta.local)
        return tune_daemon(&a, &ta);
    if (ta.daemon_only)
        return cli_usage_error("tune", "%s only applies through ktuned (not with --local)",
                               ta.daemon_only);
#if KTUNE_HAVE_NVRTC
    return tune_local(&a, &ta);
#else
    return cli_error("this ktune was built without NVRTC: --local is not available (tune "
                     "through ktuned instead)");
#endif
}
