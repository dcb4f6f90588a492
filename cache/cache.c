/* The LMDB environment: open/close, the schema-version check, read and write transactions with
 * map growth, kernel records with their ranking, and the trial log. The policies (ranking,
 * growth, commit points) are documented in cache.h and docs/formats.md (part 3). */
#include "internal.h"

#include <fcntl.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#define DEFAULT_MAP_SIZE     ((size_t)64 << 20)
#define DEFAULT_MAX_MAP_SIZE ((size_t)64 << 30)

#define META_SCHEMA "schema_version"

int cache_lmdb_error(cache_env *env, int mdb_rc, const char *what, kt_err *err)
{
    int code;
    switch (mdb_rc) {
    case MDB_SUCCESS:
        return 0;
    case MDB_NOTFOUND:
        code = -ENOENT;
        break;
    case MDB_KEYEXIST:
        code = -EEXIST;
        break;
    case MDB_MAP_FULL:
        if (env)
            env->map_full = true;
        code = -ENOSPC;
        break;
    case MDB_TXN_FULL:
    case MDB_DBS_FULL:
    case MDB_CURSOR_FULL:
    case MDB_PAGE_FULL:
    case MDB_TLS_FULL:
        code = -ENOSPC;
        break;
    case MDB_READERS_FULL:
    case MDB_MAP_RESIZED:
        code = -EAGAIN;
        break;
    case MDB_CORRUPTED:
    case MDB_PAGE_NOTFOUND:
    case MDB_INVALID:
        code = -EBADMSG;
        break;
    case MDB_VERSION_MISMATCH:
        code = -EPROTO;
        break;
    case MDB_PANIC:
        code = -EIO;
        break;
    case MDB_BAD_RSLOT:
    case MDB_BAD_TXN:
    case MDB_BAD_VALSIZE:
    case MDB_BAD_DBI:
    case MDB_INCOMPATIBLE:
        code = -EINVAL;
        break;
    default:
        code = mdb_rc > 0 ? -mdb_rc : -EIO; /* LMDB passes system errors through as errno */
        break;
    }
    /* Damage to the environment is logged as an error even if a caller swallows the code; every
     * other failure is reported once, by whoever handles err, so it is only traced here. */
    const char *why = mdb_strerror(mdb_rc);
    if (mdb_rc == MDB_CORRUPTED || mdb_rc == MDB_PAGE_NOTFOUND || mdb_rc == MDB_PANIC)
        kt_log_err(CACHE_LOG, "%s: %s", what, why);
    else
        kt_log_debug(CACHE_LOG, "%s: %s (LMDB %d)", what, why, mdb_rc);
    return kt_err_set(err, code, "%s: %s", what, why);
}

/* ---- transactions ---- */

/* mdb_txn_begin with the bounded retries of docs/formats.md ("Transactions and commit points"):
 * another process grew the map (adopt its size), or the reader table is full (clear slots of dead
 * processes). */
static int txn_begin(cache_env *env, unsigned flags, MDB_txn **txn, kt_err *err)
{
    int mrc = MDB_SUCCESS;
    for (int i = 0; i < CACHE_TXN_RETRIES; i++) {
        mrc = mdb_txn_begin(env->env, NULL, flags, txn);
        if (mrc == MDB_MAP_RESIZED) {
            kt_log_debug(CACHE_LOG, "map resized by another process; adopting its size");
            mdb_env_set_mapsize(env->env, 0);
            continue;
        }
        if (mrc == MDB_READERS_FULL) {
            int dead = 0;
            mdb_reader_check(env->env, &dead);
            if (dead == 0)
                usleep(1000u << i);
            continue;
        }
        break;
    }
    return cache_lmdb_error(env, mrc, "cannot begin a transaction", err);
}

int cache_rtxn_begin(cache_env *env, MDB_txn **txn, kt_err *err)
{
    if (env->rtxn) {
        int mrc = mdb_txn_renew(env->rtxn);
        if (mrc == MDB_SUCCESS) {
            *txn = env->rtxn;
            return 0;
        }
        /* MDB_MAP_RESIZED and friends: drop the cached handle and start afresh */
        mdb_txn_abort(env->rtxn);
        env->rtxn = NULL;
        if (mrc == MDB_MAP_RESIZED)
            mdb_env_set_mapsize(env->env, 0);
    }
    int rc = txn_begin(env, MDB_RDONLY, &env->rtxn, err);
    if (rc < 0) {
        env->rtxn = NULL;
        return rc;
    }
    *txn = env->rtxn;
    return 0;
}

void cache_rtxn_end(cache_env *env)
{
    if (env->rtxn)
        mdb_txn_reset(env->rtxn);
}

int cache_cursor_walk(cache_env *env, MDB_dbi dbi, MDB_cursor_op start, const MDB_val *from,
                      cache_entry_fn fn, void *ctx, const char *what, kt_err *err)
{
    MDB_txn *txn = NULL;
    int rc = cache_rtxn_begin(env, &txn, err);
    if (rc < 0)
        return rc;
    MDB_cursor *cur = NULL;
    if ((rc = cache_lmdb_error(env, mdb_cursor_open(txn, dbi, &cur), "cannot open a cursor", err)) <
        0)
        goto out;
    MDB_val k = from ? *from : (MDB_val){0}, v;
    int mrc = mdb_cursor_get(cur, &k, &v, start);
    for (; mrc == MDB_SUCCESS; mrc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        if ((rc = fn(env, &k, &v, ctx, err)) != 0)
            break;
    }
    if (rc == 0 && mrc != MDB_SUCCESS && mrc != MDB_NOTFOUND)
        rc = cache_lmdb_error(env, mrc, what, err);
    mdb_cursor_close(cur);
out:
    cache_rtxn_end(env);
    return rc;
}

/* Whether the file system holding dir has (almost) no space left: LMDB reports a short write as
 * EIO ("short write, filesystem full?"), which is what a full disk looks like when the first pages
 * of a flush overwrite allocated file pages and the next ones need new blocks. */
static bool fs_full(const char *dir)
{
    struct statvfs st;
    return statvfs(dir, &st) == 0 && (uint64_t)st.f_bavail * st.f_frsize < ((uint64_t)1 << 20);
}

/* Doubles the map, up to max_map_size. Only called with no transaction of env active. */
static int grow_map(cache_env *env, kt_err *err)
{
    if (env->rtxn) {
        mdb_txn_abort(env->rtxn);
        env->rtxn = NULL;
    }
    MDB_envinfo info;
    mdb_env_info(env->env, &info);
    size_t cur = info.me_mapsize;
    if (cur >= env->max_map_size)
        return kt_err_set(err, -ENOSPC,
                          "cache %s is full: map at its limit of %zu bytes (raise max_map_size)",
                          env->path, env->max_map_size);
    size_t next = cur > env->max_map_size / 2 ? env->max_map_size : cur * 2;
    int mrc = mdb_env_set_mapsize(env->env, next);
    if (mrc != MDB_SUCCESS)
        return cache_lmdb_error(env, mrc, "cannot grow the cache map", err);
    kt_log_info(CACHE_LOG, "%s: map grown from %zu to %zu bytes", env->path, cur, next);
    return 0;
}

