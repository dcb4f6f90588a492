/* The ktune cache: one LMDB environment in a directory, with the named databases `kernels` (per
 * key the best verified record and its runner-ups), `trials` (every measured candidate), `jobs`
 * (the daemon's journal) and `meta` (schema version). docs/formats.md (part 3) has the layout.
 *
 * Errors: every function returns 0 or a negative errno and, when err is non-NULL, a one-line
 * detail in it. Common codes: -ENOENT (nothing under that key, or no cache in the directory),
 * -EINVAL (bad argument), -EBADMSG (a corrupt record or bundle), -ENOSPC (the map cannot grow any
 * further, or the disk is full), -EPROTO (the cache was written by a newer ktune), -EACCES,
 * -ENOMEM.
 *
 * Threads and processes: a cache_env may be shared by threads: every call holds the handle's
 * lock for its whole duration (LMDB allows one environment per process, so the daemon's loop and
 * its job threads share one). A list/foreach callback runs with the lock held. Any number of
 * processes may open the same directory at once: readers never block the writer, and writers in
 * different processes serialise on LMDB's lock. Do not use a cache_env across fork(): open a new
 * one in the child.
 *
 * Read-only opens (CACHE_RDONLY) need only read access to the directory. LMDB's readers
 * normally register in the lock file (lock.mdb) so that a writer never reuses the pages they
 * read; when that file cannot be opened for writing (another user's cache, a read-only
 * deployment), the open falls back to reading without locks (MDB_NOLOCK). Such a reader takes
 * no reader slot, so a writer in another process may reuse pages it is still reading: a read
 * can then see a torn value. The SHA-256 checksum of every stored value catches that: the value
 * is reported as corrupt (-EBADMSG) and never decoded into a record; a caller that reads a
 * cache being written (the deploy-time runtime) reads it once more before giving up on it.
 *
 * Transactions: each call runs in its own transaction. A write call (put, delete, trial append,
 * import, merge) commits exactly once, just before it returns 0; on failure nothing it did is
 * visible. Read calls use a short read-only transaction that ends before they return. */
#pragma once

#include "record.h"

/* The `meta` schema_version this build writes and reads. 2: keys carry the problem digest and
 * the tolerance (records of schema 1 were keyed by symbol names and are dropped, see cache_open) */
#define CACHE_SCHEMA_VERSION 2
#define CACHE_KEY_MAX        300 /* bytes of an encoded key */
#define CACHE_RUNNER_UPS     3   /* default number of runner-ups kept per key */

typedef struct cache_env cache_env;

enum cache_open_flags {
    CACHE_RDONLY = 1u << 0, /* read-only: the cache must exist; no write call is allowed */
};

typedef struct cache_options {
    size_t map_size;     /* initial map size in bytes; 0: 64 MiB. A larger existing file wins. */
    size_t max_map_size; /* growth stops here (-ENOSPC); 0: 64 GiB */
    int runner_ups;      /* runner-ups kept per key besides the best, 0..32; -1: default 3 */
} cache_options;

/* Opens (read-write: creating the directory and databases when missing) the cache in dir. opts
 * may be NULL for the defaults. On success *out is a new handle the caller closes with
 * cache_close. Read-write opens write the schema version on first use and refuse (-EPROTO) a
 * cache whose schema version is newer than CACHE_SCHEMA_VERSION; read-only opens refuse it too. */
int cache_open(const char *dir, unsigned flags, const cache_options *opts, cache_env **out,
               kt_err *err);
/* Closes the handle; NULL is a no-op. Every transaction of the handle must have ended. */
void cache_close(cache_env *env);
/* The directory the handle was opened on; valid until cache_close. */
const char *cache_path(const cache_env *env);

/* ---- keys ---- */

/* The GPU id: the first CACHE_GPU_ID_BYTES of SHA-256 over the canonical fingerprint bytes. */
void cache_gpu_id(const cache_gpu *gpu, uint8_t id[CACHE_GPU_ID_BYTES]);

/* Encodes k into buf (CACHE_KEY_MAX bytes suffice): version byte, GPU id, signature, precision,
 * problem digest, tolerance (IEEE-754 bits, big-endian; 0 for the default). The shapes are
 * checked (names, values, duplicates) but not encoded: the problem digest stands for them, so
 * equal problems under other symbol names share a key. Returns 0 or -EINVAL (bad symbol name or
 * value, duplicate or too many shapes, a negative or non-finite tolerance). */
