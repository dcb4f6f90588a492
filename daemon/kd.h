/* ktuned's internals: the daemon, its connections, jobs and GPUs, and the functions the daemon's
 * files share. Everything here runs on the loop thread unless a comment says otherwise; the only
 * other threads are the GPU threads (gpu.c), which touch nothing of this but their kd_gpu's
 * thread-side fields and the event queue, and libuv's workers preparing large requests (prep.c),
 * which read the request's bytes and touch only their own work item.
 *
 * Files: main.c (start-up, shutdown), config.c, frame.c (framing), server.c (socket,
 * connections, reading and writing), prep.c (large requests decoded and prepared off the loop),
 * proto.c (envelope, dispatch, argument checks, packing), handlers.c (the op handlers), jobs.c (job
 * table, journal, scheduling, watches), gpu.c (GPU threads and the event queue), notify.c
 * (systemd). */
#pragma once

#include "config.h"
#include "frame.h"

#include "cache/cache.h"
#include "ops/msgpack_util.h"
#include "search/tune.h"

#include <msgpack.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/types.h>
#include <uv.h>

#define KD_LOG_SERVER "server"
#define KD_LOG_JOBS   "jobs"
#define KD_LOG_GPU    "gpu"
#define KD_LOG_MAIN   "ktuned"

#define KD_TICK_S          0.25 /* watch events at most this often; also the journal/status tick */
#define KD_SAVE_PERIOD_S   1.0  /* a running job's progress reaches the journal this often */
#define KD_MIN_RESUME_S    5.0  /* budget given to a resumed job whose budget is spent */
#define KD_ABORT_AFTER_S   5.0  /* at shutdown, abort GPU workers still busy after this */
#define KD_GIVE_UP_AFTER_S 8.5  /* at shutdown, stop waiting for GPU threads after this */

typedef struct kd_daemon kd_daemon;
typedef struct kd_conn kd_conn;
typedef struct kd_job kd_job;
typedef struct kd_gpu kd_gpu;

/* ---- connections (server.c) ---- */

struct kd_conn {
    uv_pipe_t pipe; /* pipe.data = this */
    kd_daemon *d;
    uint64_t serial; /* for log lines */
    pid_t pid;
    uid_t uid;
    gid_t gid;
    bool admin;  /* root, ktuned's own uid, or a member of the admin group: may act on any job */
    uint8_t *rx; /* bytes read and not yet consumed: the current message starts at rx + rx_off */
    size_t rx_off, rx_len, rx_cap;
    kd_scan scan;
    size_t queued;      /* reply bytes given to uv_write and not yet written */
    uint64_t active_ms; /* uv_now() of the last byte read or reply written (idle-timeout) */
    int n_watches;      /* watches registered by this connection (jobs.c) */
    bool closing;       /* no more reading or replying */
    bool reading;       /* uv_read_start is in effect */
    bool blocked;       /* queued went over KD_QUEUED_HIGH: no reading or handling until it falls
                         * under KD_QUEUED_LOW (a client that does not read its replies) */
    bool ready;         /* in the daemon's ready list: complete requests may wait in rx */
    bool starved;       /* rx could not grow within max-buffered: the ENOBUFS reply, then close */
    bool busy;          /* a request of it is handled off the loop (prep.c): no reading or
                         * handling until its reply is sent, so replies keep their order; the
                         * worker reads the request in rx, so rx is not grown, moved or freed */
    bool released;      /* the handle closed while busy: the work's end frees it */
    kd_conn *prev, *next;
    kd_conn *ready_prev, *ready_next;
};