int cache_write(cache_env *env, cache_write_fn fn, void *ctx, kt_err *err)
{
    if (env->rdonly)
        return kt_err_set(err, -EACCES, "cache %s is open read-only", env->path);
    int rc = 0;
    for (int attempt = 0; attempt < CACHE_GROW_RETRIES; attempt++) {
        MDB_txn *txn = NULL;
        env->map_full = false;
        if ((rc = txn_begin(env, 0, &txn, err)) < 0)
            return rc;
        rc = fn(env, txn, ctx, err);
        if (rc < 0) {
            mdb_txn_abort(txn);
        } else {
            /* the commit point of every write call; a full disk shows here (ENOSPC), so the
             * message names the cache */
            char what[512];
            snprintf(what, sizeof(what), "cache %s: cannot commit", env->path);
            rc = cache_lmdb_error(env, mdb_txn_commit(txn), what, err);
            if (rc == -EIO && fs_full(env->path))
                rc = kt_err_set(err, -ENOSPC, "%s: %s", what, strerror(ENOSPC));
        }
        if (rc >= 0)
            return 0;
        if (!env->map_full)
            return rc;
        if ((rc = grow_map(env, err)) < 0)
            return rc;
    }
    return kt_err_set(err, -ENOSPC, "cache %s: still full after %d map doublings", env->path,
                      CACHE_GROW_RETRIES);
}

/* ---- open / close ---- */

/* What a cache is created with, by ktuned and by `ktune tune --local` alike (the umask may take
 * more away): only its owner writes it (one writer process at a time anyway); its group reads
 * it, since deploy-time programs of the daemon's group look kernels up in it read-only (reading
 * without the lock file when they may not write it, env_open); other users get nothing, as the
 * job journal holds job names, graphs and shapes (docs/operations.md, "Permissions"). */
#define CACHE_DIR_MODE  0750
#define CACHE_FILE_MODE 0640

static int mkdir_p(const char *dir, kt_err *err)
{
    char path[4096];
    if (snprintf(path, sizeof(path), "%s", dir) >= (int)sizeof(path))
        return kt_err_set(err, -ENAMETOOLONG, "%s: path too long", dir);
    for (char *p = path + 1;; p++) {
        bool end = *p == '\0';
        if (*p != '/' && !end)
            continue;
        *p = '\0';
        if (mkdir(path, CACHE_DIR_MODE) < 0 && errno != EEXIST)
            return kt_err_set(err, -errno, "%s: cannot create directory: %s", path,
                              strerror(errno));
        if (end)
            break;
        *p = '/';
    }
    return 0;
}

/* Schema 1 keyed records by (GPU, signature, precision, shapes by symbol name): two different
 * problems could share a key (X[M,N] and X[N,M] bound alike), and the tolerance was not in it.
 * Its records and trials cannot be re-keyed (a record does not keep its graph), so they are
 * dropped, with a log line; the job journal stays (its entries keep their graphs, and a job
 * without a problem digest is never joined by a new submission). */
static int migrate_v1(cache_env *env, MDB_txn *txn, kt_err *err)
{
    MDB_stat ks = {0}, ts = {0};
    int mrc = mdb_stat(txn, env->kernels, &ks);
    if (mrc == MDB_SUCCESS)
        mrc = mdb_stat(txn, env->trials, &ts);
    if (mrc == MDB_SUCCESS)
        mrc = mdb_drop(txn, env->kernels, 0);
    if (mrc == MDB_SUCCESS)
        mrc = mdb_drop(txn, env->trials, 0);
    if (mrc != MDB_SUCCESS)
        return cache_lmdb_error(env, mrc, "cannot migrate schema 1", err);
    MDB_val k = {.mv_size = strlen(META_SCHEMA), .mv_data = (void *)META_SCHEMA};
    uint8_t be[4] = {0, 0, 0, CACHE_SCHEMA_VERSION};
    MDB_val v = {.mv_size = 4, .mv_data = be};
    if ((mrc = mdb_put(txn, env->meta, &k, &v, 0)) != MDB_SUCCESS)
        return cache_lmdb_error(env, mrc, "cannot write the schema version", err);
    kt_log_warn(CACHE_LOG,
                "%s: cache schema 1 -> %d: dropped %zu kernel records and %zu trials, whose keys "
                "did not identify their problem; retune to refill",
                env->path, CACHE_SCHEMA_VERSION, ks.ms_entries, ts.ms_entries);
    return 0;
}

