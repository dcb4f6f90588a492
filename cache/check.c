/* cache_check: a structural check of the LMDB file and (optionally) of every stored value, in a
 * separate process (ktune-cache-check, spawned), so that a damaged page that would make LMDB read
 * outside its map (SIGBUS, SIGSEGV) kills the child, never the caller. cache.h has the contract;
 * docs/operations.md ("A damaged cache") what an operator does with the verdict.
 *
 * Why our own page walk: LMDB 0.9 trusts its pages (no checksums; node offsets, sizes and child
 * page numbers are used as found), so walking a damaged file with mdb_cursor_get is exactly what
 * crashes, and a walk that happens not to crash proves little about a later point lookup (a
 * binary search reads branch keys that a cursor walk never compares). The child therefore reads
 * the file itself, through a private read-only mapping, and checks every page reachable from the
 * meta page of its snapshot before anything follows a pointer out of it:
 *   - the meta page: magic, format version, page size, last page inside the file;
 *   - every branch and leaf page of the free list, the main database and each named database:
 *     its own page number, type, free-space bounds, node offsets inside the page, key and data
 *     sizes inside the page, child page numbers inside the file, depth equal to the tree's,
 *     keys in strictly ascending order, and branch separators that bound their subtrees (what
 *     a point lookup's binary search relies on);
 *   - every overflow run (values too large for a leaf): inside the file, its header's page
 *     number and type, long enough for the value;
 *   - no page reachable twice, no page both in use and on the free list (a writer would then
 *     overwrite live data), and each tree's page and entry counts equal to what its header says.
 * With CACHE_CHECK_READER only what a reader relies on is checked: the branch and leaf pages and
 * every value's place inside the file; overflow headers, page ownership and the free list only
 * matter to a writer (mdb_ovpage_free trusts the header's page count; page allocation trusts the
 * free list), and reading one overflow header per large value is most of the full check's time.
 * Then, with CACHE_CHECK_VALUES, every stored value: records, trials and journal entries pass
 * their SHA-256 and decode, and belong to their keys. The layout read here is LMDB's data format
 * 1 (liblmdb 0.9.x, 64-bit): the constants below name what is read.
 *
 * The snapshot: the child opens the environment read-only and begins a read transaction, which
 * registers it in the lock file, so a writer in another process (ktuned) does not reuse the pages
 * of that snapshot while the check reads them; the meta page checked is the one whose txnid is the
 * transaction's. Without a writable lock file (MDB_NOLOCK, as cache_open falls back to) nothing
 * pins the snapshot, so a verdict of damage is only believed when no more than one commit
 * happened meanwhile (a writer reuses the pages of snapshot N only from commit N + 3 on); else the
 * check runs again, a bounded number of times. */
#include "internal.h"

#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ---- LMDB's on-disk format (data version 1, 64-bit pgno_t and size_t) ---- */

#define LM_MAGIC        0xBEEFC0DEu
#define LM_DATA_VERSION 1u
#define LM_PAGEHDR      16u /* pgno (8), pad (2), flags (2), lower+upper or overflow count (4) */
#define LM_NODEHDR      8u  /* lo (2), hi (2), flags (2), ksize (2), then key, then data */
#define LM_DB_BYTES     48u /* MDB_db: pad 4, flags 2, depth 2, 3 page counts, entries, root */
#define LM_MAX_KEY      511u
#define LM_MAX_DEPTH    30u /* LMDB's cursor holds 32 levels */
#define LM_INVALID_PG   UINT64_MAX

#define LM_P_BRANCH   0x01u
#define LM_P_LEAF     0x02u
#define LM_P_OVERFLOW 0x04u
#define LM_P_META     0x08u
#define LM_P_DIRTY    0x10u
#define LM_P_LEAF2    0x20u
#define LM_P_SUBP     0x40u
#define LM_P_KEEP     0x8000u

#define LM_F_BIGDATA 0x01u
#define LM_F_SUBDATA 0x02u
#define LM_F_DUPDATA 0x04u

/* offsets in a meta page, after the page header */
#define LM_META_MAGIC   0u
#define LM_META_VERSION 4u
#define LM_META_DBS     24u /* after magic, version, address (8), mapsize (8) */
#define LM_META_LASTPG  (LM_META_DBS + 2 * LM_DB_BYTES)
#define LM_META_TXNID   (LM_META_LASTPG + 8u)
#define LM_META_END     (LM_META_TXNID + 8u)

#define CHECK_ATTEMPTS 3 /* runs when a writer may have changed the snapshot under the check */
#define CHECK_TIMEOUT  60.0
#define CHECK_SHM_FD   3 /* the checking process's shared memory (check_shm) */
#define CHECK_DONE_FD  4 /* a pipe's write end: its closing tells the parent the child ended */

typedef struct lm_db {
    uint16_t flags, depth;
    uint64_t branch_pages, leaf_pages, overflow_pages, entries, root;
} lm_db;

static uint16_t rd16(const uint8_t *p)
{
    uint16_t v;
    memcpy(&v, p, sizeof(v));
    return v;
}

static uint32_t rd32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, sizeof(v));
    return v;
}

static uint64_t rd64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, sizeof(v));
    return v;
}

static void db_parse(const uint8_t *p, lm_db *db)
{
    db->flags = rd16(p + 4);
    db->depth = rd16(p + 6);
    db->branch_pages = rd64(p + 8);
    db->leaf_pages = rd64(p + 16);
    db->overflow_pages = rd64(p + 24);
    db->entries = rd64(p + 32);
    db->root = rd64(p + 40);
}

/* ---- what the child shares with the parent ---- */

typedef struct shared_state {
    volatile int done; /* the child finished and filled rep (a crash leaves it 0) */
    cache_check_report rep;
    char where[256]; /* what the child was reading last: for a crash's message */
} shared_state;

/* ---- the walk (child side) ---- */

typedef enum db_kind {
    DB_FREE,
    DB_MAIN,
    DB_KERNELS,
    DB_TRIALS,
    DB_JOBS,
    DB_META,
    DB_OTHER
} db_kind;