/* Memory (server.c): d->buffered counts every connection's request buffer (allocated) and
 * queued replies. A request buffer grows past its first READ_CHUNK only while the total stays
 * within max-buffered; otherwise the request gets an ENOBUFS reply and the connection is closed.
 * A reply that would take a connection's queue past its share (max-buffered over the live
 * connections, at least KD_MAX_REQUEST) while the total is over max-buffered closes the
 * connection. So the total stays under max-buffered plus a first READ_CHUNK per connection.
 *
 * Fairness and backpressure (server.c). A connection's requests are handled at most KD_BURST at a
 * time, and no more once a turn has spent KD_TURN_NS (a turn handles one request at least): the
 * rest wait in its buffer, with reading stopped, for its next turn (an idle handle gives every
 * connection with waiting requests a turn per loop iteration, between polls), so a client
 * pipelining many requests delays another's by one short turn at most, whatever a request
 * costs. While more than
 * KD_QUEUED_HIGH bytes of replies wait to be written, the connection is neither read nor served;
 * it resumes under KD_QUEUED_LOW. KD_MAX_QUEUED (frame.h) stays the last resort: over it (events
 * of watches are queued regardless) the connection is closed. */
#define KD_BURST       16
#define KD_TURN_NS     (2u * 1000 * 1000)
#define KD_QUEUED_HIGH (4u << 20)
#define KD_QUEUED_LOW  (1u << 20)

int kd_server_listen(kd_daemon *d, kt_err *err);
/* Stops accepting and removes the socket file this process created. */
void kd_server_stop_listening(kd_daemon *d);
/* Sends the encoded message in sb (taking its buffer; sb is left empty). A reply queue over
 * KD_MAX_QUEUED closes the connection. Returns 0 or a negative errno (message dropped). */
int kd_conn_send(kd_conn *c, msgpack_sbuffer *sb);
/* Closes the connection now (pending replies are dropped); why is logged. */
void kd_conn_close(kd_conn *c, const char *why);
/* Closes every connection (shutdown). */
void kd_server_close_all(kd_daemon *d);
/* Every KD_TICK_S: closes the connections idle for idle-timeout. */
void kd_server_tick(kd_daemon *d);
/* The off-loop work of c's request is over (prep.c): c is no longer busy. False when its handle
 * closed meanwhile: c is freed now and must not be touched. */
bool kd_conn_work_done(kd_conn *c);
/* After the reply of that request: serves c's buffered requests and reads again. */
void kd_conn_resume(kd_conn *c);

/* ---- the graph half of submit and lookup (handlers.c), done off the loop when large (prep.c) */

/* What submit and lookup read from `graph` and the arguments that go with it, in the order the
 * handlers report errors: the graph (parsed, validated, admitted by srch_graph_admit, signed),
 * `shapes`, `precision`, then the bound problem's digest with `tolerance`. */
typedef enum kd_prep_stage {
    KD_PREP_GRAPH = 0,
    KD_PREP_SHAPES,
    KD_PREP_PRECISION,
    KD_PREP_PROBLEM,
    KD_PREP_DONE, /* as kd_prep.failed: none failed */
} kd_prep_stage;

typedef struct kd_prep {
    const char *op;       /* the op it was run for */
    kd_prep_stage failed; /* the stage that failed, with rc and err; the later ones did not run */
    int rc;
    kt_err err;   /* "<op>: ..." as the handler would have said it */
    ops_graph *g; /* owned (kd_prep_free) */
    uint8_t sig[OPS_SIG_BYTES];
    int n_shapes;
    cache_bound shapes[CACHE_MAX_SHAPES]; /* sorted by name */
    ops_precision precision;
    uint8_t problem[OPS_SIG_BYTES];
    double tolerance; /* normalised: 0 for the default */
} kd_prep;

/* Runs the stages on the request map msg of op ("submit" or "lookup"); max_factor is the
 * config's tolerance_max_factor. Depends on nothing else and touches nothing else: any thread,
 * msg only read. */
void kd_prep_run(kd_prep *p, const msgpack_object *msg, const char *op, double max_factor);
void kd_prep_free(kd_prep *p);

