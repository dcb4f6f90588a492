/* Small msgpack-c helpers shared by every layer above ops/ (cache, search, daemon, client):
 * reading a key of a map, comparing a string object, taking an integer, and packing strings
 * and key-value pairs. The checked readers with error messages stay with each decoder (their
 * messages name their own document); these are the pieces they all had a copy of.
 *
 * Objects are msgpack-c's (msgpack_object), valid as long as the zone or unpacked result that
 * holds them; nothing here allocates except through the packer. Any thread. */
#pragma once

#include <msgpack.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The value of the first key of map equal to the string key, or NULL when map is NULL, is not
 * a map, or has no such string key (keys of other types are passed over). The value may be
 * nil: callers that treat nil as absent check for it. */
const msgpack_object *kt_mp_get(const msgpack_object *map, const char *key);

/* Is o a string equal to s (byte for byte, same length)? */
bool kt_mp_str_is(const msgpack_object *o, const char *s);

/* An integer object (positive up to INT64_MAX, or negative) as int64_t. False, *out untouched,
 * for any other type, a float included, or a positive integer above INT64_MAX. */
bool kt_mp_i64(const msgpack_object *o, int64_t *out);

/* Packing. Each returns 0, or nonzero when the packer's write failed (out of memory for an
 * sbuffer), like msgpack_pack_*; a string NULL packs as "". The kt_mp_pack_k* ones pack the
 * key string, then the value: one pair of a map whose header the caller packed. */
int kt_mp_pack_str(msgpack_packer *pk, const char *s);
int kt_mp_pack_bool(msgpack_packer *pk, bool v);
int kt_mp_pack_kstr(msgpack_packer *pk, const char *key, const char *s);
int kt_mp_pack_ki64(msgpack_packer *pk, const char *key, int64_t v);
int kt_mp_pack_ku64(msgpack_packer *pk, const char *key, uint64_t v);
int kt_mp_pack_kf64(msgpack_packer *pk, const char *key, double v);
int kt_mp_pack_kbool(msgpack_packer *pk, const char *key, bool v);
int kt_mp_pack_kbin(msgpack_packer *pk, const char *key, const void *data, size_t len);