static int check_schema(cache_env *env, MDB_txn *txn, bool may_write, kt_err *err)
{
    MDB_val k = {.mv_size = strlen(META_SCHEMA), .mv_data = (void *)META_SCHEMA}, v;
    int mrc = mdb_get(txn, env->meta, &k, &v);
    if (mrc == MDB_NOTFOUND && may_write) {
        uint8_t be[4] = {0, 0, 0, CACHE_SCHEMA_VERSION};
        v = (MDB_val){.mv_size = 4, .mv_data = be};
        return cache_lmdb_error(env, mdb_put(txn, env->meta, &k, &v, 0),
                                "cannot write the schema version", err);
    }
    if (mrc == MDB_NOTFOUND)
        return kt_err_set(err, -ENOENT, "%s is not a kernel cache (no schema version)", env->path);
    if (mrc != MDB_SUCCESS)
        return cache_lmdb_error(env, mrc, "cannot read the schema version", err);
    if (v.mv_size != 4)
        return kt_err_set(err, -EBADMSG, "%s: schema version is damaged", env->path);
    const uint8_t *b = v.mv_data;
    uint32_t ver = (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
    if (ver > CACHE_SCHEMA_VERSION)
        return kt_err_set(err, -EPROTO,
                          "%s has cache schema version %u, this ktune reads up to %d: upgrade "
                          "ktune",
                          env->path, ver, CACHE_SCHEMA_VERSION);
    if (ver == 1 && may_write)
        return migrate_v1(env, txn, err);
    if (ver == 1)
        return kt_err_set(
            err, -EPROTO,
            "%s has cache schema version 1, whose records this ktune does not "
            "serve (their keys told problems apart by symbol names): open it "
            "read-write once (ktuned, or ktune tune --local) to drop them, then retune",
            env->path);
    if (ver < CACHE_SCHEMA_VERSION)
        return kt_err_set(err, -EPROTO,
                          "%s has cache schema version %u, which this ktune cannot "
                          "migrate",
                          env->path, ver);
    return 0;
}

static int open_dbs(cache_env *env, MDB_txn *txn, unsigned flags, kt_err *err)
{
    static const char *names[] = {"kernels", "trials", "jobs", "meta"};
    MDB_dbi *dbis[] = {&env->kernels, &env->trials, &env->jobs, &env->meta};
    for (size_t i = 0; i < KT_ARRAY_LEN(names); i++) {
        int mrc = mdb_dbi_open(txn, names[i], flags, dbis[i]);
        if (mrc == MDB_NOTFOUND)
            return kt_err_set(err, -ENOENT, "%s is not a kernel cache (no '%s' database)", env->path,
                              names[i]);
        if (mrc != MDB_SUCCESS)
            return cache_lmdb_error(env, mrc, "cannot open a database", err);
    }
    return 0;
}

static int init_rw(cache_env *env, MDB_txn *txn, void *ctx, kt_err *err)
{
    int rc = open_dbs(env, txn, MDB_CREATE, err);
    return rc < 0 ? rc : check_schema(env, txn, true, err);
}

int cache_reserve_lock_file(const char *dir)
{
    char path[4200];
    if (snprintf(path, sizeof(path), "%s/lock.mdb", dir) >= (int)sizeof(path))
        return -ENAMETOOLONG;
    int fd =
        open(path, O_RDWR | O_CREAT | O_CLOEXEC, CACHE_FILE_MODE); /* the mode LMDB would give it */
    if (fd < 0)
        return -errno;
    int rc = fallocate(fd, 0, 0, CACHE_LOCK_FILE_BYTES) < 0 ? -errno : 0;
    close(fd);
    return rc;
}

/* Creates and opens env->env on dir. A read-only opener that may not write the directory's lock
 * file (lock.mdb owned by another user, or the directory not writable while the file is missing)
 * opens again with MDB_NOLOCK: it then takes no reader slot, so a writer in another process may
 * reuse the pages it reads; the checksum of every stored value catches such a torn read
 * (cache.h, "Read-only opens"). On failure env->env is closed and NULL. */
static int env_open(cache_env *env, const char *dir, bool rdonly, size_t map, kt_err *err)
{
    unsigned flags = MDB_NOTLS | (rdonly ? MDB_RDONLY : 0);
    int mrc = MDB_SUCCESS;
    /* a reader creates no lock file where there is no cache (LMDB then reports the miss) */
    char data[4200];
    snprintf(data, sizeof(data), "%s/data.mdb", dir);
    int reserved = !rdonly || access(data, F_OK) == 0 ? cache_reserve_lock_file(dir) : 0;
    if (reserved == -ENOSPC || reserved == -EDQUOT) {
        if (!rdonly)
            return kt_err_set(err, reserved,
                              "cannot open cache %s: %s (its lock file needs %d bytes)", dir,
                              strerror(-reserved), CACHE_LOCK_FILE_BYTES);
        kt_log_info(CACHE_LOG,
                    "%s: no room for the lock file (%s): reading without locks, every record's "
                    "checksum still checked",
                    dir, strerror(-reserved));
        flags |= MDB_NOLOCK;
    }
    for (int attempt = 0; attempt < 2; attempt++) {
        if ((mrc = mdb_env_create(&env->env)) != MDB_SUCCESS) {
            env->env = NULL;
            return cache_lmdb_error(env, mrc, "cannot create an LMDB environment", err);
        }
        mdb_env_set_maxdbs(env->env, 4);
        /* A read-only opener adopts whatever size the writer uses. */
        if (!rdonly)
            mdb_env_set_mapsize(env->env, map);
        mrc = mdb_env_open(env->env, dir, flags, CACHE_FILE_MODE);
        if (mrc == MDB_SUCCESS)
            return 0;
        mdb_env_close(env->env);
        env->env = NULL;
        if (!rdonly || (flags & MDB_NOLOCK) || (mrc != EACCES && mrc != EPERM))
            break;
        kt_log_info(CACHE_LOG,
                    "%s: lock file not writable (%s): reading without locks, every record's "
                    "checksum still checked",
                    dir, strerror(mrc));
        flags |= MDB_NOLOCK;
    }
    if (mrc == ENOENT)
        return kt_err_set(err, -ENOENT, "no kernel cache in %s", dir);
    char what[512];
    snprintf(what, sizeof(what), "cannot open cache %s", dir);
    return cache_lmdb_error(env, mrc, what, err);
}

/* Opens the cache in dir, whose data.mdb exists unless a writer creates it in place (only
 * create_cache_file does, in its private directory). */
static int open_env(const char *dir, bool rdonly, size_t map, size_t max, int runner_ups,
                    cache_env **out, kt_err *err)
{
    int rc;
    cache_env *env = calloc(1, sizeof(*env));
    if (!env)
        return kt_err_set(err, -ENOMEM, "out of memory opening %s", dir);
    env->path = strdup(dir);
    if (!env->path) {
        rc = kt_err_set(err, -ENOMEM, "out of memory opening %s", dir);
        goto fail_env;
    }
    pthread_mutexattr_t attr;
    pthread_mutexattr_init(&attr);
    pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&env->lock, &attr);
    pthread_mutexattr_destroy(&attr);
    env->rdonly = rdonly;
    env->max_map_size = max;
    env->runner_ups = runner_ups;

    if ((rc = env_open(env, dir, rdonly, map, err)) < 0)
        goto fail_path;

    if (rdonly) {
        MDB_txn *txn = NULL;
        if ((rc = txn_begin(env, MDB_RDONLY, &txn, err)) < 0)
            goto fail_lmdb;
        rc = open_dbs(env, txn, 0, err);
        if (rc == 0)
            rc = check_schema(env, txn, false, err);
        if (rc == 0) /* the handles outlive the transaction only once it commits */
            rc = cache_lmdb_error(env, mdb_txn_commit(txn), "cannot open the databases", err);
        else
            mdb_txn_abort(txn);
    } else {
        rc = cache_write(env, init_rw, NULL, err);
        /* reader slots of dead processes (a cache_check child killed at its time limit) would
         * keep their snapshots' pages from reuse: a writer clears them when it opens */
        int dead = 0;
        if (rc == 0 && mdb_reader_check(env->env, &dead) == MDB_SUCCESS && dead > 0)
            kt_log_info(CACHE_LOG, "%s: cleared %d reader slot%s of dead processes", dir, dead,
                        dead == 1 ? "" : "s");
    }
    if (rc < 0)
        goto fail_lmdb;
    *out = env;
    return 0;

fail_lmdb:
    mdb_env_close(env->env);
fail_path:
    free(env->path);
fail_env:
    free(env);
    return rc;
}

/* A new cache appears whole or not at all: LMDB creates data.mdb in place, page by page, and a
 * creation cut short (a full disk after one meta page, a crash) left a file every later open
 * called damaged. So a writer finding no data.mdb initialises one in a private directory inside
 * dir (databases and schema committed and synced) and moves it in with a rename that never
 * replaces: if another process created the cache meanwhile, its file stays and is used. */
