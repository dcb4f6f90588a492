/* ktune jobs | status | watch | cancel | gpus | stats: the daemon's jobs and state, through
 * libktune's client; and the job printing that `ktune tune` and `ktune batch` share. */
#include "cli.h"

#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- shared job printing ---- */

/* "M=1024;N=512" -> {"M": 1024, "N": 512}. */
static json_t *shapes_json(const char *shapes)
{
    json_t *o = json_object();
    char buf[sizeof(((ktune_job *)0)->shapes)];
    snprintf(buf, sizeof(buf), "%s", shapes);
    for (char *save = NULL, *tok = strtok_r(buf, ";", &save); tok && o;
         tok = strtok_r(NULL, ";", &save)) {
        char *eq = strchr(tok, '=');
        if (!eq)
            continue;
        *eq = '\0';
        json_object_set_new(o, tok, json_integer(strtoll(eq + 1, NULL, 10)));
    }
    return o;
}

/* "M=1024;N=512" -> "M=1024,N=512" (as --shape takes them), "-" when none. */
static const char *shapes_text(const char *shapes, char *buf, size_t len)
{
    snprintf(buf, len, "%s", shapes[0] ? shapes : "-");
    for (char *p = buf; *p; p++)
        if (*p == ';')
            *p = ',';
    return buf;
}

static json_t *ns_or_null(double ns)
{
    return ns > 0 ? json_real(ns) : json_null();
}

json_t *cli_job_json(const ktune_job *j)
{
    json_t *o = json_object();
    if (!o)
        return NULL;
    json_object_set_new(o, "job", json_integer((json_int_t)j->id));
    json_object_set_new(o, "name", json_string(j->name));
    json_object_set_new(o, "state", json_string(ktune_job_state_name(j->state)));
    json_object_set_new(o, "priority", json_integer(j->priority));
    json_object_set_new(o, "gpu", json_integer(j->gpu));
    json_object_set_new(o, "signature", json_string(j->signature));
    json_object_set_new(o, "shapes", shapes_json(j->shapes));
    json_object_set_new(o, "precision", json_string(j->precision));
    json_object_set_new(o, "budget_s", json_real(j->budget_s));
    json_object_set_new(o, "tolerance", json_real(j->tolerance));
    json_object_set_new(o, "submitted", json_integer(j->submitted));
    json_object_set_new(o, "started", json_integer(j->started));
    json_object_set_new(o, "finished", json_integer(j->finished));
    json_object_set_new(o, "phase", json_string(j->phase));
    json_object_set_new(o, "trials", json_integer(j->trials));
    json_object_set_new(o, "measured", json_integer(j->measured));
    json_object_set_new(o, "resumed", json_integer(j->resumed));
    json_object_set_new(o, "elapsed_s", json_real(j->elapsed_s));
    json_object_set_new(o, "best_ns", ns_or_null(j->best_ns));
    json_object_set_new(o, "baseline_ns", ns_or_null(j->baseline_ns));
    json_object_set_new(o, "speedup",
                        j->best_ns > 0 && j->baseline_ns > 0
                            ? json_real(j->baseline_ns / j->best_ns)
                            : json_null());
    json_object_set_new(o, "floor_ns", ns_or_null(j->floor_ns));
    json_object_set_new(o, "roofline_fraction", j->best_ns > 0 && j->floor_ns > 0
                                                    ? json_real(j->floor_ns / j->best_ns)
                                                    : json_null());
    json_object_set_new(o, "err_norm", json_real(j->err_norm));
    json_object_set_new(o, "family", json_string(j->family));
    json_object_set_new(o, "schedule", json_string(j->schedule));
    json_object_set_new(o, "record", json_boolean(j->record));
    json_object_set_new(o, "error", json_string(j->error));
    json_t *f = json_object();
    for (int i = 0; f && i < j->n_failures; i++)
        json_object_set_new(f, j->failures[i].name, json_integer(j->failures[i].count));
    json_object_set_new(o, "failures", f);
    json_object_set_new(o, "compile_s", json_real(j->compile_s));
    json_object_set_new(o, "measure_s", json_real(j->measure_s));
    json_object_set_new(o, "owner", j->owner >= 0 ? json_integer(j->owner) : json_null());
    return o;
}

