/* ktune lookup: the cached kernel a deployed program would get for a graph and shapes, read from
 * the cache directly (no daemon); and ktune trials, the trial log under the same key. With a GPU it
 * resolves exactly as ktune_lookup does (this GPU's fingerprint, then a compatible GPU's record)
 * without loading anything; with none it lists the records of every GPU for that graph, shapes and
 * precision. */
#include "cli.h"
#include "cli_trials.h"

#include "cache/cache.h"
#include "client/ktune.h"
#include "client/libktune_internal.h"
#include "client/runtime_internal.h"
#include "ops/ops.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char lookup_help[] =
    "usage: ktune lookup GRAPH.json --shape NAME=VALUE[,...] [--precision P] [--tolerance X]\n"
    "                    [--cache DIR] [--source] [--json]\n"
    "\n"
    "Shows the cached kernel that ktune_lookup (the deploy-time runtime) would load for GRAPH at\n"
    "these shapes on this machine's GPU 0: a record tuned on this GPU, driver and toolkit (match\n"
    "\"exact\"), else the fastest record of the same GPU model tuned under another driver or\n"
    "toolkit (match \"compatible\"). Reads the cache directly; no daemon is needed. Without a\n"
    "GPU it lists the records of every GPU in the cache for that graph, shapes and precision.\n"
    "Each record shows its roofline: the time no kernel can beat on its GPU (the graph's bytes\n"
    "at the measured copy bandwidth, or its FLOPs at the peak its precision allows) and the\n"
    "record's fraction of it (docs/search.md, \"Roofline\"; --json: \"roofline\").\n"
    "\n"
    "options:\n"
    "  --shape NAME=VALUE  bind a symbolic dimension (repeat or separate with commas)\n"
    "  --precision P       exact (default), tf32 or reduced\n"
    "  --tolerance X       records verified within this normwise tolerance (a job's --tolerance);\n"
    "                      default: those verified within the default of the dtype and precision\n"
    "  --cache DIR         the cache directory (default: $KTUNE_CACHE, else /var/lib/ktune/cache)\n"
    "  --source            also print the chosen record's CUDA source (without a GPU: the\n"
    "                      fastest listed record's)\n"
    "  --json              machine-readable output\n"
    "  -h, --help          show this help\n"
    "\n"
    "Exit status: 0 a record was found, 1 nothing cached for that key (or an error), 2 usage.\n";

typedef struct lookup_opts {
    const char *cache;
    bool source;
    double tolerance; /* 0: the default */
} lookup_opts;

static int lookup_extra(void *ctx, const char *opt, const char *value)
{
    lookup_opts *o = ctx;
    if (strcmp(opt, "--cache") == 0) {
        if (!value)
            return -cli_usage_error("lookup", "--cache needs a directory");
        o->cache = value;
        return 2;
    }
    if (strcmp(opt, "--source") == 0) {
        o->source = true;
        return 1;
    }
    if (strcmp(opt, "--tolerance") == 0) {
        char *end = NULL;
        o->tolerance = value ? strtod(value, &end) : -1;
        if (!value || end == value || *end || !(o->tolerance > 0) || isinf(o->tolerance))
            return -cli_usage_error("lookup", "--tolerance needs a positive number, got '%s'",
                                    value ? value : "");
        return 2;
    }
    return 0;
}

static void fmt_time(double ns, char *buf, size_t cap)
{
    if (ns <= 0)
        snprintf(buf, cap, "-");
    else if (ns < 1e3)
        snprintf(buf, cap, "%.0f ns", ns);
    else if (ns < 1e6)
        snprintf(buf, cap, "%.2f us", ns / 1e3);
    else
        snprintf(buf, cap, "%.3f ms", ns / 1e6);
}

static void fmt_version(int v, char *buf, size_t cap)
{
    if (v <= 0)
        snprintf(buf, cap, "?");
    else
        snprintf(buf, cap, "%d.%d", v / 1000, v % 1000 / 10);
}