/* Called by server.c with a complete request of len bytes at msg, before decoding it: when the
 * request is a submit or lookup whose graph is not small, or any request over
 * KD_PREP_INLINE_BYTES, decodes and prepares it (in place) on a libuv worker thread, and
 * dispatches it on the loop when that is done; c is busy (kd_conn.busy) meanwhile. True when
 * taken (the caller consumes the bytes); false: handle it now (also when out of memory). */
bool kd_prep_offload(kd_conn *c, const uint8_t *msg, size_t len);

/* ---- requests (proto.c) ---- */

typedef struct kd_req {
    kd_daemon *d;
    kd_conn *c;
    const char *op; /* the op's name, for messages */
    uint64_t id;
    const msgpack_object *msg; /* the whole request map */
    const uint8_t *raw;        /* its bytes as received, for the lookup memo */
    size_t raw_len;            /* bytes at raw */
    msgpack_sbuffer body;      /* the reply's result fields, packed by the handler */
    msgpack_packer pk;
    uint32_t n_fields;
    kd_job *end_job; /* set by watch: send the job's "end" event right after the reply */
    kd_prep *prep;   /* submit, lookup: the graph half, done off the loop (prep.c); NULL: do it */
    kt_err err;
} kd_req;

typedef int (*kd_handler)(kd_req *r);

enum kd_op_flags {
    KD_OP_REFUSED_STOPPING = 1u << 0, /* ESHUTDOWN once shutdown has begun */
};

typedef struct kd_op {
    const char *name;
    kd_handler fn;
    unsigned flags;
} kd_op;

/* The ops (handlers.c); the table ends with a NULL name. */
extern const kd_op kd_ops[];

/* Handles one complete request map from c (envelope, dispatch, reply); raw and raw_len are the
 * bytes msg was decoded from; prep (may be NULL) the graph half of a submit or lookup, done. */
void kd_dispatch(kd_conn *c, const msgpack_object *msg, const uint8_t *raw, size_t raw_len,
                 kd_prep *prep);

/* Starts a result field of the reply: packs key and returns the packer for its value. */
msgpack_packer *kd_field(kd_req *r, const char *key);
/* The request's argument key, or NULL when absent or nil. */
const msgpack_object *kd_arg(const kd_req *r, const char *key);
/* Argument readers: absent -> the default (or -EINVAL when required); wrong type or out of range
 * -> -EINVAL with "<op>: '<key>' must be ..." in r->err. */
int kd_arg_uint(kd_req *r, const char *key, bool required, uint64_t def, uint64_t *out);
int kd_arg_int(kd_req *r, const char *key, int64_t lo, int64_t hi, int64_t def, int64_t *out);
int kd_arg_num(kd_req *r, const char *key, double lo, double hi, double def, double *out);
int kd_arg_bool(kd_req *r, const char *key, bool def, bool *out);
int kd_arg_str(kd_req *r, const char *key, char *buf, size_t cap, const char *def);
/* Sets r->err and returns code: "<op>: <message>". */
int kd_fail(kd_req *r, int code, const char *fmt, ...) KT_PRINTF(3, 4);

/* Replies and events are packed with ops/msgpack_util.h's kt_mp_pack_* and these. */
/* Packs a whole error reply, {"id", "ok": false, "error": {"code", "msg"}}, into sb (initialised
 * by the caller, who sends and destroys it). code is an errno name ("EINVAL"). */
void kd_pack_error_reply(msgpack_sbuffer *sb, uint64_t id, const char *code, const char *msg);
void kd_pack_job(msgpack_packer *pk, const kd_job *j);
void kd_pack_gpu(msgpack_packer *pk, const kd_gpu *g);
/* Sends {"id", "event", "job"} to c. */
void kd_send_event(kd_conn *c, uint64_t id, const char *event, const kd_job *j);

/* ---- jobs (jobs.c) ---- */

typedef enum kd_stop { KD_STOP_NONE = 0, KD_STOP_CANCEL, KD_STOP_SHUTDOWN } kd_stop;

typedef struct kd_watch {
    kd_conn *c;
    uint64_t id; /* the watch request's id */
} kd_watch;

