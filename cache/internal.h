/* Private to cache/: the environment struct, the LMDB error translation, and the helpers that
 * cache.c, key.c, record.c and bundle.c share. Nothing outside cache/ includes this. */
#pragma once

#include "cache.h"

#include <lmdb.h>
#include <pthread.h>

#define CACHE_LOG            "cache"
#define CACHE_KEY_VERSION    1 /* first byte of every encoded key */
#define CACHE_KEY_FIXED      (1 + CACHE_GPU_ID_BYTES + OPS_SIG_BYTES + 1) /* before the shapes */
#define CACHE_SHAPES_MAX     (CACHE_KEY_MAX - CACHE_KEY_FIXED)
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