static int create_cache_file(const char *dir, size_t map, size_t max, int runner_ups, kt_err *err)
{
    char tmp[4200], from[4300], to[4300];
    if (snprintf(tmp, sizeof(tmp), "%s/.new-cache-XXXXXX", dir) >= (int)sizeof(tmp))
        return kt_err_set(err, -ENAMETOOLONG, "%s: path too long", dir);
    if (!mkdtemp(tmp))
        return kt_err_set(err, -errno, "cannot create cache %s: %s", dir, strerror(errno));
    snprintf(from, sizeof(from), "%s/data.mdb", tmp);
    snprintf(to, sizeof(to), "%s/data.mdb", dir);
    cache_env *env = NULL;
    kt_err why = {0};
    int rc = open_env(tmp, false, map, max, runner_ups, &env, &why);
    cache_close(env);
    if (rc < 0) {
        /* name the cache, not the private directory */
        const char *m = strstr(why.msg, tmp);
        m = m && strncmp(m + strlen(tmp), ": ", 2) == 0 ? m + strlen(tmp) + 2 : why.msg;
        rc = kt_err_set(err, rc, "cannot create cache %s: %s", dir, m);
    } else if (renameat2(AT_FDCWD, from, AT_FDCWD, to, RENAME_NOREPLACE) < 0 && errno != EEXIST &&
               (errno != EINVAL || (link(from, to) < 0 && errno != EEXIST))) {
        /* EINVAL: no RENAME_NOREPLACE on this filesystem; link never replaces either */
        rc = kt_err_set(err, -errno, "cannot create cache %s: %s", dir, strerror(errno));
    } else {
        int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd >= 0) { /* the new name survives a crash */
            fsync(dfd);
            close(dfd);
        }
    }
    char lock[4300];
    snprintf(lock, sizeof(lock), "%s/lock.mdb", tmp);
    unlink(from); /* still there when the rename failed, or linked */
    unlink(lock);
    rmdir(tmp);
    return rc;
}

int cache_open(const char *dir, unsigned flags, const cache_options *opts, cache_env **out,
               kt_err *err)
{
    if (!dir || !dir[0] || !out)
        return kt_err_set(err, -EINVAL, "cache_open: no directory given");
    cache_options o = {0, 0, -1};
    if (opts)
        o = *opts;
    if (o.runner_ups < 0)
        o.runner_ups = CACHE_RUNNER_UPS;
    if (o.runner_ups > CACHE_MAX_RUNNER_UPS)
        return kt_err_set(err, -EINVAL, "cache_open: at most %d runner-ups", CACHE_MAX_RUNNER_UPS);
    size_t map = o.map_size ? o.map_size : DEFAULT_MAP_SIZE;
    size_t max = o.max_map_size ? o.max_map_size : DEFAULT_MAX_MAP_SIZE;
    if (max < map)
        max = map;
    bool rdonly = flags & CACHE_RDONLY;

    int rc;
    if (!rdonly) {
        if ((rc = mkdir_p(dir, err)) < 0)
            return rc;
        char data[4200];
        if (snprintf(data, sizeof(data), "%s/data.mdb", dir) >= (int)sizeof(data))
            return kt_err_set(err, -ENAMETOOLONG, "%s: path too long", dir);
        if (access(data, F_OK) < 0 && errno == ENOENT &&
            (rc = create_cache_file(dir, map, max, o.runner_ups, err)) < 0)
            return rc;
    }
    return open_env(dir, rdonly, map, max, o.runner_ups, out, err);
}

void cache_close(cache_env *env)
{
    if (!env)
        return;
    if (env->rtxn)
        mdb_txn_abort(env->rtxn);
    mdb_env_close(env->env);
    pthread_mutex_destroy(&env->lock);
    free(env->path);
    free(env);
}

int cache_backup(cache_env *env, const char *dir, size_t *bytes, kt_err *err)
{
    if (!env || !dir)
        return kt_err_set(err, -EINVAL, "cache_backup: bad arguments");
    int rc = mkdir_p(dir, err);
    if (rc < 0)
        return rc;
    struct stat src, dst;
    if (stat(env->path, &src) == 0 && stat(dir, &dst) == 0 && src.st_dev == dst.st_dev &&
        src.st_ino == dst.st_ino)
        return kt_err_set(err, -EINVAL, "%s: is the cache itself; back up into another directory",
                          dir);
    char path[4200];
    if (snprintf(path, sizeof(path), "%s/data.mdb", dir) >= (int)sizeof(path))
        return kt_err_set(err, -ENAMETOOLONG, "%s: path too long", dir);
    kt_atomic_file out;
    if ((rc = kt_atomic_begin(&out, path, CACHE_FILE_MODE, err)) < 0)
        return rc;
    cache_lock(env);
    /* LMDB copies one read snapshot (ktuned may write meanwhile), free pages left out */
    int mrc = mdb_env_copyfd2(env->env, out.fd, MDB_CP_COMPACT);
    cache_unlock(env);
    if (mrc != MDB_SUCCESS) {
        kt_atomic_abort(&out);
        return kt_err_set(err, mrc > 0 ? -mrc : -EIO, "%s: cannot copy the cache: %s", path,
                          mdb_strerror(mrc));
    }
    struct stat st;
    if (bytes)
        *bytes = fstat(out.fd, &st) == 0 ? (size_t)st.st_size : 0;
    return kt_atomic_commit(&out, err);
}

void cache_lock(cache_env *env)
{
    if (env)
        pthread_mutex_lock(&env->lock);
}

void cache_unlock(cache_env *env)
{
    if (env)
        pthread_mutex_unlock(&env->lock);
}

const char *cache_path(const cache_env *env)
{
    return env->path;
}

/* ---- ranking ---- */

static int identity_of(const char *family, const char *schedule, cache_ranked *out)
{
    size_t fl = family ? strlen(family) : 0, sl = schedule ? strlen(schedule) : 0;
    out->identity = malloc(fl + sl + 2);
    if (!out->identity)
        return -ENOMEM;
    memcpy(out->identity, family ? family : "", fl);
    out->identity[fl] = '\0';
    memcpy(out->identity + fl + 1, schedule ? schedule : "", sl);
    out->identity[fl + 1 + sl] = '\0';
    out->identity_len = fl + sl + 2;
    return 0;
}

int cache_ranked_from_value(const uint8_t *val, size_t len, cache_ranked *out, kt_err *err)
{
    memset(out, 0, sizeof(*out));
    cache_record r;
    cache_record_init(&r);
    int rc = cache_record_decode(val, len, &r, err);
    if (rc == 0 && !r.verified)
        rc = kt_err_set(err, -EBADMSG, "record is not verified");
    if (rc == 0 && identity_of(r.family, r.schedule, out) < 0)
        rc = kt_err_set(err, -ENOMEM, "out of memory ranking records");
    if (rc == 0) {
        out->val = val;
        out->len = len;
        out->time_ns = r.time_ns;
        out->time_p90_ns = r.time_p90_ns;
        out->created = r.created;
    }
    cache_record_free(&r);
    return rc;
}

void cache_ranked_free(cache_ranked *r)
{
    free(r->identity);
    r->identity = NULL;
}

static const uint8_t *checksum_of(const cache_ranked *r)
{
    return r->val + r->len - CACHE_CHECKSUM_BYTES;
}

/* The ranking rule: faster median, then smaller p90, then older, then smaller checksum. */
static int rank_cmp(const void *pa, const void *pb)
{
    const cache_ranked *a = *(cache_ranked *const *)pa, *b = *(cache_ranked *const *)pb;
    if (a->time_ns != b->time_ns)
        return a->time_ns < b->time_ns ? -1 : 1;
    if (a->time_p90_ns != b->time_p90_ns)
        return a->time_p90_ns < b->time_p90_ns ? -1 : 1;
    if (a->created != b->created)
        return a->created < b->created ? -1 : 1;
    return memcmp(checksum_of(a), checksum_of(b), CACHE_CHECKSUM_BYTES);
}