static json_t *gpu_json(const cache_gpu *g)
{
    char sm[16];
    snprintf(sm, sizeof(sm), "%d.%d", g->sm_major, g->sm_minor);
    return json_pack("{s:s, s:s, s:i, s:I, s:i, s:i}", "name", g->name, "sm", sm, "sm_count",
                     g->sm_count, "memory_bytes", (json_int_t)g->mem_bytes, "driver_version",
                     g->driver_version, "cuda_version", g->cuda_version);
}

/* The record as JSON; with bound, its roofline on the record's GPU (docs/search.md,
 * "Roofline"), null for a GPU not in the device table. */
static json_t *record_json(const cache_record *r, bool with_source, const ops_graph *bound)
{
    json_t *kernels = json_array();
    for (int i = 0; kernels && i < r->n_kernels; i++) {
        const cache_kernel *k = &r->kernels[i];
        json_array_append_new(
            kernels, json_pack("{s:s, s:[I,I,I], s:[I,I,I], s:I, s:I, s:I}", "entry", k->entry,
                               "grid", (json_int_t)k->grid[0], (json_int_t)k->grid[1],
                               (json_int_t)k->grid[2], "block", (json_int_t)k->block[0],
                               (json_int_t)k->block[1], (json_int_t)k->block[2], "smem_bytes",
                               (json_int_t)k->smem_bytes, "zero_offset", (json_int_t)k->zero_offset,
                               "zero_bytes", (json_int_t)k->zero_bytes));
    }
    json_t *o =
        json_pack("{s:o*, s:s, s:s, s:f, s:f, s:f, s:f, s:f, s:f, s:I, s:o*, s:s, s:I}", "gpu",
                  gpu_json(&r->key.gpu), "family", r->family ? r->family : "", "schedule",
                  r->schedule ? r->schedule : "", "time_ns", r->time_ns, "p10_ns", r->time_p10_ns,
                  "p90_ns", r->time_p90_ns, "err_norm", r->err_norm, "tolerance", r->tolerance,
                  "cublaslt_ns", r->cublaslt_ns, "workspace_bytes", (json_int_t)r->workspace_bytes,
                  "kernels", kernels, "ktune_version", r->ktune_version ? r->ktune_version : "",
                  "created", (json_int_t)r->created);
    if (o && with_source)
        json_object_set_new(o, "source", json_string(r->source ? r->source : ""));
    ops_roofline roof;
    if (o && bound)
        json_object_set_new(o, "roofline",
                            cli_roofline(bound, r->key.precision, r->key.gpu.name, &roof) == 0
                                ? cli_roofline_json(r->time_ns, &roof)
                                : json_null());
    return o;
}

