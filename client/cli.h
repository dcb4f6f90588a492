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
