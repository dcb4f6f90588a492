/* The stored-value codec shared by kernel records, trials (record.c) and jobs (job.c): packing
 * helpers, the checksum trailer, and the checked field readers that decoders build on. */
#include "internal.h"
#include "ops/ops.h"

#include <stdlib.h>
#include <string.h>

/* ---- packing ---- */

int cache_pk_shapes(msgpack_packer *pk, const cache_bound *shapes, int n)
{
    if (kt_mp_pack_str(pk, "shapes") || msgpack_pack_array(pk, (size_t)n))
        return -1;
    for (int i = 0; i < n; i++) {
        if (msgpack_pack_array(pk, 2) || kt_mp_pack_str(pk, shapes[i].name) ||
            msgpack_pack_int64(pk, shapes[i].value))
            return -1;
    }
    return 0;
}

int cache_value_finish(msgpack_sbuffer *sb, uint8_t **out, size_t *len)
{
    uint8_t digest[CACHE_CHECKSUM_BYTES];
    ops_sha256(sb->data, sb->size, digest);
    if (msgpack_sbuffer_write(sb, (const char *)digest, sizeof(digest)) != 0)
        return -ENOMEM;
    *len = sb->size;
    *out = (uint8_t *)msgpack_sbuffer_release(sb);
    return 0;
}

/* ---- decoding ---- */

#define BAD(...) kt_err_set(d->err, -EBADMSG, __VA_ARGS__)

int cache_value_unpack(const void *buf, size_t len, msgpack_unpacked *res, const char *what,
                       cache_dec *d)
{
    const char *sep = what ? ": " : "";
    what = what ? what : "";
    if (!cache_value_check(buf, len))
        return BAD("%s%schecksum mismatch (the stored bytes are damaged)", what, sep);
    size_t off = 0, body = len - CACHE_CHECKSUM_BYTES;
    msgpack_unpack_return ur = msgpack_unpack_next(res, buf, body, &off);
    if (ur == MSGPACK_UNPACK_NOMEM_ERROR)
        return kt_err_set(d->err, -ENOMEM, "out of memory decoding a %s", d->doc);
    if (ur != MSGPACK_UNPACK_SUCCESS || off != body)
        return BAD("%s%smalformed msgpack body", what, sep);
    if (res->data.type != MSGPACK_OBJECT_MAP)
        return BAD("%s%sbody is not a map", what, sep);
    return 0;
}

int cache_get_i64(const msgpack_object *o, int64_t lo, int64_t hi, int64_t *out, const char *what,
                  cache_dec *d)
{
    int64_t v;
    if (!kt_mp_i64(o, &v))
        return BAD("%s field '%s': expected an integer", d->doc, what);
    if (v < lo || v > hi)
        return BAD("%s field '%s': %lld out of range", d->doc, what, (long long)v);
    *out = v;
    return 0;
}

int cache_get_i32(const msgpack_object *o, int32_t *out, const char *what, cache_dec *d)
{
    int64_t v = 0;
    int rc = cache_get_i64(o, INT32_MIN, INT32_MAX, &v, what, d);
    *out = (int32_t)v;
    return rc;
}

int cache_get_u64(const msgpack_object *o, uint64_t max, uint64_t *out, const char *what,
                  cache_dec *d)
{
    if (o->type != MSGPACK_OBJECT_POSITIVE_INTEGER || o->via.u64 > max)
        return BAD("%s field '%s': expected an unsigned integer <= %llu", d->doc, what,
                   (unsigned long long)max);
    *out = o->via.u64;
    return 0;
}

int cache_get_u32(const msgpack_object *o, uint32_t *out, const char *what, cache_dec *d)
{
    uint64_t v = 0;
    int rc = cache_get_u64(o, UINT32_MAX, &v, what, d);
    *out = (uint32_t)v;
    return rc;
}

int cache_get_f64(const msgpack_object *o, double *out, const char *what, cache_dec *d)
{
    if (o->type != MSGPACK_OBJECT_FLOAT64 && o->type != MSGPACK_OBJECT_FLOAT32)
        return BAD("%s field '%s': expected a float", d->doc, what);
    *out = o->via.f64;
    return 0;
}

int cache_get_bool(const msgpack_object *o, bool *out, const char *what, cache_dec *d)
{
    if (o->type != MSGPACK_OBJECT_BOOLEAN)
        return BAD("%s field '%s': expected a boolean", d->doc, what);
    *out = o->via.boolean;
    return 0;
}

int cache_get_strbuf(const msgpack_object *o, char *buf, size_t cap, const char *what, cache_dec *d)
{
    if (o->type != MSGPACK_OBJECT_STR || o->via.str.size >= cap)
        return BAD("%s field '%s': expected a string shorter than %zu bytes", d->doc, what, cap);
    memcpy(buf, o->via.str.ptr, o->via.str.size);
    buf[o->via.str.size] = '\0';
    return 0;
}

