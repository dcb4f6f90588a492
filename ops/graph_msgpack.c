/* The msgpack form of the op graph: the same schema as the JSON form (maps with the same keys,
 * numbers as msgpack ints and floats). Both directions go through the jansson tree of
 * graph_json.c, so the two forms accept the same documents. This parses untrusted daemon input:
 * the encoded bytes are checked (size, truncation, nesting, claimed counts) before msgpack-c
 * allocates anything for them. */
#include "graph_io.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The one place msgpack-c's unpack results become our errors. */
static int msgpack_error(msgpack_unpack_return ret, ops_diag *d)
{
    switch (ret) {
    case MSGPACK_UNPACK_SUCCESS:
        return 0;
    case MSGPACK_UNPACK_EXTRA_BYTES:
        return ops__syntax_error(d, "msgpack: trailing bytes after the graph");
    case MSGPACK_UNPACK_CONTINUE:
        return ops__syntax_error(d, "msgpack: truncated message");
    case MSGPACK_UNPACK_PARSE_ERROR:
        return ops__syntax_error(d, "msgpack: malformed message");
    case MSGPACK_UNPACK_NOMEM_ERROR:
        if (d)
            ops_diag_set(d, NULL, OPS_RULE_NONE, -1, NULL, "msgpack: out of memory");
        return -ENOMEM;
    }
    return ops__syntax_error(d, "msgpack: unpack failed (%d)", (int)ret);
}

static uint64_t read_be(const uint8_t *p, size_t n)
{
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++)
        v = (v << 8) | p[i];
    return v;
}

/* Walks the encoding once without allocating. Rejects truncation, nesting deeper than
 * OPS_MAX_NESTING, trailing bytes, and container headers claiming more entries than bytes remain
 * (msgpack-c allocates room for the claimed count before reading the entries). */
static int precheck(const uint8_t *p, size_t len, ops_diag *d)
{
    uint64_t pending[OPS_MAX_NESTING + 1];
    int depth = 0;
    size_t pos = 0;
    pending[0] = 1;
    while (depth >= 0) {
        if (pending[depth] == 0) {
            depth--;
            continue;
        }
        pending[depth]--;
        if (pos >= len)
            return msgpack_error(MSGPACK_UNPACK_CONTINUE, d);
        uint8_t b = p[pos++];
        size_t lenfield = 0; /* bytes of a length or count that follow the type byte */
        uint64_t skip = 0;   /* payload bytes */
        uint64_t count = 0;  /* entries of a container */
        int kind = 0;        /* 0 scalar, 1 payload of lenfield-given size, 2 container */
        uint64_t mul = 1;    /* maps hold two objects per entry */
        if (b <= 0x7f || b >= 0xe0 || b == 0xc0 || b == 0xc2 || b == 0xc3) {
            /* fixint, nil, bool: the type byte is the whole value */
        } else if (b <= 0x8f) {
            kind = 2, count = (uint64_t)(b & 0x0f) * 2;
        } else if (b <= 0x9f) {
            kind = 2, count = b & 0x0f;
        } else if (b <= 0xbf) {
            skip = b & 0x1f;
        } else if (b >= 0xc4 && b <= 0xc6) { /* bin 8/16/32 */
            kind = 1, lenfield = (size_t)1 << (b - 0xc4);
        } else if (b >= 0xc7 && b <= 0xc9) { /* ext 8/16/32: length, type byte, data */
            kind = 1, lenfield = (size_t)1 << (b - 0xc7), skip = 1;
        } else if (b == 0xca || b == 0xcb) {
            skip = b == 0xca ? 4 : 8;
        } else if (b >= 0xcc && b <= 0xd3) { /* uint/int 8..64 */
            skip = (uint64_t)1 << ((b - 0xcc) & 3);
        } else if (b >= 0xd4 && b <= 0xd8) { /* fixext: type byte and 1..16 bytes */
            skip = 1 + ((uint64_t)1 << (b - 0xd4));
        } else if (b >= 0xd9 && b <= 0xdb) { /* str 8/16/32 */
            kind = 1, lenfield = (size_t)1 << (b - 0xd9);
        } else if (b == 0xdc || b == 0xdd) {
            kind = 2, lenfield = b == 0xdc ? 2 : 4;
        } else if (b == 0xde || b == 0xdf) {
            kind = 2, lenfield = b == 0xde ? 2 : 4, mul = 2;
        } else {
            return msgpack_error(MSGPACK_UNPACK_PARSE_ERROR, d); /* 0xc1, never used */
        }
        if (lenfield) {
            if (len - pos < lenfield)
                return msgpack_error(MSGPACK_UNPACK_CONTINUE, d);
            uint64_t n = read_be(p + pos, lenfield);
            pos += lenfield;
            if (kind == 1)
                skip += n;
            else
                count = n * mul;
        }
        if (skip > len - pos)
            return msgpack_error(MSGPACK_UNPACK_CONTINUE, d);
        pos += (size_t)skip;
        if (kind == 2 && count > 0) {
            if (count > len - pos) /* every entry takes at least one byte */
                return msgpack_error(MSGPACK_UNPACK_CONTINUE, d);
            if (depth + 1 > OPS_MAX_NESTING)
                return ops__syntax_error(d, "msgpack: nested deeper than %d levels",
                                         OPS_MAX_NESTING);
            pending[++depth] = count;
        } else if (kind == 2 && depth + 1 > OPS_MAX_NESTING) {
            return ops__syntax_error(d, "msgpack: nested deeper than %d levels", OPS_MAX_NESTING);
        }
    }
    if (pos != len)
        return msgpack_error(MSGPACK_UNPACK_EXTRA_BYTES, d);
    return 0;
}