static void print_record(const cache_record *r, const char *match, const ops_graph *bound)
{
    char t[32], p10[32], p90[32], base[32], drv[16], cuda[16];
    fmt_time(r->time_ns, t, sizeof(t));
    fmt_time(r->time_p10_ns, p10, sizeof(p10));
    fmt_time(r->time_p90_ns, p90, sizeof(p90));
    fmt_time(r->cublaslt_ns, base, sizeof(base));
    fmt_version(r->key.gpu.driver_version, drv, sizeof(drv));
    fmt_version(r->key.gpu.cuda_version, cuda, sizeof(cuda));
    printf("match      %s\n", match);
    printf("tuned on   %s (sm_%d%d, %d SMs), driver %s, CUDA %s\n", r->key.gpu.name,
           r->key.gpu.sm_major, r->key.gpu.sm_minor, r->key.gpu.sm_count, drv, cuda);
    printf("family     %s\n", r->family ? r->family : "-");
    printf("schedule   %s\n", r->schedule ? r->schedule : "-");
    printf("time       %s (p10 %s, p90 %s, %s, %u reps)\n", t, p10, p90,
           r->timing == CACHE_TIMING_HOT ? "hot" : "cold", r->reps);
    printf("cuBLASLt   %s\n", base);
    ops_roofline roof;
    char line[256];
    if (cli_roofline(bound, r->key.precision, r->key.gpu.name, &roof) == 0) {
        cli_roofline_text(r->time_ns, &roof, line, sizeof(line));
        printf("roofline   %s\n", line);
    }
    if (r->tolerance > 0)
        printf("error      %.3g (normwise; tolerance %.3g)\n", r->err_norm, r->tolerance);
    else
        printf("error      %.3g (normwise; the default tolerance for the dtype)\n", r->err_norm);
    printf("workspace  %llu bytes\n", (unsigned long long)r->workspace_bytes);
    for (int i = 0; i < r->n_kernels; i++) {
        const cache_kernel *k = &r->kernels[i];
        if (r->family && strcmp(r->family, "library") == 0) {
            printf("launch %d   %s (cuBLASLt, rebuilt from the graph and the schedule)\n", i,
                   k->entry);
            continue;
        }
        printf("launch %d   %s grid (%u,%u,%u) block (%u,%u,%u) smem %u", i, k->entry, k->grid[0],
               k->grid[1], k->grid[2], k->block[0], k->block[1], k->block[2], k->smem_bytes);
        if (k->zero_bytes)
            printf(", clears workspace [%llu, +%llu)", (unsigned long long)k->zero_offset,
                   (unsigned long long)k->zero_bytes);
        printf("\n");
    }
    printf("ktune      %s\n", r->ktune_version ? r->ktune_version : "?");
}

/* ---- without a GPU: every GPU's record ---- */

typedef struct row {
    cache_gpu gpu;
    char family[32];
    char schedule[256];
    double time_ns, err_norm;
    char *source;
    json_t *json;
} row;

typedef struct list_state {
    const cache_key *want;
    const ops_graph *bound;
    bool json, source;
    row *rows;
    size_t n, cap;
} list_state;

static int list_cb(const cache_record *r, int rank, void *ctx)
{
    list_state *s = ctx;
    if (!r->verified || !ktune_rt_key_matches(&r->key, s->want))
        return 0;
    if (kt_grow(&s->rows, &s->cap, s->n + 1, sizeof(*s->rows)) < 0)
        return -ENOMEM;
    row *w = &s->rows[s->n++];
    w->gpu = r->key.gpu;
    snprintf(w->family, sizeof(w->family), "%s", r->family ? r->family : "-");
    snprintf(w->schedule, sizeof(w->schedule), "%s", r->schedule ? r->schedule : "-");
    w->time_ns = r->time_ns;
    w->err_norm = r->err_norm;
    if (s->source && r->source && !(w->source = strdup(r->source)))
        return -ENOMEM;
    if (s->json && !(w->json = record_json(r, s->source, s->bound)))
        return -ENOMEM;
    return 0;
}

static int row_cmp(const void *pa, const void *pb)
{
    const row *a = pa, *b = pb;
    return (a->time_ns > b->time_ns) - (a->time_ns < b->time_ns);
}

/* The graph's input (output) names in declared order: the order ktune_launch and the Python
 * binding take tensors in. */
static json_t *names_json(const ktune_graph *kg, bool inputs)
{
    json_t *arr = json_array();
    int n = inputs ? ktune_graph_n_inputs(kg) : ktune_graph_n_outputs(kg);
    for (int i = 0; arr && i < n; i++)
        json_array_append_new(arr, json_string(inputs ? ktune_graph_input_name(kg, i)
                                                      : ktune_graph_output_name(kg, i)));
    return arr;
}

static void print_names(const ktune_graph *kg, bool inputs)
{
    int n = inputs ? ktune_graph_n_inputs(kg) : ktune_graph_n_outputs(kg);
    printf("%s", inputs ? "inputs     " : "outputs    ");
    for (int i = 0; i < n; i++)
        printf("%s%s", i ? ", " : "",
               inputs ? ktune_graph_input_name(kg, i) : ktune_graph_output_name(kg, i));
    printf("%s\n", inputs ? " (declared order: ktune_launch and Python take them so)" : "");
}