int cache_key_encode(const cache_key *k, uint8_t *buf, size_t cap, size_t *len, kt_err *err);

typedef enum cache_prefix {
    CACHE_PREFIX_GPU,       /* every record of one GPU */
    CACHE_PREFIX_SIGNATURE, /* one graph on one GPU, every precision and shape */
    CACHE_PREFIX_PRECISION, /* one graph and precision on one GPU, every shape */
} cache_prefix;
/* Writes the leading bytes that every key sharing k's parts up to `level` starts with. buf needs
 * CACHE_KEY_MAX bytes. For cache_list. */
void cache_key_prefix(const cache_key *k, cache_prefix level, uint8_t *buf, size_t *len);

/* ---- kernel records ---- */

/* Inserts rec into the ranking of its key: the best verified record, then up to runner_ups others
 * ordered by the ranking rule (faster median first; then smaller p90; then older created time;
 * then the smaller checksum). At most one record per (family, schedule) is kept per key, the
 * better one; a record byte-identical to a stored one changes nothing. Records that fall off the
 * end are deleted. rec is only read. *rank (may be NULL) receives rec's position (0 = best), or
 * -1 when it did not make the list. Refuses an unverified record (-EINVAL). */
int cache_put(cache_env *env, const cache_record *rec, int *rank, kt_err *err);

/* Decodes the record at position rank (0 = best) of key k into *out, which the caller releases
 * with cache_record_free (also after a failure). Returns -ENOENT when there is none, -EBADMSG
 * (reported, not returned) when the stored bytes fail their checksum or do not decode. */
int cache_get(cache_env *env, const cache_key *k, int rank, cache_record *out, kt_err *err);

/* Deletes every record (best and runner-ups) of key k. -ENOENT when there was none. */
int cache_delete(cache_env *env, const cache_key *k, kt_err *err);

/* Called for each record in key order, ranks of one key in rank order. rec is valid only during
 * the call, and the callback must not call into the same cache_env. A non-zero return stops the
 * walk, and cache_list returns it. */
typedef int (*cache_list_cb)(const cache_record *rec, int rank, void *ctx);

/* Walks the records whose encoded key starts with prefix (every record when prefix_len is 0).
 * best_only skips runner-ups. A corrupt record is logged with its key, counted in *n_corrupt (may
 * be NULL) and skipped. Returns 0, the callback's non-zero value, or a negative errno. */
int cache_list(cache_env *env, const uint8_t *prefix, size_t prefix_len, bool best_only,
               cache_list_cb cb, void *ctx, size_t *n_corrupt, kt_err *err);

/* The fingerprints of the GPUs that have verified records, one per GPU id, in key order. Costs one
 * seek and one record decode per GPU, whatever the number of records. *out is malloc'd (free()
 * it), *n its length. */
int cache_gpus(cache_env *env, cache_gpu **out, size_t *n, kt_err *err);

typedef struct cache_stats {
    uint32_t schema_version;
    size_t map_size; /* current map size in bytes */
    size_t map_used; /* bytes of the map in use (last page + 1) */
    size_t max_map_size;
    uint32_t page_size;
    size_t keys;    /* keys in `kernels` (rank-0 records) */
    size_t records; /* records in `kernels`, runner-ups included */
    size_t trials;
    size_t jobs;
    uint32_t readers_used, readers_max;
} cache_stats;
int cache_stat(cache_env *env, cache_stats *out, kt_err *err);
/* The cache's generation: the id of the last committed write transaction as a read transaction
 * begun now sees it (LMDB's snapshot id, mdb_txn_id). Every commit, by this process or another
 * (put, delete, trial, journal entry, import, merge), raises it and nothing else changes it, so
 * an answer computed from reads begun after *out was taken is still the cache's answer while
 * the generation stays *out. It is the readers' view rather than mdb_env_info's me_last_txnid:
 * a writer updates the meta page before the lock file's txnid that new readers start from, so
 * me_last_txnid can run ahead of what a read sees. Cheap: a renewed read transaction, no system
 * call. Returns 0 or a negative errno (-EINVAL for a NULL argument). */
int cache_generation(cache_env *env, uint64_t *out, kt_err *err);

/* ---- trials ---- */

/* Stores trial t under (k, t->cand), replacing an earlier entry of the same candidate (its latest
 * outcome is what a resumed search needs). One write transaction. */
