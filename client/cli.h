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

int cli_check(int argc, char **argv);
int cli_cache(int argc, char **argv);

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
/* Parses a positive integer option value; prints a usage error and returns -1 if invalid. */
long cli_parse_count(const char *sub, const char *opt, const char *value);

int cli_space(int argc, char **argv);
int cli_compile(int argc, char **argv);
int cli_tune(int argc, char **argv);