typedef struct walker {
    const uint8_t *map; /* the data file, read-only */
    size_t map_len;
    uint32_t psize;
    uint64_t last_pg;
    uint8_t *used;  /* a bit per page: reachable from a tree (or a meta page) */
    uint8_t *freed; /* a bit per page: on the free list */
    unsigned flags;
    shared_state *sh;
    cache_check_report *rep;
    kt_err *why; /* the first structural defect */
    /* the tree being walked */
    const char *db_name;
    db_kind kind;
    uint64_t n_branch, n_leaf, n_overflow, n_entries;
    uint8_t prev[LM_MAX_KEY];
    size_t prev_len;
    bool have_prev, prev_inclusive;
    /* named databases found in the main tree */
    struct sub {
        char name[64];
        lm_db db;
    } subs[16];
    int n_subs;
} walker;

static bool bit_get(const uint8_t *bits, uint64_t i)
{
    return bits[i >> 3] & (1u << (i & 7));
}

static void bit_set(uint8_t *bits, uint64_t i)
{
    bits[i >> 3] |= (uint8_t)(1u << (i & 7));
}

static const uint8_t *page_at(const walker *w, uint64_t pg)
{
    return w->map + pg * w->psize;
}

/* Keys of LMDB's default order (shorter first on a common prefix), or size_t keys (free list). */
static int key_cmp(const walker *w, const uint8_t *a, size_t al, const uint8_t *b, size_t bl)
{
    if (w->kind == DB_FREE) {
        uint64_t x = rd64(a), y = rd64(b);
        return x < y ? -1 : x > y;
    }
    int c = memcmp(a, b, al < bl ? al : bl);
    if (c)
        return c;
    return al < bl ? -1 : al > bl;
}

static void describe_key(const walker *w, const uint8_t *k, size_t len, char *out, size_t cap)
{
    if (w->kind == DB_KERNELS && len == CACHE_KEY_FIXED + 1) {
        cache_key_describe(k, len, true, out, cap);
        return;
    }
    if (w->kind == DB_FREE && len == 8) {
        snprintf(out, cap, "txn %" PRIu64, rd64(k));
        return;
    }
    if (w->kind == DB_JOBS && len == 8) {
        uint64_t id = 0;
        for (int i = 0; i < 8; i++)
            id = id << 8 | k[i];
        snprintf(out, cap, "job %" PRIu64, id);
        return;
    }
    /* printable text as is (trial candidates, database names), else hex */
    size_t n = 0;
    for (size_t i = 0; i < len && n + 4 < cap; i++) {
        if (k[i] >= 0x20 && k[i] < 0x7f) {
            out[n++] = (char)k[i];
        } else {
            n += (size_t)snprintf(out + n, cap - n, "\\x%02x", k[i]);
        }
    }
    out[n < cap ? n : cap - 1] = '\0';
}

static void set_where(walker *w, const char *what, const uint8_t *k, size_t klen)
{
    char d[192] = "";
    if (k)
        describe_key(w, k, klen, d, sizeof(d));
    snprintf(w->sh->where, sizeof(w->sh->where), "%s in database %s%s%s", what, w->db_name,
             k ? " after key " : "", d);
}

static int structure(walker *w, const char *fmt, ...) KT_PRINTF(2, 3);
static int structure(walker *w, const char *fmt, ...)
{
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return kt_err_set(w->why, -EBADMSG, "database %s: %s", w->db_name, msg);
}

/* Claims pages [pg, pg + n) for a tree. */
static int claim(walker *w, uint64_t pg, uint64_t n, const char *what)
{
    if (pg < 2 || pg > w->last_pg || n > w->last_pg - pg + 1)
        return structure(w,
                         "%s at page %" PRIu64 " (+%" PRIu64 ") lies outside the file "
                         "(last page %" PRIu64 ")",
                         what, pg, n, w->last_pg);
    for (uint64_t i = pg; i < pg + n; i++) {
        if (bit_get(w->used, i))
            return structure(w, "page %" PRIu64 " (%s) is reachable twice", i, what);
        bit_set(w->used, i);
    }
    return 0;
}

/* Checks one stored value against its key; counts it. Only with CACHE_CHECK_VALUES. */
static void check_value(walker *w, const uint8_t *k, size_t klen, const uint8_t *v, size_t vlen)
{
    kt_err why = {0};
    int rc = 0;
    size_t *n = NULL, *bad = NULL;
    switch (w->kind) {
    case DB_KERNELS: {
        n = &w->rep->records;
        bad = &w->rep->records_bad;
        cache_record r;
        cache_record_init(&r);
        if (klen < 2)
            rc = kt_err_set(&why, -EBADMSG, "key of %zu bytes", klen);
        else if ((rc = cache_record_decode(v, vlen, &r, &why)) == 0)
            rc = cache_record_matches_key(&r, k, klen - 1, &why);
        /* sound bytes, impossible time: a rewritten record, which readers do not serve */
        if (rc == 0 && (rc = cache_record_check_floor(&r, NULL, &why)) == -ERANGE)
            w->rep->records_implausible++;
        cache_record_free(&r);
        break;
    }
    case DB_TRIALS: {
        n = &w->rep->trials;
        bad = &w->rep->trials_bad;
        cache_trial t;
        const uint8_t *nul = memrchr(k, 0, klen);
        if ((rc = cache_trial_decode(v, vlen, &t, &why)) == 0) {
            size_t cl = nul ? klen - (size_t)(nul + 1 - k) : 0;
            if (!nul || strlen(t.cand) != cl || memcmp(t.cand, nul + 1, cl) != 0)
                rc = kt_err_set(&why, -EBADMSG, "the entry holds candidate %s", t.cand);
        }
        break;
    }
    case DB_JOBS: {
        n = &w->rep->jobs;
        bad = &w->rep->jobs_bad;
        cache_job j;
        rc = cache_job_entry_decode(k, klen, v, vlen, &j, &why);
        cache_job_free(&j);
        break;
    }
    case DB_META:
        bad = &w->rep->meta_bad;
        if (klen == strlen("schema_version") && memcmp(k, "schema_version", klen) == 0 && vlen != 4)
            rc = kt_err_set(&why, -EBADMSG, "schema version of %zu bytes", vlen);
        break;
    default:
        break;
    }
    if (n)
        (*n)++;
    if (rc < 0 && rc != -ENOMEM && bad) {
        (*bad)++;
        if (!w->rep->first_bad[0]) {
            char d[200];
            describe_key(w, k, klen, d, sizeof(d));
            snprintf(w->rep->first_bad, sizeof(w->rep->first_bad), "%.16s: %.180s: %.190s",
                     w->db_name, d, why.msg);
        }
    }
}