static int schema_error(ops_diag *d, const char *what)
{
    return ops_diag_set(d, NULL, OPS_RULE_SCHEMA, -1, NULL, "msgpack: %s", what);
}

static int str_to_json(const msgpack_object_str *s, json_t **out, ops_diag *d)
{
    /* msgpack-c gives an empty string a NULL ptr (fuzz_request found memchr(NULL, ...)) */
    const char *ptr = s->size ? s->ptr : "";
    if (memchr(ptr, '\0', s->size))
        return schema_error(d, "strings must not contain NUL bytes");
    /* Not checked for UTF-8 here: the schema decoder checks every name it keeps and knows which
     * field it is (ops__graph_from_tree), and every other string is compared with a fixed word or
     * an existing name and echoed escaped. */
    *out = json_stringn_nocheck(ptr, s->size);
    return *out ? 0 : -ENOMEM;
}

/* Converts an unpacked object into the shared document tree. */
static int to_tree(const msgpack_object *o, int depth, json_t **out, ops_diag *d)
{
    *out = NULL;
    switch (o->type) {
    case MSGPACK_OBJECT_NIL:
        *out = json_null();
        return 0;
    case MSGPACK_OBJECT_BOOLEAN:
        *out = json_boolean(o->via.boolean);
        return 0;
    case MSGPACK_OBJECT_POSITIVE_INTEGER:
        if (o->via.u64 > INT64_MAX)
            return schema_error(d, "integer out of range");
        *out = json_integer((json_int_t)o->via.u64);
        return *out ? 0 : -ENOMEM;
    case MSGPACK_OBJECT_NEGATIVE_INTEGER:
        *out = json_integer((json_int_t)o->via.i64);
        return *out ? 0 : -ENOMEM;
    case MSGPACK_OBJECT_FLOAT32:
    case MSGPACK_OBJECT_FLOAT64:
        if (!isfinite(o->via.f64))
            return schema_error(d, "numbers must be finite");
        *out = json_real(o->via.f64);
        return *out ? 0 : -ENOMEM;
    case MSGPACK_OBJECT_STR:
        return str_to_json(&o->via.str, out, d);
    case MSGPACK_OBJECT_BIN:
    case MSGPACK_OBJECT_EXT:
        return schema_error(d, "binary and extension values are not part of the graph schema");
    case MSGPACK_OBJECT_ARRAY:
    case MSGPACK_OBJECT_MAP:
        break;
    }
    if (depth >= OPS_MAX_NESTING)
        return ops__syntax_error(d, "msgpack: nested deeper than %d levels", OPS_MAX_NESTING);
    int rc = 0;
    json_t *c = NULL;
    if (o->type == MSGPACK_OBJECT_ARRAY) {
        c = json_array();
        if (!c)
            return -ENOMEM;
        for (uint32_t i = 0; i < o->via.array.size; i++) {
            json_t *x;
            rc = to_tree(&o->via.array.ptr[i], depth + 1, &x, d);
            if (rc < 0)
                goto fail;
            if (json_array_append_new(c, x) < 0) {
                rc = -ENOMEM;
                goto fail;
            }
        }
        *out = c;
        return 0;
    }
    c = json_object();
    if (!c)
        return -ENOMEM;
    for (uint32_t i = 0; i < o->via.map.size; i++) {
        const msgpack_object_kv *kv = &o->via.map.ptr[i];
        char key[OPS_MAX_NAME_LEN + 1];
        if (kv->key.type != MSGPACK_OBJECT_STR) {
            rc = schema_error(d, "map keys must be strings");
            goto fail;
        }
        /* an empty key may come with a NULL ptr: no mem* call on it */
        const char *kp = kv->key.via.str.size ? kv->key.via.str.ptr : "";
        if (kv->key.via.str.size > OPS_MAX_NAME_LEN || memchr(kp, '\0', kv->key.via.str.size)) {
            rc = schema_error(d, "map key too long or containing NUL");
            goto fail;
        }
        memcpy(key, kp, kv->key.via.str.size);
        key[kv->key.via.str.size] = '\0';
        if (json_object_get(c, key)) {
            rc = ops_diag_set(d, NULL, OPS_RULE_SCHEMA, -1, NULL, "msgpack: duplicate key '%s'",
                              KT_ESC(key));
            goto fail;
        }
        json_t *x;
        rc = to_tree(&kv->val, depth + 1, &x, d);
        if (rc < 0)
            goto fail;
        /* keys are names (inputs) or fixed words, checked like strings above */
        if (json_object_set_new_nocheck(c, key, x) < 0) {
            rc = -ENOMEM;
            goto fail;
        }
    }
    *out = c;
    return 0;
fail:
    json_decref(c);
    return rc;
}

