/* Bundles (export/import) and merge. The bundle layout and the merge rule are in
 * docs/formats.md (part 3). */
#include "internal.h"
#include "ops/ops.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define BUNDLE_VERSION          2 /* signed; 1: the same without the signature block */
#define BUNDLE_VERSION_UNSIGNED 1
#define BUNDLE_HEADER           24 /* magic, format version, schema version, record count */
#define BUNDLE_SIG_BLOCK        (CACHE_SIGN_PUBLIC_BYTES + CACHE_SIGN_BYTES)

static const uint8_t bundle_magic[8] = {'K', 'T', 'B', 'U', 'N', 'D', 'L', 'E'};

/* One stored record: its full key (with rank) and value bytes, borrowed, or owned (own) when
 * the value was stamped with its bundle's signer. */
typedef struct bentry {
    const uint8_t *key;
    size_t klen;
    const uint8_t *val;
    size_t vlen;
    uint8_t *own;
} bentry;

typedef struct bentries {
    bentry *e;
    size_t n, cap;
} bentries;

static uint64_t get_be(const uint8_t *p, int bytes)
{
    uint64_t v = 0;
    for (int i = 0; i < bytes; i++)
        v = v << 8 | p[i];
    return v;
}

static void put_be(uint8_t *p, uint64_t v, int bytes)
{
    for (int i = 0; i < bytes; i++)
        p[i] = (uint8_t)(v >> (8 * (bytes - 1 - i)));
}

/* Checks one stored record: sane key, decodable value with a good checksum, verified, stored
 * under its own key, and not below its physical floor. With signer, *stamped receives the value
 * re-encoded with that provenance (malloc'd). 0, -EBADMSG, -ERANGE (implausible) or -ENOMEM. */
static int check_entry(const uint8_t *key, size_t klen, const uint8_t *val, size_t vlen,
                       const char *signer, uint8_t **stamped, size_t *slen, kt_err *err)
{
    if (klen < CACHE_KEY_FIXED + 1 || klen > CACHE_KEY_MAX + 1)
        return kt_err_set(err, -EBADMSG, "key of %zu bytes", klen);
    if (key[klen - 1] > CACHE_MAX_RUNNER_UPS)
        return kt_err_set(err, -EBADMSG, "rank %u out of range", key[klen - 1]);
    cache_record r;
    cache_record_init(&r);
    int rc = cache_record_decode(val, vlen, &r, err);
    if (rc == 0 && !r.verified)
        rc = kt_err_set(err, -EBADMSG, "record is not verified");
    if (rc == 0)
        rc = cache_record_matches_key(&r, key, klen - 1, err);
    if (rc == 0)
        rc = cache_record_check_floor(&r, NULL, err);
    if (rc == 0 && signer) {
        free(r.signer);
        if (!(r.signer = strdup(signer)))
            rc = kt_err_set(err, -ENOMEM, "out of memory");
        else
            rc = cache_record_encode(&r, stamped, slen, err);
        if (rc == -EINVAL) /* it decoded, so it encodes: only memory can fail here */
            rc = -EBADMSG;
    }
    cache_record_free(&r);
    return rc;
}

static int add_entry(bentries *b, const void *key, size_t klen, const void *val, size_t vlen,
                     uint8_t *own)
{
    if (kt_grow(&b->e, &b->cap, b->n + 1, sizeof(*b->e)) < 0)
        return -ENOMEM;
    b->e[b->n++] = (bentry){key, klen, val, vlen, own};
    return 0;
}

static void bentries_free(bentries *b)
{
    for (size_t i = 0; i < b->n; i++)
        free(b->e[i].own);
    free(b->e);
    memset(b, 0, sizeof(*b));
}

/* ---- export ---- */

/* Hashes the first len bytes of fd (mapped) and appends the digest, then, with signer, the
 * signature block: the public key and the signature over the digest. */
static int append_digest(int fd, size_t len, const cache_signer *signer)
{
    void *map = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED)
        return -errno;
    uint8_t digest[32];
    ops_sha256(map, len, digest);
    munmap(map, len);
    if (lseek(fd, 0, SEEK_END) < 0)
        return -errno;
    int rc = kt_write_all(fd, digest, sizeof(digest));
    if (rc < 0 || !signer)
        return rc;
    uint8_t block[BUNDLE_SIG_BLOCK];
    memcpy(block, signer->pk, CACHE_SIGN_PUBLIC_BYTES);
    if ((rc = cache_sign_digest(signer, digest, block + CACHE_SIGN_PUBLIC_BYTES, NULL)) < 0)
        return rc;
    return kt_write_all(fd, block, sizeof(block));
}