static int walk_page(walker *w, uint64_t pg, unsigned depth, unsigned tree_depth);

/* A large value's overflow run, as a writer sees it: its header's page number, type and length
 * (what mdb_ovpage_free frees), then its pages claimed. */
static int overflow_run(walker *w, const uint8_t *key, size_t ksize, uint64_t opg, uint64_t need)
{
    const uint8_t *op = page_at(w, opg);
    uint64_t count = rd32(op + 12);
    if (rd64(op) != opg || !(rd16(op + 10) & LM_P_OVERFLOW) || count < need ||
        count > w->last_pg - opg + 1) {
        /* Readers never look at this header (the node gives the value's place and size), so the
         * value may still be sound; a writer replacing it frees as many pages as the header says.
         * A damaged value, then, that makes the cache unfit for writing. */
        w->rep->overflow_bad++;
        if (!w->rep->first_bad[0]) {
            char d[200];
            describe_key(w, key, ksize, d, sizeof(d));
            snprintf(w->rep->first_bad, sizeof(w->rep->first_bad),
                     "%.16s: %.180s: the header of its overflow page %" PRIu64 " is damaged",
                     w->db_name, d, opg);
        }
        count = need;
    }
    int rc = claim(w, opg, count, "overflow run");
    if (rc == 0)
        w->n_overflow += count;
    return rc;
}

/* A leaf node: its data inside the page or in an overflow run of its own. */
static int leaf_node(walker *w, uint64_t pg, unsigned i, const uint8_t *node, size_t room)
{
    uint16_t nflags = rd16(node + 4), ksize = rd16(node + 6);
    uint64_t dsize = rd16(node) | (uint64_t)rd16(node + 2) << 16;
    const uint8_t *key = node + LM_NODEHDR;
    if (nflags & ~(LM_F_BIGDATA | LM_F_SUBDATA))
        return structure(w,
                         "page %" PRIu64 " node %u: flags 0x%x (duplicate-sorted data or "
                         "garbage; ktune's caches have none)",
                         pg, i, nflags);
    if ((nflags & LM_F_SUBDATA) && w->kind != DB_MAIN)
        return structure(w, "page %" PRIu64 " node %u: a sub-database inside a database", pg, i);
    if (ksize > LM_MAX_KEY || (w->kind == DB_FREE && ksize != 8))
        return structure(w, "page %" PRIu64 " node %u: key of %u bytes", pg, i, ksize);
    size_t inline_bytes = (nflags & LM_F_BIGDATA) ? 8 : dsize;
    if ((size_t)LM_NODEHDR + ksize + inline_bytes > room)
        return structure(w,
                         "page %" PRIu64 " node %u: key and data (%u + %" PRIu64 " bytes) run "
                         "past the end of the page",
                         pg, i, ksize, dsize);
    /* order */
    if (w->have_prev) {
        int c = key_cmp(w, w->prev, w->prev_len, key, ksize);
        if (c > 0 || (c == 0 && !w->prev_inclusive))
            return structure(w, "page %" PRIu64 " node %u: keys out of order", pg, i);
    }
    memcpy(w->prev, key, ksize);
    w->prev_len = ksize;
    w->have_prev = true;
    w->prev_inclusive = false;
    w->n_entries++;

    const uint8_t *data = key + ksize;
    if (nflags & LM_F_BIGDATA) {
        uint64_t opg = rd64(data);
        uint64_t need = (LM_PAGEHDR - 1 + dsize) / w->psize + 1;
        if (dsize == 0 || opg < 2 || opg > w->last_pg || need > w->last_pg - opg + 1)
            return structure(w,
                             "page %" PRIu64 " node %u: value of %" PRIu64 " bytes at page %" PRIu64
                             " lies outside the file (last page %" PRIu64 ")",
                             pg, i, dsize, opg, w->last_pg);
        const uint8_t *op = page_at(w, opg);
        data = op + LM_PAGEHDR;
        /* readers use the node's place and size only; writers also the run's header */
        int rc = w->flags & CACHE_CHECK_READER ? 0 : overflow_run(w, key, ksize, opg, need);
        if (rc < 0)
            return rc;
    }
    if (nflags & LM_F_SUBDATA) {
        if (dsize != LM_DB_BYTES)
            return structure(w,
                             "page %" PRIu64 " node %u: sub-database record of %" PRIu64 " bytes",
                             pg, i, dsize);
        if (w->n_subs == (int)KT_ARRAY_LEN(w->subs) || ksize >= sizeof(w->subs[0].name))
            return structure(w, "more than %zu named databases, or a name of %u bytes",
                             KT_ARRAY_LEN(w->subs), ksize);
        struct sub *s = &w->subs[w->n_subs++];
        memcpy(s->name, key, ksize);
        s->name[ksize] = '\0';
        db_parse(data, &s->db);
    }
    if (w->flags & CACHE_CHECK_VALUES)
        check_value(w, key, ksize, data, dsize);
    if (w->kind == DB_FREE) {
        /* an ID list: a count, then that many page numbers */
        if (dsize < 8 || dsize % 8 || rd64(data) != dsize / 8 - 1)
            return structure(w,
                             "page %" PRIu64 " node %u: a free list of %" PRIu64 " bytes does "
                             "not hold its count",
                             pg, i, dsize);
    }
    return 0;
}

