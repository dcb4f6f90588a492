/* A tuning job's trial log read from the cache, shared by `ktune trials` and `ktune report`
 * (cli_lookup.c). */
#pragma once

#include "cache/cache.h"
#include "cli.h"
#include "client/ktune.h"

typedef struct cli_trial_row {
    cache_gpu gpu;
    cache_trial t;
} cli_trial_row;

/* Job id of the cache's journal: *job (freed with cache_job_free), its graph bound to its
 * shapes (*bound, *kg), and a->path / a->precision / a->bindings set from it (a->bindings point
 * into *job); name receives "job N (NAME)". On failure prints one line and returns CLI_FAIL. */
int cli_load_job_graph(cache_env *cache, uint64_t id, cache_job *job, char *name, size_t cap,
                       cli_graph_args *a, double *tolerance, ops_graph **bound, ktune_graph **kg);

/* Every trial logged under *want's key (its gpu set in turn to each GPU the cache knows):
 * *rows (malloc'd), verified fastest first, then by status (cli_trials' order). 0 or a
 * negative errno with err set. */
int cli_collect_trials(cache_env *cache, cache_key *want, cli_trial_row **rows, size_t *n,
                       kt_err *err);
