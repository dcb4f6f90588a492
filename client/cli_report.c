/* ktune report JOB --html FILE: one self-contained HTML page about a tuning job, read from the
 * cache (its journal, trial log and records): no daemon, no GPU, no network when viewed (inline
 * CSS and SVG, no script). */
#include "cli.h"
#include "cli_trials.h"

#include "cache/record.h"
#include "ops/family.h"
#include "client/libktune_internal.h"
#include "client/runtime_internal.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char report_help[] =
    "usage: ktune report JOB --html FILE [--cache DIR]\n"
    "\n"
    "Writes one self-contained HTML page about job JOB of the cache's journal: its graph,\n"
    "shapes, precision and budget; every trial over time by kernel family and group (a plot);\n"
    "the winner against the cuBLASLt baseline and the roofline floor on its GPU; its\n"
    "error against the tolerance; its CUDA source, highlighted; the rejected candidates by\n"
    "class, with an example each; the fastest verified ones. Reads the cache directly: no\n"
    "daemon or GPU is needed, and the page needs no network (no script, no remote resource).\n"
    "\n"
    "options:\n"
    "  --html FILE   the page to write (replaced atomically)\n"
    "  --cache DIR   the cache directory (default: $KTUNE_CACHE, else /var/lib/ktune/cache)\n"
    "  -h, --help    show this help\n";

/* ---- HTML text ---- */

static void esc(kt_buf *b, const char *s, size_t n)
{
    for (size_t i = 0; i < n && s[i]; i++) {
        switch (s[i]) {
        case '&': kt_buf_printf(b, "&amp;"); break;
        case '<': kt_buf_printf(b, "&lt;"); break;
        case '>': kt_buf_printf(b, "&gt;"); break;
        case '"': kt_buf_printf(b, "&quot;"); break;
        default: kt_buf_printf(b, "%c", s[i]);
        }
    }
}

static void esc_s(kt_buf *b, const char *s)
{
    if (s)
        esc(b, s, strlen(s));
}

/* CUDA C highlighted: comments, strings, preprocessor lines, keywords and numbers in spans. */
static void highlight(kt_buf *b, const char *src)
{
    static const char *const kw[] = {
        "__global__", "__device__", "__shared__", "__restrict__", "__launch_bounds__",
        "__forceinline__", "__syncthreads", "extern", "static", "const", "constexpr", "inline",
        "if", "else", "for", "while", "do", "return", "break", "continue", "struct", "namespace",
        "template", "typename", "auto", "void", "int", "unsigned", "long", "float", "double",
        "char", "bool", "short", "size_t", "true", "false", "asm", "volatile", "using"};
    const char *p = src;
    bool line_start = true;
    while (*p) {
        size_t n;
        if (p[0] == '/' && p[1] == '*') {
            const char *e = strstr(p + 2, "*/");
            n = e ? (size_t)(e + 2 - p) : strlen(p);
            kt_buf_printf(b, "<span class=c>");
            esc(b, p, n);
            kt_buf_printf(b, "</span>");
        } else if (p[0] == '/' && p[1] == '/') {
            n = strcspn(p, "\n");
            kt_buf_printf(b, "<span class=c>");
            esc(b, p, n);
            kt_buf_printf(b, "</span>");
        } else if (line_start && *p == '#') {
            n = strcspn(p, "\n");
            kt_buf_printf(b, "<span class=p>");
            esc(b, p, n);
            kt_buf_printf(b, "</span>");
        } else if (*p == '"') {
            n = 1;
            while (p[n] && p[n] != '"' && p[n] != '\n')
                n += p[n] == '\\' && p[n + 1] ? 2 : 1;
            n += p[n] == '"';
            kt_buf_printf(b, "<span class=s>");
            esc(b, p, n);
            kt_buf_printf(b, "</span>");
        } else if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || *p == '_') {
            n = strspn(p, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_");
            bool is_kw = false;
            for (size_t k = 0; k < KT_ARRAY_LEN(kw) && !is_kw; k++)
                is_kw = strlen(kw[k]) == n && strncmp(kw[k], p, n) == 0;
            if (is_kw)
                kt_buf_printf(b, "<span class=k>");
            esc(b, p, n);
            if (is_kw)
                kt_buf_printf(b, "</span>");
        } else if (*p >= '0' && *p <= '9') {
            n = strspn(p, "0123456789abcdefABCDEFxXuUlL.");
            kt_buf_printf(b, "<span class=n>");
            esc(b, p, n);
            kt_buf_printf(b, "</span>");
        } else {
            n = 1;
            esc(b, p, 1);
        }
        for (size_t i = 0; i < n; i++)
            line_start = p[i] == '\n' || (line_start && (p[i] == ' ' || p[i] == '\t'));
        p += n;
    }
}

