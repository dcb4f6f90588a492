/* The lookup memo (kd.h): a hash table of entries chained by index, with a least-recently-used
 * list through the same entries. Entries live in one array allocated up front; keys and values
 * are malloc'd per entry and counted, with the entry itself, against the byte budget. */
#include "kd.h"

#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#define NIL UINT32_MAX

typedef struct memo_val {
    uint8_t *bytes; /* NULL: this variant is not known */
    size_t len;
    uint32_t n_fields;
} memo_val;

typedef struct memo_entry {
    uint64_t hash, gen;
    uint8_t *key;
    size_t klen;
    memo_val v[KD_MEMO_VARIANTS];
    uint32_t hnext;      /* next entry in the bucket's chain */
    uint32_t prev, next; /* LRU list: prev is more recent */
} memo_entry;

struct kd_memo {
    memo_entry *e;
    uint32_t cap, n;
    uint32_t *bucket; /* heads of the chains, n_buckets a power of two */
    uint32_t mask;
    uint32_t free_head; /* unused entries, chained by hnext */
    uint32_t lru_head, lru_tail;
    size_t bytes, max_bytes;
    uint64_t seed;
    uint8_t *scratch;
    size_t scratch_cap;
    kd_memo_stats st;
};

/* ---- hashing ---- */

static inline uint64_t rotl(uint64_t x, int r)
{
    return x << r | x >> (64 - r);
}

static inline uint64_t fmix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
}

uint64_t kd_memo_hash(const void *p, size_t n, uint64_t seed)
{
    const uint8_t *b = p;
    const uint64_t k1 = 0x9e3779b97f4a7c15ull, k2 = 0xbf58476d1ce4e5b9ull;
    uint64_t h = seed ^ ((uint64_t)n * k1);
    for (; n >= 8; b += 8, n -= 8) {
        uint64_t v;
        memcpy(&v, b, 8);
        h = rotl(h ^ (v * k1), 31) * k2;
    }
    if (n) {
        uint64_t v = 0;
        memcpy(&v, b, n);
        h = rotl(h ^ (v * k1), 31) * k2;
    }
    return fmix(h);
}

/* ---- the table ---- */

static void lru_unlink(kd_memo *m, uint32_t i)
{
    memo_entry *x = &m->e[i];
    if (x->prev != NIL)
        m->e[x->prev].next = x->next;
    else
        m->lru_head = x->next;
    if (x->next != NIL)
        m->e[x->next].prev = x->prev;
    else
        m->lru_tail = x->prev;
    x->prev = x->next = NIL;
}

static void lru_push_front(kd_memo *m, uint32_t i)
{
    memo_entry *x = &m->e[i];
    x->prev = NIL;
    x->next = m->lru_head;
    if (m->lru_head != NIL)
        m->e[m->lru_head].prev = i;
    m->lru_head = i;
    if (m->lru_tail == NIL)
        m->lru_tail = i;
}

static void drop_values(kd_memo *m, memo_entry *x)
{
    for (int v = 0; v < KD_MEMO_VARIANTS; v++) {
        m->bytes -= x->v[v].len;
        free(x->v[v].bytes);
        x->v[v] = (memo_val){0};
    }
}

/* Unlinks entry i from its chain and the LRU list and frees what it holds. */
static void remove_entry(kd_memo *m, uint32_t i)
{
    memo_entry *x = &m->e[i];
    uint32_t *pp = &m->bucket[x->hash & m->mask];
    while (*pp != i)
        pp = &m->e[*pp].hnext;
    *pp = x->hnext;
    lru_unlink(m, i);
    drop_values(m, x);
    m->bytes -= sizeof(*x) + x->klen;
    free(x->key);
    *x = (memo_entry){.hnext = m->free_head, .prev = NIL, .next = NIL};
    m->free_head = i;
    m->n--;
}

static uint32_t find(const kd_memo *m, const uint8_t *key, size_t klen, uint64_t h)
{
    for (uint32_t i = m->bucket[h & m->mask]; i != NIL; i = m->e[i].hnext) {
        const memo_entry *x = &m->e[i];
        if (x->hash == h && x->klen == klen && memcmp(x->key, key, klen) == 0)
            return i;
    }
    return NIL;
}

int kd_memo_new(size_t max_entries, size_t max_bytes, kd_memo **out)
{
    if (max_entries < 1 || max_entries > (1u << 24) || max_bytes < 1)
        return -EINVAL;
    kd_memo *m = calloc(1, sizeof(*m));
    if (!m)
        return -ENOMEM;
    uint32_t nb = 1;
    while (nb < 2 * max_entries)
        nb *= 2;
    m->e = calloc(max_entries, sizeof(*m->e));
    m->bucket = malloc(nb * sizeof(*m->bucket));
    if (!m->e || !m->bucket) {
        free(m->e);
        free(m->bucket);
        free(m);
        return -ENOMEM;
    }
    m->cap = (uint32_t)max_entries;
    m->mask = nb - 1;
    m->max_bytes = max_bytes;
    for (uint32_t b = 0; b < nb; b++)
        m->bucket[b] = NIL;
    m->free_head = NIL;
    for (uint32_t i = m->cap; i-- > 0;) {
        m->e[i] = (memo_entry){.hnext = m->free_head, .prev = NIL, .next = NIL};
        m->free_head = i;
    }
    m->lru_head = m->lru_tail = NIL;
    /* a per-process seed: keys that collide cannot be prepared in advance */
    if (getrandom(&m->seed, sizeof(m->seed), GRND_NONBLOCK) != (ssize_t)sizeof(m->seed))
        m->seed = (uint64_t)(uintptr_t)m ^ 0x5bd1e9955bd1e995ull;
    *out = m;
    return 0;
}

