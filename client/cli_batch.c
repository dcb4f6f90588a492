/* ktune batch FILE.jsonl: one tuning job per line, validated all first, submitted to ktuned,
 * followed to the end, summarised. Duplicate jobs join the daemon's identical job, so a rerun
 * of a finished batch measures nothing; --shard i/N makes one Slurm array task's share. */
#include "cli.h"
#include "client/libktune_internal.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char batch_help[] =
    "usage: ktune batch FILE.jsonl [--budget-total T] [--wait | --no-wait] [--shard I/N]\n"
    "                   [--retune | --remeasure] [--socket PATH] [--quiet] [--json]\n"
    "\n"
    "Submits one tuning job per line of FILE.jsonl to ktuned, waits for all of them (a progress\n"
    "line: elapsed time, with --budget-total the time left, k/n done) and prints a summary: name, "
    "shapes, state, best time, cuBLASLt baseline,\n"
    "speed-up, trials, kernel family. Each line is a JSON object:\n"
    "  {\"graph\": \"gemm.json\" (relative to FILE's directory) or an inline graph object,\n"
    "   \"shapes\": {\"M\": 1024}, \"precision\": \"exact\", \"budget\": 120 (seconds),\n"
    "   \"priority\": 0, \"name\": \"gemm_1024\", \"tolerance\": 0.01, \"gpu\": 0}\n"
    "where only graph is required; \"source\" and \"notes\" (strings: where the case comes\n"
    "from) are for people and tools and ignored here. Blank lines and lines starting with #\n"
    "are skipped. Every line is checked before anything is submitted (one error per bad line,\n"
    "FILE:LINE: ...). FILE.jsonl must be a regular file of at most 64 MiB, and each graph file\n"
    "one of at most 16 MiB; anything else is refused before it is read.\n"
    "A job identical to one ktuned has queued, running or done joins it: rerunning a finished\n"
    "batch measures nothing (--retune: tune the done ones again).\n"
    "\n"
    "options:\n"
    "  --budget-total T  the wall-clock time for the whole batch (like 8h): T times ktuned's\n"
    "                    GPU count, less the budgets lines give, is shared evenly by the lines\n"
    "                    that give none (default: those get 60 s each)\n"
    "  --wait            wait for every job and print the summary (the default)\n"
    "  --no-wait         submit, print the job ids, and exit\n"
    "  --shard I/N       only the jobs whose index (0-based, counting job lines) modulo N is I,\n"
    "                    e.g. --shard $SLURM_ARRAY_TASK_ID/$SLURM_ARRAY_TASK_COUNT\n"
    "  --retune          new jobs even for lines whose identical job is done (as `ktune tune\n"
    "                    --retune`): more budget, or new candidates after an upgrade; only\n"
    "                    candidates not in the trial log are measured\n"
    "  --remeasure       a retune that also measures again what the trial log holds\n"
    "  --socket PATH     ktuned's socket (default: $KTUNE_SOCKET, else /run/ktune/ktuned.sock)\n"
    "  --quiet           no progress line on stderr\n"
    "  --json            the summary as one JSON object\n"
    "  -h, --help        show this help\n"
    "\n"
    "Exits 1 when a line is invalid (nothing is submitted then), or when any job failed, was\n"
    "cancelled or ended without a verified kernel.\n";

/* The largest batch file read (the help says 64 MiB): thousands of lines, each of which may
 * name a graph file of up to OPS_MAX_GRAPH_BYTES, fit well below it. */
#define CLI_MAX_BATCH_BYTES (64u << 20)

typedef struct bjob {
    int line;  /* 1-based line number in the file */
    int index; /* 0-based among job lines */
    ktune_graph *g;
    ktune_shape shapes[CLI_MAX_BINDINGS];
    int n_shapes;
    char shapes_str[256];
    char precision[16];
    char name[64];
    double budget_s, tolerance;
    int priority, gpu;
    /* after submission */
    bool submitted, joined;
    ktune_job job;
    char submit_error[512];
} bjob;

typedef struct batch_args {
    const char *path, *socket;
    double budget_total;
    bool no_wait, json, quiet, retune, remeasure;
    long shard_i, shard_n;
} batch_args;