static bool same_bytes(const cache_ranked *a, const cache_ranked *b)
{
    return a->len == b->len && memcmp(checksum_of(a), checksum_of(b), CACHE_CHECKSUM_BYTES) == 0;
}

static bool same_identity(const cache_ranked *a, const cache_ranked *b)
{
    return a->identity_len == b->identity_len &&
           memcmp(a->identity, b->identity, a->identity_len) == 0;
}

typedef struct stored {
    uint8_t *key; /* key || rank, copied */
    size_t klen;
    uint8_t *val; /* copied */
    size_t len;
    cache_ranked r;
    bool ok;
} stored;

static void stored_free(stored *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(s[i].key);
        free(s[i].val);
        cache_ranked_free(&s[i].r);
    }
    free(s);
}

/* Copies out every stored record of key (rank entries key||0 .. key||CACHE_MAX_RUNNER_UPS). */
static int read_ranks(cache_env *env, MDB_txn *txn, const uint8_t *key, size_t klen, stored **out,
                      size_t *n_out, kt_err *err)
{
    stored *s = NULL;
    size_t n = 0, cap = 0;
    MDB_cursor *cur = NULL;
    int rc = cache_lmdb_error(env, mdb_cursor_open(txn, env->kernels, &cur), "cannot open a cursor",
                              err);
    if (rc < 0)
        return rc;
    uint8_t start[CACHE_KEY_MAX + 1];
    memcpy(start, key, klen);
    start[klen] = 0;
    MDB_val k = {.mv_size = klen + 1, .mv_data = start}, v;
    int mrc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
    for (; mrc == MDB_SUCCESS; mrc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        if (k.mv_size != klen + 1 || memcmp(k.mv_data, key, klen) != 0)
            break;
        if ((rc = kt_grow(&s, &cap, n + 1, sizeof(*s))) < 0)
            goto fail;
        stored *e = &s[n++];
        e->key = malloc(k.mv_size);
        e->val = malloc(v.mv_size ? v.mv_size : 1);
        if (!e->key || !e->val) {
            rc = -ENOMEM;
            goto fail;
        }
        memcpy(e->key, k.mv_data, k.mv_size);
        memcpy(e->val, v.mv_data, v.mv_size);
        e->klen = k.mv_size;
        e->len = v.mv_size;
        kt_err why = {0};
        e->ok = cache_ranked_from_value(e->val, e->len, &e->r, &why) == 0;
        if (!e->ok) {
            if (why.code == -ENOMEM) {
                rc = -ENOMEM;
                goto fail;
            }
            char d[256];
            cache_key_describe(e->key, e->klen, true, d, sizeof(d));
            kt_log_warn(CACHE_LOG, "%s: corrupt record %s dropped from its ranking: %s", env->path,
                        d, why.msg);
        }
    }
    if (mrc != MDB_SUCCESS && mrc != MDB_NOTFOUND) {
        rc = cache_lmdb_error(env, mrc, "cannot read records", err);
        goto fail_noerr;
    }
    mdb_cursor_close(cur);
    *out = s;
    *n_out = n;
    return 0;
fail:
    kt_err_set(err, rc, "out of memory reading records");
fail_noerr:
    mdb_cursor_close(cur);
    stored_free(s, n);
    return rc;
}

int cache_rank_into(cache_env *env, MDB_txn *txn, const uint8_t *key, size_t klen,
                    const cache_ranked *add, size_t n_add, bool *changed, int *pos, kt_err *err)
{
    stored *old = NULL;
    size_t n_old = 0;
    int rc = read_ranks(env, txn, key, klen, &old, &n_old, err);
    if (rc < 0)
        return rc;
    const cache_ranked **all = calloc(n_old + n_add + 1, sizeof(const cache_ranked *));
    if (!all) {
        rc = kt_err_set(err, -ENOMEM, "out of memory ranking records");
        goto out;
    }
    /* The candidates: every sound stored record and every addition, then one per identity (the
     * best by the ranking rule; identical bytes are one record), sorted, truncated. */
    size_t n = 0;
    for (size_t i = 0; i < n_old; i++) {
        if (old[i].ok)
            all[n++] = &old[i].r;
    }
    for (size_t i = 0; i < n_add; i++)
        all[n++] = &add[i];
    qsort(all, n, sizeof(const cache_ranked *), rank_cmp);
    size_t kept = 0, limit = (size_t)env->runner_ups + 1;
    for (size_t i = 0; i < n && kept < limit; i++) {
        bool dup = false;
        for (size_t j = 0; j < kept && !dup; j++)
            dup = same_bytes(all[j], all[i]) || same_identity(all[j], all[i]);
        if (!dup)
            all[kept++] = all[i];
    }

    bool diff = kept != n_old;
    for (size_t i = 0; i < kept && !diff; i++)
        diff = !old[i].ok || !same_bytes(&old[i].r, all[i]) || old[i].r.len != all[i]->len;
    if (pos) {
        *pos = -1;
        for (size_t i = 0; n_add && i < kept; i++) {
            if (same_bytes(all[i], &add[0]))
                *pos = (int)i;
        }
    }
    if (changed)
        *changed = diff;
    if (!diff)
        goto out;
    for (size_t i = 0; i < n_old; i++) {
        MDB_val k = {.mv_size = old[i].klen, .mv_data = old[i].key};
        rc = cache_lmdb_error(env, mdb_del(txn, env->kernels, &k, NULL), "cannot delete a record",
                              err);
        if (rc < 0)
            goto out;
    }
    uint8_t rk[CACHE_KEY_MAX + 1];
    memcpy(rk, key, klen);
    for (size_t i = 0; i < kept; i++) {
        rk[klen] = (uint8_t)i;
        MDB_val k = {.mv_size = klen + 1, .mv_data = rk};
        MDB_val v = {.mv_size = all[i]->len, .mv_data = (void *)all[i]->val};
        rc = cache_lmdb_error(env, mdb_put(txn, env->kernels, &k, &v, 0), "cannot store a record",
                              err);
        if (rc < 0)
            goto out;
    }
out:
    free(all);
    stored_free(old, n_old);
    return rc;
}

/* ---- kernel records ---- */

typedef struct put_ctx {
    const uint8_t *key;
    size_t klen;
    const cache_ranked *add;
    int *rank;
} put_ctx;

static int put_fn(cache_env *env, MDB_txn *txn, void *ctx, kt_err *err)
{
    put_ctx *p = ctx;
    return cache_rank_into(env, txn, p->key, p->klen, p->add, 1, NULL, p->rank, err);
}