static int cache_export_locked(cache_env *env, const char *path, const cache_signer *signer,
                               size_t *n, kt_err *err)
{
    if (!env || !path)
        return kt_err_set(err, -EINVAL, "cache_export: bad arguments");
    /* Written beside the target, then renamed over it, which must be a regular file or
     * nothing (kt_atomic_begin refuses a FIFO, a device, a symbolic link, a directory). */
    kt_atomic_file out;
    int rc = kt_atomic_begin(&out, path, 0644, err);
    if (rc < 0)
        return rc;
    int fd = out.fd;

    MDB_txn *txn = NULL;
    MDB_cursor *cur = NULL;
    rc = cache_rtxn_begin(env, &txn, err);
    if (rc < 0)
        goto fail_file;
    if ((rc = cache_lmdb_error(env, mdb_cursor_open(txn, env->kernels, &cur),
                               "cannot open a cursor", err)) < 0)
        goto fail_txn;

    uint8_t hdr[BUNDLE_HEADER];
    memcpy(hdr, bundle_magic, sizeof(bundle_magic));
    put_be(hdr + 8, signer ? BUNDLE_VERSION : BUNDLE_VERSION_UNSIGNED, 4);
    put_be(hdr + 12, CACHE_SCHEMA_VERSION, 4);
    put_be(hdr + 16, 0, 8); /* count, patched below */
    size_t count = 0, size = BUNDLE_HEADER;
    int wrc = kt_write_all(fd, hdr, sizeof(hdr));
    MDB_val k, v;
    int mrc = mdb_cursor_get(cur, &k, &v, MDB_FIRST);
    for (; wrc == 0 && mrc == MDB_SUCCESS; mrc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        kt_err why = {0};
        int crc = check_entry(k.mv_data, k.mv_size, v.mv_data, v.mv_size, NULL, NULL, NULL, &why);
        if (crc == -ENOMEM) {
            rc = kt_err_set(err, crc, "out of memory exporting %s", env->path);
            goto fail_cursor;
        }
        if (crc < 0) {
            char d[256];
            cache_key_describe(k.mv_data, k.mv_size, true, d, sizeof(d));
            kt_log_warn(CACHE_LOG, "%s: %s record %s left out of the export: %s", env->path,
                        crc == -ERANGE ? "implausible" : "corrupt", d, why.msg);
            continue;
        }
        uint8_t kl[2], vl[4];
        put_be(kl, k.mv_size, 2);
        put_be(vl, v.mv_size, 4);
        if (v.mv_size > UINT32_MAX) {
            rc = kt_err_set(err, -EFBIG, "record of %zu bytes does not fit a bundle", v.mv_size);
            goto fail_cursor;
        }
        wrc = kt_write_all(fd, kl, 2);
        wrc = wrc ? wrc : kt_write_all(fd, k.mv_data, k.mv_size);
        wrc = wrc ? wrc : kt_write_all(fd, vl, 4);
        wrc = wrc ? wrc : kt_write_all(fd, v.mv_data, v.mv_size);
        size += 2 + k.mv_size + 4 + v.mv_size;
        count++;
    }
    if (wrc == 0 && mrc != MDB_NOTFOUND) {
        rc = cache_lmdb_error(env, mrc, "cannot read records", err);
        goto fail_cursor;
    }
    mdb_cursor_close(cur);
    cache_rtxn_end(env);
    put_be(hdr + 16, count, 8);
    if (wrc == 0 && pwrite(fd, hdr + 16, 8, 16) != 8)
        wrc = errno ? -errno : -EIO;
    if (wrc == 0)
        wrc = append_digest(fd, size, signer);
    if (wrc < 0) {
        rc = kt_err_set(err, wrc, "%s: cannot write: %s", path, strerror(-wrc));
        goto fail_file;
    }
    if ((rc = kt_atomic_commit(&out, err)) < 0)
        return rc;
    if (n)
        *n = count;
    return 0;

fail_cursor:
    mdb_cursor_close(cur);
fail_txn:
    cache_rtxn_end(env);
fail_file:
    kt_atomic_abort(&out);
    return rc;
}

