/* The NVRTC compile pool: CUDA C source in, cubin and ptxas resource report out.
 *
 * NVRTC serialises calls made from threads of one process, so the pool is N forked worker
 * processes, each compiling one program at a time. A compile that runs past the pool's timeout
 * has its worker killed and respawned. Results are content-addressed: the key is SHA-256 over
 * (NVRTC version, arch, options, source), and with a store directory a key compiled once is
 * never compiled again, by this process or any later one.
 *
 * A pool is owned by one thread; it is not thread-safe. It never owns an event loop: callers
 * either block in srch_pool_next() or (the daemon) watch srch_pool_fds() themselves. */
#pragma once

#include "ops/util.h"

#define SRCH_KEY_BYTES   32
#define SRCH_MAX_KERNELS 16

typedef struct srch_pool srch_pool;

typedef struct srch_pool_opts {
    const char *arch;      /* "sm_90a" (default when NULL) */
    int jobs;              /* worker processes; <= 0 means one per online CPU */
    double timeout_s;      /* per compile; <= 0 means 60 s */
    const char *store_dir; /* content-addressed cubin store, or NULL for none */
    const char *compiler;  /* the ktune-nvrtc executable; NULL: kt_find_exe's lookup */
} srch_pool_opts;

/* The compile server each pool process runs (search/nvrtc_main.c, `ktune-nvrtc ARCH` with its
 * socket as fd 3); $KTUNE_NVRTC overrides the lookup. */
#define SRCH_COMPILER_NAME "ktune-nvrtc"
#define SRCH_COMPILER_ENV  "KTUNE_NVRTC"

/* The compile server's loop on fd (until its peer closes it): NVRTC compiles for arch. */
_Noreturn void srch_compile_serve(int fd, const char *arch);

/* What ptxas reported for one entry point. */
typedef struct srch_kernel_usage {
    char name[128];
    int registers;
    int spill_store_bytes;
    int spill_load_bytes;
    int stack_bytes;
    int smem_bytes; /* static shared memory */
    int barriers;
} srch_kernel_usage;

typedef enum srch_compile_status {
    SRCH_COMPILE_OK = 0,
    SRCH_COMPILE_REJECTED, /* NVRTC rejected the source; the log says why */
    SRCH_COMPILE_TIMEOUT,  /* the worker ran past timeout_s and was killed */
    SRCH_COMPILE_CRASH,    /* the worker died (signal, OOM) */
} srch_compile_status;

typedef struct srch_compile_result {
    uint64_t tag; /* the caller's tag from srch_pool_submit */
    srch_compile_status status;
    uint8_t key[SRCH_KEY_BYTES];
    void *cubin; /* malloc'd; owned by the result */
    size_t cubin_len;
    char *log; /* NVRTC log including the ptxas report; malloc'd, may be "" */
    int n_kernels;
    srch_kernel_usage kernels[SRCH_MAX_KERNELS];
    double seconds; /* compile wall time (0 for a store hit) */
    bool from_store;
} srch_compile_result;

/* Starts the workers. Returns 0 or a negative errno with detail in err. */
int srch_pool_new(const srch_pool_opts *opts, srch_pool **out, kt_err *err);
/* Queues source (copied) for compilation and hands it to an idle worker at once. Never waits
 * for a compile. 0 or -ENOMEM. */
int srch_pool_submit(srch_pool *p, const char *source, uint64_t tag);
/* Number of submitted compiles whose result has not been returned yet. */
int srch_pool_pending(const srch_pool *p);
/* Waits for the next finished compile (in completion order) and moves it into *out, which the
 * caller releases with srch_compile_result_release. Returns 0, -EAGAIN when nothing is pending,
 * or another negative errno on a pool failure (detail in err). */
int srch_pool_next(srch_pool *p, srch_compile_result *out, kt_err *err);
/* Drops the compiles not yet started and the results not yet returned; the ones in flight still
 * arrive through srch_pool_next (at most one per worker). For a caller that stops early. */
void srch_pool_discard(srch_pool *p);
/* Kills the workers and frees everything, including results not yet returned. */
void srch_pool_free(srch_pool *p);
void srch_compile_result_release(srch_compile_result *r);

/* Compiles one program in the calling process (what a worker runs). log and cubin are
 * malloc'd into r. Returns 0 (r->status tells OK or ERROR) or a negative errno. */
int srch_nvrtc_compile(const char *source, const char *arch, srch_compile_result *r);
/* Parses the ptxas "-v" report in log into r->kernels. Returns the number of kernels found. */
int srch_parse_ptxas_report(const char *log, srch_compile_result *r);
const char *srch_status_name(srch_compile_status s);