void kd_memo_clear(kd_memo *m)
{
    if (!m)
        return;
    while (m->lru_tail != NIL)
        remove_entry(m, m->lru_tail);
}

void kd_memo_free(kd_memo *m)
{
    if (!m)
        return;
    kd_memo_clear(m);
    free(m->scratch);
    free(m->e);
    free(m->bucket);
    free(m);
}

uint8_t *kd_memo_scratch(kd_memo *m, size_t n)
{
    if (n > m->scratch_cap) {
        size_t cap = m->scratch_cap ? m->scratch_cap : 1024;
        while (cap < n)
            cap *= 2;
        uint8_t *p = realloc(m->scratch, cap);
        if (!p)
            return NULL;
        m->scratch = p;
        m->scratch_cap = cap;
    }
    return m->scratch;
}

bool kd_memo_get(kd_memo *m, const uint8_t *key, size_t klen, int variant, uint64_t gen,
                 const uint8_t **val, size_t *vlen, uint32_t *n_fields)
{
    KT_REQUIRE(variant >= 0 && variant < KD_MEMO_VARIANTS);
    uint64_t h = kd_memo_hash(key, klen, m->seed);
    uint32_t i = find(m, key, klen, h);
    if (i == NIL) {
        m->st.misses++;
        return false;
    }
    memo_entry *x = &m->e[i];
    if (x->gen != gen) {
        /* the cache changed since: what the entry says may be wrong now */
        m->st.stale++;
        remove_entry(m, i);
        return false;
    }
    if (!x->v[variant].bytes) {
        m->st.misses++;
        return false;
    }
    if (m->lru_head != i) {
        lru_unlink(m, i);
        lru_push_front(m, i);
    }
    m->st.hits++;
    *val = x->v[variant].bytes;
    *vlen = x->v[variant].len;
    *n_fields = x->v[variant].n_fields;
    return true;
}

int kd_memo_put(kd_memo *m, const uint8_t *key, size_t klen, int variant, uint64_t gen,
                const uint8_t *val, size_t vlen, uint32_t n_fields)
{
    KT_REQUIRE(variant >= 0 && variant < KD_MEMO_VARIANTS);
    /* one entry may take at most a sixteenth of the budget */
    if (sizeof(memo_entry) + klen + vlen > m->max_bytes / 16)
        return -E2BIG;
    uint64_t h = kd_memo_hash(key, klen, m->seed);
    uint32_t i = find(m, key, klen, h);
    uint8_t *copy = malloc(vlen ? vlen : 1);
    if (!copy)
        return -ENOMEM;
    memcpy(copy, val, vlen);
    if (i != NIL) {
        memo_entry *x = &m->e[i];
        if (x->gen != gen) {
            drop_values(m, x);
            x->gen = gen;
        }
        m->bytes -= x->v[variant].len;
        free(x->v[variant].bytes);
        lru_unlink(m, i);
    } else {
        uint8_t *kcopy = malloc(klen ? klen : 1);
        if (!kcopy) {
            free(copy);
            return -ENOMEM;
        }
        memcpy(kcopy, key, klen);
        if (m->free_head == NIL) {
            m->st.evictions++;
            remove_entry(m, m->lru_tail);
        }
        i = m->free_head;
        memo_entry *x = &m->e[i];
        m->free_head = x->hnext;
        *x = (memo_entry){.hash = h, .gen = gen, .key = kcopy, .klen = klen};
        x->hnext = m->bucket[h & m->mask];
        m->bucket[h & m->mask] = i;
        x->prev = x->next = NIL;
        m->bytes += sizeof(*x) + klen;
        m->n++;
    }
    memo_entry *x = &m->e[i];
    x->v[variant] = (memo_val){.bytes = copy, .len = vlen, .n_fields = n_fields};
    m->bytes += vlen;
    lru_push_front(m, i);
    /* over budget: the least recently used go (never the entry just written) */
    while (m->bytes > m->max_bytes && m->lru_tail != i) {
        m->st.evictions++;
        remove_entry(m, m->lru_tail);
    }
    return 0;
}

void kd_memo_stat(const kd_memo *m, kd_memo_stats *out)
{
    *out = m->st;
    out->entries = m->n;
    out->bytes = m->bytes;
}