static int cache_put_locked(cache_env *env, const cache_record *rec, int *rank, kt_err *err)
{
    if (!env || !rec)
        return kt_err_set(err, -EINVAL, "cache_put: no cache or record");
    if (!rec->verified)
        return kt_err_set(err, -EINVAL, "cache_put: refusing an unverified record");
    kt_err why = {0};
    if (cache_record_check_floor(rec, NULL, &why) < 0)
        return kt_err_set(err, -EINVAL, "cache_put: refusing a record: %s", why.msg);
    uint8_t key[CACHE_KEY_MAX];
    size_t klen = 0;
    int rc = cache_key_encode(&rec->key, key, sizeof(key), &klen, err);
    if (rc < 0)
        return rc;
    cache_ranked add = {0};
    uint8_t *val = NULL;
    if ((rc = cache_record_encode(rec, &val, &add.len, err)) < 0)
        return rc;
    add.val = val;
    add.time_ns = rec->time_ns;
    add.time_p90_ns = rec->time_p90_ns;
    add.created = rec->created;
    if (identity_of(rec->family, rec->schedule, &add) < 0) {
        rc = kt_err_set(err, -ENOMEM, "out of memory storing a record");
        goto out;
    }
    int pos = -1;
    put_ctx p = {key, klen, &add, &pos};
    rc = cache_write(env, put_fn, &p, err);
    if (rc == 0 && rank)
        *rank = pos;
out:
    cache_ranked_free(&add);
    free(val);
    return rc;
}

static void report_corrupt(cache_env *env, const void *key, size_t klen, bool has_rank,
                           const kt_err *why)
{
    char d[256];
    cache_key_describe(key, klen, has_rank, d, sizeof(d));
    kt_log_warn(CACHE_LOG, "%s: corrupt record %s skipped: %s", env->path, d, why->msg);
}

/* Decodes a stored kernel record and checks it belongs to its key; reports a defect. */
static int decode_stored(cache_env *env, const MDB_val *k, const MDB_val *v, cache_record *out,
                         kt_err *err)
{
    kt_err why = {0};
    int rc = cache_record_decode(v->mv_data, v->mv_size, out, &why);
    if (rc == 0)
        rc = cache_record_matches_key(out, k->mv_data, k->mv_size - 1, &why);
    if (rc == -EBADMSG)
        report_corrupt(env, k->mv_data, k->mv_size, true, &why);
    if (rc < 0) {
        cache_record_free(out);
        char d[256];
        cache_key_describe(k->mv_data, k->mv_size, true, d, sizeof(d));
        return kt_err_set(err, rc, "record %s: %s", d, why.msg);
    }
    return 0;
}

static int cache_get_locked(cache_env *env, const cache_key *k, int rank, cache_record *out,
                            kt_err *err)
{
    if (!env || !k || !out || rank < 0 || rank > CACHE_MAX_RUNNER_UPS)
        return kt_err_set(err, -EINVAL, "cache_get: bad arguments");
    uint8_t key[CACHE_KEY_MAX + 1];
    size_t klen = 0;
    int rc = cache_key_encode(k, key, sizeof(key), &klen, err);
    if (rc < 0)
        return rc;
    key[klen++] = (uint8_t)rank;
    MDB_txn *txn = NULL;
    if ((rc = cache_rtxn_begin(env, &txn, err)) < 0)
        return rc;
    MDB_val mk = {.mv_size = klen, .mv_data = key}, mv;
    int mrc = mdb_get(txn, env->kernels, &mk, &mv);
    if (mrc == MDB_NOTFOUND) {
        char d[256];
        cache_key_describe(key, klen, true, d, sizeof(d));
        rc = kt_err_set(err, -ENOENT, "no record for %s", d);
    } else if (mrc != MDB_SUCCESS) {
        rc = cache_lmdb_error(env, mrc, "cannot read a record", err);
    } else {
        rc = decode_stored(env, &mk, &mv, out, err);
        /* One that entered before the floor was enforced is not served (`cache check` names
         * it); readers treat it as they treat a damaged value. */
        kt_err why = {0};
        if (rc == 0 && cache_record_check_floor(out, NULL, &why) < 0) {
            char d[256];
            cache_key_describe(key, klen, true, d, sizeof(d));
            rc = kt_err_set(err, -EBADMSG, "record %s: %s", d, why.msg);
        }
    }
    cache_rtxn_end(env);
    return rc;
}

typedef struct del_ctx {
    const uint8_t *key;
    size_t klen;
} del_ctx;

static int delete_fn(cache_env *env, MDB_txn *txn, void *ctx, kt_err *err)
{
    del_ctx *d = ctx;
    uint8_t rk[CACHE_KEY_MAX + 1];
    memcpy(rk, d->key, d->klen);
    size_t n = 0;
    for (int rank = 0; rank <= CACHE_MAX_RUNNER_UPS; rank++) {
        rk[d->klen] = (uint8_t)rank;
        MDB_val k = {.mv_size = d->klen + 1, .mv_data = rk};
        int mrc = mdb_del(txn, env->kernels, &k, NULL);
        if (mrc == MDB_NOTFOUND)
            continue;
        int rc = cache_lmdb_error(env, mrc, "cannot delete a record", err);
        if (rc < 0)
            return rc;
        n++;
    }
    if (n == 0) {
        char desc[256];
        cache_key_describe(d->key, d->klen, false, desc, sizeof(desc));
        return kt_err_set(err, -ENOENT, "no record for %s", desc);
    }
    return 0;
}

static int cache_delete_locked(cache_env *env, const cache_key *k, kt_err *err)
{
    if (!env || !k)
        return kt_err_set(err, -EINVAL, "cache_delete: bad arguments");
    uint8_t key[CACHE_KEY_MAX];
    size_t klen = 0;
    int rc = cache_key_encode(k, key, sizeof(key), &klen, err);
    if (rc < 0)
        return rc;
    del_ctx d = {key, klen};
    return cache_write(env, delete_fn, &d, err);
}

typedef struct list_ctx {
    const uint8_t *prefix;
    size_t prefix_len;
    bool best_only, past_prefix;
    cache_list_cb cb;
    void *ctx;
    size_t *n_corrupt;
} list_ctx;

static int list_entry(cache_env *env, const MDB_val *k, const MDB_val *v, void *ctx, kt_err *err)
{
    list_ctx *lc = ctx;
    if (k->mv_size < lc->prefix_len ||
        (lc->prefix_len && memcmp(k->mv_data, lc->prefix, lc->prefix_len) != 0)) {
        lc->past_prefix = true;
        return 1;
    }
    if (k->mv_size < 2)
        return 0;
    int rank = ((const uint8_t *)k->mv_data)[k->mv_size - 1];
    if (lc->best_only && rank != 0)
        return 0;
    cache_record rec;
    cache_record_init(&rec);
    kt_err why = {0};
    int rc = decode_stored(env, k, v, &rec, &why);
    if (rc == -EBADMSG) {
        if (lc->n_corrupt)
            (*lc->n_corrupt)++;
        return 0;
    }
    if (rc < 0)
        return kt_err_set(err, rc, "%s", why.msg);
    rc = lc->cb(&rec, rank, lc->ctx);
    cache_record_free(&rec);
    return rc;
}

