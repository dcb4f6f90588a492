/* Private to cache/: the environment struct, the LMDB error translation, and the helpers that
 * cache.c, key.c, record.c, bundle.c and job.c share, and the value codec (codec.c). Nothing
 * outside cache/ includes this. */
#pragma once

#include "cache.h"
#include "ops/msgpack_util.h"

#include <lmdb.h>
#include <msgpack.h>
#include <pthread.h>

#define CACHE_LOG         "cache"
#define CACHE_KEY_VERSION 2 /* first byte of every encoded key (2: problem digest, tolerance) */
/* An encoded key's length: version, GPU id, signature, precision, problem digest, tolerance */
#define CACHE_KEY_FIXED      (1 + CACHE_GPU_ID_BYTES + OPS_SIG_BYTES + 1 + OPS_SIG_BYTES + 8)
#define CACHE_TXN_RETRIES    8  /* MDB_MAP_RESIZED / MDB_READERS_FULL retries */
#define CACHE_GROW_RETRIES   40 /* map doublings per operation (bounded also by max_map_size) */
#define CACHE_MAX_RUNNER_UPS 32 /* keeps rank bytes below '0' (docs: key encoding) */

struct cache_env {
    MDB_env *env;
    MDB_dbi kernels, trials, jobs, meta;
    MDB_txn *rtxn; /* cached read transaction, reset between uses (NULL when none) */
    bool rdonly;
    bool map_full; /* set by cache_lmdb_error when it translates MDB_MAP_FULL */
    size_t max_map_size;
    int runner_ups;
    char *path;
    pthread_mutex_t lock; /* recursive; held by every public call (cache.h "Threads") */
};

/* The handle's lock; NULL is a no-op (the call then fails its own argument check). */
void cache_lock(cache_env *env);
void cache_unlock(cache_env *env);

/* LMDB maps its lock file (lock.mdb) and writes it through the map. A new or short file on a
 * full filesystem is extended sparse by ftruncate, and the first store into a page that has no
 * block gets SIGBUS, not an error (tmpfs and ext4 alike): a full disk killed ktuned, `tune
 * --local` and the cache check. So every opener reserves the file's blocks first, with
 * fallocate(2) (never writes: the file may be in use by other processes), at the size LMDB 0.9
 * gives it: two 64-byte header lines and one line per reader slot (126 by default). Returns 0,
 * -ENOSPC or -EDQUOT when the blocks cannot be had (the caller fails with that, or reads
 * without locks), or another negative errno it leaves to LMDB to report (cannot create the file,
 * a filesystem without fallocate). */
#define CACHE_LOCK_FILE_BYTES ((2 + 126) * 64)
int cache_reserve_lock_file(const char *dir);

/* The one place LMDB's error space becomes ours: returns 0 for MDB_SUCCESS, otherwise a negative
 * errno, logs mdb_strerror (as an error for damage: MDB_CORRUPTED, MDB_PAGE_NOTFOUND, MDB_PANIC;
 * at debug level otherwise, since the caller reports err) and fills err with "<what>: <reason>".
 * MDB_MAP_FULL also sets env->map_full (env may be NULL). */
int cache_lmdb_error(cache_env *env, int mdb_rc, const char *what, kt_err *err);

/* Checks k and writes its shapes sorted by name into sorted. 0 or -EINVAL. */
int cache_key_sorted(const cache_key *k, cache_bound sorted[CACHE_MAX_SHAPES], kt_err *err);
/* Formats an encoded key (with or without its trailing rank byte) for messages:
 * "gpu=<8 hex> sig=<12 hex> prec=exact shapes=M=1024;N=512[ rank=1]". */
void cache_key_describe(const uint8_t *key, size_t len, bool has_rank, char *out, size_t cap);

/* Read transactions: cache_rtxn_begin renews the cached one (or begins one), handling
 * MDB_MAP_RESIZED and MDB_READERS_FULL; cache_rtxn_end resets it. */