struct kd_job {
    cache_job j;    /* what the journal holds; j.graph owned; j.owner the submitter's uid */
    char phase[16]; /* while running: the search phase */
    int failures[SRCH_STATUS_COUNT];
    kd_watch *watches;
    size_t n_watches, cap_watches;
    bool progressed; /* progress not yet sent to the watchers */
    double saved_at; /* monotonic time of the last journal write while running */
    double elapsed0; /* elapsed_s when the current attempt started */
    double compile0; /* j.compile_s when the current attempt started (the cost sums attempts) */
    double measure0; /* j.measure_s then */
    double run_t0;   /* monotonic time the current attempt started */
    bool crashed;    /* was running when the daemon stopped without saving it: on its next start,
                      * elapsed_s is brought up to its trial log (jobs.c, resumed_time) */
    kd_stop stop;
    uid_t cancel_by; /* who set stop to KD_STOP_CANCEL, for the log */
    int slot;        /* index in d->gpus running it, -1 */
    int ran_on;      /* CUDA index of the GPU running it or that ran it (this process), -1 */
};

/* A submission, checked by the submit handler. graph is borrowed. */
typedef struct kd_submit {
    const ops_graph *graph; /* validated */
    uint8_t sig[OPS_SIG_BYTES];
    uint8_t problem[OPS_SIG_BYTES]; /* ops_graph_problem of the bound graph */
    int n_shapes;
    cache_bound shapes[CACHE_MAX_SHAPES]; /* sorted by name */
    ops_precision precision;
    double budget_s, tolerance; /* tolerance 0: the default (also when asked by its value) */
    int priority, gpu;
    /* retune: a new job even where a done twin exists (a queued or running one is joined); its
     * search reads the twin's trial log back, so only candidates not measured before are
     * measured. remeasure: a retune that measures again what was logged before it */
    bool retune, remeasure;
    char name[64];
    const kd_conn *by; /* the submitter: the job's owner, and whether it may raise a priority */
} kd_submit;

/* Loads the journal: every job into memory, `running` ones back to `queued`. */
int kd_jobs_load(kd_daemon *d, kt_err *err);
void kd_jobs_free(kd_daemon *d);
kd_job *kd_jobs_find(kd_daemon *d, uint64_t id);
/* Joins an identical queued/running/done job (not a done one for a retune; for a remeasure only
 * a queued or running remeasure), or creates one (journal written before return). */
int kd_jobs_submit(kd_daemon *d, const kd_submit *s, kd_job **out, bool *joined, kt_err *err);
/* queued -> cancelled now; running -> its cancel flag. -EPERM unless c owns the job or is an
 * admin (kd_conn.admin); -EINVAL when already finished. */
int kd_jobs_cancel(kd_daemon *d, kd_job *j, const kd_conn *c, kt_err *err);
/* Hands the best queued jobs to idle GPUs. */
void kd_jobs_schedule(kd_daemon *d);
void kd_jobs_count(const kd_daemon *d, int counts[CACHE_JOB_STATE_COUNT]);
bool kd_job_finished(const kd_job *j);
/* Registers a watch (events until the job ends). -ENOMEM. */
int kd_jobs_watch(kd_job *j, kd_conn *c, uint64_t id);
/* Drops every watch of c (the connection is closing). */
void kd_jobs_forget_conn(kd_daemon *d, kd_conn *c);
/* Every KD_TICK_S: progress events, journal saves of running jobs. */
void kd_jobs_tick(kd_daemon *d);
/* Results from GPU threads, on the loop thread. */
void kd_jobs_on_progress(kd_daemon *d, int slot, uint64_t job, const srch_tune_progress *p,
                         const char *phase);
void kd_jobs_on_finish(kd_daemon *d, int slot, uint64_t job, int rc, const char *msg,
                       const srch_tune_result *res);