static int walk_page(walker *w, uint64_t pg, unsigned depth, unsigned tree_depth)
{
    int rc = claim(w, pg, 1, depth == 1 ? "root page" : "page");
    if (rc < 0)
        return rc;
    const uint8_t *p = page_at(w, pg);
    uint16_t flags = rd16(p + 10);
    uint16_t lower = rd16(p + 12), upper = rd16(p + 14);
    uint16_t type = flags & (uint16_t) ~(LM_P_DIRTY | LM_P_KEEP);
    if (rd64(p) != pg)
        return structure(w, "page %" PRIu64 " says it is page %" PRIu64, pg, rd64(p));
    if (type != LM_P_BRANCH && type != LM_P_LEAF)
        return structure(w, "page %" PRIu64 ": type 0x%x where a %s page belongs", pg, flags,
                         depth < tree_depth ? "branch" : "leaf");
    bool branch = type == LM_P_BRANCH;
    if (branch != (depth < tree_depth))
        return structure(w, "page %" PRIu64 ": a %s page at depth %u of %u", pg,
                         branch ? "branch" : "leaf", depth, tree_depth);
    if (lower < LM_PAGEHDR || (lower - LM_PAGEHDR) % 2 || lower > upper || upper > w->psize)
        return structure(w, "page %" PRIu64 ": free space bounds %u..%u are impossible", pg, lower,
                         upper);
    unsigned nkeys = (lower - LM_PAGEHDR) / 2;
    if (nkeys == 0)
        return structure(w, "page %" PRIu64 ": an empty %s page", pg, branch ? "branch" : "leaf");
    if (branch) {
        w->n_branch++;
    } else {
        w->n_leaf++;
        char what[64];
        snprintf(what, sizeof(what), "reading leaf page %" PRIu64, pg);
        set_where(w, what, w->have_prev ? w->prev : NULL, w->prev_len);
    }
    for (unsigned i = 0; i < nkeys; i++) {
        uint16_t off = rd16(p + LM_PAGEHDR + 2 * i);
        if (off < upper || off % 2 || (size_t)off + LM_NODEHDR > w->psize)
            return structure(w,
                             "page %" PRIu64 " node %u: offset %u is outside the node area "
                             "%u..%u",
                             pg, i, off, upper, w->psize);
        const uint8_t *node = p + off;
        size_t room = w->psize - off;
        uint16_t ksize = rd16(node + 6);
        if (!branch) {
            if ((rc = leaf_node(w, pg, i, node, room)) < 0)
                return rc;
            continue;
        }
        if (ksize > LM_MAX_KEY || LM_NODEHDR + (size_t)ksize > room)
            return structure(w, "page %" PRIu64 " node %u: key of %u bytes runs past the page", pg,
                             i, ksize);
        uint64_t child =
            rd16(node) | (uint64_t)rd16(node + 2) << 16 | (uint64_t)rd16(node + 4) << 32;
        /* node 0's key is never read; each later one separates its subtree from the ones before
         * it: every key before is smaller, every key below it is at least as large */
        if (i > 0) {
            const uint8_t *key = node + LM_NODEHDR;
            if (w->kind == DB_FREE && ksize != 8)
                return structure(w, "page %" PRIu64 " node %u: key of %u bytes", pg, i, ksize);
            if (w->have_prev && key_cmp(w, w->prev, w->prev_len, key, ksize) >= 0)
                return structure(w, "page %" PRIu64 " node %u: separator key out of order", pg, i);
            memcpy(w->prev, key, ksize);
            w->prev_len = ksize;
            w->have_prev = true;
            w->prev_inclusive = true;
        }
        if ((rc = walk_page(w, child, depth + 1, tree_depth)) < 0)
            return rc;
    }
    return 0;
}

/* Walks one tree from its header; compares the counts. */
static int walk_tree(walker *w, const char *name, db_kind kind, const lm_db *db)
{
    w->db_name = name;
    w->kind = kind;
    w->n_branch = w->n_leaf = w->n_overflow = w->n_entries = 0;
    w->have_prev = false;
    set_where(w, "walking", NULL, 0);
    if (db->root == LM_INVALID_PG) {
        if (db->depth || db->entries || db->branch_pages || db->leaf_pages || db->overflow_pages)
            return structure(w, "empty, yet its header counts %" PRIu64 " entries, depth %u",
                             db->entries, db->depth);
        return 0;
    }
    if (db->depth == 0 || db->depth > LM_MAX_DEPTH)
        return structure(w, "depth %u", db->depth);
    int rc = walk_page(w, db->root, 1, db->depth);
    if (rc < 0)
        return rc;
    bool reader = w->flags & CACHE_CHECK_READER; /* overflow runs not counted */
    if (w->n_branch != db->branch_pages || w->n_leaf != db->leaf_pages ||
        (!reader && w->n_overflow != db->overflow_pages) || w->n_entries != db->entries)
        return structure(w,
                         "%" PRIu64 " branch, %" PRIu64 " leaf, %" PRIu64
                         " overflow pages and %" PRIu64 " entries found; its header says %" PRIu64
                         ", %" PRIu64 ", %" PRIu64 ", %" PRIu64,
                         w->n_branch, w->n_leaf, w->n_overflow, w->n_entries, db->branch_pages,
                         db->leaf_pages, db->overflow_pages, db->entries);
    w->rep->tree_pages += w->n_branch + w->n_leaf + w->n_overflow;
    return 0;
}