static void fmt_time(int64_t t, char *buf, size_t len)
{
    time_t tt = (time_t)t;
    struct tm tm;
    if (t <= 0 || !localtime_r(&tt, &tm) || !strftime(buf, len, "%Y-%m-%d %H:%M:%S", &tm))
        snprintf(buf, len, "-");
}

static bool job_ended(const ktune_job *j)
{
    return j->state == KTUNE_JOB_DONE || j->state == KTUNE_JOB_FAILED ||
           j->state == KTUNE_JOB_CANCELLED;
}

/* Seconds the job has been in its current life: queued since submission, else its search. */
static double job_elapsed(const ktune_job *j)
{
    if (j->state == KTUNE_JOB_QUEUED && j->submitted > 0) {
        double d = difftime(time(NULL), (time_t)j->submitted);
        return d > 0 ? d : 0;
    }
    return j->elapsed_s;
}

void cli_print_job_result(const ktune_job *j)
{
    char t[32], base[32], sub[32], start[32], fin[32], shapes[256];
    /* what the daemon sends is printed escaped: a name must not drive the terminal */
    printf("job        %" PRIu64 "  %s  (%s, %s)\n", j->id, KT_ESC(j->name),
           shapes_text(j->shapes, shapes, sizeof(shapes)), /* bound symbols: identifiers */
           j->precision[0] ? KT_ESC(j->precision) : "exact");
    printf("state      %s", ktune_job_state_name(j->state));
    if (j->state == KTUNE_JOB_RUNNING && j->phase[0])
        printf(" (%s)", KT_ESC(j->phase));
    if (j->gpu >= 0)
        printf(", gpu %d", j->gpu);
    printf(", priority %d, budget %.0f s\n", j->priority, j->budget_s);
    if (j->owner >= 0)
        printf("owner      uid %lld\n", (long long)j->owner);
    fmt_time(j->submitted, sub, sizeof(sub));
    fmt_time(j->started, start, sizeof(start));
    fmt_time(j->finished, fin, sizeof(fin));
    printf("times      submitted %s, started %s, finished %s\n", sub, start, fin);
    printf("trials     %d (%d measured, %d from the trial log), %.1f s\n", j->trials, j->measured,
           j->resumed, j->elapsed_s);
    printf("failures   ");
    for (int i = 0; i < j->n_failures; i++)
        printf("%s%s %d", i ? ", " : "", KT_ESC(j->failures[i].name), j->failures[i].count);
    printf("%s\n", j->n_failures ? "" : "none");
    printf("cost       compile %.1f s (NVRTC, summed over the pool), measure %.1f s\n",
           j->compile_s, j->measure_s);
    if (j->best_ns > 0) {
        cli_fmt_ns(j->best_ns, t, sizeof(t));
        printf("%-10s %s, error %.2e\n", job_ended(j) ? "winner" : "best", t, j->err_norm);
        if (j->baseline_ns > 0) {
            cli_fmt_ns(j->baseline_ns, base, sizeof(base));
            printf("baseline   cuBLASLt %s: speed-up %.2fx\n", base, j->baseline_ns / j->best_ns);
        }
        if (j->floor_ns > 0) {
            cli_fmt_ns(j->floor_ns, base, sizeof(base));
            printf("roofline   %.3g%% of the floor %s (docs/search.md, \"Roofline\")\n",
                   100.0 * j->floor_ns / j->best_ns, base);
        }
    }
    if (j->family[0]) {
        const char *sp = strchr(j->schedule, ' '); /* the family is its own column */
        printf("kernel     %-10s %s\n", KT_ESC(j->family),
               KT_ESC(sp && strncmp(j->schedule, j->family, (size_t)(sp - j->schedule)) == 0
                          ? sp + 1
                          : j->schedule));
    }
    printf("signature  %s\n", KT_ESC(j->signature));
    if (j->state == KTUNE_JOB_DONE)
        printf("cached     %s\n",
               j->record ? "yes (verified winner written to the cache)" : "no record");
    if (j->error[0]) {
        char err[sizeof(j->error) * 4];
        /* the daemon's own message, its untrusted parts escaped already: keep backslashes */
        printf("%-10s %s\n", j->state == KTUNE_JOB_DONE ? "note" : "error",
               kt_escape(err, sizeof(err), j->error, strlen(j->error), KT_ESC_KEEP_BACKSLASH));
    }
}