int cache_trial_append(cache_env *env, const cache_key *k, const cache_trial *t, kt_err *err);
/* Looks one candidate up. -ENOENT when it was never tried; -EBADMSG when corrupt. */
int cache_trial_get(cache_env *env, const cache_key *k, const char *cand, cache_trial *out,
                    kt_err *err);
/* Walks every trial of key k in candidate-id order; same callback rules as cache_list_cb. Corrupt
 * entries are logged and skipped. */
typedef int (*cache_trial_cb)(const cache_trial *t, void *ctx);
int cache_trial_foreach(cache_env *env, const cache_key *k, cache_trial_cb cb, void *ctx,
                        kt_err *err);

/* ---- bundles and merge (cache/bundle.c, cache/sign.c) ----
 * These live in their own library (ktbundle, cache_bundle_dep in cache/meson.build) because
 * they need libsodium; libktune and ktuned do not link them. */

#define CACHE_SIGN_PUBLIC_BYTES 32 /* an Ed25519 public key */
#define CACHE_SIGN_SECRET_BYTES 64 /* libsodium's secret key: seed, then public key */
#define CACHE_SIGN_BYTES        64 /* an Ed25519 signature */
#define CACHE_KEY_ID_LEN        25 /* "ed25519:" + 16 hex digits + NUL */
#define CACHE_SIGN_SECRET_FILE  "bundle-signing.key" /* in the key directory, mode 0600 */
#define CACHE_SIGN_PUBLIC_FILE  "bundle-signing.pub" /* beside it: what other hosts trust */
#define CACHE_TRUSTED_DIR       "trusted-keys"       /* in the key directory: NAME.pub files */
#define CACHE_SIGN_CONTEXT      "ktune bundle signature v1" /* signed before the digest */
#define CACHE_SIGN_CONTEXT_LEN  (sizeof(CACHE_SIGN_CONTEXT) - 1)

/* A signing key pair. Holds a secret: clear it with cache_signer_clear when done. */
typedef struct cache_signer {
    uint8_t pk[CACHE_SIGN_PUBLIC_BYTES];
    uint8_t sk[CACHE_SIGN_SECRET_BYTES];
} cache_signer;

/* Loads the key pair of dir/CACHE_SIGN_SECRET_FILE. With create, a missing one is made (dir too:
 * mode 0755): a fresh random key written 0600 beside the target and linked into place only if
 * no other process made one meanwhile (else that one is loaded), and dir/CACHE_SIGN_PUBLIC_FILE
 * (re)written to match; *created (may be NULL) says whether this call made it. Refuses a secret
 * key file readable by group or others (-EACCES), anything but a regular file (-EINVAL), a
 * malformed one (-EINVAL). -ENOENT without create when there is none. */
int cache_signer_open(const char *dir, bool create, cache_signer *out, bool *created, kt_err *err);
/* A fresh key pair in memory only (tests). */
int cache_signer_generate(cache_signer *out, kt_err *err);
void cache_signer_clear(cache_signer *s); /* zeroes *s; NULL is a no-op */
/* "ed25519:" and the first 8 bytes of pk in hex: how records and messages name a key. */
void cache_key_id(const uint8_t pk[CACHE_SIGN_PUBLIC_BYTES], char out[CACHE_KEY_ID_LEN]);
/* A public key file: one line "ktune-ed25519 " and 64 hex digits. */
int cache_public_key_read(const char *path, uint8_t pk[CACHE_SIGN_PUBLIC_BYTES], kt_err *err);
int cache_public_key_write(const char *path, const uint8_t pk[CACHE_SIGN_PUBLIC_BYTES],
                           kt_err *err);
/* Ed25519 over CACHE_SIGN_CONTEXT then the 32-byte digest. */
int cache_sign_digest(const cache_signer *s, const uint8_t digest[32],
                      uint8_t sig[CACHE_SIGN_BYTES], kt_err *err);
bool cache_verify_digest(const uint8_t pk[CACHE_SIGN_PUBLIC_BYTES], const uint8_t digest[32],
                         const uint8_t sig[CACHE_SIGN_BYTES]);

/* What import and merge accept: bundles signed by one of keys; with trust_unsigned also
 * unsigned (format 1) bundles and bundles signed by another key. The caller owns it. */