/* ---- reading bundles ---- */

typedef struct bundle {
    void *map;
    size_t size;
    bentries ents;
} bundle;

static void bundle_unload(bundle *b)
{
    if (b->map && b->map != MAP_FAILED)
        munmap(b->map, b->size);
    bentries_free(&b->ents);
    memset(b, 0, sizeof(*b));
}

static int key_cmp(const bentry *a, const bentry *b)
{
    size_t n = a->klen < b->klen ? a->klen : b->klen;
    int c = memcmp(a->key, b->key, n);
    return c ? c : (a->klen > b->klen) - (a->klen < b->klen);
}

/* The provenance of a bundle that passed its checksum: its signature checked against trust.
 * 0 with the signer's text in out, -EBADMSG (a signature that does not verify), -EPERM (unsigned
 * or untrusted, and trust does not take those). */
static int bundle_trust(const char *path, const uint8_t *p, uint64_t ver, size_t body,
                        const cache_trust *trust, char *out, size_t cap, kt_err *err)
{
    bool lax = trust && trust->trust_unsigned;
    const char *where = trust && trust->where ? trust->where : "the trusted keys";
    if (ver == BUNDLE_VERSION_UNSIGNED) {
        if (!lax)
            return kt_err_set(err, -EPERM,
                              "%s: unsigned bundle (format 1): refused; pass --trust-unsigned "
                              "to import it anyway",
                              path);
        snprintf(out, cap, "unsigned");
        return 0;
    }
    const uint8_t *pk = p + body + CACHE_CHECKSUM_BYTES, *sig = pk + CACHE_SIGN_PUBLIC_BYTES;
    char id[CACHE_KEY_ID_LEN];
    cache_key_id(pk, id);
    if (!cache_verify_digest(pk, p + body, sig))
        return kt_err_set(err, -EBADMSG,
                          "%s: the signature by %s does not verify: the file was changed after "
                          "it was signed",
                          path, id);
    if (cache_trust_has(trust, pk)) {
        snprintf(out, cap, "%s", id);
        return 0;
    }
    if (!lax)
        return kt_err_set(err, -EPERM,
                          "%s: signed by %s, which is not in %s: refused; add its .pub there, "
                          "or pass --trust-unsigned",
                          path, id, where);
    snprintf(out, cap, "untrusted %s", id);
    return 0;
}

/* Maps a bundle and checks all of it: header, file checksum, signature against trust, framing,
 * key order, ranks, every record (each then stamped with the signer). Any defect is -EBADMSG
 * with the offending record named in err; -EPERM for a bundle trust does not accept. */