/* Shutdown: every running job's cancel flag, with the "shutting down" reason. */
void kd_jobs_stop_all(kd_daemon *d);

/* ---- GPUs (gpu.c) ---- */

typedef enum kd_gpu_state {
    KD_GPU_STARTING = 0,
    KD_GPU_IDLE,
    KD_GPU_BUSY,
    KD_GPU_DOWN
} kd_gpu_state;
const char *kd_gpu_state_name(kd_gpu_state s);

/* What the loop hands a GPU thread: a copy of the job's inputs, owned by the thread. */
typedef struct kd_run {
    uint64_t job;
    uint8_t *graph;
    size_t graph_len;
    int n_shapes;
    cache_bound shapes[CACHE_MAX_SHAPES];
    ops_precision precision;
    double tolerance, budget_s;
    int64_t trials_since_ms; /* cache_job's: a remeasuring job's start */
} kd_run;

struct kd_gpu {
    kd_daemon *d;
    int slot;  /* index in d->gpus */
    int index; /* CUDA device index */
    int compile_jobs;
    /* shared with the thread, under lock */
    pthread_mutex_t lock;
    pthread_cond_t cond;
    kd_run *run; /* the next job, taken by the thread */
    bool quit;
    srch_worker *worker; /* live while the thread holds a started worker */
    atomic_bool cancel;
    uv_thread_t thread;
    bool thread_started, thread_exited;
    /* loop thread only */
    kd_gpu_state state;
    uint64_t job; /* running job, 0: none */
    cache_gpu fp;
    char arch[16];
    int restarts;
    char error[256];
};

/* Creates d->gpus from the configuration (auto: /proc/driver/nvidia/gpus) and starts a thread
 * per GPU; each starts its worker and compile pool and reports up or down. */
int kd_gpus_start(kd_daemon *d, kt_err *err);
/* Gives job j to the idle GPU in slot (the job must be queued; it becomes running). */
int kd_gpu_assign(kd_daemon *d, int slot, kd_job *j, kt_err *err);
/* Sets the cancel flag of the job running in slot. */
void kd_gpu_cancel(kd_daemon *d, int slot);
/* Shutdown: every thread quits after its job; abort kills the workers of busy GPUs. */
void kd_gpus_quit(kd_daemon *d);
void kd_gpus_abort(kd_daemon *d);
/* True when every GPU thread has exited (or was never started). */
bool kd_gpus_exited(const kd_daemon *d);
/* Joins exited threads and frees d->gpus; threads still running are left (gave up). */
void kd_gpus_free(kd_daemon *d);
/* GPUs that are idle or busy. */
int kd_gpus_usable(const kd_daemon *d);
/* Slot of CUDA device index, -1 when not configured. */
int kd_gpu_slot(const kd_daemon *d, int index);

/* The event queue from GPU threads to the loop (gpu.c). */
typedef struct kd_event kd_event;
typedef struct kd_events {
    pthread_mutex_t lock;
    kd_event *head, *tail;
    bool closed;
    uv_async_t async;
} kd_events;
int kd_events_init(kd_daemon *d, kt_err *err);
void kd_events_close(kd_daemon *d);

/* ---- the lookup memo (memo.c) ---- */

/* A bounded table from key bytes to the packed result fields of a reply, so that a repeated
 * `lookup` costs neither the graph's decoding and signature nor the record's read and checksum.
 * The key is the request's exact bytes that decide the answer (handlers.c: graph, shapes,
 * precision, gpu), compared in full: a hash collision is never a hit. An entry holds up to
 * KD_MEMO_VARIANTS variants of the reply (without and with the kernel source) and the cache
 * generation (cache_generation) read before the cache was read for it; it is only returned for
 * that same generation, so any commit since (a record, by this daemon or another process) makes
 * the next lookup read the cache again. At most max_entries entries and max_bytes bytes (keys,
 * values and the entries themselves); the least recently used go first. Loop thread only. */