static void bjob_free(bjob *b)
{
    ktune_graph_free(b->g);
    for (int i = 0; i < b->n_shapes; i++)
        free((char *)b->shapes[i].name);
}

static int parse_args(int argc, char **argv, batch_args *a)
{
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i], *value = i + 1 < argc ? argv[i + 1] : NULL;
        const char *opt = arg; /* "--opt=value" arrives split (client/ktune.c) */
        if (cli_is_help(arg)) {
            fputs(batch_help, stdout);
            exit(CLI_OK);
        } else if (strcmp(opt, "--json") == 0) {
            a->json = true;
        } else if (strcmp(opt, "--quiet") == 0) {
            a->quiet = true;
        } else if (strcmp(opt, "--wait") == 0) {
            a->no_wait = false;
        } else if (strcmp(opt, "--no-wait") == 0) {
            a->no_wait = true;
        } else if (strcmp(opt, "--retune") == 0) {
            a->retune = true;
        } else if (strcmp(opt, "--remeasure") == 0) {
            a->remeasure = true;
        } else if (strcmp(opt, "--socket") == 0 || strcmp(opt, "--budget-total") == 0 ||
                   strcmp(opt, "--shard") == 0) {
            if (!value)
                return cli_usage_error("batch", "%s needs a value", opt);
            i++;
            if (strcmp(opt, "--socket") == 0) {
                a->socket = value;
            } else if (strcmp(opt, "--budget-total") == 0) {
                if ((a->budget_total = cli_parse_duration(value)) <= 0)
                    return cli_usage_error("batch",
                                           "--budget-total takes a duration like 8h or "
                                           "90m, not '%s'",
                                           value);
            } else {
                char *end = NULL, *end2 = NULL;
                a->shard_i = strtol(value, &end, 10);
                a->shard_n = *end == '/' ? strtol(end + 1, &end2, 10) : 0;
                if (end == value || *end != '/' || end2 == end + 1 || *end2 || a->shard_n < 1 ||
                    a->shard_i < 0 || a->shard_i >= a->shard_n)
                    return cli_usage_error("batch",
                                           "--shard takes I/N with 0 <= I < N, like "
                                           "0/4, not '%s'",
                                           value);
            }
        } else if (arg[0] == '-' && arg[1] != '\0') {
            return cli_usage_error("batch", "unknown option '%s'", arg);
        } else if (a->path) {
            return cli_usage_error("batch", "one FILE.jsonl at a time ('%s' and '%s')", a->path,
                                   arg);
        } else {
            a->path = arg;
        }
    }
    if (!a->path)
        return cli_usage_error("batch", "missing FILE.jsonl");
    return CLI_OK;
}

/* ---- one line ---- */

typedef struct line_ctx {
    const char *file, *dir; /* dir: FILE's directory, "" for the current one */
    int line;
    char msg[1024];
} line_ctx;

