/* TMA tensor maps: checks, msgpack form and the encoding arguments (see ops/tmap.h). */
#include "tmap.h"

#include "msgpack_util.h"

#include <errno.h>
#include <inttypes.h>
#include <string.h>

#define BAD(...) ops_diag_set(d, NULL, OPS_RULE_SHAPE, -1, "", "tensor map " __VA_ARGS__)

static size_t elem_size(int dtype)
{
    switch (dtype) {
    case OPS_DT_F32:
    case OPS_DT_F16:
    case OPS_DT_BF16:
    case OPS_DT_F64:
        return ops_dtype_size((ops_dtype)dtype);
    default:
        return 0;
    }
}

int ops_tensor_map_check(const ops_tensor_map *m, ops_diag *d)
{
    if (m->rank < 1 || m->rank > OPS_TMAP_MAX_RANK)
        return BAD("rank = %d: must be 1..%d", m->rank, OPS_TMAP_MAX_RANK);
    size_t es = elem_size(m->dtype);
    if (!es)
        return BAD("dtype = %d: must be f32, f16, bf16 or f64", m->dtype);
    for (int i = 0; i < OPS_TMAP_MAX_RANK; i++) {
        bool used = i < m->rank;
        if (used && (m->dims[i] < 1 || m->dims[i] > (UINT64_C(1) << 32)))
            return BAD("dims[%d] = %" PRIu64 ": must be 1..2^32", i, m->dims[i]);
        if (used && (m->box[i] < 1 || m->box[i] > 256))
            return BAD("box[%d] = %" PRIu32 ": must be 1..256", i, m->box[i]);
        if (used && (m->elem_strides[i] < 1 || m->elem_strides[i] > 8))
            return BAD("elem_strides[%d] = %" PRIu32 ": must be 1..8", i, m->elem_strides[i]);
        if (!used && (m->dims[i] || m->box[i] || m->elem_strides[i]))
            return BAD("dims, box or elem_strides[%d] set past rank %d", i, m->rank);
    }
    for (int i = 0; i < OPS_TMAP_MAX_RANK - 1; i++) {
        bool used = i < m->rank - 1;
        if (used && (m->strides[i] % 16 || m->strides[i] >= (UINT64_C(1) << 40)))
            return BAD("strides[%d] = %" PRIu64 ": must be a multiple of 16 below 2^40", i,
                       m->strides[i]);
        if (!used && m->strides[i])
            return BAD("strides[%d] = %" PRIu64 " set past rank %d", i, m->strides[i], m->rank);
    }
    uint64_t inner = (uint64_t)m->box[0] * es;
    if (inner % 16)
        return BAD("box[0] = %" PRIu32 ": %" PRIu64 " bytes, must be a multiple of 16", m->box[0],
                   inner);
    if (m->swizzle != 0 && m->swizzle != 32 && m->swizzle != 64 && m->swizzle != 128)
        return BAD("swizzle = %d: must be 0, 32, 64 or 128", m->swizzle);
    if (m->swizzle && inner > (uint64_t)m->swizzle)
        return BAD("box[0] = %" PRIu32 ": %" PRIu64 " bytes, over the %d-byte swizzle span",
                   m->box[0], inner, m->swizzle);
    if (m->l2_promotion != 0 && m->l2_promotion != 64 && m->l2_promotion != 128 &&
        m->l2_promotion != 256)
        return BAD("l2_promotion = %d: must be 0, 64, 128 or 256", m->l2_promotion);
    return 0;
}

uint64_t ops_tensor_map_span(const ops_tensor_map *m)
{
    uint64_t span = m->dims[0] * elem_size(m->dtype);
    for (int i = 1; i < m->rank; i++)
        span += (m->dims[i] - 1) * m->strides[i - 1];
    return span;
}

/* 32, 64, 128 (swizzle) or 64, 128, 256 (promotion) bytes to the driver's enum: NONE is 0, then
 * one step per doubling from `first`. */
static int enum_of(int bytes, int first)
{
    int c = 0;
    for (int v = first; bytes && v <= bytes; v <<= 1)
        c++;
    return c;
}