static int cache_list_locked(cache_env *env, const uint8_t *prefix, size_t prefix_len,
                             bool best_only, cache_list_cb cb, void *ctx, size_t *n_corrupt,
                             kt_err *err)
{
    if (!env || !cb || (prefix_len && !prefix))
        return kt_err_set(err, -EINVAL, "cache_list: bad arguments");
    if (n_corrupt)
        *n_corrupt = 0;
    list_ctx lc = {prefix, prefix_len, best_only, false, cb, ctx, n_corrupt};
    MDB_val from = {.mv_size = prefix_len, .mv_data = (void *)prefix};
    int rc = cache_cursor_walk(env, env->kernels, prefix_len ? MDB_SET_RANGE : MDB_FIRST, &from,
                               list_entry, &lc, "cannot read records", err);
    return lc.past_prefix ? 0 : rc;
}

/* Seeks GPU by GPU: the GPU id follows the version byte of every key, so after reading one
 * record of an id the cursor jumps past every other key of that id. */
static int cache_gpus_locked(cache_env *env, cache_gpu **out, size_t *n, kt_err *err)
{
    if (!env || !out || !n)
        return kt_err_set(err, -EINVAL, "cache_gpus: bad arguments");
    *out = NULL;
    *n = 0;
    size_t cap = 0;
    MDB_txn *txn = NULL;
    int rc = cache_rtxn_begin(env, &txn, err);
    if (rc < 0)
        return rc;
    MDB_cursor *cur = NULL;
    if ((rc = cache_lmdb_error(env, mdb_cursor_open(txn, env->kernels, &cur),
                               "cannot open a cursor", err)) < 0)
        goto out;
    uint8_t seek[1 + CACHE_GPU_ID_BYTES];
    MDB_val k = {0}, v;
    int mrc = mdb_cursor_get(cur, &k, &v, MDB_FIRST);
    cache_record rec;
    cache_record_init(&rec);
    while (mrc == MDB_SUCCESS && rc == 0) {
        const uint8_t *kb = k.mv_data;
        if (k.mv_size < sizeof(seek)) {
            mrc = mdb_cursor_get(cur, &k, &v, MDB_NEXT);
            continue;
        }
        memcpy(seek, kb, sizeof(seek));
        kt_err why = {0};
        rc = decode_stored(env, &k, &v, &rec, &why);
        if (rc == -EBADMSG || (rc == 0 && !rec.verified)) {
            rc = 0; /* another record of this GPU may tell its fingerprint */
            cache_record_free(&rec);
            mrc = mdb_cursor_get(cur, &k, &v, MDB_NEXT);
            continue;
        }
        if (rc < 0) {
            kt_err_set(err, rc, "%s", why.msg);
            break;
        }
        if (kt_grow(out, &cap, *n + 1, sizeof(**out)) < 0) {
            rc = kt_err_set(err, -ENOMEM, "out of memory listing GPUs");
            cache_record_free(&rec);
            break;
        }
        (*out)[(*n)++] = rec.key.gpu;
        cache_record_free(&rec);
        /* The next GPU id: increment the (version, id) prefix as a big-endian number. */
        int i = (int)sizeof(seek) - 1;
        while (i >= 0 && ++seek[i] == 0)
            i--;
        if (i < 0)
            break;
        k.mv_size = sizeof(seek);
        k.mv_data = seek;
        mrc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
    }
    if (rc == 0 && mrc != MDB_SUCCESS && mrc != MDB_NOTFOUND)
        rc = cache_lmdb_error(env, mrc, "cannot read records", err);
    mdb_cursor_close(cur);
out:
    cache_rtxn_end(env);
    if (rc < 0) {
        free(*out);
        *out = NULL;
        *n = 0;
    }
    return rc;
}

static int cache_stat_locked(cache_env *env, cache_stats *out, kt_err *err)
{
    if (!env || !out)
        return kt_err_set(err, -EINVAL, "cache_stat: bad arguments");
    memset(out, 0, sizeof(*out));
    MDB_envinfo info;
    MDB_stat st;
    mdb_env_info(env->env, &info);
    mdb_env_stat(env->env, &st);
    out->schema_version = CACHE_SCHEMA_VERSION; /* checked equal on open */
    out->map_size = info.me_mapsize;
    out->page_size = st.ms_psize;
    out->map_used = (info.me_last_pgno + 1) * (size_t)st.ms_psize;
    out->max_map_size = env->max_map_size;
    out->readers_used = info.me_numreaders;
    out->readers_max = info.me_maxreaders;

    MDB_txn *txn = NULL;
    int rc = cache_rtxn_begin(env, &txn, err);
    if (rc < 0)
        return rc;
    MDB_stat ds;
    if ((rc = cache_lmdb_error(env, mdb_stat(txn, env->kernels, &ds), "cannot stat", err)) < 0)
        goto out;
    out->records = ds.ms_entries;
    if ((rc = cache_lmdb_error(env, mdb_stat(txn, env->trials, &ds), "cannot stat", err)) < 0)
        goto out;
    out->trials = ds.ms_entries;
    if ((rc = cache_lmdb_error(env, mdb_stat(txn, env->jobs, &ds), "cannot stat", err)) < 0)
        goto out;
    out->jobs = ds.ms_entries;
    MDB_cursor *cur = NULL;
    if ((rc = cache_lmdb_error(env, mdb_cursor_open(txn, env->kernels, &cur),
                               "cannot open a cursor", err)) < 0)
        goto out;
    MDB_val k, v;
    int mrc = mdb_cursor_get(cur, &k, &v, MDB_FIRST);
    for (; mrc == MDB_SUCCESS; mrc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        if (k.mv_size > 0 && ((const uint8_t *)k.mv_data)[k.mv_size - 1] == 0)
            out->keys++;
    }
    mdb_cursor_close(cur);
    if (mrc != MDB_NOTFOUND)
        rc = cache_lmdb_error(env, mrc, "cannot count keys", err);
out:
    cache_rtxn_end(env);
    return rc;
}

/* ---- trials ---- */

/* trial key: cache key || 0x00 || candidate id (no NUL). */
static int trial_key(const cache_key *k, const char *cand, uint8_t *buf, size_t *len, kt_err *err)
{
    size_t klen = 0;
    int rc = cache_key_encode(k, buf, CACHE_KEY_MAX, &klen, err);
    if (rc < 0)
        return rc;
    buf[klen++] = 0;
    if (cand) {
        size_t cl = strnlen(cand, CACHE_CAND_MAX);
        if (cl == 0 || cl == CACHE_CAND_MAX)
            return kt_err_set(err, -EINVAL, "trial: candidate id empty or longer than %d bytes",
                              CACHE_CAND_MAX - 1);
        memcpy(buf + klen, cand, cl);
        klen += cl;
    }
    *len = klen;
    return 0;
}

typedef struct trial_ctx {
    const uint8_t *key;
    size_t klen;
    const uint8_t *val;
    size_t vlen;
} trial_ctx;

static int trial_put_fn(cache_env *env, MDB_txn *txn, void *ctx, kt_err *err)
{
    trial_ctx *t = ctx;
    MDB_val k = {.mv_size = t->klen, .mv_data = (void *)t->key};
    MDB_val v = {.mv_size = t->vlen, .mv_data = (void *)t->val};
    return cache_lmdb_error(env, mdb_put(txn, env->trials, &k, &v, 0), "cannot store a trial", err);
}