static int line_error(line_ctx *lc, const char *fmt, ...) KT_PRINTF(2, 3);
static int line_error(line_ctx *lc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(lc->msg, sizeof(lc->msg), fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s:%d: %s\n", lc->file, lc->line, lc->msg);
    return -EINVAL;
}

static bool json_is_int(const json_t *v, json_int_t lo, json_int_t hi)
{
    if (json_is_integer(v))
        return json_integer_value(v) >= lo && json_integer_value(v) <= hi;
    return false;
}

/* Loads the graph of a line: a path (relative to the file's directory) or an inline object. */
static int line_graph(line_ctx *lc, const json_t *gv, ops_graph **out, char *what, size_t wlen)
{
    ops_diag d = {0};
    *out = NULL;
    if (json_is_string(gv)) {
        const char *p = json_string_value(gv);
        if (!p[0])
            return line_error(lc, "'graph' is an empty path");
        if (p[0] == '/' || !lc->dir[0])
            snprintf(what, wlen, "%s", p);
        else
            snprintf(what, wlen, "%s/%s", lc->dir, p);
        if (ops_graph_from_json_file(what, out, &d) < 0)
            return line_error(lc, "%s: %s", what, d.msg);
        return 0;
    }
    if (json_is_object(gv)) {
        snprintf(what, wlen, "inline graph");
        char *text = json_dumps(gv, JSON_COMPACT);
        if (!text)
            return line_error(lc, "out of memory");
        int rc = ops_graph_from_json(text, strlen(text), out, &d);
        free(text);
        if (rc < 0)
            return line_error(lc, "inline graph: %s", d.msg);
        return 0;
    }
    return line_error(lc, "'graph' must be a path or a graph object");
}

static int parse_line(line_ctx *lc, const char *text, size_t len, bjob *b)
{
    static const char *const keys[] = {"graph", "shapes",    "precision", "budget", "priority",
                                       "name",  "tolerance", "gpu",       "source", "notes"};
    json_error_t je;
    ops_graph *og = NULL, *bound = NULL;
    char what[4096];
    int rc = 0;
    json_t *v = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
    b->gpu = -1;
    if (!v)
        return line_error(lc, "not JSON: %s (column %d)", je.text, je.column);
    if (!json_is_object(v)) {
        rc = line_error(lc, "a job line is a JSON object, like {\"graph\": \"g.json\", "
                            "\"shapes\": {\"M\": 1024}}");
        goto out;
    }
    const char *key;
    json_t *val;
    json_object_foreach(v, key, val)
    {
        bool known = false;
        for (size_t k = 0; k < KT_ARRAY_LEN(keys); k++)
            known |= strcmp(key, keys[k]) == 0;
        if (!known) {
            rc = line_error(lc,
                            "unknown key '%s' (known: graph, shapes, precision, budget, "
                            "priority, name, tolerance, gpu, source, notes)",
                            key);
            goto out;
        }
    }
    json_t *gv = json_object_get(v, "graph");
    if (!gv) {
        rc = line_error(lc, "missing 'graph' (a path or a graph object)");
        goto out;
    }
    if ((rc = line_graph(lc, gv, &og, what, sizeof(what))) < 0)
        goto out;
    /* shapes */
    json_t *sv = json_object_get(v, "shapes");
    if (sv && !json_is_object(sv)) {
        rc = line_error(lc, "'shapes' must be an object like {\"M\": 1024}");
        goto out;
    }
    size_t off = 0;
    json_object_foreach(sv, key, val)
    {
        if (b->n_shapes == CLI_MAX_BINDINGS) {
            rc = line_error(lc, "more than %d shapes", CLI_MAX_BINDINGS);
            goto out;
        }
        if (!json_is_int(val, 1, OPS_MAX_DIM)) {
            rc = line_error(lc, "'shapes.%s' must be a positive integer", key);
            goto out;
        }
        char *name = kt_strdup(key);
        if (!name) {
            rc = line_error(lc, "out of memory");
            goto out;
        }
        b->shapes[b->n_shapes++] = (ktune_shape){name, (int64_t)json_integer_value(val)};
        int n = snprintf(b->shapes_str + off, sizeof(b->shapes_str) - off, "%s%s=%" PRId64,
                         off ? "," : "", key, (int64_t)json_integer_value(val));
        if (n > 0 && (size_t)n < sizeof(b->shapes_str) - off)
            off += (size_t)n;
    }
    /* the rest */
    json_t *pv = json_object_get(v, "precision");
    ops_precision prec = OPS_PREC_EXACT;
    if (pv && (!json_is_string(pv) || ops_precision_from_name(json_string_value(pv), &prec) < 0)) {
        rc = line_error(lc, "'precision' must be \"exact\", \"tf32\" or \"reduced\"");
        goto out;
    }
    snprintf(b->precision, sizeof(b->precision), "%s", ops_precision_name(prec));
    json_t *bv = json_object_get(v, "budget");
    if (bv) {
        b->budget_s = json_is_number(bv)   ? json_number_value(bv)
                      : json_is_string(bv) ? cli_parse_duration(json_string_value(bv))
                                           : -1;
        if (!(b->budget_s >= 1) || b->budget_s > 86400) { /* what ktuned accepts */
            rc = line_error(lc, "'budget' must be seconds in [1, 86400] (a number, or a string "
                                "like \"90s\" or \"2m\")");
            goto out;
        }
    }
    json_t *tv = json_object_get(v, "tolerance");
    if (tv) {
        b->tolerance = json_is_number(tv) ? json_number_value(tv) : -1;
        if (!(b->tolerance > 0) || !isfinite(b->tolerance)) {
            rc = line_error(lc, "'tolerance' must be a positive number");
            goto out;
        }
    }
    json_t *prv = json_object_get(v, "priority");
    if (prv) {
        if (!json_is_int(prv, -100, 100)) {
            rc = line_error(lc, "'priority' must be an integer in -100..100");
            goto out;
        }
        b->priority = (int)json_integer_value(prv);
    }
    json_t *gpv = json_object_get(v, "gpu");
    if (gpv) {
        if (!json_is_int(gpv, 0, 1023)) {
            rc = line_error(lc, "'gpu' must be a GPU index (0, 1, ...)");
            goto out;
        }
        b->gpu = (int)json_integer_value(gpv);
    }
    json_t *nv = json_object_get(v, "name");
    if (nv && (!json_is_string(nv) || !json_string_value(nv)[0] ||
               strlen(json_string_value(nv)) >= sizeof(b->name))) {
        rc = line_error(lc, "'name' must be a string of 1 to %zu bytes", sizeof(b->name) - 1);
        goto out;
    }
    /* The graph must validate and every dimension must be bound. */
    ops_diag d = {0};
    ops_binding bind[CLI_MAX_BINDINGS];
    for (int i = 0; i < b->n_shapes; i++)
        bind[i] = (ops_binding){b->shapes[i].name, b->shapes[i].value};
    if (ops_graph_validate(og, &d) < 0 || ops_graph_bind(og, bind, b->n_shapes, &bound, &d) < 0) {
        rc = line_error(lc, "%s: %s", what, d.msg);
        goto out;
    }
    const char *unbound = ops_graph_first_unbound(bound);
    if (unbound) {
        rc = line_error(lc, "%s: dimension '%s' needs a value in 'shapes'", what, unbound);
        goto out;
    }
    ktune_error kerr;
    rc = ktune_graph_wrap(og, what, &b->g, &kerr);
    og = NULL; /* taken over */
    if (rc < 0) {
        rc = line_error(lc, "%s", kerr.msg);
        goto out;
    }
    snprintf(b->name, sizeof(b->name), "%s", nv ? json_string_value(nv) : ktune_graph_name(b->g));
out:
    ops_graph_free(bound);
    ops_graph_free(og);
    json_decref(v);
    return rc;
}

/* Reads and checks every line. Returns CLI_OK with *jobs (all job lines) or CLI_FAIL after
 * printing one line per bad line. */
static int load_batch(const char *path, bjob **jobs, int *n_jobs)
{
    char *text = NULL;
    size_t len = 0;
    kt_err err = {0};
    *jobs = NULL;
    *n_jobs = 0;
    if (kt_read_file(path, CLI_MAX_BATCH_BYTES, &text, &len, &err) < 0)
        return cli_error("%s: %s", path, err.msg);
    char dir[4096];
    snprintf(dir, sizeof(dir), "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash)
        slash[slash == dir] = '\0'; /* "/x.jsonl" -> "/" */
    else
        dir[0] = '\0';
    line_ctx lc = {.file = path, .dir = dir};
    bjob *list = NULL;
    size_t cap = 0;
    int n = 0, bad = 0;
    for (char *p = text; p < text + len;) {
        char *nl = memchr(p, '\n', (size_t)(text + len - p));
        size_t l = nl ? (size_t)(nl - p) : (size_t)(text + len - p);
        char *s = p;
        p += l + 1;
        lc.line++;
        size_t ws = strspn(s, " \t\r");
        if (ws >= l || s[ws] == '#')
            continue;
        if (kt_grow(&list, &cap, (size_t)n + 1, sizeof(*list)) < 0) {
            free(text);
            for (int i = 0; i < n; i++)
                bjob_free(&list[i]);
            free(list);
            return cli_error("%s: out of memory", path);
        }
        bjob *b = &list[n];
        memset(b, 0, sizeof(*b));
        b->line = lc.line;
        b->index = n + bad;
        if (parse_line(&lc, s, l, b) < 0) {
            bjob_free(b);
            bad++;
        } else {
            n++;
        }
    }
    free(text);
    if (bad || n == 0) {
        for (int i = 0; i < n; i++)
            bjob_free(&list[i]);
        free(list);
        if (bad)
            return cli_error("%s: %d bad line%s: nothing submitted", path, bad,
                             bad == 1 ? "" : "s");
        return cli_error("%s: no jobs (one JSON object per line)", path);
    }
    *jobs = list;
    *n_jobs = n;
    return CLI_OK;
}

/* ---- after submission ---- */

static bool ended(const ktune_job *j)
{
    return j->state == KTUNE_JOB_DONE || j->state == KTUNE_JOB_FAILED ||
           j->state == KTUNE_JOB_CANCELLED;
}

static bool job_ok(const bjob *b)
{
    return b->submitted && b->job.state == KTUNE_JOB_DONE && b->job.record;
}

/* Refreshes every submitted, unfinished job: one `jobs` request for the queued and running
 * ones; a job missing from it has ended (or fell outside the list), so its status is asked. */
static int refresh(ktune_client *c, bjob *jobs, int n, ktune_error *err)
{
    int pending = 0;
    for (int i = 0; i < n; i++)
        pending += jobs[i].submitted && !ended(&jobs[i].job);
    if (!pending)
        return 0;
    int limit = pending * 2 + 1000;
    ktune_job *live = NULL;
    size_t n_live = 0;
    int rc = ktune_jobs(c, (1u << KTUNE_JOB_QUEUED) | (1u << KTUNE_JOB_RUNNING), limit, &live,
                        &n_live, err);
    if (rc < 0)
        return rc;
    for (int i = 0; i < n && rc == 0; i++) {
        bjob *b = &jobs[i];
        if (!b->submitted || ended(&b->job))
            continue;
        size_t k = 0;
        while (k < n_live && live[k].id != b->job.id)
            k++;
        if (k < n_live) {
            b->job = live[k];
            continue;
        }
        /* Lines that joined the same job share one status request. */
        int same = 0;
        while (same < i && !(jobs[same].submitted && jobs[same].job.id == b->job.id))
            same++;
        if (same < i)
            b->job = jobs[same].job;
        else
            rc = ktune_status(c, b->job.id, &b->job, err);
    }
    free(live);
    return rc;
}

static void count(const bjob *jobs, int n, int *done, int *running, int *queued, int *bad)
{
    *done = *running = *queued = *bad = 0;
    for (int i = 0; i < n; i++) {
        const bjob *b = &jobs[i];
        if (!b->submitted || (ended(&b->job) && !job_ok(b)))
            (*bad)++;
        if (b->submitted && ended(&b->job))
            (*done)++;
        else if (b->submitted && b->job.state == KTUNE_JOB_RUNNING)
            (*running)++;
        else if (b->submitted)
            (*queued)++;
    }
}

static int wait_all(ktune_client *c, bjob *jobs, int n, bool show, double budget_total)
{
    cli_progress line;
    cli_progress_init(&line, show);
    int last_done = -1;
    double t0 = cli_mono_s();
    ktune_error err;
    for (;;) {
        if (refresh(c, jobs, n, &err) < 0) {
            cli_progress_end(&line);
            return cli_client_error(NULL, &err);
        }
        int done, running, queued, bad;
        count(jobs, n, &done, &running, &queued, &bad);
        int submitted = 0;
        for (int i = 0; i < n; i++)
            submitted += jobs[i].submitted;
        char notok[32] = "";
        if (bad)
            snprintf(notok, sizeof(notok), ", %d not ok", bad);
        cli_progress_show(&line, done != last_done, cli_mono_s() - t0, budget_total,
                          "%d/%d done, %d running, %d queued%s", done, submitted, running, queued,
                          notok);
        last_done = done;
        if (done == submitted)
            break;
        struct timespec ts = {.tv_sec = 1};
        while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
            ;
    }
    cli_progress_end(&line);
    return CLI_OK;
}

static const char *state_label(const bjob *b)
{
    if (!b->submitted)
        return "not submitted";
    if (b->job.state == KTUNE_JOB_DONE && !b->job.record)
        return "done, no kernel";
    return ktune_job_state_name(b->job.state);
}

static void print_summary(const char *path, const bjob *jobs, int n, bool waited)
{
    printf("%4s  %6s  %-24s  %-20s  %-15s  %10s  %10s  %7s  %6s  %s\n", "LINE", "JOB", "NAME",
           "SHAPES", "STATE", "BEST", "CUBLASLT", "SPEEDUP", "TRIALS", "FAMILY");
    for (int i = 0; i < n; i++) {
        const bjob *b = &jobs[i];
        const ktune_job *j = &b->job;
        char id[24] = "-", best[32], base[32], sp[16] = "-";
        if (b->submitted)
            snprintf(id, sizeof(id), "%" PRIu64, j->id);
        cli_fmt_ns(j->best_ns, best, sizeof(best));
        cli_fmt_ns(j->baseline_ns, base, sizeof(base));
        if (j->best_ns > 0 && j->baseline_ns > 0)
            snprintf(sp, sizeof(sp), "%.2fx", j->baseline_ns / j->best_ns);
        printf("%4d  %6s  %-24.24s  %-20.20s  %-15s  %10s  %10s  %7s  %6d  %s%s\n", b->line, id,
               KT_ESC(b->name), b->shapes_str[0] ? b->shapes_str : "-", state_label(b), best, base,
               sp, j->trials, j->family[0] ? KT_ESC(j->family) : "-",
               !waited && b->joined ? "  (joined)" : "");
    }
    /* Why each job that is not ok is not. */
    for (int i = 0; i < n; i++) {
        const bjob *b = &jobs[i];
        if (!b->submitted)
            fprintf(stderr, "%s:%d: not submitted: %s\n", path, b->line, b->submit_error);
        else if (waited && !job_ok(b))
            fprintf(stderr, "%s:%d: job %" PRIu64 " %s%s%s\n", path, b->line, b->job.id,
                    state_label(b), b->job.error[0] ? ": " : "", b->job.error);
    }
}

static json_t *summary_json(const batch_args *a, const bjob *jobs, int n)
{
    json_t *arr = json_array();
    int counts[5] = {0}, no_record = 0, unsubmitted = 0;
    for (int i = 0; i < n && arr; i++) {
        const bjob *b = &jobs[i];
        json_t *o = b->submitted ? cli_job_json(&b->job) : json_object();
        if (!o) {
            json_decref(arr);
            return NULL;
        }
        json_object_set_new(o, "line", json_integer(b->line));
        json_object_set_new(o, "joined", json_boolean(b->joined));
        if (!b->submitted) {
            json_object_set_new(o, "name", json_string(b->name));
            json_object_set_new(o, "state", json_string("not submitted"));
            json_object_set_new(o, "error", json_string(b->submit_error));
            unsubmitted++;
        } else {
            counts[b->job.state]++;
            no_record += b->job.state == KTUNE_JOB_DONE && !b->job.record;
        }
        json_array_append_new(arr, o);
    }
    char shard[48] = "";
    if (a->shard_n > 0)
        snprintf(shard, sizeof(shard), "%ld/%ld", a->shard_i, a->shard_n);
    return json_pack("{s:s, s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:o*}", "file", a->path,
                     "shard", shard, "total", n, "queued", counts[KTUNE_JOB_QUEUED], "running",
                     counts[KTUNE_JOB_RUNNING], "done", counts[KTUNE_JOB_DONE], "failed",
                     counts[KTUNE_JOB_FAILED], "cancelled", counts[KTUNE_JOB_CANCELLED],
                     "no_record", no_record, "not_submitted", unsubmitted, "jobs", arr);
}

/* Shares --budget-total among the jobs that give no budget. */
static int share_budget(ktune_client *c, const batch_args *a, bjob *jobs, int n)
{
    int without = 0;
    double given = 0;
    for (int i = 0; i < n; i++) {
        without += jobs[i].budget_s <= 0;
        given += jobs[i].budget_s > 0 ? jobs[i].budget_s : 0;
    }
    if (!without)
        return CLI_OK;
    ktune_gpu *gpus = NULL;
    size_t n_gpus = 0;
    ktune_error err;
    if (ktune_gpus(c, &gpus, &n_gpus, NULL, &err) < 0)
        return cli_client_error(NULL, &err);
    free(gpus);
    double pool = a->budget_total * (double)(n_gpus ? n_gpus : 1) - given;
    double each = pool / without;
    if (each < 1)
        return cli_error("--budget-total %.0f s over %zu GPU%s leaves %.1f s for each of the %d "
                         "jobs without a budget (the lines' own budgets take %.0f s)",
                         a->budget_total, n_gpus ? n_gpus : 1, n_gpus > 1 ? "s" : "",
                         each > 0 ? each : 0, without, given);
    if (each > 86400)
        each = 86400;
    for (int i = 0; i < n; i++)
        if (jobs[i].budget_s <= 0)
            jobs[i].budget_s = each;
    if (!a->json)
        fprintf(stderr, "budget: %.0f s for each of %d job%s without one (%zu GPU%s)\n", each,
                without, without == 1 ? "" : "s", n_gpus, n_gpus == 1 ? "" : "s");
    return CLI_OK;
}

int cli_batch(int argc, char **argv)
{
    batch_args a = {0};
    int rc = parse_args(argc, argv, &a);
    if (rc != CLI_OK)
        return rc;
    bjob *all = NULL;
    int n_all = 0;
    if ((rc = load_batch(a.path, &all, &n_all)) != CLI_OK)
        return rc;
    /* This shard's jobs, in file order, moved to the front. */
    int n = 0;
    for (int i = 0; i < n_all; i++) {
        if (a.shard_n > 0 && all[i].index % a.shard_n != a.shard_i) {
            bjob_free(&all[i]);
            continue;
        }
        all[n++] = all[i];
    }
    ktune_client *c = NULL;
    if (n == 0) {
        if (a.json)
            rc = cli_print_json(summary_json(&a, all, 0));
        else
            printf("no jobs in shard %ld/%ld of %s (%d jobs)\n", a.shard_i, a.shard_n, a.path,
                   n_all);
        goto out;
    }
    if ((rc = cli_connect(a.socket, &c)) != CLI_OK)
        goto out;
    if (a.budget_total > 0 && (rc = share_budget(c, &a, all, n)) != CLI_OK)
        goto out;
    int failed_submits = 0;
    for (int i = 0; i < n; i++) {
        bjob *b = &all[i];
        ktune_submit_opts o = KTUNE_SUBMIT_OPTS_INIT;
        o.precision = b->precision;
        o.budget_s = b->budget_s;
        o.tolerance = b->tolerance;
        o.priority = b->priority;
        o.gpu = b->gpu;
        o.name = b->name;
        ktune_error err;
        unsigned flags =
            (a.retune ? KTUNE_SUBMIT_RETUNE : 0) | (a.remeasure ? KTUNE_SUBMIT_REMEASURE : 0);
        if (ktune_submit2(c, b->g, b->shapes, b->n_shapes, &o, flags, &b->job, &b->joined, &err) <
            0) {
            snprintf(b->submit_error, sizeof(b->submit_error), "%s", err.msg);
            failed_submits++;
            /* A broken connection fails every later submission the same way: stop there. */
            if (err.code == -ECONNRESET || err.code == -EPIPE || err.code == -EPROTO) {
                for (int k = i + 1; k < n; k++)
                    snprintf(all[k].submit_error, sizeof(all[k].submit_error), "%s", err.msg);
                failed_submits += n - i - 1;
                break;
            }
            continue;
        }
        b->submitted = true;
    }
    if (!a.json && !a.no_wait) {
        int joined = 0;
        for (int i = 0; i < n; i++)
            joined += all[i].joined;
        fprintf(stderr, "%d job%s submitted to ktuned (%d joined an identical job)%s\n",
                n - failed_submits, n - failed_submits == 1 ? "" : "s", joined,
                failed_submits ? ", some failed" : "");
    }
    if (!a.no_wait && failed_submits < n &&
        (rc = wait_all(c, all, n, !a.quiet && (!a.json || isatty(2)), a.budget_total)) != CLI_OK)
        goto out;
    if (a.json)
        rc = cli_print_json(summary_json(&a, all, n));
    else
        print_summary(a.path, all, n, !a.no_wait);
    if (rc == CLI_OK) {
        int bad = failed_submits;
        for (int i = 0; i < n && !a.no_wait; i++)
            bad += all[i].submitted && !job_ok(&all[i]);
        if (bad)
            rc = cli_error("%d of %d job%s %s", bad, n, n == 1 ? "" : "s",
                           a.no_wait ? "not submitted" : "did not end with a verified kernel");
    }
out:
    ktune_disconnect(c);
    for (int i = 0; i < n; i++)
        bjob_free(&all[i]);
    free(all);
    return rc;
}
