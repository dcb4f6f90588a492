/* msgpack helpers shared by the layers above ops/ (ops/msgpack_util.h). */
#include "msgpack_util.h"

#include <string.h>

const msgpack_object *kt_mp_get(const msgpack_object *map, const char *key)
{
    if (!map || map->type != MSGPACK_OBJECT_MAP)
        return NULL;
    for (uint32_t i = 0; i < map->via.map.size; i++)
        if (kt_mp_str_is(&map->via.map.ptr[i].key, key))
            return &map->via.map.ptr[i].val;
    return NULL;
}

bool kt_mp_str_is(const msgpack_object *o, const char *s)
{
    size_t n = strlen(s);
    return o->type == MSGPACK_OBJECT_STR && o->via.str.size == n &&
           memcmp(o->via.str.ptr, s, n) == 0;
}

bool kt_mp_i64(const msgpack_object *o, int64_t *out)
{
    if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER && o->via.u64 <= (uint64_t)INT64_MAX)
        *out = (int64_t)o->via.u64;
    else if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
        *out = o->via.i64;
    else
        return false;
    return true;
}

int kt_mp_pack_str(msgpack_packer *pk, const char *s)
{
    return msgpack_pack_str_with_body(pk, s ? s : "", s ? strlen(s) : 0);
}

int kt_mp_pack_bool(msgpack_packer *pk, bool v)
{
    return v ? msgpack_pack_true(pk) : msgpack_pack_false(pk);
}

int kt_mp_pack_kstr(msgpack_packer *pk, const char *key, const char *s)
{
    return kt_mp_pack_str(pk, key) || kt_mp_pack_str(pk, s);
}

int kt_mp_pack_ki64(msgpack_packer *pk, const char *key, int64_t v)
{
    return kt_mp_pack_str(pk, key) || msgpack_pack_int64(pk, v);
}

int kt_mp_pack_ku64(msgpack_packer *pk, const char *key, uint64_t v)
{
    return kt_mp_pack_str(pk, key) || msgpack_pack_uint64(pk, v);
}

int kt_mp_pack_kf64(msgpack_packer *pk, const char *key, double v)
{
    return kt_mp_pack_str(pk, key) || msgpack_pack_double(pk, v);
}

int kt_mp_pack_kbool(msgpack_packer *pk, const char *key, bool v)
{
    return kt_mp_pack_str(pk, key) || kt_mp_pack_bool(pk, v);
}

int kt_mp_pack_kbin(msgpack_packer *pk, const char *key, const void *data, size_t len)
{
    return kt_mp_pack_str(pk, key) || msgpack_pack_bin_with_body(pk, data, len);
}