#define KD_MEMO_VARIANTS 2
#define KD_MEMO_ENTRIES  4096
#define KD_MEMO_BYTES    (64u << 20)

typedef struct kd_memo kd_memo;
typedef struct kd_memo_stats {
    uint64_t hits, misses, stale, evictions;
    size_t entries, bytes;
} kd_memo_stats;

/* -EINVAL (max_entries 1..2^24, max_bytes > 0), -ENOMEM. */
int kd_memo_new(size_t max_entries, size_t max_bytes, kd_memo **out);
void kd_memo_free(kd_memo *m);  /* NULL: no-op */
void kd_memo_clear(kd_memo *m); /* every entry goes (a GPU's fingerprint changed); NULL: no-op */
/* A 64-bit hash of n bytes (not cryptographic). */
uint64_t kd_memo_hash(const void *p, size_t n, uint64_t seed);
/* A buffer of at least n bytes for building a key, owned by m, valid until the next call; NULL
 * when out of memory. */
uint8_t *kd_memo_scratch(kd_memo *m, size_t n);
/* Variant `variant` of key's entry at generation gen: true with *val (valid until the next
 * kd_memo call), *vlen and *n_fields. An entry of another generation is dropped. */
bool kd_memo_get(kd_memo *m, const uint8_t *key, size_t klen, int variant, uint64_t gen,
                 const uint8_t **val, size_t *vlen, uint32_t *n_fields);
/* Stores (a copy of) val as variant `variant` of key's entry at generation gen; the entry's
 * variants of another generation go. -E2BIG: larger than a sixteenth of max_bytes (not stored);
 * -ENOMEM (not stored). */
int kd_memo_put(kd_memo *m, const uint8_t *key, size_t klen, int variant, uint64_t gen,
                const uint8_t *val, size_t vlen, uint32_t n_fields);
void kd_memo_stat(const kd_memo *m, kd_memo_stats *out);

/* ---- systemd (notify.c) ---- */

/* The listening socket passed by systemd, or -1 (none; also without libsystemd). */
int kd_notify_listen_fd(void);
void kd_notify_ready(void);
void kd_notify_stopping(void);
/* STATUS=... when it changed since the last call. */
void kd_notify_status(kd_daemon *d);

/* ---- the daemon (main.c) ---- */

struct kd_daemon {
    const kd_config *cfg;
    uv_loop_t loop;
    uv_pipe_t server;
    bool listening;
    bool socket_created; /* we bound cfg->socket (not systemd): unlink it at the end */
    uv_signal_t sig_term, sig_int, sig_hup;
    uv_timer_t tick, stop_timer;
    kd_events ev;
    cache_env *cache;
    kd_job **jobs; /* by increasing id */
    size_t n_jobs, cap_jobs;
    uint64_t next_id;
    kd_memo *memo; /* lookup replies; NULL: none (out of memory at start) */
    kd_gpu *gpus;
    int n_gpus;
    char gpu_note[256]; /* why there is no GPU at all */
    kd_conn *conns;
    int n_conns;
    size_t buffered; /* bytes of every connection's rx buffer and queued replies (max-buffered) */
    kd_conn *ready_head, *ready_tail; /* connections waiting for a turn, in turn order */
    uv_idle_t pump;                   /* running while ready_head: gives the turns */
    uint64_t conn_serial, requests, rejected;
    double t0;
    bool stopping, aborted, finishing;
    double stop_t0;
    char status[256]; /* last STATUS= sent */
};

double kd_now(void);      /* monotonic seconds */
int64_t kd_wall(void);    /* unix seconds */
int64_t kd_wall_ms(void); /* unix milliseconds */
/* Begins the shutdown (signal); idempotent. */
void kd_daemon_stop(kd_daemon *d, const char *why);
/* Called as GPU threads exit during shutdown: finishes once all have. */
void kd_daemon_check_stopped(kd_daemon *d);
/* Something counted in the systemd status changed. */
void kd_daemon_changed(kd_daemon *d);
