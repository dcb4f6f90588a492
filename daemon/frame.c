/* The msgpack frame scanner (frame.h). Element headers follow the msgpack specification's format
 * table: a header is 1 to 9 bytes; strings, binaries and extensions carry a body of the length
 * the header gives; arrays and maps open a container of n (maps: 2n) elements. */
#include "frame.h"

#include <string.h>

typedef enum kind { K_SCALAR, K_BODY, K_ARRAY, K_MAP, K_BAD } kind;

static uint64_t be(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = 0; i < n; i++)
        v = v << 8 | p[i];
    return v;
}

/* Decodes the header at p (avail bytes): kind, header size, and body length (K_BODY) or element
 * count (K_ARRAY, K_MAP). Returns false when the header itself is incomplete. */
static bool header(const uint8_t *p, size_t avail, kind *k, size_t *hdr, uint64_t *n)
{
    uint8_t b = p[0];
    int lenb = 0; /* bytes of the length/count field after the first byte */
    *n = 0;
    *hdr = 1;
    if (b <= 0x7f || b >= 0xe0 || b == 0xc0 || b == 0xc2 || b == 0xc3) {
        *k = K_SCALAR;
        return true;
    }
    if (b >= 0x80 && b <= 0x8f) {
        *k = K_MAP;
        *n = b & 0x0f;
        return true;
    }
    if (b >= 0x90 && b <= 0x9f) {
        *k = K_ARRAY;
        *n = b & 0x0f;
        return true;
    }
    if (b >= 0xa0 && b <= 0xbf) {
        *k = K_BODY;
        *n = b & 0x1f;
        return true;
    }
    switch (b) {
    case 0xca: /* float32 */
    case 0xce: /* uint32 */
    case 0xd2: /* int32 */
        *k = K_SCALAR, *hdr = 5;
        break;
    case 0xcb:
    case 0xcf:
    case 0xd3:
        *k = K_SCALAR, *hdr = 9;
        break;
    case 0xcc:
    case 0xd0:
        *k = K_SCALAR, *hdr = 2;
        break;
    case 0xcd:
    case 0xd1:
        *k = K_SCALAR, *hdr = 3;
        break;
    case 0xd4: /* fixext 1, 2, 4, 8, 16: type byte + data */
        *k = K_SCALAR, *hdr = 3;
        break;
    case 0xd5:
        *k = K_SCALAR, *hdr = 4;
        break;
    case 0xd6:
        *k = K_SCALAR, *hdr = 6;
        break;
    case 0xd7:
        *k = K_SCALAR, *hdr = 10;
        break;
    case 0xd8:
        *k = K_SCALAR, *hdr = 18;
        break;
    case 0xc4: /* bin 8/16/32 */
    case 0xd9: /* str 8/16/32 */
        *k = K_BODY, lenb = 1;
        break;
    case 0xc5:
    case 0xda:
        *k = K_BODY, lenb = 2;
        break;
    case 0xc6:
    case 0xdb:
        *k = K_BODY, lenb = 4;
        break;
    case 0xc7: /* ext 8/16/32: length, then a type byte, then the body */
        *k = K_BODY, lenb = 1;
        break;
    case 0xc8:
        *k = K_BODY, lenb = 2;
        break;
    case 0xc9:
        *k = K_BODY, lenb = 4;
        break;
    case 0xdc:
        *k = K_ARRAY, lenb = 2;
        break;
    case 0xdd:
        *k = K_ARRAY, lenb = 4;
        break;
    case 0xde:
        *k = K_MAP, lenb = 2;
        break;
    case 0xdf:
        *k = K_MAP, lenb = 4;
        break;
    default: /* 0xc1: never used */
        *k = K_BAD;
        return true;
    }
    if (lenb) {
        *hdr = 1 + (size_t)lenb + (b >= 0xc7 && b <= 0xc9 ? 1 : 0);
        if (avail < *hdr)
            return false;
        *n = be(p + 1, lenb);
        return true;
    }
    return avail >= *hdr;
}

kd_scan_rc kd_scan_step(kd_scan *s, const uint8_t *buf, size_t len)
{
    while (s->pos < len) {
        kind k;
        size_t hdr;
        uint64_t n;
        if (!header(buf + s->pos, len - s->pos, &k, &hdr, &n))
            return KD_SCAN_MORE;
        if (k == K_BAD)
            return KD_SCAN_BAD;
        if (k == K_BODY) {
            if (n > len - s->pos - hdr)
                return KD_SCAN_MORE; /* the body is not all here: re-read this header next time */
            s->pos += hdr + (size_t)n;
        } else {
            s->pos += hdr;
        }
        if ((k == K_ARRAY || k == K_MAP) && n > 0) {
            if (s->depth == KD_MAX_DEPTH)
                return KD_SCAN_DEEP;
            s->left[s->depth++] = k == K_MAP ? 2 * n : n;
            continue;
        }
        /* one element complete: close every container it completes */
        for (;;) {
            if (s->depth == 0)
                return KD_SCAN_DONE;
            if (--s->left[s->depth - 1] > 0)
                break;
            s->depth--;
        }
    }
    return KD_SCAN_MORE;
}