int cache_rtxn_begin(cache_env *env, MDB_txn **txn, kt_err *err);
void cache_rtxn_end(cache_env *env);

/* Walks dbi inside one read transaction: positions the cursor with start (MDB_FIRST, MDB_LAST, or
 * MDB_SET_RANGE at *from), then calls fn on each entry moving with MDB_NEXT. fn returns 0 to go
 * on; anything else stops the walk and is returned (a negative one with err filled by fn). A
 * cursor failure is translated with what ("cannot read jobs"). k and v are valid during the call
 * only. Returns 0 after the last entry (none is fine). */
typedef int (*cache_entry_fn)(cache_env *env, const MDB_val *k, const MDB_val *v, void *ctx,
                              kt_err *err);
int cache_cursor_walk(cache_env *env, MDB_dbi dbi, MDB_cursor_op start, const MDB_val *from,
                      cache_entry_fn fn, void *ctx, const char *what, kt_err *err);

/* Runs fn inside one write transaction and commits it. On MDB_MAP_FULL (from fn or the commit)
 * the transaction is aborted, the map doubled (up to max_map_size) and fn run again from the
 * start, so fn must be restartable: it may only change state through txn, or reset what it
 * changes on entry. Returns fn's negative result, or 0 after a successful commit. */
typedef int (*cache_write_fn)(cache_env *env, MDB_txn *txn, void *ctx, kt_err *err);
int cache_write(cache_env *env, cache_write_fn fn, void *ctx, kt_err *err);

/* One stored value being ranked, with the fields the ranking rule reads. */
typedef struct cache_ranked {
    const uint8_t *val; /* stored bytes (not owned) */
    size_t len;
    double time_ns, time_p90_ns;
    int64_t created;
    char *identity; /* "family\0schedule", malloc'd */
    size_t identity_len;
} cache_ranked;

/* Decodes val's ranking fields into *out (val is borrowed, not copied). 0, -EBADMSG, -ENOMEM. */
int cache_ranked_from_value(const uint8_t *val, size_t len, cache_ranked *out, kt_err *err);
void cache_ranked_free(cache_ranked *r);
/* Replaces the stored list of key (encoded, klen bytes, without rank) by the ranking of its
 * current records plus add[0..n_add): one per identity, sorted, truncated to 1 + runner_ups.
 * add entries are borrowed. *changed (may be NULL) tells whether anything was written; *pos (may
 * be NULL) receives the final rank of add[0], or -1. Used by cache_put and cache_merge. */
int cache_rank_into(cache_env *env, MDB_txn *txn, const uint8_t *key, size_t klen,
                    const cache_ranked *add, size_t n_add, bool *changed, int *pos, kt_err *err);
/* Checks that the decoded record's own key parts encode to key (without rank). 0 or -EBADMSG. */
int cache_record_matches_key(const cache_record *r, const uint8_t *key, size_t klen, kt_err *err);

/* ---- codec.c: the stored-value codec of records, trials and jobs ----
 * A stored value is a canonical msgpack map followed by SHA-256 of the map's bytes. */

/* Packing into an sbuffer is ops/msgpack_util.h's kt_mp_pack_* (0, or nonzero when an
 * allocation failed) and this: "shapes": [[name, value], ...] in the given order. */
int cache_pk_shapes(msgpack_packer *pk, const cache_bound *shapes, int n);
/* Appends SHA-256 of sb's bytes and hands the buffer to *out (malloc'd, the caller frees it).
 * 0, or -ENOMEM with sb still owned by the caller. */
int cache_value_finish(msgpack_sbuffer *sb, uint8_t **out, size_t *len);

/* A decoder's context: doc names the value in messages ("record field 'gpu.name': ..."). */
typedef struct cache_dec {
    const char *doc; /* "record", "trial", "job" */
    kt_err *err;     /* may be NULL */
    uint64_t v;      /* the "v" field, once read (decoders whose form depends on it) */
} cache_dec;