static int bundle_load(const char *path, const cache_trust *trust, bundle *b, kt_err *err)
{
    memset(b, 0, sizeof(*b));
    /* O_NONBLOCK: a FIFO must not hold the open until fstat refuses it. */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return kt_err_set(err, -errno, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) < 0) {
        int e = errno;
        close(fd);
        return kt_err_set(err, -e, "%s: cannot stat: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return kt_err_set(err, S_ISDIR(st.st_mode) ? -EISDIR : -EINVAL,
                          "%s: is %s, not a regular file", path, kt_file_kind(st.st_mode));
    }
    if ((size_t)st.st_size < BUNDLE_HEADER + CACHE_CHECKSUM_BYTES) {
        close(fd);
        return kt_err_set(err, -EBADMSG, "%s: not a ktune bundle (too short)", path);
    }
    b->size = (size_t)st.st_size;
    b->map = mmap(NULL, b->size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (b->map == MAP_FAILED) {
        b->map = NULL;
        return kt_err_set(err, -errno, "%s: cannot map: %s", path, strerror(errno));
    }
    const uint8_t *p = b->map;
    int rc;
    if (memcmp(p, bundle_magic, sizeof(bundle_magic)) != 0) {
        rc = kt_err_set(err, -EBADMSG, "%s: not a ktune bundle (bad magic)", path);
        goto fail;
    }
    uint64_t ver = get_be(p + 8, 4), schema = get_be(p + 12, 4), count = get_be(p + 16, 8);
    size_t trailer = CACHE_CHECKSUM_BYTES + (ver == BUNDLE_VERSION ? BUNDLE_SIG_BLOCK : 0);
    if ((ver != BUNDLE_VERSION && ver != BUNDLE_VERSION_UNSIGNED) ||
        schema != CACHE_SCHEMA_VERSION) {
        rc = kt_err_set(err, -EPROTO,
                        "%s: bundle format %llu, schema %llu; this ktune reads formats %d and %d, "
                        "schema %d",
                        path, (unsigned long long)ver, (unsigned long long)schema,
                        BUNDLE_VERSION_UNSIGNED, BUNDLE_VERSION, CACHE_SCHEMA_VERSION);
        goto fail;
    }
    if (b->size < BUNDLE_HEADER + trailer) {
        rc = kt_err_set(err, -EBADMSG, "%s: not a ktune bundle (too short)", path);
        goto fail;
    }
    size_t body = b->size - trailer;
    uint8_t digest[32];
    ops_sha256(p, body, digest);
    if (memcmp(digest, p + body, sizeof(digest)) != 0) {
        rc = kt_err_set(err, -EBADMSG, "%s: bundle checksum mismatch (file damaged)", path);
        goto fail;
    }
    char signer[64];
    if ((rc = bundle_trust(path, p, ver, body, trust, signer, sizeof(signer), err)) < 0)
        goto fail;
    size_t off = BUNDLE_HEADER;
    for (uint64_t i = 0; i < count; i++) {
        if (body - off < 2) {
            rc = kt_err_set(err, -EBADMSG, "%s: truncated at record %llu", path,
                            (unsigned long long)i);
            goto fail;
        }
        size_t klen = get_be(p + off, 2);
        if (body - off - 2 < klen + 4) {
            rc = kt_err_set(err, -EBADMSG, "%s: truncated at record %llu", path,
                            (unsigned long long)i);
            goto fail;
        }
        const uint8_t *key = p + off + 2;
        size_t vlen = get_be(key + klen, 4);
        off += 2 + klen + 4;
        if (body - off < vlen) {
            rc = kt_err_set(err, -EBADMSG, "%s: truncated at record %llu", path,
                            (unsigned long long)i);
            goto fail;
        }
        const uint8_t *val = p + off;
        off += vlen;
        kt_err why = {0};
        uint8_t *own = NULL;
        size_t olen = 0;
        if ((rc = check_entry(key, klen, val, vlen, signer, &own, &olen, &why)) < 0) {
            char d[256];
            cache_key_describe(key, klen, true, d, sizeof(d));
            rc = kt_err_set(err, rc == -ERANGE ? -EBADMSG : rc, "%s: record %llu (%s): %s", path,
                            (unsigned long long)i, d, why.msg);
            goto fail;
        }
        if (add_entry(&b->ents, key, klen, own, olen, own) < 0) {
            free(own);
            rc = kt_err_set(err, -ENOMEM, "out of memory reading %s", path);
            goto fail;
        }
        const bentry *e = &b->ents.e[b->ents.n - 1];
        if (b->ents.n > 1 && key_cmp(&b->ents.e[b->ents.n - 2], e) >= 0) {
            rc = kt_err_set(err, -EBADMSG, "%s: record %llu is out of key order", path,
                            (unsigned long long)i);
            goto fail;
        }
        /* ranks of one key are contiguous from 0 */
        uint8_t rank = key[klen - 1];
        const bentry *prev = b->ents.n > 1 ? &b->ents.e[b->ents.n - 2] : NULL;
        bool same_key = prev && prev->klen == klen && memcmp(prev->key, key, klen - 1) == 0;
        if (rank != (same_key ? prev->key[klen - 1] + 1 : 0)) {
            rc = kt_err_set(err, -EBADMSG, "%s: record %llu: rank %u out of sequence", path,
                            (unsigned long long)i, rank);
            goto fail;
        }
    }
    if (off != body) {
        rc = kt_err_set(err, -EBADMSG, "%s: %zu trailing bytes after %llu records", path,
                        body - off, (unsigned long long)count);
        goto fail;
    }
    return 0;
fail:
    bundle_unload(b);
    return rc;
}