int ops_tensor_map_encode_args(const ops_tensor_map *m, uint64_t base, ops_tmap_encode *out,
                               ops_diag *d)
{
    int rc = ops_tensor_map_check(m, d);
    if (rc < 0)
        return rc;
    if (base % 16)
        return BAD("base address 0x%" PRIx64 ": must be 16-byte aligned", base);
    memset(out, 0, sizeof(*out));
    switch (m->dtype) {
    case OPS_DT_F16:
        out->data_type = OPS_TMAP_DT_FLOAT16;
        break;
    case OPS_DT_BF16:
        out->data_type = OPS_TMAP_DT_BFLOAT16;
        break;
    case OPS_DT_F64:
        out->data_type = OPS_TMAP_DT_FLOAT64;
        break;
    default:
        out->data_type = OPS_TMAP_DT_FLOAT32;
    }
    out->rank = (uint32_t)m->rank;
    out->global_address = base;
    for (int i = 0; i < m->rank; i++) {
        out->global_dim[i] = m->dims[i];
        out->box_dim[i] = m->box[i];
        out->element_strides[i] = m->elem_strides[i];
        if (i < m->rank - 1)
            out->global_strides[i] = m->strides[i];
    }
    out->interleave = 0;
    out->swizzle = enum_of(m->swizzle, 32);
    out->l2_promotion = enum_of(m->l2_promotion, 64);
    out->oob_fill = m->oob_nan ? 1 : 0;
    return 0;
}

/* ---- msgpack form ---- */

enum { TK_RANK, TK_DTYPE, TK_DIMS, TK_STRIDES, TK_BOX, TK_ELEM, TK_SWIZZLE, TK_L2, TK_OOB, TK_N };
static const char *const tmap_keys[TK_N] = {"rank",         "dtype",   "dims", "strides", "box",
                                            "elem_strides", "swizzle", "l2",   "oob_nan"};

int ops_tensor_map_pack(msgpack_packer *pk, const ops_tensor_map *m)
{
    int n = m->rank < 0 ? 0 : m->rank > OPS_TMAP_MAX_RANK ? OPS_TMAP_MAX_RANK : m->rank;
    int e = msgpack_pack_map(pk, TK_N);
    e = e || kt_mp_pack_ki64(pk, tmap_keys[TK_RANK], m->rank);
    e = e || kt_mp_pack_kstr(pk, tmap_keys[TK_DTYPE], ops_dtype_name((ops_dtype)m->dtype));
    e = e || kt_mp_pack_str(pk, tmap_keys[TK_DIMS]) || msgpack_pack_array(pk, (size_t)n);
    for (int i = 0; i < n; i++)
        e = e || msgpack_pack_uint64(pk, m->dims[i]);
    e = e || kt_mp_pack_str(pk, tmap_keys[TK_STRIDES]) ||
        msgpack_pack_array(pk, (size_t)(n ? n - 1 : 0));
    for (int i = 0; i < n - 1; i++)
        e = e || msgpack_pack_uint64(pk, m->strides[i]);
    e = e || kt_mp_pack_str(pk, tmap_keys[TK_BOX]) || msgpack_pack_array(pk, (size_t)n);
    for (int i = 0; i < n; i++)
        e = e || msgpack_pack_uint32(pk, m->box[i]);
    e = e || kt_mp_pack_str(pk, tmap_keys[TK_ELEM]) || msgpack_pack_array(pk, (size_t)n);
    for (int i = 0; i < n; i++)
        e = e || msgpack_pack_uint32(pk, m->elem_strides[i]);
    e = e || kt_mp_pack_ki64(pk, tmap_keys[TK_SWIZZLE], m->swizzle);
    e = e || kt_mp_pack_ki64(pk, tmap_keys[TK_L2], m->l2_promotion);
    e = e || kt_mp_pack_kbool(pk, tmap_keys[TK_OOB], m->oob_nan);
    return e;
}

#define SCHEMA(...) ops_diag_set(d, NULL, OPS_RULE_SCHEMA, -1, "", "tensor map " __VA_ARGS__)

/* An array of n unsigned integers, each at most max, into out (u64) or out32. */
static int get_uints(const msgpack_object *o, uint32_t n, uint64_t max, uint64_t *out,
                     uint32_t *out32, const char *key, ops_diag *d)
{
    if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size != n)
        return SCHEMA("'%s': expected an array of %u integers", key, n);
    for (uint32_t i = 0; i < n; i++) {
        const msgpack_object *v = &o->via.array.ptr[i];
        if (v->type != MSGPACK_OBJECT_POSITIVE_INTEGER || v->via.u64 > max)
            return SCHEMA("'%s'[%u]: expected an integer 0..%" PRIu64, key, i, max);
        if (out)
            out[i] = v->via.u64;
        else
            out32[i] = (uint32_t)v->via.u64;
    }
    return 0;
}