int cli_job_exit(const ktune_job *j)
{
    switch (j->state) {
    case KTUNE_JOB_DONE:
        if (j->record)
            return CLI_OK;
        return cli_error("job %" PRIu64 ": no verified kernel%s%s", j->id, j->error[0] ? ": " : "",
                         j->error);
    case KTUNE_JOB_FAILED:
        return cli_error("job %" PRIu64 " failed: %s", j->id,
                         j->error[0] ? j->error : "(no reason)");
    case KTUNE_JOB_CANCELLED:
        return cli_error("job %" PRIu64 " was cancelled%s%s", j->id, j->error[0] ? ": " : "",
                         j->error);
    default:
        return cli_error("job %" PRIu64 " is still %s", j->id, ktune_job_state_name(j->state));
    }
}

typedef struct follow_ctx {
    cli_progress line;
    int last_state;
} follow_ctx;

static int follow_cb(const ktune_job *j, void *ctx)
{
    follow_ctx *f = ctx;
    bool changed = (int)j->state != f->last_state || job_ended(j);
    f->last_state = (int)j->state;
    char line[512], best[32], base[32];
    int n =
        snprintf(line, sizeof(line), "job %" PRIu64 " %s", j->id, ktune_job_state_name(j->state));
    if (j->state == KTUNE_JOB_RUNNING || j->trials > 0) {
        cli_fmt_ns(j->best_ns, best, sizeof(best));
        n += snprintf(line + n, sizeof(line) - (size_t)n,
                      "%s%s  trials %d (%d measured, %d "
                      "from log)  best %s",
                      j->phase[0] ? " " : "", KT_ESC(j->phase), j->trials, j->measured, j->resumed,
                      best);
        if (j->baseline_ns > 0 && j->best_ns > 0 && n < (int)sizeof(line)) {
            cli_fmt_ns(j->baseline_ns, base, sizeof(base));
            snprintf(line + n, sizeof(line) - (size_t)n, "  cuBLASLt %s (%.2fx)", base,
                     j->baseline_ns / j->best_ns);
        }
    } else if (j->state == KTUNE_JOB_QUEUED) {
        snprintf(line + n, sizeof(line) - (size_t)n, " (priority %d)", j->priority);
    }
    /* the time left is the budget's while it runs */
    cli_progress_show(&f->line, changed, job_elapsed(j),
                      j->state == KTUNE_JOB_RUNNING ? j->budget_s : 0, "%s", line);
    return 0;
}

/* Ctrl-C while following a job stops the following, not the job: the handler says so and how
 * to go on (a message made before, written with write(2): all a handler may do), then exits. */
static char interrupt_msg[256];
static size_t interrupt_len;

static void on_interrupt(int sig)
{
    (void)sig;
    ssize_t w = write(STDERR_FILENO, interrupt_msg, interrupt_len);
    (void)w;
    _exit(130);
}

int cli_follow_job(ktune_client *c, uint64_t id, bool show, ktune_job *final)
{
    follow_ctx f = {.last_state = -1};
    cli_progress_init(&f.line, show);
    int n = snprintf(interrupt_msg, sizeof(interrupt_msg),
                     "%sktune: job %" PRIu64 " goes on in ktuned: `ktune watch %" PRIu64
                     "` follows it, `ktune cancel %" PRIu64 "` stops it\n",
                     f.line.tty ? "\n" : "", id, id, id);
    interrupt_len = n > 0 && (size_t)n < sizeof(interrupt_msg) ? (size_t)n : 0;
    struct sigaction sa = {.sa_handler = on_interrupt}, old_int;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int);
    ktune_error err;
    int rc = ktune_watch(c, id, follow_cb, &f, final, &err);
    sigaction(SIGINT, &old_int, NULL);
    cli_progress_end(&f.line);
    if (rc < 0)
        return cli_client_error(NULL, &err);
    return CLI_OK;
}

/* ---- option parsing shared by these commands ---- */

typedef struct cmd_args {
    const char *sub, *help;
    const char *socket;
    bool json, quiet;
    bool want_job; /* takes one JOB argument */
    uint64_t job;
    bool have_job;
    const char *state; /* jobs --state */
    long limit;        /* jobs --limit */
} cmd_args;