typedef struct cache_trust {
    uint8_t (*keys)[CACHE_SIGN_PUBLIC_BYTES];
    size_t n, cap;
    bool trust_unsigned;
    const char *where; /* for messages: where trusted keys are kept (may be NULL) */
} cache_trust;
int cache_trust_add(cache_trust *t, const uint8_t pk[CACHE_SIGN_PUBLIC_BYTES]); /* 0, -ENOMEM */
/* Adds every dir/NAME.pub (not dot files); a missing dir adds nothing. A malformed key file is
 * an error naming it (-EINVAL): a key meant to be trusted is not silently ignored. */
int cache_trust_add_dir(cache_trust *t, const char *dir, kt_err *err);
bool cache_trust_has(const cache_trust *t, const uint8_t pk[CACHE_SIGN_PUBLIC_BYTES]);
void cache_trust_free(cache_trust *t); /* frees the key list; t itself is the caller's */

/* Writes every kernel record (best and runner-ups, exact stored bytes) into a bundle file at
 * path, replacing it atomically (written beside it, then renamed: kt_atomic_begin in
 * ops/util.h). path must be a regular file or nothing; anything else (a FIFO, a device, a
 * symbolic link, a directory) is refused (-EEXIST, -EISDIR) and left untouched. Corrupt and
 * implausible (cache_record_check_floor) records are reported and left out. With signer the
 * bundle is format 2, signed; without, format 1 (unsigned: accepted only with trust_unsigned).
 * *n (may be NULL) receives the number of records written. */
int cache_export(cache_env *env, const char *path, const cache_signer *signer, size_t *n,
                 kt_err *err);

/* Restores a bundle: checks the whole file (framing, file checksum, signature against trust,
 * every record's checksum, decoding, verified flag, key against the record's own key parts,
 * physical floor) before writing anything, then in one write transaction replaces, for each key
 * in the bundle, all of that key's records with the bundle's, each stamped with the bundle's
 * signer (cache_record.signer; otherwise byte for byte). Keys not in the bundle are untouched.
 * -EPERM for an unsigned bundle, or one signed by a key not in trust, unless
 * trust->trust_unsigned; -EBADMSG on any defect (a signature that does not verify included),
 * with nothing written. trust NULL trusts no key. */
int cache_import(cache_env *env, const char *path, const cache_trust *trust, size_t *n,
                 kt_err *err);

typedef struct cache_merge_stats {
    size_t read;        /* records read from the source */
    size_t corrupt;     /* source records skipped as corrupt (cache directories only) */
    size_t implausible; /* skipped as below their physical floor (cache directories only) */
    size_t keys;        /* distinct keys in the source */
    size_t changed;     /* keys whose ranking in this cache changed */
} cache_merge_stats;

/* Merges src (a cache directory or a bundle file) into env, in one write transaction: for each
 * key, the records of both sides are ranked by cache_put's rule and the list is truncated to
 * env's runner_ups, so the faster verified record wins and equal times are decided by the fixed
 * tie rule. Deterministic, commutative in its result, and idempotent. A bundle is checked and
 * stamped as by cache_import (any defect, or a bundle trust refuses, refuses the merge); a
 * source directory is the operator's own and needs no signature: its corrupt and implausible
 * records are reported and skipped, the others keep their provenance. stats may be NULL. */
int cache_merge(cache_env *env, const char *src, const cache_trust *trust, cache_merge_stats *stats,
                kt_err *err);

/* Writes a consistent copy of the whole cache (kernel records, trial logs, job journal: one LMDB
 * read snapshot, compacted) to dir/data.mdb, creating dir when missing and replacing an earlier
 * copy atomically (kt_atomic_begin: a reader of dir sees the old copy or the new, never half).
 * Safe while ktuned writes the cache. dir is then a cache directory of its own: open it, or copy
 * it back, to restore. -EINVAL when dir is the cache's own directory. *bytes (may be NULL)
 * receives the copy's size. */
int cache_backup(cache_env *env, const char *dir, size_t *bytes, kt_err *err);

/* ---- the job journal (the `jobs` database; cache/job.c) ----
 * The daemon's jobs, keyed by id (8 bytes big-endian, so walks go in submission order). Values
 * are msgpack + SHA-256 like records; a corrupt entry is reported and skipped. docs/protocol.md
 * says what each state means. */

typedef enum cache_job_state {
    CACHE_JOB_QUEUED = 0,
    CACHE_JOB_RUNNING,
    CACHE_JOB_DONE,
    CACHE_JOB_FAILED,
    CACHE_JOB_CANCELLED,
    CACHE_JOB_STATE_COUNT
} cache_job_state;