/* The free list's page numbers, once every tree is walked: none in use, none listed twice. */
static int free_ids(walker *w, uint64_t pg, unsigned depth, unsigned tree_depth)
{
    const uint8_t *p = page_at(w, pg);
    unsigned nkeys = (rd16(p + 12) - LM_PAGEHDR) / 2;
    for (unsigned i = 0; i < nkeys; i++) {
        const uint8_t *node = p + rd16(p + LM_PAGEHDR + 2 * i);
        if (depth < tree_depth) {
            uint64_t child =
                rd16(node) | (uint64_t)rd16(node + 2) << 16 | (uint64_t)rd16(node + 4) << 32;
            int rc = free_ids(w, child, depth + 1, tree_depth);
            if (rc < 0)
                return rc;
            continue;
        }
        uint16_t nflags = rd16(node + 4), ksize = rd16(node + 6);
        uint64_t dsize = rd16(node) | (uint64_t)rd16(node + 2) << 16;
        const uint8_t *data = node + LM_NODEHDR + ksize;
        if (nflags & LM_F_BIGDATA)
            data = page_at(w, rd64(data)) + LM_PAGEHDR;
        uint64_t n = dsize / 8 - 1;
        for (uint64_t j = 1; j <= n; j++) {
            uint64_t id = rd64(data + 8 * j);
            if (id < 2 || id > w->last_pg)
                return structure(w, "txn %" PRIu64 " frees page %" PRIu64 ", outside the file",
                                 rd64(node + LM_NODEHDR), id);
            if (bit_get(w->used, id))
                return structure(w, "page %" PRIu64 " is on the free list and in use", id);
            if (bit_get(w->freed, id))
                return structure(w, "page %" PRIu64 " is on the free list twice", id);
            bit_set(w->freed, id);
            w->rep->free_pages++;
        }
    }
    return 0;
}

static const struct {
    const char *name;
    db_kind kind;
} named_dbs[] = {
    {"kernels", DB_KERNELS},
    {"trials", DB_TRIALS},
    {"jobs", DB_JOBS},
    {"meta", DB_META},
};

/* Reads the meta page of snapshot txnid (transaction N writes meta page N % 2, and that is the
 * page LMDB's reader of snapshot N uses). 0; -EAGAIN when the page holds another txnid (a
 * writer moved on twice: try again; or damage, which child_check tells apart); -EBADMSG for
 * damage. */
static int read_meta(walker *w, uint64_t txnid, lm_db dbs[2], uint64_t *last_pg)
{
    w->db_name = "(meta page)";
    int m = (int)(txnid & 1);
    size_t off = (size_t)m * w->psize;
    if (off + LM_PAGEHDR + LM_META_END > w->map_len)
        return structure(w, "the file (%zu bytes) is too short for its meta pages", w->map_len);
    const uint8_t *mp = w->map + off + LM_PAGEHDR;
    uint8_t copy[LM_META_END];
    memcpy(copy, mp, sizeof(copy));
    if (rd64(copy + LM_META_TXNID) != txnid || memcmp(copy, mp, sizeof(copy)) != 0)
        return kt_err_set(w->why, -EAGAIN,
                          "meta page %d holds transaction %" PRIu64 ", the snapshot is %" PRIu64, m,
                          rd64(copy + LM_META_TXNID), txnid);
    if (rd32(copy + LM_META_MAGIC) != LM_MAGIC || rd32(copy + LM_META_VERSION) != LM_DATA_VERSION)
        return structure(w, "meta page %d: not an LMDB data file of format %u", m, LM_DATA_VERSION);
    if (rd32(copy + LM_META_DBS) != w->psize)
        return structure(w, "meta page %d: page size %u, the file was opened with %u", m,
                         rd32(copy + LM_META_DBS), w->psize);
    db_parse(copy + LM_META_DBS, &dbs[0]);
    db_parse(copy + LM_META_DBS + LM_DB_BYTES, &dbs[1]);
    *last_pg = rd64(copy + LM_META_LASTPG);
    if (*last_pg < 1 || *last_pg >= w->map_len / w->psize)
        return structure(w, "meta page %d: last page %" PRIu64 ", but the file holds %zu pages", m,
                         *last_pg, w->map_len / w->psize);
    return 0;
}

/* The newest txnid on either meta page (0 when unreadable). */
static uint64_t newest_txnid(const walker *w)
{
    uint64_t best = 0;
    for (int m = 0; m < 2; m++) {
        size_t off = (size_t)m * w->psize + LM_PAGEHDR + LM_META_TXNID;
        if (off + 8 <= w->map_len && rd64(w->map + off) > best)
            best = rd64(w->map + off);
    }
    return best;
}

static int walk_all(walker *w, uint64_t txnid)
{
    lm_db dbs[2];
    uint64_t last_pg = 0;
    int rc = read_meta(w, txnid, dbs, &last_pg);
    if (rc < 0)
        return rc;
    w->last_pg = last_pg;
    w->rep->txnid = txnid;
    w->rep->pages_used = last_pg + 1;
    size_t bytes = (size_t)(last_pg / 8 + 1);
    free(w->used);
    free(w->freed);
    w->used = calloc(1, bytes);
    w->freed = calloc(1, bytes);
    if (!w->used || !w->freed)
        return kt_err_set(w->why, -ENOMEM, "out of memory for %zu page bits", (size_t)last_pg + 1);
    bit_set(w->used, 0);
    bit_set(w->used, 1);
    w->n_subs = 0;
    if ((rc = walk_tree(w, "(main)", DB_MAIN, &dbs[1])) < 0)
        return rc;
    for (size_t i = 0; i < KT_ARRAY_LEN(named_dbs); i++) {
        bool found = false;
        for (int s = 0; s < w->n_subs; s++)
            found |= strcmp(w->subs[s].name, named_dbs[i].name) == 0;
        if (!found) {
            w->db_name = named_dbs[i].name;
            return structure(w, "missing from the main database");
        }
    }
    for (int s = 0; s < w->n_subs; s++) {
        db_kind kind = DB_OTHER;
        for (size_t i = 0; i < KT_ARRAY_LEN(named_dbs); i++)
            if (strcmp(w->subs[s].name, named_dbs[i].name) == 0)
                kind = named_dbs[i].kind;
        if (w->subs[s].db.flags != 0) {
            w->db_name = w->subs[s].name;
            return structure(w, "flags 0x%x (ktune opens its databases with none)",
                             w->subs[s].db.flags);
        }
        if ((rc = walk_tree(w, w->subs[s].name, kind, &w->subs[s].db)) < 0)
            return rc;
    }
    if (w->flags & CACHE_CHECK_READER)
        return 0; /* readers never read the free list */
    if ((rc = walk_tree(w, "(free list)", DB_FREE, &dbs[0])) < 0)
        return rc;
    w->db_name = "(free list)";
    w->kind = DB_FREE;
    if (dbs[0].root != LM_INVALID_PG && (rc = free_ids(w, dbs[0].root, 1, dbs[0].depth)) < 0)
        return rc;
    return 0;
}

