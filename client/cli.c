#include "cli.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* An error line's parts may come from a graph file, an argument or the daemon: whatever is not
 * clean text is escaped, keeping backslashes (the daemon's messages are escaped already), so
 * one message stays one line and cannot drive the terminal. */
static const char *one_line(const char *line, char *buf, size_t cap)
{
    size_t n = strlen(line);
    return kt_text_clean(line, n) ? line : kt_escape(buf, cap, line, n, KT_ESC_KEEP_BACKSLASH);
}

int cli_error(const char *fmt, ...)
{
    char line[1024], safe[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    fprintf(stderr, "ktune: %s\n", one_line(line, safe, sizeof(safe)));
    return CLI_FAIL;
}

int cli_usage_error(const char *sub, const char *fmt, ...)
{
    char line[1024], safe[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    fprintf(stderr, "ktune %s: %s (see 'ktune %s --help')\n", sub,
            one_line(line, safe, sizeof(safe)), sub);
    return CLI_USAGE;
}

int cli_print_json(json_t *v)
{
    if (!v)
        return cli_error("out of memory building JSON output");
    int rc = json_dumpf(v, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17));
    json_decref(v);
    fputc('\n', stdout);
    return rc == 0 ? CLI_OK : cli_error("cannot write JSON to stdout");
}

bool cli_is_help(const char *s)
{
    return strcmp(s, "--help") == 0 || strcmp(s, "-h") == 0;
}

double cli_mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void cli_progress_init(cli_progress *p, bool show)
{
    *p = (cli_progress){.show = show, .tty = show && isatty(2)};
}

#define CLI_PROGRESS_PERIOD_S 5.0 /* a line through a pipe at least this far apart */

void cli_progress_show(cli_progress *p, bool changed, double elapsed_s, double total_s,
                       const char *fmt, ...)
{
    if (!p->show || (!p->tty && !changed && cli_mono_s() - p->last_s < CLI_PROGRESS_PERIOD_S))
        return;
    char when[64];
    if (total_s > 0 && elapsed_s < total_s)
        snprintf(when, sizeof(when), "[%6.1fs of %.1fs, %.1fs left]", elapsed_s, total_s,
                 total_s - elapsed_s);
    else if (total_s > 0)
        snprintf(when, sizeof(when), "[%6.1fs of %.1fs, ending]", elapsed_s, total_s);
    else
        snprintf(when, sizeof(when), "[%6.1fs]", elapsed_s);
    char text[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    if (p->tty) {
        fprintf(stderr, "\r\033[K%s %s", when, text);
        p->drawn = true;
    } else {
        fprintf(stderr, "%s %s\n", when, text);
        p->last_s = cli_mono_s();
    }
    fflush(stderr);
}

void cli_progress_end(cli_progress *p)
{
    if (p->drawn)
        fputc('\n', stderr);
    p->drawn = false;
}

static int add_bindings(cli_graph_args *a, char *list)
{
    for (char *save = NULL, *tok = strtok_r(list, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        if (a->n_bindings == CLI_MAX_BINDINGS)
            return cli_usage_error(a->sub, "more than %d --shape bindings", CLI_MAX_BINDINGS);
        kt_err err = {0};
        if (ops_binding_parse(tok, &a->bindings[a->n_bindings], &err) < 0)
            return cli_usage_error(a->sub, "--shape %s", err.msg);
        a->n_bindings++;
    }
    return CLI_OK;
}

int cli_parse_graph_args(int argc, char **argv, cli_graph_args *a,
                         int (*extra)(void *ctx, const char *opt, const char *value), void *ctx)
{
    for (int i = 1; i < argc; i++) {
        char *arg = argv[i];
        char *value = i + 1 < argc ? argv[i + 1] : NULL;
        int rc;
        if (cli_is_help(arg)) {
            fputs(a->help, stdout);
            exit(CLI_OK);
        } else if (strcmp(arg, "--json") == 0) {
            a->json = true;
        } else if (strcmp(arg, "--shape") == 0) {
            if (!value)
                return cli_usage_error(a->sub, "--shape needs NAME=VALUE");
            if ((rc = add_bindings(a, value)) != CLI_OK)
                return rc;
            i++;
        } else if (strcmp(arg, "--precision") == 0) {
            if (!value || ops_precision_from_name(value, &a->precision) < 0)
                return cli_usage_error(a->sub, "--precision takes exact, tf32 or reduced");
            i++;
        } else if (arg[0] == '-' && arg[1] != '\0') {
            rc = extra ? extra(ctx, arg, value) : 0;
            if (rc < 0)
                return -rc;
            if (rc == 0)
                return cli_usage_error(a->sub, "unknown option '%s'", arg);
            i += rc - 1;
        } else if (a->path) {
            return cli_usage_error(a->sub, "one graph at a time ('%s' and '%s')", a->path, arg);
        } else {
            a->path = arg;
        }
    }
    if (!a->path)
        return cli_usage_error(a->sub, "missing GRAPH.json");
    return CLI_OK;
}

int cli_load_graph(const cli_graph_args *a, ops_graph **graph, ops_graph **bound)
{
    ops_graph *g = NULL;
    ops_diag d = {0};
    *bound = NULL;
    if (ops_graph_from_json_file(a->path, &g, &d) < 0 || ops_graph_validate(g, &d) < 0 ||
        ops_graph_bind(g, a->bindings, a->n_bindings, bound, &d) < 0) {
        ops_graph_free(g);
        return cli_error("%s: %s", a->path, d.msg);
    }
    *graph = g;
    return CLI_OK;
}

long cli_parse_count(const char *sub, const char *opt, const char *value)
{
    char *end = NULL;
    long n = value ? strtol(value, &end, 10) : 0;
    if (!value || *end != '\0' || n <= 0) {
        cli_usage_error(sub, "%s takes a positive integer", opt);
        return -1;
    }
    return n;
}

double cli_parse_duration(const char *s)
{
    return kt_parse_duration(s);
}

void cli_fmt_ns(double ns, char *buf, size_t len)
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

int cli_connect(const char *path, ktune_client **out)
{
    ktune_error err;
    int rc = ktune_connect(path, out, &err);
    if (rc == 0)
        return CLI_OK;
    /* ktune_connect's message is "cannot reach ktuned at PATH: <reason>". */
    if (rc == -EACCES)
        return cli_error("%s (the socket admits the members of its group, usually ktune)", err.msg);
    /* the line says it all: a protocol mismatch; ktuned turning the connection away (too many
     * connections, shutting down), which is not "down"; a socket root does not trust */
    if (rc == -EPROTO || rc == -EUSERS || rc == -ESHUTDOWN || rc == -EPERM)
        return cli_error("%s", err.msg);
    return cli_error("%s (start it with `ktuned`, or use `ktune tune --local`)", err.msg);
}

int cli_client_error(const char *what, const ktune_error *err)
{
    if (what)
        return cli_error("%s: %s", what, err->msg);
    return cli_error("%s", err->msg);
}

int cli_roofline(const ops_graph *bound, ops_precision p, const char *gpu, ops_roofline *out)
{
    ops_device dev;
    ops_diag d = {0};
    memset(out, 0, sizeof(*out));
    if (ops_device_find(gpu, &dev) < 0)
        return -ENOENT;
    return ops_graph_roofline(bound, p, &dev, out, &d);
}

void cli_roofline_text(double time_ns, const ops_roofline *r, char *buf, size_t len)
{
    char fl[32], rate[64];
    cli_fmt_ns(r->floor_ns, fl, sizeof(fl));
    if (r->memory_bound)
        snprintf(rate, sizeof(rate), "%.3g MB at %.3g TB/s", r->bytes / 1e6, r->bytes_per_s / 1e12);
    else
        snprintf(rate, sizeof(rate), "%.3g GFLOP at %.3g TFLOP/s, %s", r->flops / 1e9,
                 r->flops_per_s / 1e12, r->unit);
    if (time_ns > 0)
        snprintf(buf, len, "%.3g%% of the roofline floor %s (%s: %s-bound)",
                 100.0 * r->floor_ns / time_ns, fl, rate, r->memory_bound ? "memory" : "compute");
    else
        snprintf(buf, len, "floor %s (%s: %s-bound)", fl, rate,
                 r->memory_bound ? "memory" : "compute");
}

json_t *cli_roofline_json(double time_ns, const ops_roofline *r)
{
    return json_pack("{s:f, s:o, s:s, s:f, s:f, s:f, s:f, s:s}", "floor_ns", r->floor_ns,
                     "fraction", time_ns > 0 ? json_real(r->floor_ns / time_ns) : json_null(),
                     "bound", r->memory_bound ? "memory" : "compute", "bytes", r->bytes, "flops",
                     r->flops, "bytes_per_s", r->bytes_per_s, "flops_per_s", r->flops_per_s,
                     "unit", r->unit ? r->unit : "");
}