bool kd_frame_is_map(uint8_t b)
{
    return (b >= 0x80 && b <= 0x8f) || b == 0xde || b == 0xdf;
}

/* Skips one complete element at buf; its size in *size, or false when it is incomplete or bad. */
static bool skip_one(const uint8_t *buf, size_t len, size_t *size)
{
    kd_scan s = {0};
    if (kd_scan_step(&s, buf, len) != KD_SCAN_DONE)
        return false;
    *size = s.pos;
    return true;
}

bool kd_frame_peek_id(const uint8_t *buf, size_t len, uint64_t *id)
{
    kind k;
    size_t hdr, off;
    uint64_t n;
    if (len == 0 || !header(buf, len, &k, &hdr, &n) || k != K_MAP)
        return false;
    off = hdr;
    for (uint64_t i = 0; i < n; i++) {
        size_t ksize = 0, vsize = 0;
        if (!skip_one(buf + off, len - off, &ksize))
            return false;
        const uint8_t *key = buf + off;
        bool is_id = (ksize == 3 && key[0] == 0xa2 && memcmp(key + 1, "id", 2) == 0);
        off += ksize;
        if (is_id) {
            kind vk;
            size_t vh;
            uint64_t vn;
            if (off >= len || !header(buf + off, len - off, &vk, &vh, &vn) || vk != K_SCALAR)
                return false;
            uint8_t b = buf[off];
            if (b <= 0x7f) {
                *id = b;
            } else if (b >= 0xcc && b <= 0xcf) {
                *id = be(buf + off + 1, (int)vh - 1);
            } else if (b >= 0xd0 && b <= 0xd3) {
                /* int 8..64: msgpack-c decodes a non-negative one as the same id, so the
                 * E2BIG reply must carry it too; a negative id is not an id */
                uint64_t v = be(buf + off + 1, (int)vh - 1);
                int bits = 8 * ((int)vh - 1);
                if (bits < 64 && (v >> (bits - 1) & 1))
                    return false;
                if (bits == 64 && (v >> 63))
                    return false;
                *id = v;
            } else {
                return false;
            }
            return true;
        }
        if (!skip_one(buf + off, len - off, &vsize))
            return false;
        off += vsize;
    }
    return false;
}

/* The string at buf (an element of size bytes): its bytes and length, or false when it is not a
 * string. */
static bool as_str(const uint8_t *buf, size_t size, const uint8_t **s, size_t *n)
{
    kind k;
    size_t hdr;
    uint64_t body;
    uint8_t b = buf[0];
    bool str = (b >= 0xa0 && b <= 0xbf) || (b >= 0xd9 && b <= 0xdb);
    if (!str || !header(buf, size, &k, &hdr, &body) || hdr + body != size)
        return false;
    *s = buf + hdr;
    *n = (size_t)body;
    return true;
}

bool kd_frame_map_values(const uint8_t *buf, size_t len, const char *const *keys, int n,
                         const uint8_t **vals, size_t *lens)
{
    kind k;
    size_t hdr, off;
    uint64_t pairs;
    for (int i = 0; i < n; i++) {
        vals[i] = NULL;
        lens[i] = 0;
    }
    if (len == 0 || !header(buf, len, &k, &hdr, &pairs) || k != K_MAP)
        return false;
    off = hdr;
    for (uint64_t p = 0; p < pairs; p++) {
        size_t ksize = 0, vsize = 0;
        if (!skip_one(buf + off, len - off, &ksize))
            return false;
        const uint8_t *key = buf + off, *s = NULL;
        size_t slen = 0;
        off += ksize;
        if (!skip_one(buf + off, len - off, &vsize))
            return false;
        if (as_str(key, ksize, &s, &slen))
            for (int i = 0; i < n; i++)
                if (!vals[i] && strlen(keys[i]) == slen && memcmp(keys[i], s, slen) == 0) {
                    vals[i] = buf + off;
                    lens[i] = vsize;
                    break;
                }
        off += vsize;
    }
    return off == len;
}

bool kd_frame_is_str(const uint8_t *buf, size_t len, const char *s)
{
    const uint8_t *body;
    size_t n;
    return len > 0 && as_str(buf, len, &body, &n) && n == strlen(s) && memcmp(body, s, n) == 0;
}

int64_t kd_frame_graph_tensors(const uint8_t *buf, size_t len)
{
    kind k;
    size_t hdr;
    uint64_t n;
    if (len == 0 || !header(buf, len, &k, &hdr, &n))
        return -1;
    if (buf[0] == 0xc4 || buf[0] == 0xc5 || buf[0] == 0xc6) { /* bin: the msgpack form inside */
        if (hdr + n != len)
            return -1;
        buf += hdr;
        len = (size_t)n;
    }
    static const char *const keys[] = {"inputs", "nodes"};
    const uint8_t *vals[2];
    size_t lens[2];
    if (!kd_frame_map_values(buf, len, keys, 2, vals, lens))
        return -1;
    int64_t total = 0;
    for (int i = 0; i < 2; i++) {
        if (!vals[i] || !header(vals[i], lens[i], &k, &hdr, &n) || (k != K_ARRAY && k != K_MAP))
            return -1;
        total += (int64_t)n;
    }
    return total;
}