static int parse_job_id(const char *sub, const char *s, uint64_t *out)
{
    char *end = NULL;
    if (s[0] == '#')
        s++;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (!s[0] || *end || errno || v == 0 || s[0] == '-')
        return cli_usage_error(sub, "'%s' is not a job id (a positive integer, see `ktune jobs`)",
                               s);
    *out = v;
    return CLI_OK;
}

static int parse_cmd(int argc, char **argv, cmd_args *a)
{
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i], *value = i + 1 < argc ? argv[i + 1] : NULL;
        if (cli_is_help(arg)) {
            fputs(a->help, stdout);
            exit(CLI_OK);
        } else if (strcmp(arg, "--json") == 0) {
            a->json = true;
        } else if (strcmp(a->sub, "watch") == 0 && strcmp(arg, "--quiet") == 0) {
            a->quiet = true;
        } else if (strcmp(arg, "--socket") == 0) {
            if (!value)
                return cli_usage_error(a->sub, "--socket needs a PATH");
            a->socket = value;
            i++;
        } else if (strcmp(a->sub, "jobs") == 0 && strcmp(arg, "--state") == 0) {
            if (!value)
                return cli_usage_error(a->sub, "--state needs queued, running, done, failed or "
                                               "cancelled");
            a->state = value;
            i++;
        } else if (strcmp(a->sub, "jobs") == 0 && strcmp(arg, "--limit") == 0) {
            if ((a->limit = cli_parse_count(a->sub, arg, value)) < 0)
                return CLI_USAGE;
            i++;
        } else if (arg[0] == '-' && arg[1] != '\0' && !(arg[1] >= '0' && arg[1] <= '9')) {
            return cli_usage_error(a->sub, "unknown option '%s'", arg);
        } else if (a->want_job && !a->have_job) {
            int rc = parse_job_id(a->sub, arg, &a->job);
            if (rc != CLI_OK)
                return rc;
            a->have_job = true;
        } else {
            return cli_usage_error(a->sub, "unexpected argument '%s'", arg);
        }
    }
    if (a->want_job && !a->have_job)
        return cli_usage_error(a->sub, "missing JOB (a job id, see `ktune jobs`)");
    return CLI_OK;
}

#define SOCKET_HELP                                                                                \
    "  --socket PATH    ktuned's socket (default: $KTUNE_SOCKET, else /run/ktune/ktuned.sock)\n"

/* ---- ktune jobs ---- */

static const char jobs_help[] =
    "usage: ktune jobs [--state S[,S...]] [--limit N] [--socket PATH] [--json]\n"
    "\n"
    "Lists ktuned's jobs, newest first: id, state, name, shapes, GPU, phase, trials, best time.\n"
    "\n"
    "options:\n"
    "  --state S        only jobs in these states: queued, running, done, failed, cancelled\n"
    "  --limit N        at most N jobs (default: the daemon's, 1000)\n" SOCKET_HELP
    "  --json           a JSON array of jobs (the protocol's Job objects)\n"
    "  -h, --help       show this help\n";

static int parse_states(const char *list, unsigned *mask)
{
    char buf[256];
    snprintf(buf, sizeof(buf), "%s", list);
    *mask = 0;
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        int s = 0;
        while (s <= KTUNE_JOB_CANCELLED &&
               strcmp(tok, ktune_job_state_name((ktune_job_state)s)) != 0)
            s++;
        if (s > KTUNE_JOB_CANCELLED)
            return cli_usage_error("jobs",
                                   "--state '%s' is not queued, running, done, failed or "
                                   "cancelled",
                                   tok);
        *mask |= 1u << s;
    }
    if (!*mask)
        return cli_usage_error("jobs", "--state needs at least one state");
    return CLI_OK;
}