static json_t *query_json(const cli_graph_args *a, const ktune_graph *kg, const char *cache)
{
    json_t *shapes = json_object();
    for (int i = 0; shapes && i < a->n_bindings; i++)
        json_object_set_new(shapes, a->bindings[i].name,
                            json_integer((json_int_t)a->bindings[i].value));
    return json_pack("{s:s, s:s, s:o*, s:s, s:s, s:o*, s:o*}", "graph", a->path, "signature",
                     ktune_graph_signature(kg), "shapes", shapes, "precision",
                     ops_precision_name(a->precision), "cache", cache, "inputs",
                     names_json(kg, true), "outputs", names_json(kg, false));
}

static int list_every_gpu(const cli_graph_args *a, const lookup_opts *o, cache_env *cache,
                          const cache_key *want, const ops_graph *bound, const ktune_graph *kg,
                          const char *why)
{
    fprintf(stderr, "ktune: no GPU here: showing records of every GPU (%s)\n", why);
    list_state s = {.want = want, .bound = bound, .json = a->json, .source = o->source};
    size_t corrupt = 0;
    kt_err err = {0};
    int rc = cache_list(cache, NULL, 0, true, list_cb, &s, &corrupt, &err);
    int status = CLI_OK;
    if (rc < 0) {
        status = rc == -ENOMEM ? cli_error("out of memory listing %s", cache_path(cache))
                               : cli_error("%s", err.msg);
        goto out;
    }
    if (corrupt)
        fprintf(stderr, "ktune: %zu corrupt record(s) in %s skipped\n", corrupt, cache_path(cache));
    qsort(s.rows, s.n, sizeof(*s.rows), row_cmp);
    if (s.n == 0) {
        status = cli_error("nothing cached in %s for %s (signature %.12s) at these shapes, "
                           "precision %s, on any GPU",
                           cache_path(cache), a->path, ktune_graph_signature(kg),
                           ops_precision_name(a->precision));
        goto out;
    }
    if (a->json) {
        json_t *q = query_json(a, kg, cache_path(cache));
        json_t *recs = json_array();
        for (size_t i = 0; recs && i < s.n; i++) {
            json_array_append_new(recs, s.rows[i].json);
            s.rows[i].json = NULL;
        }
        if (q) {
            json_object_set_new(q, "gpu", json_null());
            json_object_set_new(q, "note",
                                json_string("no GPU here: showing records of every GPU"));
            json_object_set_new(q, "records", recs ? recs : json_null());
        }
        status = cli_print_json(q);
        goto out;
    }
    print_names(kg, true);
    print_names(kg, false);
    int wg = 3;
    for (size_t i = 0; i < s.n; i++)
        wg = (int)strlen(s.rows[i].gpu.name) > wg ? (int)strlen(s.rows[i].gpu.name) : wg;
    printf("%-*s  %-6s  %-6s  %-9s  %10s  %-8s  %s\n", wg, "GPU", "DRIVER", "CUDA", "FAMILY",
           "TIME", "ERROR", "SCHEDULE");
    for (size_t i = 0; i < s.n; i++) {
        const row *w = &s.rows[i];
        char t[32], drv[16], cuda[16];
        fmt_time(w->time_ns, t, sizeof(t));
        fmt_version(w->gpu.driver_version, drv, sizeof(drv));
        fmt_version(w->gpu.cuda_version, cuda, sizeof(cuda));
        printf("%-*s  %-6s  %-6s  %-9s  %10s  %.2e  %s\n", wg, w->gpu.name, drv, cuda, w->family, t,
               w->err_norm, w->schedule);
    }
    if (o->source && s.rows[0].source)
        printf("\n%s%s", s.rows[0].source,
               s.rows[0].source[0] && s.rows[0].source[strlen(s.rows[0].source) - 1] == '\n'
                   ? ""
                   : "\n");
out:
    for (size_t i = 0; i < s.n; i++) {
        free(s.rows[i].source);
        json_decref(s.rows[i].json);
    }
    free(s.rows);
    return status;
}

