/* Shared plumbing of the `ktune` CLI: one-line errors, JSON output, option parsing helpers.
 * Each subcommand is `int cli_<name>(int argc, char **argv)` with argv[0] the subcommand name,
 * returning the process exit status (0 success, 1 failure, 2 usage error). */
#pragma once

#include "ops/util.h"

#include <jansson.h>
#include <stdio.h>

enum { CLI_OK = 0, CLI_FAIL = 1, CLI_USAGE = 2 };

/* Prints "ktune: <message>" as one line on stderr and returns CLI_FAIL. */
int cli_error(const char *fmt, ...) KT_PRINTF(1, 2);
/* Prints "ktune <sub>: <message>" and a hint to run --help, returns CLI_USAGE. */
int cli_usage_error(const char *sub, const char *fmt, ...) KT_PRINTF(2, 3);
/* Prints v as indented JSON on stdout followed by a newline and releases it. Returns CLI_OK,
 * or CLI_FAIL when v is NULL (an allocation failed while building it). */
int cli_print_json(json_t *v);
/* True when s is "--help" or "-h". */
bool cli_is_help(const char *s);

/* The progress line of compile, tune, batch and watch, on stderr: on a terminal one line redrawn
 * in place, through a pipe a line when something changed or every few seconds, nothing when not
 * shown (--quiet, --json). Each line starts with the elapsed time, and with an expected total
 * the time left: "[  12.3s of 60s, 47.7s left] ...". */
typedef struct cli_progress {
    bool show, tty;
    bool drawn;    /* a redrawn line is up: cli_progress_end ends it */
    double last_s; /* monotonic seconds of the last line through a pipe */
} cli_progress;
void cli_progress_init(cli_progress *p, bool show);
/* total_s: the expected whole (a budget, an estimate), <= 0 when unknown; changed: a line
 * through a pipe now, not at the next period. */
void cli_progress_show(cli_progress *p, bool changed, double elapsed_s, double total_s,
                       const char *fmt, ...) KT_PRINTF(5, 6);
void cli_progress_end(cli_progress *p);
double cli_mono_s(void);

int cli_check(int argc, char **argv);
int cli_cache(int argc, char **argv);
int cli_lookup(int argc, char **argv); /* cli_lookup.c: the runtime's lookup, no daemon */
int cli_trials(int argc, char **argv); /* cli_lookup.c: a graph's trial log, no daemon */
int cli_report(int argc, char **argv); /* cli_report.c: a job's HTML page, no daemon */

#include "ops/family.h"
#include "ops/ops.h"

#define CLI_MAX_BINDINGS 32

/* The arguments every graph command shares: GRAPH.json, --shape, --precision, --json, --help. */
typedef struct cli_graph_args {
    const char *sub;  /* subcommand name, for messages */
    const char *help; /* printed by --help */
    const char *path;
    bool json;
    ops_precision precision;
    ops_binding bindings[CLI_MAX_BINDINGS];
    int n_bindings;
} cli_graph_args;

/* Parses argv (argv[0] is the subcommand). Options it does not know go to extra(ctx, option,
 * value) where value is the next argument or NULL; extra returns how many arguments it used
 * (1 or 2), 0 for an unknown option, or a negative CLI status to stop with. --help prints
 * a->help and exits 0. Returns CLI_OK or the exit status to stop with. */
int cli_parse_graph_args(int argc, char **argv, cli_graph_args *a,
                         int (*extra)(void *ctx, const char *opt, const char *value), void *ctx);
/* Reads, validates and binds the graph. On failure prints one line and returns CLI_FAIL. */
int cli_load_graph(const cli_graph_args *a, ops_graph **graph, ops_graph **bound);
/* The roofline of bound under precision p on the GPU named gpu (cuDeviceGetName's; docs/
 * search.md, "Roofline"): 0, or -ENOENT for a GPU not in the device table (no floor). */
int cli_roofline(const ops_graph *bound, ops_precision p, const char *gpu, ops_roofline *out);
/* "91% of the roofline floor 12.3 us (268 MB at 4.19 TB/s: memory-bound)" for a kernel of
 * time_ns. */
void cli_roofline_text(double time_ns, const ops_roofline *r, char *buf, size_t len);
/* {"floor_ns", "fraction", "bound", "bytes", "flops", "bytes_per_s", "flops_per_s", "unit"};
 * fraction null without a time. */
json_t *cli_roofline_json(double time_ns, const ops_roofline *r);
/* Parses a positive integer option value; prints a usage error and returns -1 if invalid. */
long cli_parse_count(const char *sub, const char *opt, const char *value);

int cli_space(int argc, char **argv);
int cli_compile(int argc, char **argv);
int cli_tune(int argc, char **argv);

/* ---- commands through the daemon (cli_tune.c, cli_batch.c, cli_jobs.c) ---- */

#include "client/ktune.h"

int cli_batch(int argc, char **argv);
int cli_jobs(int argc, char **argv);
int cli_status(int argc, char **argv);
int cli_watch(int argc, char **argv);
int cli_cancel(int argc, char **argv);
int cli_gpus(int argc, char **argv);
int cli_stats(int argc, char **argv);

/* "90", "90s", "1.5m", "2h" -> seconds; -1 when malformed or not positive. */
double cli_parse_duration(const char *s);
/* "5.98 us", "-" for ns <= 0. */
void cli_fmt_ns(double ns, char *buf, size_t len);
/* Connects to ktuned at path (NULL: ktune_default_socket()). On failure prints one line
 * ("ktune: cannot reach ktuned at PATH: <reason> (start it with `ktuned`, ...)") and returns
 * CLI_FAIL. */
int cli_connect(const char *path, ktune_client **out);
/* Prints a failed client call as one line, "ktune: <what>: <err->msg>" (what may be NULL);
 * returns CLI_FAIL. */
int cli_client_error(const char *what, const ktune_error *err);

/* A job as a JSON object (the protocol's Job, shapes as an object); NULL on ENOMEM. */
json_t *cli_job_json(const ktune_job *j);
/* The result of a finished job as a small table on stdout (what `tune --local` prints). */
void cli_print_job_result(const ktune_job *j);
/* The exit status a finished job gives: 0 when done with a cached record; otherwise prints
 * why on stderr and returns CLI_FAIL. */
int cli_job_exit(const ktune_job *j);
/* Follows job id until it ends. show: a progress display on stderr (one line redrawn on a
 * TTY, a plain line every few seconds otherwise). Returns CLI_OK with *final filled, or prints
 * the error and returns CLI_FAIL. */
int cli_follow_job(ktune_client *c, uint64_t id, bool show, ktune_job *final);