/* Opens the environment read-only as cache_open does (falling back to no locks when the lock file
 * is not writable). */
static int child_env(const char *dir, MDB_env **out, kt_err *why)
{
    unsigned flags = MDB_RDONLY | MDB_NOTLS;
    int reserved = cache_reserve_lock_file(dir); /* internal.h says why */
    if (reserved == -ENOSPC || reserved == -EDQUOT)
        flags |= MDB_NOLOCK; /* as a reader does: the snapshot is then re-checked (see above) */
    for (int attempt = 0; attempt < 2; attempt++) {
        MDB_env *env = NULL;
        int mrc = mdb_env_create(&env);
        if (mrc != MDB_SUCCESS)
            return kt_err_set(why, -ENOMEM, "cannot create an LMDB environment");
        mdb_env_set_maxdbs(env, 8);
        mrc = mdb_env_open(env, dir, flags, 0664);
        if (mrc == MDB_SUCCESS) {
            *out = env;
            return 0;
        }
        mdb_env_close(env);
        if (!(flags & MDB_NOLOCK) && (mrc == EACCES || mrc == EPERM)) {
            flags |= MDB_NOLOCK;
            continue;
        }
        if (mrc == ENOENT)
            return kt_err_set(why, -ENOENT, "no kernel cache in %s", dir);
        if (mrc == EACCES || mrc == EPERM || mrc == ENOMEM || mrc == EMFILE)
            return kt_err_set(why, -mrc, "cannot open %s: %s", dir, strerror(mrc));
        /* MDB_INVALID, MDB_VERSION_MISMATCH, a map that cannot be set up from the meta page */
        return kt_err_set(why, -EBADMSG, "LMDB cannot open it: %s", mdb_strerror(mrc));
    }
    return kt_err_set(why, -EACCES, "cannot open %s", dir);
}

/* The child's work: fills sh->rep. Returns 0 when a verdict was reached (in rep), or a negative
 * errno when the check could not run (why filled). */
static int child_check(const char *dir, unsigned flags, shared_state *sh, kt_err *why)
{
    cache_check_report *rep = &sh->rep;
    snprintf(sh->where, sizeof(sh->where), "opening the environment");
    MDB_env *env = NULL;
    int rc = child_env(dir, &env, why);
    if (rc == -EBADMSG) {
        rep->verdict = CACHE_CHECK_DAMAGED_STRUCTURE;
        snprintf(rep->what, sizeof(rep->what), "%s", why->msg);
        return 0;
    }
    if (rc < 0)
        return rc;
    MDB_stat st;
    mdb_env_stat(env, &st);
    char path[4200];
    snprintf(path, sizeof(path), "%s/data.mdb", dir);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb) < 0) {
        rc = kt_err_set(why, -errno, "%s: %s", path, strerror(errno));
        if (fd >= 0)
            close(fd);
        mdb_env_close(env);
        return rc;
    }
    walker w = {.psize = st.ms_psize, .flags = flags, .sh = sh, .rep = rep, .why = why};
    w.map_len = (size_t)sb.st_size;
    rep->page_size = st.ms_psize;
    rep->file_bytes = w.map_len;
    void *map = w.map_len ? mmap(NULL, w.map_len, PROT_READ, MAP_SHARED, fd, 0) : MAP_FAILED;
    close(fd);
    if (map == MAP_FAILED) {
        mdb_env_close(env);
        return kt_err_set(why, -EIO, "%s: cannot map %zu bytes: %s", path, w.map_len,
                          strerror(errno));
    }
    w.map = map;
    uint64_t first_txnid = 0;
    for (int attempt = 0;; attempt++) {
        MDB_txn *txn = NULL;
        int mrc = mdb_txn_begin(env, NULL, MDB_RDONLY, &txn);
        if (mrc != MDB_SUCCESS) {
            rc = kt_err_set(why, -EIO, "cannot begin a read transaction: %s", mdb_strerror(mrc));
            break;
        }
        uint64_t txnid = (uint64_t)mdb_txn_id(txn);
        rep->records = rep->records_bad = rep->trials = rep->trials_bad = 0;
        rep->records_implausible = 0;
        rep->jobs = rep->jobs_bad = rep->meta_bad = rep->tree_pages = rep->free_pages = 0;
        rep->overflow_bad = 0;
        rep->first_bad[0] = '\0';
        *why = (kt_err){0};
        if (attempt == 0)
            first_txnid = txnid;
        rc = walk_all(&w, txnid);
        uint64_t now = newest_txnid(&w);
        mdb_txn_abort(txn);
        /* a meta page that keeps holding another transaction than the snapshot while nothing
         * commits is damaged, not overtaken */
        if (rc == -EAGAIN && attempt + 1 == CHECK_ATTEMPTS && txnid == first_txnid) {
            rep->verdict = CACHE_CHECK_DAMAGED_STRUCTURE;
            snprintf(rep->what, sizeof(rep->what), "%s", why->msg);
            rc = 0;
            break;
        }
        bool moved = now > txnid + 1 || rc == -EAGAIN;
        if (rc == -EBADMSG && !moved) {
            rep->verdict = CACHE_CHECK_DAMAGED_STRUCTURE;
            snprintf(rep->what, sizeof(rep->what), "%s", why->msg);
            rc = 0;
            break;
        }
        if (rc == 0 || (rc != -EBADMSG && rc != -EAGAIN) || attempt + 1 == CHECK_ATTEMPTS) {
            if (rc == -EAGAIN || rc == -EBADMSG)
                rc = kt_err_set(why, -EAGAIN,
                                "the cache changed under the check %d times (a busy writer "
                                "without reader locks): try again",
                                CHECK_ATTEMPTS);
            break;
        }
    }
    if (rc == 0 && rep->verdict == CACHE_CHECK_OK &&
        rep->records_bad + rep->trials_bad + rep->jobs_bad + rep->meta_bad + rep->overflow_bad >
            0) {
        rep->verdict = CACHE_CHECK_DAMAGED_VALUES;
        if (flags & CACHE_CHECK_VALUES)
            snprintf(rep->what, sizeof(rep->what),
                     "%zu of %zu records, %zu of %zu trials, %zu of %zu journal entries and %zu "
                     "meta values fail their checksum or do not decode (%zu records are below "
                     "their physical floor: implausible), %zu large values have a damaged page "
                     "header (first: %.380s)",
                     rep->records_bad, rep->records, rep->trials_bad, rep->trials, rep->jobs_bad,
                     rep->jobs, rep->meta_bad, rep->records_implausible, rep->overflow_bad,
                     rep->first_bad);
        else
            snprintf(rep->what, sizeof(rep->what),
                     "%zu large values have a damaged page header (first: %.400s)",
                     rep->overflow_bad, rep->first_bad);
    }
    munmap(map, w.map_len);
    free(w.used);
    free(w.freed);
    mdb_env_close(env);
    return rc;
}