/* Loads and binds the graph for a read under its cache key (every dimension bound, at most
 * CACHE_MAX_SHAPES bindings) and wraps it as the runtime sees it (signature, declaration digest).
 * On CLI_OK the caller frees *bound and *kg; otherwise nothing is left to free. */
static int load_keyed_graph(const cli_graph_args *a, ops_graph **bound, ktune_graph **kg)
{
    *bound = NULL;
    *kg = NULL;
    if (a->n_bindings > CACHE_MAX_SHAPES)
        return cli_usage_error(a->sub, "more than %d --shape bindings", CACHE_MAX_SHAPES);
    ops_graph *g = NULL;
    int status = cli_load_graph(a, &g, bound);
    if (status != CLI_OK)
        return status;
    const char *unbound = ops_graph_first_unbound(*bound);
    ktune_error err = {0};
    if (unbound) {
        status = cli_usage_error(a->sub, "dimension %s is not bound: pass --shape %s=VALUE",
                                 unbound, unbound);
        ops_graph_free(g);
    } else if (ktune_graph_wrap(g, a->path, kg, &err) < 0) { /* takes g over */
        status = cli_error("%s", err.msg);
    } else {
        return CLI_OK;
    }
    ops_graph_free(*bound);
    *bound = NULL;
    return status;
}

int cli_lookup(int argc, char **argv)
{
    cli_graph_args a = {.sub = "lookup", .help = lookup_help};
    lookup_opts o = {0};
    int status = cli_parse_graph_args(argc, argv, &a, lookup_extra, &o);
    if (status != CLI_OK)
        return status;
    ops_graph *bound = NULL;
    ktune_graph *kg = NULL;
    if ((status = load_keyed_graph(&a, &bound, &kg)) != CLI_OK)
        return status;
    ktune_runtime *rt = NULL;
    ktune_kernel *k = NULL;
    ktune_shape shapes[CLI_MAX_BINDINGS];
    for (int i = 0; i < a.n_bindings; i++)
        shapes[i] = (ktune_shape){a.bindings[i].name, a.bindings[i].value};
    ktune_error err = {0};
    const char *sig_hex = ktune_graph_signature(kg);
    if (ktune_runtime_open(o.cache, &rt, &err) < 0) {
        status = cli_error("%s", err.msg);
        goto out;
    }
    const char *precision = ops_precision_name(a.precision);
    cache_gpu here;
    int rc = ktune_rt_fingerprint(rt, 0, &here, &err);
    if (rc == -ENODEV) {
        cache_key want;
        memset(&want, 0, sizeof(want));
        memcpy(want.sig, kg->sig, sizeof(want.sig));
        want.precision = a.precision;
        want.tolerance = o.tolerance;
        if ((rc = ktune_rt_complete_key(&want, bound, &err)) < 0) {
            status = cli_error("%s: %s", a.path, err.msg);
            goto out;
        }
        status = list_every_gpu(&a, &o, ktune_rt_cache(rt), &want, bound, kg, err.msg);
        goto out;
    }
    if (rc < 0) {
        status = cli_error("%s", err.msg);
        goto out;
    }
    ktune_match match = KTUNE_MATCH_EXACT;
    rc = ktune_rt_resolve(rt, kg, shapes, a.n_bindings, precision, o.tolerance, &here, 0,
                          KTUNE_RT_NO_MEMO, &k, &match, &err);
    if (rc < 0) {
        status = cli_error("%s", err.msg);
        goto out;
    }
    const cache_record *r = ktune_rt_kernel_record(k);
    const char *m = match == KTUNE_MATCH_EXACT ? "exact" : "compatible";
    if (a.json) {
        json_t *q = query_json(&a, kg, cache_path(ktune_rt_cache(rt)));
        if (q) {
            json_object_set_new(q, "gpu", gpu_json(&here));
            json_object_set_new(q, "match", json_string(m));
            json_object_set_new(q, "record", record_json(r, o.source, bound));
        }
        status = cli_print_json(q);
        goto out;
    }
    char drv[16], cuda[16];
    fmt_version(here.driver_version, drv, sizeof(drv));
    fmt_version(here.cuda_version, cuda, sizeof(cuda));
    printf("graph      %s (signature %.12s), %s\n", a.path, sig_hex, precision);
    print_names(kg, true);
    print_names(kg, false);
    printf("this GPU   %s (sm_%d%d, %d SMs), driver %s, CUDA %s\n", here.name, here.sm_major,
           here.sm_minor, here.sm_count, drv, cuda);
    print_record(r,
                 match == KTUNE_MATCH_EXACT
                     ? "exact (tuned on this GPU, driver and toolkit)"
                     : "compatible (same GPU model, other driver or toolkit: correct, possibly "
                       "not the fastest here)",
                 bound);
    if (o.source && r->source)
        printf("\n%s%s", r->source,
               r->source_len && r->source[r->source_len - 1] == '\n' ? "" : "\n");
    status = CLI_OK;
out:
    ktune_rt_kernel_free(k);
    ktune_runtime_close(rt);
    ktune_graph_free(kg);
    ops_graph_free(bound);
    return status;
}

