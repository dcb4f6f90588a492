/* Framing of the client stream (docs/protocol.md, "Framing"): a resumable scanner that finds where
 * one msgpack value ends, and its nesting depth, without decoding it, so the caps are checked
 * before anything is allocated for a message; and a peek at the envelope of a message too large
 * to decode (for its E2BIG reply). Pure functions over bytes: no I/O, no allocation. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define KD_MAX_REQUEST  (4u << 20)  /* bytes of one request */
#define KD_MAX_DEPTH    32          /* nesting of containers, the top-level map counting 1 */
#define KD_MAX_BUFFERED (4u << 20)  /* bytes buffered for a connection without a whole message */
#define KD_MAX_QUEUED   (64u << 20) /* reply bytes queued and not yet written to a connection */

/* Scanner state: where the next element header starts, and the elements still to come in each
 * open container. Zero-initialise (or kd_scan_reset) before the first byte of a message. */
typedef struct kd_scan {
    size_t pos;
    int depth;
    uint64_t left[KD_MAX_DEPTH];
} kd_scan;

typedef enum kd_scan_rc {
    KD_SCAN_MORE = 0, /* the value is not complete in buf: call again with more bytes */
    KD_SCAN_DONE,     /* the value is buf[0 .. s->pos) */
    KD_SCAN_BAD,      /* not msgpack (the byte 0xc1) */
    KD_SCAN_DEEP,     /* nested deeper than KD_MAX_DEPTH */
} kd_scan_rc;

static inline void kd_scan_reset(kd_scan *s)
{
    s->pos = 0;
    s->depth = 0;
}

/* Continues scanning one msgpack value that starts at buf[0]; buf holds len bytes (those of an
 * earlier call plus new ones). O(new elements): a string body is skipped, not read. */
kd_scan_rc kd_scan_step(kd_scan *s, const uint8_t *buf, size_t len);

/* True when b starts a msgpack map (fixmap, map16, map32). */
bool kd_frame_is_map(uint8_t b);

/* Reads the top-level map at buf (possibly truncated) pair by pair until it finds "id" with an
 * unsigned integer value: true and *id. False when the bytes run out first or the map has no
 * such key. */
bool kd_frame_peek_id(const uint8_t *buf, size_t len, uint64_t *id);

/* Finds keys[0..n) in the complete top-level map at buf (len bytes): vals[i] and lens[i] get the
 * raw bytes of the value of the first pair whose key is the string keys[i] (in any of msgpack's
 * string encodings), NULL and 0 when there is none. Keys that are not strings are skipped. False
 * when buf does not hold one whole map. Used to key the lookup memo by the exact bytes sent. */
bool kd_frame_map_values(const uint8_t *buf, size_t len, const char *const *keys, int n,
                         const uint8_t **vals, size_t *lens);

/* True when the complete element at buf (len bytes) is the string s. */
bool kd_frame_is_str(const uint8_t *buf, size_t len, const char *s);

/* The entries of "inputs" and "nodes" together of the graph value at buf (len bytes: a request's
 * `graph`, a map or bin holding one), read without decoding it; -1 when the bytes are not such a
 * value or either is absent or not a container. How large a graph is, for prep.c's choice. */
int64_t kd_frame_graph_tensors(const uint8_t *buf, size_t len);