int cache_get_strdup(const msgpack_object *o, char **out, size_t *len, const char *what,
                     cache_dec *d)
{
    if (o->type != MSGPACK_OBJECT_STR)
        return BAD("%s field '%s': expected a string", d->doc, what);
    char *s = malloc(o->via.str.size + 1);
    if (!s)
        return kt_err_set(d->err, -ENOMEM, "out of memory decoding a %s", d->doc);
    memcpy(s, o->via.str.ptr, o->via.str.size);
    s[o->via.str.size] = '\0';
    free(*out);
    *out = s;
    if (len)
        *len = o->via.str.size;
    return 0;
}

int cache_get_bindup(const msgpack_object *o, uint8_t **out, size_t *len, const char *what,
                     cache_dec *d)
{
    if (o->type != MSGPACK_OBJECT_BIN)
        return BAD("%s field '%s': expected bytes", d->doc, what);
    uint8_t *b = malloc(o->via.bin.size ? o->via.bin.size : 1);
    if (!b)
        return kt_err_set(d->err, -ENOMEM, "out of memory decoding a %s", d->doc);
    memcpy(b, o->via.bin.ptr, o->via.bin.size);
    free(*out);
    *out = b;
    *len = o->via.bin.size;
    return 0;
}

int cache_get_enum(const msgpack_object *o, const char *const *names, int n, int *out,
                   const char *what, cache_dec *d)
{
    for (int i = 0; i < n; i++) {
        if (kt_mp_str_is(o, names[i])) {
            *out = i;
            return 0;
        }
    }
    return BAD("%s field '%s': unknown value", d->doc, what);
}

int cache_get_version(const msgpack_object *o, int expect, cache_dec *d)
{
    uint64_t u = 0;
    int rc = cache_get_u64(o, UINT32_MAX, &u, "v", d);
    if (rc < 0)
        return rc;
    if (u != (uint64_t)expect)
        return BAD("%s version %llu is not supported (this build reads %d)", d->doc,
                   (unsigned long long)u, expect);
    return 0;
}

int cache_get_sig(const msgpack_object *o, uint8_t sig[OPS_SIG_BYTES], cache_dec *d)
{
    if (o->type != MSGPACK_OBJECT_BIN || o->via.bin.size != OPS_SIG_BYTES)
        return BAD("%s field 'sig': expected %d bytes", d->doc, OPS_SIG_BYTES);
    memcpy(sig, o->via.bin.ptr, OPS_SIG_BYTES);
    return 0;
}

int cache_get_precision(const msgpack_object *o, ops_precision *out, cache_dec *d)
{
    char name[16];
    int rc = cache_get_strbuf(o, name, sizeof(name), "precision", d);
    if (rc < 0)
        return rc;
    if (ops_precision_from_name(name, out) < 0)
        return BAD("%s field 'precision': unknown value '%s'", d->doc, name);
    return 0;
}

int cache_get_shapes(const msgpack_object *o, cache_bound shapes[CACHE_MAX_SHAPES], int *n,
                     cache_dec *d)
{
    if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size > CACHE_MAX_SHAPES)
        return BAD("%s field 'shapes': expected at most %d pairs", d->doc, CACHE_MAX_SHAPES);
    *n = 0;
    for (uint32_t i = 0; i < o->via.array.size; i++) {
        const msgpack_object *p = &o->via.array.ptr[i];
        if (p->type != MSGPACK_OBJECT_ARRAY || p->via.array.size != 2)
            return BAD("%s field 'shapes': expected [name, value] pairs", d->doc);
        cache_bound *b = &shapes[i];
        int rc = cache_get_strbuf(&p->via.array.ptr[0], b->name, sizeof(b->name), "shapes.name", d);
        if (rc < 0 || (rc = cache_get_i64(&p->via.array.ptr[1], 1, INT64_MAX, &b->value,
                                          "shapes.value", d)) < 0)
            return rc;
        (*n)++;
    }
    return 0;
}

int cache_decode_map(const msgpack_object *o, const char *const *names, int n, cache_field_fn fn,
                     void *ctx, const char *what, cache_dec *d)
{
    return cache_decode_map_opt(o, names, n, 0, fn, ctx, what, d);
}

int cache_decode_map_opt(const msgpack_object *o, const char *const *names, int n,
                         uint64_t optional, cache_field_fn fn, void *ctx, const char *what,
                         cache_dec *d)
{
    KT_REQUIRE(n <= 64);
    const char *dot = what ? "." : "";
    if (o->type != MSGPACK_OBJECT_MAP)
        return BAD("%s field '%s': expected a map", d->doc, what ? what : "");
    what = what ? what : "";
    uint64_t seen = 0;
    for (uint32_t i = 0; i < o->via.map.size; i++) {
        const msgpack_object_kv *kv = &o->via.map.ptr[i];
        for (int f = 0; f < n; f++) {
            if (!kt_mp_str_is(&kv->key, names[f]))
                continue;
            if (seen & (1ull << f))
                return BAD("%s field '%s%s%s' appears twice", d->doc, what, dot, names[f]);
            seen |= 1ull << f;
            int rc = fn(f, &kv->val, ctx, d);
            if (rc < 0)
                return rc;
            break;
        }
    }
    for (int f = 0; f < n; f++) {
        if (!(seen & (1ull << f)) && !(optional & (1ull << f)))
            return BAD("%s field '%s%s%s' is missing", d->doc, what, dot, names[f]);
    }
    return 0;
}