/* Length of the run of entries starting at i that share one key (without rank). */
static size_t group_len(const bentries *b, size_t i)
{
    const bentry *first = &b->e[i];
    size_t j = i + 1;
    while (j < b->n && b->e[j].klen == first->klen &&
           memcmp(b->e[j].key, first->key, first->klen - 1) == 0)
        j++;
    return j - i;
}

/* ---- import ---- */

static int import_fn(cache_env *env, MDB_txn *txn, void *ctx, kt_err *err)
{
    const bentries *b = ctx;
    uint8_t rk[CACHE_KEY_MAX + 1];
    for (size_t i = 0; i < b->n;) {
        size_t g = group_len(b, i), klen = b->e[i].klen - 1;
        memcpy(rk, b->e[i].key, klen);
        for (int rank = 0; rank <= CACHE_MAX_RUNNER_UPS; rank++) {
            rk[klen] = (uint8_t)rank;
            MDB_val k = {.mv_size = klen + 1, .mv_data = rk};
            int mrc = mdb_del(txn, env->kernels, &k, NULL);
            if (mrc != MDB_SUCCESS && mrc != MDB_NOTFOUND)
                return cache_lmdb_error(env, mrc, "cannot replace a record", err);
        }
        for (size_t j = i; j < i + g; j++) {
            MDB_val k = {.mv_size = b->e[j].klen, .mv_data = (void *)b->e[j].key};
            MDB_val v = {.mv_size = b->e[j].vlen, .mv_data = (void *)b->e[j].val};
            int rc = cache_lmdb_error(env, mdb_put(txn, env->kernels, &k, &v, 0),
                                      "cannot store a record", err);
            if (rc < 0)
                return rc;
        }
        i += g;
    }
    return 0;
}

static int cache_import_locked(cache_env *env, const char *path, const cache_trust *trust,
                               size_t *n, kt_err *err)
{
    if (!env || !path)
        return kt_err_set(err, -EINVAL, "cache_import: bad arguments");
    bundle b;
    int rc = bundle_load(path, trust, &b, err);
    if (rc < 0)
        return rc;
    rc = cache_write(env, import_fn, &b.ents, err);
    if (rc == 0 && n)
        *n = b.ents.n;
    bundle_unload(&b);
    return rc;
}

/* ---- merge ---- */

typedef struct merge_ctx {
    const bentries *src;
    cache_ranked *ranked; /* one per source entry, same order */
    cache_merge_stats st;
} merge_ctx;

static int merge_fn(cache_env *env, MDB_txn *txn, void *ctx, kt_err *err)
{
    merge_ctx *m = ctx;
    m->st.keys = m->st.changed = 0; /* restartable after a map growth */
    for (size_t i = 0; i < m->src->n;) {
        size_t g = group_len(m->src, i);
        bool changed = false;
        int rc = cache_rank_into(env, txn, m->src->e[i].key, m->src->e[i].klen - 1, &m->ranked[i],
                                 g, &changed, NULL, err);
        if (rc < 0)
            return rc;
        m->st.keys++;
        m->st.changed += changed;
        i += g;
    }
    return 0;
}

/* Collects the sound records of a source cache (read transaction left open on src). */
static int collect_dir(cache_env *src, bentries *out, cache_merge_stats *st, kt_err *err)
{
    MDB_txn *txn = NULL;
    MDB_cursor *cur = NULL;
    int rc = cache_rtxn_begin(src, &txn, err);
    if (rc < 0)
        return rc;
    if ((rc = cache_lmdb_error(src, mdb_cursor_open(txn, src->kernels, &cur),
                               "cannot open a cursor", err)) < 0)
        return rc;
    MDB_val k, v;
    int mrc = mdb_cursor_get(cur, &k, &v, MDB_FIRST);
    for (; mrc == MDB_SUCCESS; mrc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        kt_err why = {0};
        int crc = check_entry(k.mv_data, k.mv_size, v.mv_data, v.mv_size, NULL, NULL, NULL, &why);
        if (crc == -ENOMEM) {
            rc = kt_err_set(err, crc, "out of memory reading %s", src->path);
            break;
        }
        if (crc < 0) {
            char d[256];
            cache_key_describe(k.mv_data, k.mv_size, true, d, sizeof(d));
            kt_log_warn(CACHE_LOG, "%s: %s record %s skipped by merge: %s", src->path,
                        crc == -ERANGE ? "implausible" : "corrupt", d, why.msg);
            if (crc == -ERANGE)
                st->implausible++;
            else
                st->corrupt++;
            continue;
        }
        if (add_entry(out, k.mv_data, k.mv_size, v.mv_data, v.mv_size, NULL) < 0) {
            rc = kt_err_set(err, -ENOMEM, "out of memory reading %s", src->path);
            break;
        }
    }
    if (rc == 0 && mrc != MDB_NOTFOUND)
        rc = cache_lmdb_error(src, mrc, "cannot read records", err);
    mdb_cursor_close(cur);
    return rc;
}