int cli_jobs(int argc, char **argv)
{
    cmd_args a = {.sub = "jobs", .help = jobs_help};
    unsigned mask = 0;
    int rc = parse_cmd(argc, argv, &a);
    if (rc == CLI_OK && a.state)
        rc = parse_states(a.state, &mask);
    if (rc != CLI_OK)
        return rc;
    ktune_client *c = NULL;
    if ((rc = cli_connect(a.socket, &c)) != CLI_OK)
        return rc;
    ktune_job *jobs = NULL;
    size_t n = 0;
    ktune_error err;
    if (ktune_jobs(c, mask, (int)a.limit, &jobs, &n, &err) < 0) {
        rc = cli_client_error(NULL, &err);
        goto out;
    }
    if (a.json) {
        json_t *arr = json_array();
        for (size_t i = 0; i < n && arr; i++)
            if (json_array_append_new(arr, cli_job_json(&jobs[i])) < 0) {
                json_decref(arr);
                arr = NULL;
            }
        rc = cli_print_json(arr);
        goto out;
    }
    if (n == 0) {
        printf("no jobs%s%s\n", a.state ? " in state " : "", a.state ? a.state : "");
        goto out;
    }
    printf("%6s  %-9s  %-22s  %-20s  %3s  %-6s  %6s  %10s  %8s\n", "ID", "STATE", "NAME", "SHAPES",
           "GPU", "PHASE", "TRIALS", "BEST", "ELAPSED");
    for (size_t i = 0; i < n; i++) {
        const ktune_job *j = &jobs[i];
        char best[32], gpu[8], el[16], shapes[256];
        cli_fmt_ns(j->best_ns, best, sizeof(best));
        snprintf(gpu, sizeof(gpu), j->gpu >= 0 ? "%d" : "-", j->gpu);
        snprintf(el, sizeof(el), "%.1fs", job_elapsed(j));
        printf("%6" PRIu64 "  %-9s  %-22.22s  %-20.20s  %3s  %-6s  %6d  %10s  %8s\n", j->id,
               ktune_job_state_name(j->state), KT_ESC(j->name),
               shapes_text(j->shapes, shapes, sizeof(shapes)), gpu,
               j->state == KTUNE_JOB_RUNNING ? KT_ESC(j->phase) : "", j->trials, best, el);
    }
out:
    free(jobs);
    ktune_disconnect(c);
    return rc;
}

/* ---- ktune status | watch | cancel ---- */

static const char status_help[] =
    "usage: ktune status JOB [--socket PATH] [--json]\n"
    "\n"
    "Shows one job: state, phase, trials, best time so far, the cuBLASLt baseline, its fraction\n"
    "of the graph's roofline floor on its GPU (docs/search.md, \"Roofline\"), the winning\n"
    "kernel once done, and why it failed or was cancelled.\n"
    "\n"
    "options:\n" SOCKET_HELP "  --json           the job as a JSON object\n"
    "  -h, --help       show this help\n";

static const char watch_help[] =
    "usage: ktune watch JOB [--socket PATH] [--quiet] [--json]\n"
    "\n"
    "Follows a job until it ends, with a progress line on stderr (redrawn on a terminal, a plain\n"
    "line every few seconds otherwise: elapsed time, the budget's time left, phase, trials,\n"
    "best so far against cuBLASLt), then prints its result. Interrupting the watch does not\n"
    "stop the job.\n"
    "\n"
    "options:\n" SOCKET_HELP "  --quiet          no progress line\n"
    "  --json           no progress; the final job as a JSON object\n"
    "  -h, --help       show this help\n"
    "\n"
    "Exits 0 when the job is done with a verified kernel cached, 1 otherwise.\n";

static const char cancel_help[] =
    "usage: ktune cancel JOB [--socket PATH] [--json]\n"
    "\n"
    "Cancels a job: a queued job at once, a running one after the candidate it is measuring.\n"
    "Cancelling a finished job is an error.\n"
    "\n"
    "options:\n" SOCKET_HELP "  --json           the job as a JSON object\n"
    "  -h, --help       show this help\n";

typedef enum { JOB_STATUS, JOB_WATCH, JOB_CANCEL } job_cmd;

