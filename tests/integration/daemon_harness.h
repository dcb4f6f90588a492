/* A harness for the daemon's integration tests and the service benchmark: starts `ktuned` on a
 * temporary socket and cache with the fake GPU worker (tests/fake_worker), speaks the wire
 * protocol (docs/protocol.md) with its own small raw-msgpack client, and stops or SIGKILLs the
 * daemon. It does not use libktune: the tests check the protocol itself.
 *
 * Environment: KTUNED_BIN (the daemon), KTUNE_FAKE_WORKER (the fake worker), KTUNE_SOURCE_ROOT
 * (for examples/). Every function returning int returns 0 or a negative errno and, on failure,
 * prints one line saying why to stderr (tests run from threads, so nothing here asserts).
 *
 * Threads: a dh_conn belongs to one thread at a time; dh_daemon functions are called from the
 * test's main thread only. */
#pragma once

#include <msgpack.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* ---- the daemon process ---- */

typedef struct dh_opts {
    const char *gpus;      /* --gpus, NULL: "0" */
    int delay_ms;          /* FAKE_DELAY_MS for the fake worker, 0: none */
    bool log_evals;        /* FAKE_LOG (detailed lines) into dh_daemon.fake_log */
    int compile_jobs;      /* --compile-jobs, <= 0: 2 */
    const char *env[8];    /* more "NAME=VALUE" for the daemon (and so its workers); NULL ends */
    const char *log_level; /* --log-level, NULL: the daemon's default */
    const char *args[8];   /* more arguments for ktuned ("--idle-timeout", "1s", ...); NULL ends.
                            * The harness passes --max-clients-per-uid 1000000 before them. */
} dh_opts;

typedef struct dh_daemon {
    pid_t pid;                            /* 0: not running */
    char root[256];                       /* temporary directory, removed by dh_cleanup */
    char sock[300], cache[300], log[300]; /* socket, cache dir, the daemon's stderr+stdout */
    char fake_log[300];                   /* the fake worker's eval log (dh_opts.log_evals) */
    dh_opts opts;                         /* of the last dh_start */
    int starts;
} dh_daemon;

/* Makes the temporary directory (under $TMPDIR or /tmp; tag names it). */
int dh_init(dh_daemon *d, const char *tag);
/* Starts ktuned with d's socket and cache and waits until it answers hello (timeout_s). A
 * restart reuses the same socket path, cache and logs (the log is appended to). */
int dh_start(dh_daemon *d, const dh_opts *o, double timeout_s);
/* Sends sig and waits up to timeout_s for the daemon to exit; *wstatus (may be NULL) gets its
 * waitpid status. -ETIMEDOUT when it did not exit (it is then SIGKILLed and reaped). The
 * daemon's process group (its workers) is SIGKILLed afterwards in every case. */
int dh_stop(dh_daemon *d, int sig, double timeout_s, int *wstatus);
/* True while the daemon process exists and has not exited (waitpid WNOHANG and kill(pid, 0)). */
bool dh_alive(dh_daemon *d);
/* SIGKILLs what is still running and removes the temporary directory unless KTUNE_KEEP_TMP is
 * set. */
void dh_cleanup(dh_daemon *d);
/* Prints the last `bytes` bytes of the daemon's log to stderr (for failing tests). */
void dh_dump_log(const dh_daemon *d, size_t bytes);
/* VmRSS of pid in bytes from /proc/PID/status, or -1. */
int64_t dh_rss_bytes(pid_t pid);
/* Monotonic seconds. */
double dh_now(void);
/* $KTUNE_TEST_TIME_SCALE (default 1): tests multiply job budgets, latency limits and waits by
 * it, for slow builds (e.g. 5 for -Db_sanitize=address,undefined). */
double dh_scale(void);

/* ---- a connection ---- */

typedef struct dh_conn {
    int fd;
    uint64_t next_id;
    msgpack_unpacker up;
    msgpack_unpacked msg; /* the last message dh_recv returned; valid until the next call */
    bool init;
} dh_conn;

/* Connects to the daemon's socket (-ECONNREFUSED, -ENOENT while it is not listening). */
int dh_connect(dh_conn *c, const char *sock);
void dh_close(dh_conn *c);                        /* idempotent */
int dh_send(dh_conn *c, const void *p, size_t n); /* -EPIPE when the daemon closed it */
/* dh_send with a time limit (dh_send: 10 s): -ETIMEDOUT when the daemon stopped reading. */
int dh_send_for(dh_conn *c, const void *p, size_t n, double timeout_s);
/* Receives the next message (reply or event) into *out (valid until the next call on c).
 * -ETIMEDOUT, -ECONNRESET when the daemon closed the connection, -EPROTO for bytes that are not
 * msgpack. */
int dh_recv(dh_conn *c, double timeout_s, const msgpack_object **out);
/* Reads and discards until the daemon closes the connection: 0, or -ETIMEDOUT. *n_msgs (may be
 * NULL) counts the messages received meanwhile. */