/* Checks buf's trailing checksum and unpacks the map before it into *res (the caller destroys
 * res). what (may be NULL) prefixes the envelope messages. 0, -EBADMSG or -ENOMEM. */
int cache_value_unpack(const void *buf, size_t len, msgpack_unpacked *res, const char *what,
                       cache_dec *d);

/* Checked field readers: what is the field's name in messages; each returns 0 or -EBADMSG
 * (-ENOMEM for the copying ones) with "<doc> field '<what>': ..." in d->err, and leaves *out
 * alone on a type error. */
int cache_get_i64(const msgpack_object *o, int64_t lo, int64_t hi, int64_t *out, const char *what,
                  cache_dec *d);
int cache_get_i32(const msgpack_object *o, int32_t *out, const char *what, cache_dec *d);
int cache_get_u64(const msgpack_object *o, uint64_t max, uint64_t *out, const char *what,
                  cache_dec *d);
int cache_get_u32(const msgpack_object *o, uint32_t *out, const char *what, cache_dec *d);
int cache_get_f64(const msgpack_object *o, double *out, const char *what, cache_dec *d);
int cache_get_bool(const msgpack_object *o, bool *out, const char *what, cache_dec *d);
/* A string of fewer than cap bytes, NUL-terminated into buf. */
int cache_get_strbuf(const msgpack_object *o, char *buf, size_t cap, const char *what,
                     cache_dec *d);
/* A malloc'd copy replaces *out (freed first); *len (may be NULL) receives the length. */
int cache_get_strdup(const msgpack_object *o, char **out, size_t *len, const char *what,
                     cache_dec *d);
int cache_get_bindup(const msgpack_object *o, uint8_t **out, size_t *len, const char *what,
                     cache_dec *d);
/* A string among names[0..n): *out receives its index. */
int cache_get_enum(const msgpack_object *o, const char *const *names, int n, int *out,
                   const char *what, cache_dec *d);
/* The "v" field: must equal expect. */
int cache_get_version(const msgpack_object *o, int expect, cache_dec *d);
int cache_get_sig(const msgpack_object *o, uint8_t sig[OPS_SIG_BYTES], cache_dec *d);
int cache_get_precision(const msgpack_object *o, ops_precision *out, cache_dec *d);
/* [[name, value], ...], at most CACHE_MAX_SHAPES, values >= 1; *n counts those decoded. */
int cache_get_shapes(const msgpack_object *o, cache_bound shapes[CACHE_MAX_SHAPES], int *n,
                     cache_dec *d);

/* Decodes the map o field by field: for each key among names[0..n) (n <= 64) calls fn with its
 * index (unknown keys are skipped), stopping at fn's first negative result; then checks that
 * every name was seen exactly once. what (NULL at the top level) prefixes the field names in
 * messages: "record field 'gpu.name' is missing". */
typedef int (*cache_field_fn)(int field, const msgpack_object *v, void *ctx, cache_dec *d);
int cache_decode_map(const msgpack_object *o, const char *const *names, int n, cache_field_fn fn,
                     void *ctx, const char *what, cache_dec *d);
/* The same, except that the fields whose bit (1 << index) is set in optional may be absent (fn
 * is not called for them: ctx keeps what it held, e.g. zero). For fields added to a document
 * after entries of it were stored. */
int cache_decode_map_opt(const msgpack_object *o, const char *const *names, int n,
                         uint64_t optional, cache_field_fn fn, void *ctx, const char *what,
                         cache_dec *d);

/* ---- job.c, for check.c ---- */

/* Decodes the journal entry (key, value) into *out (released with cache_job_free, also after a
 * failure): checksum, fields, and the value's id against the key's. Logs nothing. 0, -EBADMSG or
 * -ENOMEM. */
int cache_job_entry_decode(const void *key, size_t klen, const void *val, size_t vlen,
                           cache_job *out, kt_err *err);
