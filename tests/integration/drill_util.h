/* Helpers shared by the fault drills of issue 7 (tests/integration/test_daemon_crashloop.c,
 * test_daemon_disk.c, test_cache_corrupt_file.c, test_daemon_conns.c, test_socket_access.c,
 * test_daemon_worker_kill.c): a full consistency check of a cache directory, graphs from JSON
 * text, and small process helpers. Every function returning int returns 0 or a negative errno
 * and prints one line saying why to stderr on failure; nothing here asserts. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* What drill_cache_check found. Counts of stored values and of those that fail their checksum
 * or do not decode, per database; the jobs by state (cache_job_state order). */
typedef struct drill_cache_report {
    size_t records, records_bad;
    size_t trials, trials_bad;
    size_t jobs, jobs_bad;
    size_t trials_by_status[8]; /* cache_trial_status order, of the sound trials */
    size_t jobs_by_state[8];
    size_t listed, listed_corrupt; /* cache_list over every rank: served, skipped as corrupt */
} drill_cache_report;

/* Checks the cache in dir, with nothing else of this process holding it open: first a raw
 * read-only LMDB walk of `kernels`, `trials` and `jobs` that verifies and decodes every value,
 * then a read-write cache_open (the open a restarted daemon does) with cache_list and
 * cache_job_foreach. -EBADMSG when LMDB itself reports damage, other negative errnos when the
 * cache cannot be opened; corrupt values are counted, not errors. */
int drill_cache_check(const char *dir, drill_cache_report *out);
/* One line describing r (for print_message). */
void drill_cache_describe(const drill_cache_report *r, char *buf, size_t len);

/* A graph from JSON text in its msgpack form (free *mp). */
int drill_graph_msgpack(const char *json, void **mp, size_t *len);

/* User + system CPU seconds of pid from /proc/PID/stat, or -1. */
double drill_cpu_seconds(pid_t pid);
/* Open file descriptors of pid (entries of /proc/PID/fd), or -1. */
int drill_count_fds(pid_t pid);
/* Runs argv (argv[0] a path) with stdout and stderr captured into out (cut to len - 1), as
 * uid/gid when uid >= 0 (supplementary groups dropped; needs root), and waits up to timeout_s.
 * *status gets the waitpid status. */
int drill_run(char *const argv[], int uid, int gid, double timeout_s, int *status, char *out,
              size_t len);