/* "queued", "running", "done", "failed", "cancelled"; NULL for an unknown value. */
const char *cache_job_state_name(cache_job_state s);
int cache_job_state_from_name(const char *name, cache_job_state *out); /* 0 or -EINVAL */

#define CACHE_JOB_FAILURE_KINDS 8 /* failure classes kept per job */

typedef struct cache_job {
    uint64_t id; /* > 0 */
    cache_job_state state;
    int32_t priority; /* -100..100, higher first */
    int32_t gpu;      /* pinned GPU index, -1: any */
    char name[64];
    uint8_t sig[OPS_SIG_BYTES];
    uint8_t problem[OPS_SIG_BYTES]; /* ops_graph_problem; all zero in entries written before it */
    int n_shapes;
    cache_bound shapes[CACHE_MAX_SHAPES]; /* as submitted: they bind `graph` */
    ops_precision precision;
    double tolerance; /* 0: the default */
    double budget_s;
    uint8_t *graph; /* the graph's msgpack form (ops_graph_to_msgpack), malloc'd, owned */
    size_t graph_len;
    int64_t submitted, started, finished; /* unix seconds, 0: not yet */
    double elapsed_s;                     /* running time over all attempts */
    /* progress and outcome */
    int32_t trials, measured, resumed;
    double best_ns, baseline_ns, err_norm;
    char family[32];
    char schedule[256];
    bool record;     /* a verified winner was cached */
    char error[256]; /* why failed / cancelled / no record */
    /* rejected candidates by class, named as srch_status_str names them ("wrong", "fault",
     * "compile_error", ...): the protocol's Job "failures", kept across restarts */
    int n_failures;
    struct cache_job_failure {
        char name[16];
        int32_t count;
    } failures[CACHE_JOB_FAILURE_KINDS];
    /* the tuning cost over all attempts (srch_tune_result's): NVRTC seconds summed over the
     * compile pool, and seconds spent measuring; 0 in entries written before they existed */
    double compile_s, measure_s;
    /* the uid that submitted the job: cancelling it takes that uid, root or ktuned's admin group
     * (docs/protocol.md, "Ownership"); 0 (root) in entries written before owners were kept */
    uint32_t owner;
    /* unix milliseconds at which elapsed_s was last brought up to date while the job ran: a
     * daemon killed later than that resumes it with the time its trial log shows since
     * (docs/protocol.md, "Journal and restart"); 0 in older entries */
    int64_t elapsed_at_ms;
    /* the job remeasures: trial log entries older than this (unix milliseconds) are measured
     * again (srch_tune_opts.trials_since_ms); 0: every entry is read back */
    int64_t trials_since_ms;
    /* the roofline floor of the bound graph on the GPU it ran on (ops_graph_roofline), which
     * best_ns is a multiple of; 0 before it ran, or in older entries */
    double floor_ns;
} cache_job;

void cache_job_free(cache_job *j); /* frees j->graph and zeroes *j; NULL is a no-op */
/* Inserts or replaces job j->id (one write transaction). */
int cache_job_put(cache_env *env, const cache_job *j, kt_err *err);
/* -ENOENT when there is no such job; -EBADMSG when corrupt. *out owns its graph. */
int cache_job_get(cache_env *env, uint64_t id, cache_job *out, kt_err *err);
/* Walks every job in id order; j is valid during the call only (same rules as cache_list_cb).
 * Corrupt entries are logged, counted in *n_corrupt (may be NULL) and skipped. */
typedef int (*cache_job_cb)(const cache_job *j, void *ctx);
int cache_job_foreach(cache_env *env, cache_job_cb cb, void *ctx, size_t *n_corrupt, kt_err *err);
/* One more than the largest id in the journal (1 when empty). */
int cache_job_next_id(cache_env *env, uint64_t *out, kt_err *err);

/* ---- the structural check (cache/check.c) ----
 * LMDB 0.9 trusts its own pages (no checksums): a damaged B-tree page can make any reader,
 * mdb_cursor_get included, read outside the file (SIGBUS) or the map (SIGSEGV). cache_check reads
 * the file in a child process (ktune-cache-check), so such damage kills the child, never the
 * caller, and walks every page reachable from the snapshot's meta page checking what LMDB relies on
 * (page numbers, types, node offsets and sizes inside their page, child and overflow pages inside
 * the file, key order and branch separators, no page reachable twice or both free and in use, each
 * tree's counts). With CACHE_CHECK_VALUES it also verifies and decodes every stored value (records,
 * trials, journal entries) against its key. docs/operations.md, "A damaged cache", says what to do
 * with each verdict. */