static void fmt_ns(double ns, char *buf, size_t cap)
{
    if (!(ns > 0))
        snprintf(buf, cap, "-");
    else
        cli_fmt_ns(ns, buf, cap);
}

/* ---- the plot: trials over time ---- */

/* A trial's kernel family ("row", "gemm", ...; "assembled" for a record's check) and group mask
 * ("m3"), from its candidate id ("m3 row strategy=..." or "record <hash>"). */
static void trial_family(const char *cand, char *fam, size_t fcap, char *grp, size_t gcap)
{
    grp[0] = '\0';
    if (strncmp(cand, "record", 6) == 0) {
        snprintf(fam, fcap, "assembled");
        return;
    }
    const char *sp = strchr(cand, ' ');
    if (cand[0] == 'm' && sp) {
        snprintf(grp, gcap, "%.*s", (int)(sp - cand), cand);
        cand = sp + 1;
    }
    snprintf(fam, fcap, "%.*s", (int)strcspn(cand, " "), cand);
}

static const char *const palette[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e",
                                      "#17becf", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22"};

typedef struct fam_list {
    char name[16][32];
    int n;
} fam_list;

static int fam_index(fam_list *f, const char *name)
{
    for (int i = 0; i < f->n; i++)
        if (strcmp(f->name[i], name) == 0)
            return i;
    if (f->n == 16)
        return 15;
    snprintf(f->name[f->n], sizeof(f->name[0]), "%s", name);
    return f->n++;
}

/* Is the trial's candidate ("m3 gemm math=...") the winner, or one of its groups' winners: one
 * of the " | "-separated schedules of the record's? */
static bool is_winner(const char *cand, const char *winner)
{
    if (!winner || strncmp(cand, "record", 6) == 0)
        return false;
    const char *sp = strchr(cand, ' ');
    const char *sched = cand[0] == 'm' && sp ? sp + 1 : cand;
    size_t n = strlen(sched);
    for (const char *w = winner; w;) {
        const char *bar = strstr(w, " | ");
        size_t len = bar ? (size_t)(bar - w) : strlen(w);
        if (len == n && strncmp(w, sched, n) == 0)
            return true;
        w = bar ? bar + 3 : NULL;
    }
    return false;
}

static void plot(kt_buf *b, const cli_trial_row *rows, size_t n, double baseline, double floor_ns,
                 const char *winner)
{
    const double W = 900, H = 360, L = 70, R = 20, T = 20, B = 40;
    int64_t t0 = INT64_MAX, t1 = INT64_MIN;
    double lo = INFINITY, hi = 0;
    for (size_t i = 0; i < n; i++) {
        const cache_trial *t = &rows[i].t;
        int64_t ms = t->ts_ms ? t->ts_ms : t->ts * 1000;
        t0 = ms < t0 ? ms : t0;
        t1 = ms > t1 ? ms : t1;
        if (t->status == CACHE_TRIAL_OK && t->time_ns > 0) {
            lo = fmin(lo, t->time_ns);
            hi = fmax(hi, t->time_ns);
        }
    }
    if (baseline > 0)
        lo = fmin(lo, baseline), hi = fmax(hi, baseline);
    if (floor_ns > 0)
        lo = fmin(lo, floor_ns), hi = fmax(hi, floor_ns);
    if (!(hi > 0) || !isfinite(lo)) {
        kt_buf_printf(b, "<p>No trial has a time to plot.</p>\n");
        return;
    }
    double ylo = floor(log10(lo) * 4) / 4, yhi = ceil(log10(hi) * 4) / 4;
    if (yhi - ylo < 0.5)
        ylo -= 0.25, yhi += 0.25;
    double span_s = t1 > t0 ? (double)(t1 - t0) / 1e3 : 1;
    kt_buf_printf(b, "<svg width='%.0f' height='%.0f' "
                     "role='img' aria-label='trials over time'>\n",
                  W, H);
    kt_buf_printf(b, "<rect x='%.0f' y='%.0f' width='%.0f' height='%.0f' fill='#fafafa' "
                     "stroke='#ccc'/>\n",
                  L, T, W - L - R, H - T - B);
#define PX(s) (L + (s) / span_s * (W - L - R))
#define PY(ns) (T + (yhi - log10(ns)) / (yhi - ylo) * (H - T - B))
    for (double e = ceil(ylo); e <= yhi; e += 1) {
        char tm[32];
        fmt_ns(pow(10, e), tm, sizeof(tm));
        kt_buf_printf(b, "<line x1='%.0f' x2='%.0f' y1='%.1f' y2='%.1f' stroke='#e5e5e5'/>"
                         "<text x='%.0f' y='%.1f' text-anchor='end' class=ax>%s</text>\n",
                      L, W - R, PY(pow(10, e)), PY(pow(10, e)), L - 6, PY(pow(10, e)) + 4, tm);
    }
    for (int k = 0; k <= 4; k++)
        kt_buf_printf(b, "<text x='%.1f' y='%.0f' text-anchor='middle' class=ax>%.1f s</text>\n",
                      PX(span_s * k / 4), H - B + 16, span_s * k / 4);
    kt_buf_printf(b, "<text x='%.0f' y='%.0f' text-anchor='middle' class=ax>time since the "
                     "first trial</text>\n",
                  L + (W - L - R) / 2, H - 6);
    if (baseline > 0)
        kt_buf_printf(b, "<line x1='%.0f' x2='%.0f' y1='%.1f' y2='%.1f' stroke='#444' "
                         "stroke-dasharray='6 4'><title>cuBLASLt baseline</title></line>"
                         "<text x='%.0f' y='%.1f' class=ax>baseline</text>\n",
                      L, W - R, PY(baseline), PY(baseline), W - R - 60, PY(baseline) - 4);
    if (floor_ns > 0)
        kt_buf_printf(b, "<line x1='%.0f' x2='%.0f' y1='%.1f' y2='%.1f' stroke='#2ca02c' "
                         "stroke-dasharray='2 3'><title>roofline floor</title></line>"
                         "<text x='%.0f' y='%.1f' class=ax>floor</text>\n",
                      L, W - R, PY(floor_ns), PY(floor_ns), W - R - 40, PY(floor_ns) - 4);
    fam_list fams = {0};
    for (size_t i = 0; i < n; i++) {
        const cache_trial *t = &rows[i].t;
        char fam[32], grp[24];
        trial_family(t->cand, fam, sizeof(fam), grp, sizeof(grp));
        int fi = fam_index(&fams, fam);
        if (t->status != CACHE_TRIAL_OK || !(t->time_ns > 0))
            continue;
        int64_t ms = t->ts_ms ? t->ts_ms : t->ts * 1000;
        bool won = is_winner(t->cand, winner);
        kt_buf_printf(b, "<circle cx='%.1f' cy='%.1f' r='%d' fill='%s' fill-opacity='0.75'%s>"
                         "<title>",
                      PX((double)(ms - t0) / 1e3), PY(t->time_ns), won ? 6 : 3,
                      palette[fi % KT_ARRAY_LEN(palette)], won ? " stroke='#000'" : "");
        char tm[32];
        fmt_ns(t->time_ns, tm, sizeof(tm));
        kt_buf_printf(b, "%s ", tm);
        esc_s(b, t->cand);
        kt_buf_printf(b, "</title></circle>\n");
    }
#undef PX
#undef PY
    kt_buf_printf(b, "</svg>\n<p class=legend>");
    for (int i = 0; i < fams.n; i++) {
        kt_buf_printf(b, "<span style='color:%s'>&#9679;</span> ",
                      palette[i % KT_ARRAY_LEN(palette)]);
        esc_s(b, fams.name[i]);
        kt_buf_printf(b, " &nbsp; ");
    }
    kt_buf_printf(b, "(verified trials; a point's tooltip names its candidate, \"m&lt;hex&gt;\" "
                     "the group of the partition it belongs to; ringed: the winner's kernels)</p>\n");
}

/* ---- the page ---- */

static const char css[] =
    "body{font:14px/1.45 system-ui,sans-serif;margin:24px auto;max-width:1000px;color:#222}"
    "h1{font-size:20px}h2{font-size:16px;margin-top:28px}table{border-collapse:collapse}"
    "td,th{padding:3px 10px;border-bottom:1px solid #eee;text-align:left;vertical-align:top}"
    "th{color:#555;font-weight:600}td.num{text-align:right;font-variant-numeric:tabular-nums}"
    "pre{background:#f6f8fa;padding:12px;overflow:auto;font-size:12px;line-height:1.35}"
    ".c{color:#6a737d}.p{color:#8250df}.s{color:#0a3069}.k{color:#cf222e}.n{color:#0550ae}"
    ".ax{font-size:11px;fill:#666}.legend{font-size:12px;color:#444}"
    ".ok{color:#1a7f37}.bad{color:#cf222e}code{font-size:12px}";

static void row2(kt_buf *b, const char *k, const char *v)
{
    kt_buf_printf(b, "<tr><th>%s</th><td>", k);
    esc_s(b, v);
    kt_buf_printf(b, "</td></tr>\n");
}

typedef struct report {
    const cache_job *job;
    const char *graph_name, *sig;
    const ops_graph *bound;
    const cli_trial_row *rows;
    size_t n;
    const cache_record *rec; /* the best record of the job's key, NULL when none */
    ops_roofline roof; /* the record's graph on its GPU (cli_roofline); floor_ns 0: none */
} report;

static void page(kt_buf *b, const report *r)
{
    const cache_job *j = r->job;
    char title[128], tm[32], tm2[32], line[512];
    snprintf(title, sizeof(title), "job %llu (%.63s)", (unsigned long long)j->id, j->name);
    kt_buf_printf(b, "<!DOCTYPE html>\n<html lang=en><head><meta charset='utf-8'>"
                     "<meta name='viewport' content='width=device-width'>"
                     "<title>ktune report: ");
    esc_s(b, title);
    kt_buf_printf(b, "</title><style>%s</style></head>\n<body>\n<h1>ktune report: ", css);
    esc_s(b, title);
    kt_buf_printf(b, "</h1>\n<table>\n");
    row2(b, "graph", r->graph_name);
    snprintf(line, sizeof(line), "%.16s", r->sig);
    row2(b, "signature", line);
    size_t off = 0;
    line[0] = '\0';
    for (int i = 0; i < j->n_shapes && off < sizeof(line); i++)
        off += (size_t)snprintf(line + off, sizeof(line) - off, "%s%s=%lld", i ? ", " : "",
                                j->shapes[i].name, (long long)j->shapes[i].value);
    row2(b, "shapes", j->n_shapes ? line : "-");
    row2(b, "precision", ops_precision_name(j->precision));
    row2(b, "state", cache_job_state_name(j->state));
    snprintf(line, sizeof(line), "%.0f s of %.0f s budget; %d trials (%d measured, %d read back "
             "from the log); NVRTC %.0f s, measuring %.0f s",
             j->elapsed_s, j->budget_s, j->trials, j->measured, j->resumed, j->compile_s,
             j->measure_s);
    row2(b, "tuning", line);
    if (j->error[0])
        row2(b, "note", j->error);
    kt_buf_printf(b, "</table>\n");

    kt_buf_printf(b, "<h2>Winner</h2>\n");
    if (!r->rec) {
        kt_buf_printf(b, "<p class=bad>No verified kernel is cached for this job's key.</p>\n");
    } else {
        const cache_record *rec = r->rec;
        kt_buf_printf(b, "<table>\n");
        row2(b, "GPU", rec->key.gpu.name);
        kt_buf_printf(b, "<tr><th>kernel</th><td>");
        esc_s(b, rec->family);
        kt_buf_printf(b, ": ");
        esc_s(b, rec->schedule);
        kt_buf_printf(b, "</td></tr>\n");
        fmt_ns(rec->time_ns, tm, sizeof(tm));
        fmt_ns(rec->time_p90_ns, tm2, sizeof(tm2));
        snprintf(line, sizeof(line), "%s median (p90 %s, %u reps)", tm, tm2, rec->reps);
        row2(b, "time", line);
        if (rec->cublaslt_ns > 0) {
            fmt_ns(rec->cublaslt_ns, tm2, sizeof(tm2));
            snprintf(line, sizeof(line), "%s: %.2fx", tm2, rec->cublaslt_ns / rec->time_ns);
            row2(b, "cuBLASLt baseline", line);
        } else {
            row2(b, "cuBLASLt baseline", "none for this graph");
        }
        if (r->roof.floor_ns > 0) {
            cli_roofline_text(rec->time_ns, &r->roof, line, sizeof(line));
            row2(b, "roofline", line);
        }
        snprintf(line, sizeof(line), "normwise %.3g against the tolerance %.3g (%s); largest "
                 "element %.3g of its bound",
                 rec->err_norm, rec->tolerance, rec->err_norm <= rec->tolerance ? "holds" : "FAILS",
                 rec->err_max);
        row2(b, "error", line);
        kt_buf_printf(b, "</table>\n");
    }

    kt_buf_printf(b, "<h2>Trials over time</h2>\n");
    plot(b, r->rows, r->n, r->rec ? r->rec->cublaslt_ns : j->baseline_ns, r->roof.floor_ns,
         r->rec ? r->rec->schedule : j->schedule);

    kt_buf_printf(b, "<h2>Rejected</h2>\n");
    size_t counts[CACHE_TRIAL_STATUS_COUNT] = {0}, first[CACHE_TRIAL_STATUS_COUNT];
    for (size_t i = 0; i < r->n; i++)
        if (counts[r->rows[i].t.status]++ == 0)
            first[r->rows[i].t.status] = i;
    bool any = false;
    kt_buf_printf(b, "<table><tr><th>class</th><th>count</th><th>an example</th></tr>\n");
    for (int s = 0; s < CACHE_TRIAL_STATUS_COUNT; s++) {
        if (s == CACHE_TRIAL_OK || !counts[s])
            continue;
        any = true;
        const cache_trial *t = &r->rows[first[s]].t;
        kt_buf_printf(b, "<tr><td class=bad>%s</td><td class=num>%zu</td><td><code>",
                      cache_trial_status_name((cache_trial_status)s), counts[s]);
        esc_s(b, t->cand);
        kt_buf_printf(b, "</code><br>");
        esc_s(b, t->detail);
        kt_buf_printf(b, "</td></tr>\n");
    }
    kt_buf_printf(b, "</table>\n");
    if (!any)
        kt_buf_printf(b, "<p class=ok>No candidate was rejected.</p>\n");

    kt_buf_printf(b, "<h2>Fastest verified</h2>\n<table><tr><th>time</th><th>error</th>"
                     "<th>candidate</th></tr>\n");
    for (size_t i = 0, shown = 0; i < r->n && shown < 15; i++) {
        const cache_trial *t = &r->rows[i].t;
        if (t->status != CACHE_TRIAL_OK || !(t->time_ns > 0))
            continue;
        fmt_ns(t->time_ns, tm, sizeof(tm));
        kt_buf_printf(b, "<tr><td class=num>%s</td><td class=num>%.2e</td><td><code>", tm,
                      t->error);
        esc_s(b, t->cand);
        kt_buf_printf(b, "</code></td></tr>\n");
        shown++;
    }
    kt_buf_printf(b, "</table>\n");

    if (r->rec && r->rec->source) {
        kt_buf_printf(b, "<h2>The winner's CUDA source</h2>\n<pre><code>");
        highlight(b, r->rec->source);
        kt_buf_printf(b, "</code></pre>\n");
    }
    time_t now = time(NULL);
    struct tm g;
    char when[32] = "";
    if (gmtime_r(&now, &g))
        strftime(when, sizeof(when), "%Y-%m-%d %H:%M UTC", &g);
    kt_buf_printf(b, "<p class=legend>Written by ktune %s at %s from the cache's journal, trial "
                     "log and records.</p>\n</body></html>\n",
                  ktune_version(), when);
}

int cli_report(int argc, char **argv)
{
    const char *job_arg = NULL, *html = NULL, *cache_dir = NULL;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i]; /* "--opt=value" arrives split (client/ktune.c) */
        const char **slot = strcmp(arg, "--html") == 0    ? &html
                            : strcmp(arg, "--cache") == 0 ? &cache_dir
                                                          : NULL;
        if (cli_is_help(arg)) {
            fputs(report_help, stdout);
            return CLI_OK;
        } else if (slot) {
            if (i + 1 == argc || !argv[i + 1][0])
                return cli_usage_error("report", "%s needs a value", arg);
            *slot = argv[++i];
        } else if (arg[0] == '-') {
            return cli_usage_error("report", "unknown option '%s'", arg);
        } else if (job_arg) {
            return cli_usage_error("report", "one JOB at a time ('%s' and '%s')", job_arg, arg);
        } else {
            job_arg = arg;
        }
    }
    if (!job_arg || !job_arg[0] || job_arg[strspn(job_arg, "0123456789")])
        return cli_usage_error("report", "expected a job id (`ktune jobs` lists them)%s%s%s",
                               job_arg ? ", not '" : "", job_arg ? job_arg : "",
                               job_arg ? "'" : "");
    if (!html)
        return cli_usage_error("report", "--html FILE is needed (the page to write)");
    ktune_runtime *rt = NULL;
    ktune_graph *kg = NULL;
    ops_graph *bound = NULL;
    cache_job job = {0};
    cli_trial_row *rows = NULL;
    size_t n = 0, n_gpus = 0;
    cache_gpu *gpus = NULL;
    cache_record best;
    cache_record_init(&best);
    bool have = false;
    char name[128];
    double tolerance = 0;
    cli_graph_args a = {.sub = "report"};
    ktune_error err = {0};
    kt_err kerr = {0};
    kt_buf b = {0};
    int status;
    if (ktune_runtime_open(cache_dir, &rt, &err) < 0) {
        status = cli_error("%s", err.msg);
        goto out;
    }
    cache_env *cache = ktune_rt_cache(rt);
    if ((status = cli_load_job_graph(cache, strtoull(job_arg, NULL, 10), &job, name, sizeof(name),
                                     &a, &tolerance, &bound, &kg)) != CLI_OK)
        goto out;
    cache_key want;
    memset(&want, 0, sizeof(want));
    memcpy(want.sig, kg->sig, sizeof(want.sig));
    want.precision = a.precision;
    want.tolerance = tolerance;
    if (ktune_rt_complete_key(&want, bound, &err) < 0) {
        status = cli_error("%s: %s", name, err.msg);
        goto out;
    }
    if (cli_collect_trials(cache, &want, &rows, &n, &kerr) < 0) {
        status = cli_error("%s", kerr.msg);
        goto out;
    }
    /* the fastest best record of the key over the GPUs the cache knows */
    if (cache_gpus(cache, &gpus, &n_gpus, &kerr) < 0) {
        status = cli_error("%s", kerr.msg);
        goto out;
    }
    for (size_t i = 0; i < n_gpus; i++) {
        want.gpu = gpus[i];
        cache_record r;
        cache_record_init(&r);
        if (cache_get(cache, &want, 0, &r, NULL) == 0 && (!have || r.time_ns < best.time_ns)) {
            cache_record_free(&best);
            best = r;
            have = true;
        } else {
            cache_record_free(&r);
        }
    }
    report rep = {.job = &job, .graph_name = ktune_graph_name(kg), .sig = ktune_graph_signature(kg),
                  .bound = bound, .rows = rows, .n = n, .rec = have ? &best : NULL};
    if (have)
        cli_roofline(bound, best.key.precision, best.key.gpu.name, &rep.roof);
    page(&b, &rep);
    if (kt_buf_status(&b) < 0) {
        status = cli_error("out of memory writing the report");
        goto out;
    }
    if (kt_write_file(html, b.data, b.len, 0644, &kerr) < 0) {
        status = cli_error("%s", kerr.msg);
        goto out;
    }
    printf("wrote %s: %s, %zu trials%s\n", html, name, n,
           have ? "" : " (no verified kernel cached)");
    status = CLI_OK;
out:
    kt_buf_free(&b);
    cache_record_free(&best);
    free(gpus);
    free(rows);
    cache_job_free(&job);
    ktune_graph_free(kg);
    ops_graph_free(bound);
    ktune_runtime_close(rt);
    return status;
}