/* ---- ktune trials: the trial log of a graph at some shapes, every GPU in the cache ---- */

static const char trials_help[] =
    "usage: ktune trials GRAPH.json --shape NAME=VALUE[,...] [--precision P] [--tolerance X]\n"
    "                    [--cache DIR] [--json]\n"
    "       ktune trials JOB [--cache DIR] [--json]\n"
    "\n"
    "Prints the trial log of GRAPH at these shapes, or of job JOB of the cache's journal (where\n"
    "ktuned keeps each job's graph, shapes, precision and tolerance): every candidate the search\n"
    "measured or rejected, on every GPU with records in the cache; the verified ones fastest\n"
    "first (median time, normwise error), then the checks of assembled records (\"assembled\"),\n"
    "then the rejected ones with their reason. A rerun of the job resumes from this log. Reads\n"
    "the cache directly; no daemon or GPU is needed.\n"
    "\n"
    "options:\n"
    "  --shape NAME=VALUE  bind a symbolic dimension (repeat or separate with commas)\n"
    "  --precision P       exact (default), tf32 or reduced\n"
    "  --tolerance X       the job's --tolerance, if it had one (default: none)\n"
    "  --cache DIR         the cache directory (default: $KTUNE_CACHE, else /var/lib/ktune/cache)\n"
    "  --json              machine-readable output\n"
    "  -h, --help          show this help\n"
    "\n"
    "Exit status: 0 trials were found, 1 none (or an error), 2 usage.\n";

typedef struct trial_list {
    const cache_gpu *gpu;
    cli_trial_row *rows;
    size_t n, cap;
} trial_list;

static int trial_cb(const cache_trial *t, void *ctx)
{
    trial_list *l = ctx;
    if (kt_grow(&l->rows, &l->cap, l->n + 1, sizeof(*l->rows)) < 0)
        return -ENOMEM;
    l->rows[l->n++] = (cli_trial_row){.gpu = *l->gpu, .t = *t};
    return 0;
}

/* Verified (ok) first, fastest first (an assembled record's check, ok with no time, after the
 * timed ones); then the rest by status, then candidate. */