typedef enum cache_check_verdict {
    CACHE_CHECK_OK = 0,            /* sound (values too, when they were checked) */
    CACHE_CHECK_DAMAGED_VALUES,    /* sound structure; some values fail their checksum or do not
                                    * decode: readers skip those and serve the rest */
    CACHE_CHECK_DAMAGED_STRUCTURE, /* LMDB's own pages are damaged: the file cannot be trusted */
} cache_check_verdict;

enum cache_check_flags {
    CACHE_CHECK_VALUES = 1u << 0, /* also verify and decode every stored value */
    /* only what a reader relies on: the branch and leaf pages, and every large value's pages
     * inside the file; not the overflow page headers, page ownership or the free list, which
     * only a writer uses. Touches a few pages per thousand values instead of one per large value
     * (100 000 records of 15 KiB: see docs/RELIABILITY.md). For read-only opens (the runtime). */
    CACHE_CHECK_READER = 1u << 1,
};

typedef struct cache_check_report {
    cache_check_verdict verdict;
    char what[640];      /* one line: what is damaged and where ("" when ok) */
    char first_bad[400]; /* the first damaged value: "kernels: KEY: why" ("" when none) */
    int signal;          /* the checking process was killed by this signal (0: it was not) */
    uint64_t txnid;      /* the snapshot checked */
    uint32_t page_size;
    size_t file_bytes; /* size of data.mdb */
    size_t pages_used; /* pages up to the snapshot's last page */
    size_t tree_pages; /* branch, leaf and overflow pages of every tree */
    size_t free_pages; /* pages on the free list */
    size_t records, records_bad, trials, trials_bad, jobs, jobs_bad, meta_bad; /* VALUES only */
    /* of records_bad, those that decode but are faster than their physical floor
     * (cache_record_check_floor): readers do not serve them */
    size_t records_implausible;
    /* values stored in overflow pages whose first page's header is damaged (checked always):
     * readers do not use that header, but a writer replacing the value frees as many pages as it
     * says, so a cache with any must not be written to (cache_check_writable) */
    size_t overflow_bad;
    double seconds; /* wall time of the whole check, fork and wait included */
} cache_check_report;

/* The checking process's executable (installed in libexec; found like ktune-worker, see
 * kt_find_exe) and the variable that overrides where it is. */
#define CACHE_CHECK_EXE "ktune-cache-check"
#define CACHE_CHECK_ENV "KTUNE_CACHE_CHECKER"

/* Checks the cache in dir (read-only; any number of readers and one writer may use it meanwhile)
 * in a child process, ktune-cache-check, that it starts with posix_spawn (no fork of the caller:
 * a large or multithreaded caller, PyTorch's, is neither copied nor run in a child) and waits for,
 * at most timeout_s seconds (<= 0: 60 s). The child starts with the crash signals at their default
 * action, so damage kills it; any thread of a caller holding CUDA contexts, threads or signal
 * handlers may call this. The caller must not reap children it did not start (a SIGCHLD handler
 * calling wait(-1) makes a crashed check indistinguishable from a finished one; it is then
 * reported as damage).
 * Returns 0 with the verdict in *out, or a negative errno when no verdict could be reached:
 * -ENOENT (no cache in dir, or no ktune-cache-check found), -EACCES, -ETIMEDOUT (the child was
 * killed at the limit), -EAGAIN (a writer without reader locks kept changing the file), -EPROTO
 * (the helper refused to run), -ENOMEM, or posix_spawn's and pipe's errors. */
int cache_check(const char *dir, unsigned flags, double timeout_s, cache_check_report *out,
                kt_err *err);
/* The main of ktune-cache-check (cache/check_main.c): argv DIR FLAGS, the shared memory and the
 * pipe from cache_check as descriptors 3 and 4. Returns the exit status. */
int cache_check_serve(int argc, char **argv);
/* Whether a writer (ktuned, import, merge) may use a cache with this report: the structure is
 * sound and no overflow header is damaged (a damaged value alone is fine: it is skipped, and
 * replaced when its key is tuned again). */
bool cache_check_writable(const cache_check_report *r);
/* "ok", "damaged_records", "damaged_structure" (the JSON names of `ktune cache check`). */
const char *cache_check_verdict_name(cache_check_verdict v);