int ops_graph_from_msgpack_object(const msgpack_object *obj, ops_graph **out, ops_diag *d)
{
    *out = NULL;
    json_t *root;
    int rc = to_tree(obj, 0, &root, d);
    if (rc == -ENOMEM && d)
        ops_diag_set(d, NULL, OPS_RULE_NONE, -1, NULL, "out of memory reading the graph");
    if (rc < 0)
        return rc;
    rc = ops__graph_from_tree(root, out, d);
    json_decref(root);
    return rc;
}

int ops_graph_from_msgpack(const void *buf, size_t len, ops_graph **out, ops_diag *d)
{
    *out = NULL;
    if (len > OPS_MAX_GRAPH_BYTES)
        return ops__syntax_error(d, "msgpack: message is %zu bytes; at most %u are accepted", len,
                                 OPS_MAX_GRAPH_BYTES);
    if (len == 0)
        return msgpack_error(MSGPACK_UNPACK_CONTINUE, d);
    int rc = precheck(buf, len, d);
    if (rc < 0)
        return rc;
    msgpack_unpacked msg;
    msgpack_unpacked_init(&msg);
    size_t off = 0;
    msgpack_unpack_return ret = msgpack_unpack_next(&msg, buf, len, &off);
    if (ret == MSGPACK_UNPACK_SUCCESS && off != len)
        ret = MSGPACK_UNPACK_EXTRA_BYTES;
    rc = msgpack_error(ret, d);
    if (rc == 0)
        rc = ops_graph_from_msgpack_object(&msg.data, out, d);
    msgpack_unpacked_destroy(&msg);
    return rc;
}

/* Packer failures come from its write callback; for the sbuffer that means out of memory. */
static int pack_tree(msgpack_packer *pk, const json_t *v)
{
    int rc = 0;
    switch (json_typeof(v)) {
    case JSON_OBJECT: {
        const char *key;
        json_t *x;
        rc = msgpack_pack_map(pk, json_object_size(v));
        json_object_foreach((json_t *)v, key, x)
        {
            size_t n = strlen(key);
            if (rc == 0)
                rc = msgpack_pack_str(pk, n);
            if (rc == 0)
                rc = msgpack_pack_str_body(pk, key, n);
            if (rc == 0)
                rc = pack_tree(pk, x);
        }
        break;
    }
    case JSON_ARRAY:
        rc = msgpack_pack_array(pk, json_array_size(v));
        for (size_t i = 0; rc == 0 && i < json_array_size(v); i++)
            rc = pack_tree(pk, json_array_get(v, i));
        break;
    case JSON_STRING:
        rc = msgpack_pack_str(pk, json_string_length(v));
        if (rc == 0)
            rc = msgpack_pack_str_body(pk, json_string_value(v), json_string_length(v));
        break;
    case JSON_INTEGER:
        rc = msgpack_pack_int64(pk, (int64_t)json_integer_value(v));
        break;
    case JSON_REAL:
        rc = msgpack_pack_double(pk, json_real_value(v));
        break;
    case JSON_TRUE:
        rc = msgpack_pack_true(pk);
        break;
    case JSON_FALSE:
        rc = msgpack_pack_false(pk);
        break;
    case JSON_NULL:
        rc = msgpack_pack_nil(pk);
        break;
    }
    return rc == 0 ? 0 : -ENOMEM;
}

int ops_graph_pack(msgpack_packer *pk, const ops_graph *g)
{
    json_t *root;
    int rc = ops__graph_to_tree(g, &root);
    if (rc < 0)
        return rc;
    rc = pack_tree(pk, root);
    json_decref(root);
    return rc;
}

int ops_graph_to_msgpack(const ops_graph *g, void **buf, size_t *len)
{
    *buf = NULL;
    *len = 0;
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    int rc = ops_graph_pack(&pk, g);
    if (rc < 0) {
        msgpack_sbuffer_destroy(&sb);
        return rc;
    }
    *len = sb.size; /* release() clears size */
    *buf = msgpack_sbuffer_release(&sb);
    return 0;
}