static int job_command(int argc, char **argv, job_cmd cmd)
{
    static const char *const subs[] = {"status", "watch", "cancel"};
    static const char *const helps[] = {status_help, watch_help, cancel_help};
    cmd_args a = {.sub = subs[cmd], .help = helps[cmd], .want_job = true};
    int rc = parse_cmd(argc, argv, &a);
    if (rc != CLI_OK)
        return rc;
    ktune_client *c = NULL;
    if ((rc = cli_connect(a.socket, &c)) != CLI_OK)
        return rc;
    ktune_job j;
    ktune_error err;
    if (cmd == JOB_WATCH) {
        if ((rc = cli_follow_job(c, a.job, !a.json && !a.quiet, &j)) != CLI_OK)
            goto out;
        if (a.json)
            rc = cli_print_json(cli_job_json(&j));
        else
            cli_print_job_result(&j);
        if (rc == CLI_OK)
            rc = cli_job_exit(&j);
        goto out;
    }
    if ((cmd == JOB_STATUS ? ktune_status(c, a.job, &j, &err) : ktune_cancel(c, a.job, &j, &err)) <
        0) {
        rc = cli_client_error(NULL, &err);
        goto out;
    }
    if (a.json)
        rc = cli_print_json(cli_job_json(&j));
    else if (cmd == JOB_STATUS)
        cli_print_job_result(&j);
    else if (j.state == KTUNE_JOB_CANCELLED)
        printf("job %" PRIu64 " cancelled\n", j.id);
    else
        printf("job %" PRIu64 " is %s: it stops after the candidate in flight (see `ktune status "
               "%" PRIu64 "`)\n",
               j.id, ktune_job_state_name(j.state), j.id);
out:
    ktune_disconnect(c);
    return rc;
}

int cli_status(int argc, char **argv)
{
    return job_command(argc, argv, JOB_STATUS);
}

int cli_watch(int argc, char **argv)
{
    return job_command(argc, argv, JOB_WATCH);
}

int cli_cancel(int argc, char **argv)
{
    return job_command(argc, argv, JOB_CANCEL);
}

/* ---- ktune gpus ---- */

static const char gpus_help[] =
    "usage: ktune gpus [--socket PATH] [--json]\n"
    "\n"
    "Lists the GPUs ktuned drives: name, compute capability, SMs, memory, state (starting,\n"
    "idle, busy, down), the job running there, worker restarts. With none, says why in one\n"
    "line.\n"
    "\n"
    "options:\n" SOCKET_HELP "  --json           {\"gpus\": [...], \"note\": \"...\"}\n"
    "  -h, --help       show this help\n";

static void fmt_version(int v, char *buf, size_t len)
{
    if (v <= 0)
        snprintf(buf, len, "-");
    else
        snprintf(buf, len, "%d.%d", v / 1000, (v % 1000) / 10);
}

int cli_gpus(int argc, char **argv)
{
    cmd_args a = {.sub = "gpus", .help = gpus_help};
    int rc = parse_cmd(argc, argv, &a);
    if (rc != CLI_OK)
        return rc;
    ktune_client *c = NULL;
    if ((rc = cli_connect(a.socket, &c)) != CLI_OK)
        return rc;
    ktune_gpu *gpus = NULL;
    size_t n = 0;
    char note[256];
    ktune_error err;
    if (ktune_gpus(c, &gpus, &n, note, &err) < 0) {
        rc = cli_client_error(NULL, &err);
        goto out;
    }
    if (a.json) {
        json_t *arr = json_array();
        for (size_t i = 0; i < n && arr; i++) {
            const ktune_gpu *g = &gpus[i];
            char sm[16];
            snprintf(sm, sizeof(sm), "%d.%d", g->sm_major, g->sm_minor);
            json_array_append_new(
                arr,
                json_pack("{s:i, s:s, s:s, s:i, s:I, s:i, s:i, s:s, s:I, s:i, s:s}", "index",
                          g->index, "name", g->name, "sm", sm, "sm_count", g->sm_count, "mem_bytes",
                          (json_int_t)g->mem_bytes, "driver_version", g->driver_version,
                          "cuda_version", g->cuda_version, "state", g->state, "job",
                          (json_int_t)g->job, "restarts", g->restarts, "error", g->error));
        }
        rc = cli_print_json(arr ? json_pack("{s:o, s:s}", "gpus", arr, "note", note) : NULL);
        goto out;
    }
    if (n == 0) {
        /* The daemon's note usually says "no GPU: ..." itself. */
        printf("%s%s\n", strncmp(note, "no GPU", 6) == 0 ? "" : "no GPU: ",
               note[0] ? note : "ktuned drives none");
        goto out;
    }
    printf("%3s  %-28s  %4s  %4s  %9s  %-5s  %6s  %8s  %6s  %4s\n", "GPU", "NAME", "SM", "SMS",
           "MEMORY", "STATE", "JOB", "RESTARTS", "DRIVER", "CUDA");
    for (size_t i = 0; i < n; i++) {
        const ktune_gpu *g = &gpus[i];
        /* before its worker's hello a GPU has no name, SMs or memory yet: say so, not blanks */
        if (strcmp(g->state, "starting") == 0) {
            printf("%3d  (starting: the worker is saying hello)\n", g->index);
            continue;
        }
        if (!g->name[0] && strcmp(g->state, "down") == 0) {
            printf("%3d  (down: %s)\n", g->index, g->error[0] ? g->error : "no worker");
            continue;
        }
        char sm[16], mem[32], job[24], drv[16], cuda[16];
        snprintf(sm, sizeof(sm), "%d.%d", g->sm_major, g->sm_minor);
        snprintf(mem, sizeof(mem), "%.1f GiB", (double)g->mem_bytes / (1u << 30));
        snprintf(job, sizeof(job), g->job ? "%" PRIu64 : "-", g->job);
        fmt_version(g->driver_version, drv, sizeof(drv));
        fmt_version(g->cuda_version, cuda, sizeof(cuda));
        printf("%3d  %-28.28s  %4s  %4d  %9s  %-5s  %6s  %8d  %6s  %4s\n", g->index, g->name, sm,
               g->sm_count, mem, g->state, job, g->restarts, drv, cuda);
        if (g->error[0])
            printf("     %s\n", g->error);
    }
out:
    free(gpus);
    ktune_disconnect(c);
    return rc;
}