/* ---- the parent ---- */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

typedef struct child_result {
    int rc;   /* the child's return (when done) */
    int code; /* its kt_err code */
    char msg[sizeof(((kt_err *)0)->msg)];
} child_result;

/* What parent and child share: one memfd mapping (a fork's anonymous mapping would not survive
 * the child's exec). */
typedef struct check_shm {
    shared_state sh;
    child_result cr;
} check_shm;

int cache_check_serve(int argc, char **argv)
{
    if (argc != 3 || !argv[1][0] || fcntl(CHECK_SHM_FD, F_GETFD) < 0 ||
        fcntl(CHECK_DONE_FD, F_GETFD) < 0) {
        fprintf(stderr,
                "%s: an internal helper of ktune's cache check; run `ktune cache check "
                "DIR` instead\n",
                argc > 0 ? argv[0] : CACHE_CHECK_EXE);
        return 2;
    }
    /* a crash must end this process, whatever a sanitizer runtime installed at start-up */
    static const int fatal[] = {SIGBUS, SIGSEGV, SIGILL, SIGFPE, SIGABRT};
    for (size_t i = 0; i < KT_ARRAY_LEN(fatal); i++)
        signal(fatal[i], SIG_DFL);
    char *end = NULL;
    unsigned long flags = strtoul(argv[2], &end, 10);
    struct stat sb;
    if (*end || fstat(CHECK_SHM_FD, &sb) < 0 || (size_t)sb.st_size != sizeof(check_shm))
        return 2;
    check_shm *m =
        mmap(NULL, sizeof(check_shm), PROT_READ | PROT_WRITE, MAP_SHARED, CHECK_SHM_FD, 0);
    if (m == MAP_FAILED)
        return 2;
    kt_err why = {0};
    m->cr.rc = child_check(argv[1], (unsigned)flags, &m->sh, &why);
    m->cr.code = why.code;
    memcpy(m->cr.msg, why.msg, sizeof(m->cr.msg));
    __atomic_store_n(&m->sh.done, 1, __ATOMIC_SEQ_CST);
    return 0; /* CHECK_DONE_FD closes with the process */
}

/* Starts the checking process: posix_spawn (vfork and exec: no copy of a large caller's page
 * tables, and nothing of the caller's threads, locks or signal handlers reaches it) of
 * ktune-cache-check with the shared memory as CHECK_SHM_FD and a pipe's write end as
 * CHECK_DONE_FD, every other descriptor closed, signals unblocked and at their default. */
static int spawn_checker(const char *dir, unsigned flags, int shm_fd, int done_fd, pid_t *pid,
                         kt_err *err)
{
    char *exe = NULL;
    int rc = kt_find_exe(NULL, CACHE_CHECK_ENV, CACHE_CHECK_EXE, &exe, err);
    if (rc < 0)
        return rc;
    char flag_text[16];
    snprintf(flag_text, sizeof(flag_text), "%u", flags);
    char *argv[] = {exe, (char *)dir, flag_text, NULL};
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t at;
    sigset_t none, all;
    sigemptyset(&none);
    sigfillset(&all);
    /* the sources are at CHECK_DONE_FD + 1 or above (F_DUPFD), so no dup2 overwrites another */
    if ((rc = posix_spawn_file_actions_init(&fa)) != 0)
        goto out_exe;
    if ((rc = posix_spawnattr_init(&at)) != 0)
        goto out_fa;
    if ((rc = posix_spawn_file_actions_adddup2(&fa, shm_fd, CHECK_SHM_FD)) != 0 ||
        (rc = posix_spawn_file_actions_adddup2(&fa, done_fd, CHECK_DONE_FD)) != 0 ||
        (rc = posix_spawn_file_actions_addclosefrom_np(&fa, CHECK_DONE_FD + 1)) != 0 ||
        (rc = posix_spawnattr_setsigmask(&at, &none)) != 0 ||
        (rc = posix_spawnattr_setsigdefault(&at, &all)) != 0 ||
        (rc = posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF)) != 0)
        goto out_at;
    rc = posix_spawn(pid, exe, &fa, &at, argv, environ);
out_at:
    posix_spawnattr_destroy(&at);
out_fa:
    posix_spawn_file_actions_destroy(&fa);
out_exe:
    if (rc != 0)
        kt_err_set(err, -rc, "cache_check: cannot start %s: %s", exe, strerror(rc));
    free(exe);
    return -rc;
}

