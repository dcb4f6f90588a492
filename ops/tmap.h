/* TMA tensor maps as kernel arguments (ops/family.h's OPS_ARG_TENSOR_MAP): the description an
 * emitter writes, its checks, its msgpack form (the worker protocol and cache records carry the
 * same map), and the pure half of encoding it, shared by the GPU worker (search/worker_load.c)
 * and the deploy-time runtime (client/runtime.c), which each call the driver's
 * cuTensorMapEncodeTiled with what ops_tensor_map_encode_args fills. No CUDA header here: the
 * enum values are the driver's documented ones (cuda.h), which search/cudrv.c checks at compile
 * time. docs/search.md ("Tensor maps") and docs/formats.md (part 3) describe them. Any thread. */
#pragma once

#include "graph.h"

#include <msgpack.h>
#include <stdbool.h>
#include <stdint.h>

#define OPS_TMAP_MAX_RANK 5
#define OPS_TMAP_BYTES    128 /* sizeof(CUtensorMap): the kernel parameter's size */
#define OPS_TMAP_ALIGN    64  /* the alignment the driver requires of it */

typedef struct ops_tensor_map {
    int rank;                 /* 1..5 */
    int dtype;                /* ops dtype of the elements (f32, f16, bf16 ...) */
    uint64_t dims[5];         /* elements per dimension, innermost (contiguous) first */
    uint64_t strides[4];      /* bytes between consecutive indices of dims 1..rank-1 */
    uint32_t box[5];          /* elements one copy moves per dimension, innermost first */
    uint32_t elem_strides[5]; /* traversal strides, 1 for a plain tile */
    int swizzle;              /* 0 none, 32, 64 or 128 (bytes): the shared-memory swizzle */
    int l2_promotion;         /* 0 none, 64, 128 or 256 (bytes) */
    bool oob_nan;             /* out-of-bounds elements read as NaN instead of zero */
} ops_tensor_map;

/* 0, or -EINVAL with one line in d naming the field and its value, when m breaks a rule of
 * cuTensorMapEncodeTiled that does not depend on the address: rank 1..5; dtype f32, f16, bf16 or
 * f64; dims 1..2^32; strides multiples of 16 below 2^40; box 1..256 per dimension with the
 * innermost box a multiple of 16 bytes, and with a swizzle at most the swizzle's span;
 * elem_strides 1..8; swizzle 0/32/64/128; l2_promotion 0/64/128/256. Entries past rank must be
 * 0. (The base address's 16-byte alignment is checked at encoding.) */
int ops_tensor_map_check(const ops_tensor_map *m, ops_diag *d);

/* The bytes from the map's base to one past the last element it can address:
 * dims[0] * element size + sum over i >= 1 of (dims[i] - 1) * strides[i - 1]. The buffer the map
 * lies over must hold this many bytes. m must pass ops_tensor_map_check. */
uint64_t ops_tensor_map_span(const ops_tensor_map *m);

/* The arguments of cuTensorMapEncodeTiled, as the driver's enums' integer values. */
typedef struct ops_tmap_encode {
    int data_type; /* CUtensorMapDataType: FLOAT16 6, FLOAT32 7, FLOAT64 8, BFLOAT16 9 */
    uint32_t rank;
    uint64_t global_address;
    uint64_t global_dim[5];
    uint64_t global_strides[4];
    uint32_t box_dim[5];
    uint32_t element_strides[5];
    int interleave;   /* CUtensorMapInterleave: always NONE (0) */
    int swizzle;      /* CUtensorMapSwizzle: NONE 0, 32B 1, 64B 2, 128B 3 */
    int l2_promotion; /* CUtensorMapL2promotion: NONE 0, 64B 1, 128B 2, 256B 3 */
    int oob_fill;     /* CUtensorMapFloatOOBfill: NONE 0 (zeros), NAN_REQUEST_ZERO_FMA 1 */
} ops_tmap_encode;
#define OPS_TMAP_DT_FLOAT16  6
#define OPS_TMAP_DT_FLOAT32  7
#define OPS_TMAP_DT_FLOAT64  8
#define OPS_TMAP_DT_BFLOAT16 9

/* Fills out for m over the device address base. -EINVAL (d names the field) when m fails
 * ops_tensor_map_check or base is not 16-byte aligned. */
int ops_tensor_map_encode_args(const ops_tensor_map *m, uint64_t base, ops_tmap_encode *out,
                               ops_diag *d);

/* The msgpack form: a map {"rank": int, "dtype": "f16", "dims": [rank uint], "strides":
 * [rank - 1 uint], "box": [rank uint], "elem_strides": [rank uint], "swizzle": int, "l2": int,
 * "oob_nan": bool}, keys in that order. Pack returns 0 or nonzero when the packer failed. Unpack
 * is strict (every key, no other, each array exactly as long as rank says) and runs
 * ops_tensor_map_check: 0 or -EINVAL with the key or rule in d. */
int ops_tensor_map_pack(msgpack_packer *pk, const ops_tensor_map *m);
int ops_tensor_map_unpack(const msgpack_object *o, ops_tensor_map *m, ops_diag *d);

/* The map the 16-bit wgmma kernels use: batch contiguous matrices of outer rows by inner elements
 * of dtype (rank 3, the batch index outermost; rank 2 when batch is 1), boxes of box0 x box1
 * elements landing in the 128-byte swizzle, L2 promotion 256 bytes, zeros out of bounds. */
void ops_tensor_map_swizzled(ops_tensor_map *m, int dtype, uint64_t inner, uint64_t outer,
                             int64_t batch, uint32_t box0, uint32_t box1);

/* Whether two maps describe the same thing (field by field, unused entries included). */
bool ops_tensor_map_equal(const ops_tensor_map *a, const ops_tensor_map *b);