static bool same_file(const char *a, const char *b)
{
    struct stat sa, sb;
    return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev &&
           sa.st_ino == sb.st_ino;
}

static int cache_merge_locked(cache_env *env, const char *src, const cache_trust *trust,
                              cache_merge_stats *stats, kt_err *err)
{
    if (!env || !src)
        return kt_err_set(err, -EINVAL, "cache_merge: bad arguments");
    struct stat st;
    if (stat(src, &st) < 0)
        return kt_err_set(err, -errno, "%s: %s", src, strerror(errno));
    merge_ctx m = {0};
    bundle b = {0};
    bentries dir_ents = {0};
    cache_env *senv = NULL;
    int rc;
    if (S_ISDIR(st.st_mode)) {
        char a[4096], c[4096];
        snprintf(a, sizeof(a), "%s/data.mdb", src);
        snprintf(c, sizeof(c), "%s/data.mdb", env->path);
        if (same_file(a, c))
            return kt_err_set(err, -EINVAL, "cannot merge %s into itself", src);
        if ((rc = cache_open(src, CACHE_RDONLY, NULL, &senv, err)) < 0)
            return rc;
        if ((rc = collect_dir(senv, &dir_ents, &m.st, err)) < 0)
            goto out;
        m.src = &dir_ents;
    } else {
        if ((rc = bundle_load(src, trust, &b, err)) < 0)
            return rc;
        m.src = &b.ents;
    }
    m.st.read = m.src->n + m.st.corrupt + m.st.implausible;
    m.ranked = calloc(m.src->n ? m.src->n : 1, sizeof(*m.ranked));
    if (!m.ranked) {
        rc = kt_err_set(err, -ENOMEM, "out of memory merging %s", src);
        goto out;
    }
    for (size_t i = 0; i < m.src->n; i++) {
        if ((rc = cache_ranked_from_value(m.src->e[i].val, m.src->e[i].vlen, &m.ranked[i], err)) <
            0)
            goto out;
    }
    rc = cache_write(env, merge_fn, &m, err);
    if (rc == 0 && stats)
        *stats = m.st;
    if (rc == 0)
        kt_log_info(CACHE_LOG, "merged %s into %s: %zu records, %zu keys, %zu changed", src,
                    env->path, m.st.read, m.st.keys, m.st.changed);
out:
    for (size_t i = 0; m.ranked && i < m.src->n; i++)
        cache_ranked_free(&m.ranked[i]);
    free(m.ranked);
    bentries_free(&dir_ents);
    bundle_unload(&b);
    if (senv) {
        cache_rtxn_end(senv);
        cache_close(senv);
    }
    return rc;
}

/* Public entry points: each holds the handle's lock for the whole call (cache.h "Threads"). */

int cache_export(cache_env *env, const char *path, const cache_signer *signer, size_t *n,
                 kt_err *err)
{
    cache_lock(env);
    int rc = cache_export_locked(env, path, signer, n, err);
    cache_unlock(env);
    return rc;
}

int cache_import(cache_env *env, const char *path, const cache_trust *trust, size_t *n, kt_err *err)
{
    cache_lock(env);
    int rc = cache_import_locked(env, path, trust, n, err);
    cache_unlock(env);
    return rc;
}

int cache_merge(cache_env *env, const char *src, const cache_trust *trust, cache_merge_stats *stats,
                kt_err *err)
{
    cache_lock(env);
    int rc = cache_merge_locked(env, src, trust, stats, err);
    cache_unlock(env);
    return rc;
}