int cache_check(const char *dir, unsigned flags, double timeout_s, cache_check_report *out,
                kt_err *err)
{
    if (!dir || !dir[0] || !out)
        return kt_err_set(err, -EINVAL, "cache_check: no directory or report given");
    if (flags & ~(unsigned)(CACHE_CHECK_VALUES | CACHE_CHECK_READER))
        return kt_err_set(err, -EINVAL, "cache_check: unknown flags 0x%x", flags);
    memset(out, 0, sizeof(*out));
    if (timeout_s <= 0)
        timeout_s = CHECK_TIMEOUT;
    char path[4200];
    if (snprintf(path, sizeof(path), "%s/data.mdb", dir) >= (int)sizeof(path))
        return kt_err_set(err, -ENAMETOOLONG, "%s: path too long", dir);
    struct stat sb;
    if (stat(path, &sb) < 0)
        return errno == ENOENT ? kt_err_set(err, -ENOENT, "no kernel cache in %s", dir)
                               : kt_err_set(err, -errno, "%s: %s", path, strerror(errno));

    double t0 = now_s();
    int rc;
    int shm_fd = memfd_create("ktune-cache-check", MFD_CLOEXEC);
    if (shm_fd < 0)
        return kt_err_set(err, -errno, "cache_check: memfd_create: %s", strerror(errno));
    check_shm *m = MAP_FAILED;
    if (ftruncate(shm_fd, sizeof(check_shm)) < 0 ||
        (m = mmap(NULL, sizeof(check_shm), PROT_READ | PROT_WRITE, MAP_SHARED, shm_fd, 0)) ==
            MAP_FAILED) {
        rc = kt_err_set(err, -ENOMEM, "cache_check: cannot map shared memory: %s", strerror(errno));
        goto out_fd;
    }
    shared_state *sh = &m->sh;
    child_result *cr = &m->cr;
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) < 0) {
        rc = kt_err_set(err, -errno, "cache_check: pipe: %s", strerror(errno));
        goto out_mem;
    }
    /* move both descriptors the child gets above its targets (see spawn_checker) */
    int shm_src = fcntl(shm_fd, F_DUPFD_CLOEXEC, CHECK_DONE_FD + 1);
    int done_src = fcntl(fds[1], F_DUPFD_CLOEXEC, CHECK_DONE_FD + 1);
    close(fds[1]);
    pid_t pid = -1;
    if (shm_src < 0 || done_src < 0)
        rc = kt_err_set(err, -errno, "cache_check: fcntl: %s", strerror(errno));
    else
        rc = spawn_checker(dir, flags, shm_src, done_src, &pid, err);
    if (shm_src >= 0)
        close(shm_src);
    if (done_src >= 0)
        close(done_src);
    if (rc < 0) {
        close(fds[0]);
        goto out_mem;
    }
    /* Wait for the pipe to close (the child exited or died), at most timeout_s. A child started
     * meanwhile by another thread of the caller may hold the pipe too (until its exec closes it),
     * so each slice also asks for our child directly. */
    int st = 0;
    pid_t r = 0;
    while (r == 0) {
        double left = t0 + timeout_s - now_s();
        if (left <= 0) {
            kill(pid, SIGKILL);
            break;
        }
        struct pollfd pfd = {.fd = fds[0], .events = POLLIN};
        int n = poll(&pfd, 1, left > 0.25 ? 250 : (int)(left * 1000) + 1);
        if (n > 0 || (n < 0 && errno != EINTR))
            break; /* POLLHUP: the child's end closed */
        r = waitpid(pid, &st, WNOHANG);
    }
    close(fds[0]);
    while (r == 0 && (r = waitpid(pid, &st, 0)) < 0 && errno == EINTR)
        r = 0;
    bool done = __atomic_load_n(&sh->done, __ATOMIC_SEQ_CST);
    if (!done && r == pid && WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL &&
        now_s() >= t0 + timeout_s) {
        rc = kt_err_set(err, -ETIMEDOUT, "cache %s: the check did not finish in %.0f s (last: %s)",
                        dir, timeout_s, sh->where);
        goto out_mem;
    }
    if (!done && r == pid && WIFEXITED(st) && WEXITSTATUS(st) != 0) {
        /* the helper refused to run (a broken install): no verdict, not damage */
        rc = kt_err_set(err, -EPROTO, "cache %s: %s exited with status %d before checking", dir,
                        CACHE_CHECK_EXE, WEXITSTATUS(st));
        goto out_mem;
    }
    if (!done) {
        /* a crash: the damage LMDB itself would have hit */
        *out = sh->rep;
        out->verdict = CACHE_CHECK_DAMAGED_STRUCTURE;
        if (r == pid && WIFSIGNALED(st)) {
            out->signal = WTERMSIG(st);
            snprintf(out->what, sizeof(out->what),
                     "reading it killed the checking process with SIG%s while %s",
                     sigabbrev_np(out->signal) ? sigabbrev_np(out->signal) : "?", sh->where);
        } else {
            /* reaped elsewhere (SIGCHLD ignored by the caller), or an exit without a result */
            snprintf(out->what, sizeof(out->what),
                     "the checking process ended without a result while %s", sh->where);
        }
        out->seconds = now_s() - t0;
        rc = 0;
        goto out_mem;
    }
    if (cr->rc < 0) {
        rc = kt_err_set(err, cr->rc, "cache %s: %s", dir, cr->msg);
        goto out_mem;
    }
    *out = sh->rep;
    out->seconds = now_s() - t0;
    rc = 0;
out_mem:
    munmap(m, sizeof(check_shm));
out_fd:
    close(shm_fd);
    return rc;
}

bool cache_check_writable(const cache_check_report *r)
{
    return r->verdict != CACHE_CHECK_DAMAGED_STRUCTURE && r->overflow_bad == 0;
}

const char *cache_check_verdict_name(cache_check_verdict v)
{
    switch (v) {
    case CACHE_CHECK_OK:
        return "ok";
    case CACHE_CHECK_DAMAGED_VALUES:
        return "damaged_records";
    case CACHE_CHECK_DAMAGED_STRUCTURE:
        return "damaged_structure";
    }
    return "unknown";
}