int ops_tensor_map_unpack(const msgpack_object *o, ops_tensor_map *m, ops_diag *d)
{
    memset(m, 0, sizeof(*m));
    if (o->type != MSGPACK_OBJECT_MAP || o->via.map.size != TK_N)
        return SCHEMA("expected a map of %d keys", TK_N);
    const msgpack_object *v[TK_N] = {0};
    for (uint32_t i = 0; i < o->via.map.size; i++) {
        const msgpack_object_kv *kv = &o->via.map.ptr[i];
        int k = 0;
        while (k < TK_N && !kt_mp_str_is(&kv->key, tmap_keys[k]))
            k++;
        if (k == TK_N)
            return SCHEMA("has an unknown key");
        if (v[k])
            return SCHEMA("key '%s' repeated", tmap_keys[k]);
        v[k] = &kv->val;
    }
    int64_t x = 0;
    if (!kt_mp_i64(v[TK_RANK], &x) || x < 1 || x > OPS_TMAP_MAX_RANK)
        return SCHEMA("'rank': expected an integer 1..%d", OPS_TMAP_MAX_RANK);
    m->rank = (int)x;
    char name[8] = "";
    ops_dtype dt = OPS_DT_NONE;
    if (v[TK_DTYPE]->type != MSGPACK_OBJECT_STR || v[TK_DTYPE]->via.str.size >= sizeof(name))
        return SCHEMA("'dtype': expected a dtype name");
    memcpy(name, v[TK_DTYPE]->via.str.ptr, v[TK_DTYPE]->via.str.size);
    if (ops_dtype_from_name(name, &dt) < 0)
        return SCHEMA("'dtype': unknown dtype '%s'", name);
    m->dtype = (int)dt;
    uint32_t r = (uint32_t)m->rank;
    int rc;
    if ((rc = get_uints(v[TK_DIMS], r, UINT64_MAX, m->dims, NULL, "dims", d)) < 0 ||
        (rc = get_uints(v[TK_STRIDES], r - 1, UINT64_MAX, m->strides, NULL, "strides", d)) < 0 ||
        (rc = get_uints(v[TK_BOX], r, UINT32_MAX, NULL, m->box, "box", d)) < 0 ||
        (rc = get_uints(v[TK_ELEM], r, UINT32_MAX, NULL, m->elem_strides, "elem_strides", d)) < 0)
        return rc;
    if (!kt_mp_i64(v[TK_SWIZZLE], &x) || x < 0 || x > 1024)
        return SCHEMA("'swizzle': expected an integer");
    m->swizzle = (int)x;
    if (!kt_mp_i64(v[TK_L2], &x) || x < 0 || x > 1024)
        return SCHEMA("'l2': expected an integer");
    m->l2_promotion = (int)x;
    if (v[TK_OOB]->type != MSGPACK_OBJECT_BOOLEAN)
        return SCHEMA("'oob_nan': expected a boolean");
    m->oob_nan = v[TK_OOB]->via.boolean;
    return ops_tensor_map_check(m, d);
}

bool ops_tensor_map_equal(const ops_tensor_map *a, const ops_tensor_map *b)
{
    return a->rank == b->rank && a->dtype == b->dtype && a->swizzle == b->swizzle &&
           a->l2_promotion == b->l2_promotion && a->oob_nan == b->oob_nan &&
           !memcmp(a->dims, b->dims, sizeof(a->dims)) &&
           !memcmp(a->strides, b->strides, sizeof(a->strides)) &&
           !memcmp(a->box, b->box, sizeof(a->box)) &&
           !memcmp(a->elem_strides, b->elem_strides, sizeof(a->elem_strides));
}

void ops_tensor_map_swizzled(ops_tensor_map *m, int dtype, uint64_t inner, uint64_t outer,
                             int64_t batch, uint32_t box0, uint32_t box1)
{
    uint64_t esize = elem_size(dtype);
    memset(m, 0, sizeof(*m));
    m->rank = batch > 1 ? 3 : 2;
    m->dtype = dtype;
    m->dims[0] = inner;
    m->dims[1] = outer;
    m->strides[0] = inner * esize;
    m->box[0] = box0;
    m->box[1] = box1;
    if (m->rank == 3) { /* one matrix per batch index */
        m->dims[2] = (uint64_t)batch;
        m->strides[1] = inner * outer * esize;
        m->box[2] = 1;
    }
    for (int i = 0; i < m->rank; i++)
        m->elem_strides[i] = 1;
    m->swizzle = 128;
    m->l2_promotion = 256;
    m->oob_nan = false;
}