static int trial_cmp(const void *pa, const void *pb)
{
    const cli_trial_row *a = pa, *b = pb;
    if (a->t.status != b->t.status)
        return (int)a->t.status - (int)b->t.status;
    double ta = a->t.time_ns > 0 ? a->t.time_ns : INFINITY;
    double tb = b->t.time_ns > 0 ? b->t.time_ns : INFINITY;
    if (ta != tb)
        return (ta > tb) - (ta < tb);
    return strcmp(a->t.cand, b->t.cand);
}

int cli_collect_trials(cache_env *cache, cache_key *want, cli_trial_row **rows, size_t *n,
                       kt_err *err)
{
    cache_gpu *gpus = NULL;
    size_t n_gpus = 0;
    trial_list l = {0};
    int rc = cache_gpus(cache, &gpus, &n_gpus, err);
    for (size_t i = 0; rc == 0 && i < n_gpus; i++) {
        want->gpu = gpus[i];
        l.gpu = &gpus[i];
        rc = cache_trial_foreach(cache, want, trial_cb, &l, err);
    }
    free(gpus);
    if (rc < 0) {
        free(l.rows);
        if (rc == -ENOMEM)
            kt_err_set(err, rc, "out of memory reading %s", cache_path(cache));
        return rc;
    }
    if (l.n)
        qsort(l.rows, l.n, sizeof(*l.rows), trial_cmp);
    *rows = l.rows;
    *n = l.n;
    return 0;
}

int cli_load_job_graph(cache_env *cache, uint64_t id, cache_job *job, char *name, size_t cap,
                       cli_graph_args *a, double *tolerance, ops_graph **bound, ktune_graph **kg)
{
    kt_err kerr = {0};
    int rc = cache_job_get(cache, id, job, &kerr);
    if (rc == -ENOENT)
        return cli_error("no job %llu in the journal of %s", (unsigned long long)id,
                         cache_path(cache));
    if (rc < 0)
        return cli_error("%s", kerr.msg);
    snprintf(name, cap, "job %llu (%s)", (unsigned long long)id, job->name);
    a->path = name;
    a->precision = job->precision;
    *tolerance = job->tolerance;
    a->n_bindings = job->n_shapes;
    for (int i = 0; i < job->n_shapes; i++)
        a->bindings[i] = (ops_binding){job->shapes[i].name, job->shapes[i].value};
    ops_graph *g = NULL;
    ops_diag d = {0};
    ktune_error err = {0};
    if (ops_graph_from_msgpack(job->graph, job->graph_len, &g, &d) < 0 ||
        ops_graph_validate(g, &d) < 0 ||
        ops_graph_bind(g, a->bindings, a->n_bindings, bound, &d) < 0) {
        ops_graph_free(g);
        return cli_error("%s: the journal's graph: %s", name, d.msg);
    }
    if (ktune_graph_wrap(g, name, kg, &err) < 0) { /* takes g over */
        ops_graph_free(*bound);
        *bound = NULL;
        return cli_error("%s: %s", name, err.msg);
    }
    return CLI_OK;
}