static int cache_trial_append_locked(cache_env *env, const cache_key *k, const cache_trial *t,
                                     kt_err *err)
{
    if (!env || !k || !t)
        return kt_err_set(err, -EINVAL, "cache_trial_append: bad arguments");
    uint8_t key[CACHE_KEY_MAX + 1 + CACHE_CAND_MAX];
    size_t klen = 0;
    int rc = trial_key(k, t->cand, key, &klen, err);
    if (rc < 0)
        return rc;
    uint8_t *val = NULL;
    size_t vlen = 0;
    if ((rc = cache_trial_encode(t, &val, &vlen, err)) < 0)
        return rc;
    trial_ctx c = {key, klen, val, vlen};
    rc = cache_write(env, trial_put_fn, &c, err);
    free(val);
    return rc;
}

static int cache_trial_get_locked(cache_env *env, const cache_key *k, const char *cand,
                                  cache_trial *out, kt_err *err)
{
    if (!env || !k || !cand || !out)
        return kt_err_set(err, -EINVAL, "cache_trial_get: bad arguments");
    uint8_t key[CACHE_KEY_MAX + 1 + CACHE_CAND_MAX];
    size_t klen = 0;
    int rc = trial_key(k, cand, key, &klen, err);
    if (rc < 0)
        return rc;
    MDB_txn *txn = NULL;
    if ((rc = cache_rtxn_begin(env, &txn, err)) < 0)
        return rc;
    MDB_val mk = {.mv_size = klen, .mv_data = key}, mv;
    int mrc = mdb_get(txn, env->trials, &mk, &mv);
    if (mrc == MDB_NOTFOUND) {
        rc = kt_err_set(err, -ENOENT, "no trial of candidate %s", cand);
    } else if (mrc != MDB_SUCCESS) {
        rc = cache_lmdb_error(env, mrc, "cannot read a trial", err);
    } else {
        kt_err why = {0};
        rc = cache_trial_decode(mv.mv_data, mv.mv_size, out, &why);
        if (rc == -EBADMSG)
            report_corrupt(env, key, klen, false, &why);
        if (rc < 0)
            kt_err_set(err, rc, "trial of candidate %s: %s", cand, why.msg);
    }
    cache_rtxn_end(env);
    return rc;
}

static int cache_trial_foreach_locked(cache_env *env, const cache_key *k, cache_trial_cb cb,
                                      void *ctx, kt_err *err)
{
    if (!env || !k || !cb)
        return kt_err_set(err, -EINVAL, "cache_trial_foreach: bad arguments");
    uint8_t prefix[CACHE_KEY_MAX + 1];
    size_t plen = 0;
    int rc = trial_key(k, NULL, prefix, &plen, err);
    if (rc < 0)
        return rc;
    MDB_txn *txn = NULL;
    if ((rc = cache_rtxn_begin(env, &txn, err)) < 0)
        return rc;
    MDB_cursor *cur = NULL;
    if ((rc = cache_lmdb_error(env, mdb_cursor_open(txn, env->trials, &cur), "cannot open a cursor",
                               err)) < 0)
        goto out;
    MDB_val mk = {.mv_size = plen, .mv_data = prefix}, mv;
    int mrc = mdb_cursor_get(cur, &mk, &mv, MDB_SET_RANGE);
    for (; mrc == MDB_SUCCESS; mrc = mdb_cursor_get(cur, &mk, &mv, MDB_NEXT)) {
        if (mk.mv_size <= plen || memcmp(mk.mv_data, prefix, plen) != 0)
            break;
        cache_trial t;
        kt_err why = {0};
        int drc = cache_trial_decode(mv.mv_data, mv.mv_size, &t, &why);
        if (drc == -EBADMSG) {
            report_corrupt(env, mk.mv_data, mk.mv_size, false, &why);
            continue;
        }
        if (drc < 0) {
            rc = kt_err_set(err, drc, "%s", why.msg);
            break;
        }
        if ((rc = cb(&t, ctx)) != 0)
            break;
    }
    if (rc == 0 && mrc != MDB_SUCCESS && mrc != MDB_NOTFOUND)
        rc = cache_lmdb_error(env, mrc, "cannot read trials", err);
    mdb_cursor_close(cur);
out:
    cache_rtxn_end(env);
    return rc;
}

/* Public entry points: each holds the handle's lock for the whole call (cache.h "Threads"). */

int cache_put(cache_env *env, const cache_record *rec, int *rank, kt_err *err)
{
    cache_lock(env);
    int rc = cache_put_locked(env, rec, rank, err);
    cache_unlock(env);
    return rc;
}

int cache_get(cache_env *env, const cache_key *k, int rank, cache_record *out, kt_err *err)
{
    cache_lock(env);
    int rc = cache_get_locked(env, k, rank, out, err);
    cache_unlock(env);
    return rc;
}

int cache_delete(cache_env *env, const cache_key *k, kt_err *err)
{
    cache_lock(env);
    int rc = cache_delete_locked(env, k, err);
    cache_unlock(env);
    return rc;
}

int cache_list(cache_env *env, const uint8_t *prefix, size_t prefix_len, bool best_only,
               cache_list_cb cb, void *ctx, size_t *n_corrupt, kt_err *err)
{
    cache_lock(env);
    int rc = cache_list_locked(env, prefix, prefix_len, best_only, cb, ctx, n_corrupt, err);
    cache_unlock(env);
    return rc;
}

int cache_stat(cache_env *env, cache_stats *out, kt_err *err)
{
    cache_lock(env);
    int rc = cache_stat_locked(env, out, err);
    cache_unlock(env);
    return rc;
}

int cache_generation(cache_env *env, uint64_t *out, kt_err *err)
{
    if (!env || !out)
        return kt_err_set(err, -EINVAL, "cache_generation: NULL argument");
    MDB_txn *txn = NULL;
    cache_lock(env);
    int rc = cache_rtxn_begin(env, &txn, err);
    if (rc == 0) {
        *out = (uint64_t)mdb_txn_id(txn);
        cache_rtxn_end(env);
    }
    cache_unlock(env);
    return rc;
}

int cache_trial_append(cache_env *env, const cache_key *k, const cache_trial *t, kt_err *err)
{
    cache_lock(env);
    int rc = cache_trial_append_locked(env, k, t, err);
    cache_unlock(env);
    return rc;
}

int cache_trial_get(cache_env *env, const cache_key *k, const char *cand, cache_trial *out,
                    kt_err *err)
{
    cache_lock(env);
    int rc = cache_trial_get_locked(env, k, cand, out, err);
    cache_unlock(env);
    return rc;
}

int cache_trial_foreach(cache_env *env, const cache_key *k, cache_trial_cb cb, void *ctx,
                        kt_err *err)
{
    cache_lock(env);
    int rc = cache_trial_foreach_locked(env, k, cb, ctx, err);
    cache_unlock(env);
    return rc;
}

int cache_gpus(cache_env *env, cache_gpu **out, size_t *n, kt_err *err)
{
    cache_lock(env);
    int rc = cache_gpus_locked(env, out, n, err);
    cache_unlock(env);
    return rc;
}