int dh_wait_closed(dh_conn *c, double timeout_s, int *n_msgs);

/* ---- requests ---- */

/* A request under construction: dh_req_begin packs the envelope {"v": 1, "id", "op"} as a map
 * of n_args + 3 entries, then the caller packs n_args keys and values with dh_req_key and the
 * packer (r->pk) or the helpers below. */
typedef struct dh_req {
    msgpack_sbuffer sb;
    msgpack_packer pk;
    uint64_t id;
} dh_req;
void dh_req_begin(dh_req *r, dh_conn *c, const char *op, uint32_t n_args);
void dh_req_key(dh_req *r, const char *key);
void dh_req_str(dh_req *r, const char *key, const char *val);
void dh_req_int(dh_req *r, const char *key, int64_t val);
void dh_req_num(dh_req *r, const char *key, double val);
void dh_req_bool(dh_req *r, const char *key, bool val);
void dh_req_raw(dh_req *r, const char *key, const void *mp, size_t len); /* a packed value */
void dh_req_free(dh_req *r);
/* Sends r and waits for the reply with its id (events of watches are skipped); frees r.
 * *reply is valid until the next call on c. */
int dh_call(dh_conn *c, dh_req *r, double timeout_s, const msgpack_object **reply);
/* Packs {"NAME": value, ...} for n shapes into r (the value of key "shapes"). */
typedef struct dh_shape {
    const char *name;
    int64_t value;
} dh_shape;
void dh_req_shapes(dh_req *r, const dh_shape *s, int n);

/* ---- replies ---- */

/* Looks a dotted path ("job.state", "error.code") up in nested maps; NULL when absent. */
const msgpack_object *dh_get(const msgpack_object *o, const char *path);
bool dh_is_str(const msgpack_object *o, const char *path, const char *s);
bool dh_ok(const msgpack_object *reply); /* "ok" is true */
int64_t dh_int(const msgpack_object *o, const char *path, int64_t dflt);
double dh_num(const msgpack_object *o, const char *path, double dflt);
bool dh_bool(const msgpack_object *o, const char *path, bool dflt);
/* Copies a string (cut to len - 1); "" when absent or not a string. */
void dh_str(const msgpack_object *o, const char *path, char *buf, size_t len);
/* One line describing a reply or event for failure messages (kept short). */
void dh_describe(const msgpack_object *o, char *buf, size_t len);

/* The Job object of docs/protocol.md, as far as the tests look at it. */
typedef struct dh_job {
    uint64_t id;
    char state[16];
    int priority, gpu;
    int64_t submitted, started, finished;
    int trials, measured, resumed;
    double elapsed_s, best_ns;
    bool record;
    char family[32];
    char error[256];
} dh_job;
int dh_job_parse(const msgpack_object *job, dh_job *out); /* -EPROTO when not a Job */
bool dh_job_final(const dh_job *j);                       /* done, failed or cancelled */

/* ---- the ops, one call each ---- */

/* An example graph (examples/NAME.json) in its msgpack form; free *mp. */
int dh_example_graph(const char *name, void **mp, size_t *len);

typedef struct dh_submit_args {
    const void *graph; /* msgpack form */
    size_t graph_len;
    const dh_shape *shapes;
    int n_shapes;
    double budget_s; /* <= 0: leave out */
    int priority;
    int gpu;          /* < 0: leave out */
    const char *name; /* NULL: leave out */
} dh_submit_args;
/* submit; -EREMOTEIO when the daemon answered an error (its line is printed). */
int dh_submit(dh_conn *c, const dh_submit_args *a, double timeout_s, dh_job *job, bool *joined);
int dh_status(dh_conn *c, uint64_t id, double timeout_s, dh_job *job);
/* cancel; *code gets the error code ("" when ok) so callers can expect EINVAL / ENOENT. */
int dh_cancel(dh_conn *c, uint64_t id, double timeout_s, dh_job *job, char code[16]);
/* lookup; *found, and the record's family when found (family may be NULL). */
int dh_lookup(dh_conn *c, const void *graph, size_t graph_len, const dh_shape *shapes, int n,
              double timeout_s, bool *found, char family[32]);
int dh_hello(dh_conn *c, double timeout_s, int64_t *pid);
/* Polls status every poll_s until the job is final (or, with state non-NULL, in that state or
 * final): 0, or -ETIMEDOUT with *job the last seen. */
int dh_wait_job(dh_conn *c, uint64_t id, const char *state, double timeout_s, double poll_s,
                dh_job *job);

/* ---- the fake worker's eval log (FAKE_LOG_DETAIL lines) ---- */

typedef struct dh_eval {
    char key[256];      /* the fake key */
    char sub[17];       /* which group */
    char bindings[128]; /* which job */
    long pid;
    int64_t ms;
    bool load; /* a finalist loaded again to be re-timed, not an evaluation */
} dh_eval;
/* Reads every line of path: *out is malloc'd (free it), *n its count. A missing file is 0
 * lines. */
int dh_read_evals(const char *path, dh_eval **out, size_t *n);