int cli_trials(int argc, char **argv)
{
    cli_graph_args a = {.sub = "trials", .help = trials_help};
    lookup_opts o = {0};
    int status = cli_parse_graph_args(argc, argv, &a, lookup_extra, &o);
    if (status != CLI_OK)
        return status;
    if (o.source)
        return cli_usage_error("trials", "unknown option --source");
    /* JOB: digits that name no file */
    bool is_job = a.path[strspn(a.path, "0123456789")] == 0 && access(a.path, F_OK) != 0;
    if (is_job && a.n_bindings > 0)
        return cli_usage_error("trials", "job %s has its own shapes: drop --shape", a.path);
    ops_graph *bound = NULL;
    ktune_graph *kg = NULL;
    ktune_runtime *rt = NULL;
    cli_trial_row *rows = NULL;
    size_t n_rows = 0;
    cache_job job = {0};
    char job_name[128];
    ktune_error err = {0};
    if (!is_job && (status = load_keyed_graph(&a, &bound, &kg)) != CLI_OK)
        return status;
    if (ktune_runtime_open(o.cache, &rt, &err) < 0) {
        status = cli_error("%s", err.msg);
        goto out;
    }
    if (is_job &&
        (status = cli_load_job_graph(ktune_rt_cache(rt), strtoull(a.path, NULL, 10), &job, job_name,
                                 sizeof(job_name), &a, &o.tolerance, &bound, &kg)) != CLI_OK)
        goto out;
    /* the job's key on each GPU the cache knows: trials are logged under it */
    cache_key want;
    memset(&want, 0, sizeof(want));
    memcpy(want.sig, kg->sig, sizeof(want.sig));
    want.precision = a.precision;
    want.tolerance = o.tolerance;
    if (ktune_rt_complete_key(&want, bound, &err) < 0) {
        status = cli_error("%s: %s", a.path, err.msg);
        goto out;
    }
    cache_env *cache = ktune_rt_cache(rt);
    kt_err kerr = {0};
    if (cli_collect_trials(cache, &want, &rows, &n_rows, &kerr) < 0) {
        status = cli_error("%s", kerr.msg);
        goto out;
    }
    trial_list l = {.rows = rows, .n = n_rows};
    if (l.n == 0) {
        status = cli_error("no trials in %s for %s (signature %.12s) at these shapes, precision %s",
                           cache_path(cache), a.path, ktune_graph_signature(kg),
                           ops_precision_name(a.precision));
        goto out;
    }
    if (a.json) {
        json_t *q = query_json(&a, kg, cache_path(cache));
        json_t *arr = json_array();
        for (size_t i = 0; arr && i < l.n; i++) {
            const cache_trial *t = &l.rows[i].t;
            json_array_append_new(arr, json_pack("{s:o*, s:s, s:s, s:f, s:f, s:s, s:I}", "gpu",
                                                 gpu_json(&l.rows[i].gpu), "candidate", t->cand,
                                                 "status", cache_trial_status_name(t->status),
                                                 "time_ns", t->time_ns, "error", t->error, "detail",
                                                 t->detail, "ts", (json_int_t)t->ts));
        }
        if (q)
            json_object_set_new(q, "trials", arr ? arr : json_null());
        status = cli_print_json(q);
        goto out;
    }
    size_t counts[CACHE_TRIAL_STATUS_COUNT] = {0};
    int wg = 3;
    for (size_t i = 0; i < l.n; i++) {
        counts[l.rows[i].t.status]++;
        wg = (int)strlen(l.rows[i].gpu.name) > wg ? (int)strlen(l.rows[i].gpu.name) : wg;
    }
    printf("graph   %s (signature %.12s), %s, %zu trials:", a.path, ktune_graph_signature(kg),
           ops_precision_name(a.precision), l.n);
    for (int s = 0; s < CACHE_TRIAL_STATUS_COUNT; s++)
        if (counts[s])
            printf(" %zu %s", counts[s], cache_trial_status_name((cache_trial_status)s));
    printf("\n%-*s  %-13s  %10s  %-8s  %s\n", wg, "GPU", "STATUS", "TIME", "ERROR", "CANDIDATE");
    for (size_t i = 0; i < l.n; i++) {
        const cache_trial *t = &l.rows[i].t;
        char tm[32];
        fmt_time(t->time_ns, tm, sizeof(tm));
        printf("%-*s  %-13s  %10s  %.2e  %s\n", wg, l.rows[i].gpu.name,
               cache_trial_status_name(t->status), tm, t->error, t->cand);
        if (t->detail[0] && (t->status != CACHE_TRIAL_OK || t->time_ns <= 0))
            printf("%-*s  %s\n", wg + 2 + 13 + 2 + 10 + 2 + 8, "", t->detail);
    }
    status = CLI_OK;
out:
    free(rows);
    ktune_runtime_close(rt);
    ktune_graph_free(kg);
    ops_graph_free(bound);
    cache_job_free(&job);
    return status;
}