/* ---- ktune stats ---- */

static const char stats_help[] =
    "usage: ktune stats [--socket PATH] [--json]\n"
    "\n"
    "Shows ktuned's state: uptime, clients, requests served, jobs by state, GPUs, resident\n"
    "memory, and its cache (path, records, keys, logged trials, map size and use).\n"
    "\n"
    "options:\n" SOCKET_HELP "  --json           one JSON object\n"
    "  -h, --help       show this help\n";

int cli_stats(int argc, char **argv)
{
    cmd_args a = {.sub = "stats", .help = stats_help};
    int rc = parse_cmd(argc, argv, &a);
    if (rc != CLI_OK)
        return rc;
    ktune_client *c = NULL;
    if ((rc = cli_connect(a.socket, &c)) != CLI_OK)
        return rc;
    ktune_stats s;
    ktune_error err;
    if (ktune_stats_get(c, &s, &err) < 0) {
        rc = cli_client_error(NULL, &err);
        goto out;
    }
    if (a.json) {
        json_t *jobs = json_object();
        for (int k = 0; k <= KTUNE_JOB_CANCELLED && jobs; k++)
            json_object_set_new(jobs, ktune_job_state_name((ktune_job_state)k),
                                json_integer(s.jobs[k]));
        json_t *cache =
            json_pack("{s:s, s:I, s:I, s:I, s:I, s:I}", "path", s.cache_path, "records",
                      (json_int_t)s.cache_records, "keys", (json_int_t)s.cache_keys, "trials",
                      (json_int_t)s.cache_trials, "map_size", (json_int_t)s.cache_map_size,
                      "map_used", (json_int_t)s.cache_map_used);
        rc = cli_print_json(json_pack("{s:f, s:i, s:I, s:o*, s:i, s:I, s:o*}", "uptime_s",
                                      s.uptime_s, "clients", s.clients, "requests",
                                      (json_int_t)s.requests, "jobs", jobs, "gpus", s.gpus,
                                      "rss_bytes", (json_int_t)s.rss_bytes, "cache", cache));
        goto out;
    }
    printf("uptime     %.0f s\n", s.uptime_s);
    printf("clients    %d connected, %" PRIu64 " requests served\n", s.clients, s.requests);
    printf("jobs       %d queued, %d running, %d done, %d failed, %d cancelled\n", s.jobs[0],
           s.jobs[1], s.jobs[2], s.jobs[3], s.jobs[4]);
    printf("gpus       %d\n", s.gpus);
    printf("memory     %.1f MiB resident\n", (double)s.rss_bytes / (1u << 20));
    printf("cache      %s\n", s.cache_path);
    printf("           %" PRIu64 " records under %" PRIu64 " keys, %" PRIu64 " trials logged\n",
           s.cache_records, s.cache_keys, s.cache_trials);
    printf("           map %.1f of %.1f MiB used\n", (double)s.cache_map_used / (1u << 20),
           (double)s.cache_map_size / (1u << 20));
out:
    ktune_disconnect(c);
    return rc;
}
