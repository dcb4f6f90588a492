/* The op-graph IR: tensors, nodes, symbolic dimensions; building, copying, comparing and freeing
 * graphs. Parsing and writing (JSON, msgpack), validation with shape inference, binding of
 * symbolic dimensions, canonicalisation of composites, the canonical signature, the fp64
 * reference interpreter and the cost counts are declared in ops/ops.h.
 *
 * A graph is a plain struct owned by whoever created it (ops_graph_new, a parser, a clone) and
 * freed with ops_graph_free. It is not thread-safe for writing; concurrent readers are fine. */
#pragma once

#include "util.h"

#define OPS_MAX_RANK     8
#define OPS_MAX_OPERANDS 4 /* conv2d: x, w, bias; layernorm: x, w, b; attention: q, k, v */
#define OPS_NO_SYM       (-1)
#define OPS_SCALAR       (-1) /* ops_operand.tensor value for a scalar constant operand */
#define OPS_SIG_BYTES    32   /* SHA-256 */

typedef enum ops_dtype {
    OPS_DT_NONE = 0, /* not yet inferred */
    OPS_DT_F32,
    OPS_DT_F16,
    OPS_DT_BF16,
    OPS_DT_F64, /* references only; not accepted in graphs */
} ops_dtype;

/* A job's precision policy (part of the cache key): compute in the graph's dtypes with fp32
 * accumulation, allow tf32 tensor cores for f32 matmuls, or allow f16/bf16 math for f32 graphs. */
typedef enum ops_precision { OPS_PREC_EXACT = 0, OPS_PREC_TF32, OPS_PREC_REDUCED } ops_precision;
const char *ops_precision_name(ops_precision p);                   /* "exact", "tf32", "reduced" */
int ops_precision_from_name(const char *name, ops_precision *out); /* 0 or -EINVAL */

typedef enum ops_op {
    OPS_OP_INVALID = 0,
    /* pointwise unary */
    OPS_NEG,
    OPS_ABS,
    OPS_RELU,
    OPS_GELU,
    OPS_GELU_TANH,
    OPS_SILU,
    OPS_SIGMOID,
    OPS_TANH,
    OPS_EXP,
    OPS_LOG,
    OPS_SQRT,
    OPS_RSQRT,
    OPS_SQUARE,
    OPS_RECIP,
    OPS_MISH,
    OPS_SOFTPLUS,
    OPS_HARDTANH,
    OPS_LEAKY_RELU,
    OPS_CLAMP,
    OPS_CAST,
    /* pointwise binary, NumPy broadcasting, either operand may be a scalar constant */
    OPS_ADD,
    OPS_SUB,
    OPS_MUL,
    OPS_DIV,
    OPS_MAX,
    OPS_MIN,
    OPS_POW,
    /* reductions over attrs.axes; JSON names sum, mean, max, min with one operand */
    OPS_REDUCE_SUM,
    OPS_REDUCE_MEAN,
    OPS_REDUCE_MAX,
    OPS_REDUCE_MIN,
    /* composites, canonicalised into the primitives above */
    OPS_SOFTMAX,
    OPS_LOG_SOFTMAX,
    OPS_LOGSUMEXP,
    OPS_LAYERNORM,
    OPS_RMSNORM,
    /* contractions */
    OPS_MATMUL,
    OPS_CONV2D,
    OPS_ATTENTION,
    /* layout */
    OPS_TRANSPOSE,
    OPS_PERMUTE,
    OPS_RESHAPE,
    /* appended: a signature holds the op's number, so existing ops keep theirs */
    OPS_CONV3D,
    OPS_SLICE, /* layout: a strided window of the operand, optionally past its edges (fill) */
    OPS_CUMSUM,  /* scans: inclusive, along attrs.axis */
    OPS_CUMPROD,
    OPS_OP_COUNT
} ops_op;

typedef enum ops_op_kind {
    OPS_KIND_UNARY,
    OPS_KIND_BINARY,
    OPS_KIND_REDUCE,
    OPS_KIND_COMPOSITE,
    OPS_KIND_MATMUL,
    OPS_KIND_CONV,
    OPS_KIND_ATTENTION,
    OPS_KIND_LAYOUT,
    OPS_KIND_SCAN,
} ops_op_kind;

typedef struct ops_op_info {
    const char *name; /* JSON name */
    ops_op_kind kind;
    int min_in, max_in;
} ops_op_info;

typedef enum ops_layout { OPS_LAYOUT_NCHW = 0, OPS_LAYOUT_NHWC } ops_layout;

/* One dimension: fixed (sym == OPS_NO_SYM, size >= 0), or symbolic (sym indexes graph->syms;
 * size is the bound value, or -1 while unbound). A bound graph keeps sym so the difference
 * between a symbolic and a fixed dimension survives binding. */
typedef struct ops_dim {
    int64_t size;
    int32_t sym;
} ops_dim;

typedef struct ops_shape {
    int rank;
    ops_dim d[OPS_MAX_RANK];
} ops_shape;

typedef struct ops_attrs {
    double alpha;  /* leaky_relu negative slope (default 0.01) */
    double lo, hi; /* hardtanh (default -1, 1) and clamp (±INFINITY when absent) */
    ops_dtype to;  /* cast target */
    int n_axes;    /* reductions: axes as written (negative counts from the end) */
    int axes[OPS_MAX_RANK];
    bool keepdim; /* reductions, logsumexp */
    int axis;     /* softmax, log_softmax, logsumexp, layernorm, rmsnorm, cumsum, cumprod
                     (default -1);
                     layernorm/rmsnorm normalise over axes [axis, rank) */
    double eps;   /* layernorm (default 1e-5), rmsnorm (default 1e-6) */
    bool transpose_a, transpose_b; /* matmul */
    /* conv2d, conv3d: per spatial dimension in the tensor's order ([H, W]; [D, H, W]) */
    int stride[3], padding[3], dilation[3], groups; /* defaults 1, 0, 1; groups 1 */
    int input_dilation[3]; /* input elements this far apart, zeros between (default 1): the
                              stride of a transposed convolution */
    int end_padding[3];    /* zeros after each spatial end on top of padding (default 0): a
                              transposed convolution's output_padding */
    ops_layout layout;     /* conv: NCHW (weight OIHW) or NHWC (weight OHWI); 3-d: NCDHW or NDHWC */
    bool has_scale;        /* attention: scale given; otherwise 1/sqrt(head dim) */
    double scale;
    bool causal; /* attention */
    int n_perm;  /* transpose/permute */
    int perm[OPS_MAX_RANK];
    ops_shape shape; /* reshape target; a dim with size -1 and no sym is inferred. slice: the
                        output's sizes, -1 keeping the operand's (start 0, step 1 there) */
    /* slice: out[i] = in[start + i * step] per axis (step nonzero: negative walks backwards);
     * an index outside the operand reads `fill` (has_fill), else is an error */
    int n_start, start[OPS_MAX_RANK];
    int n_step, step[OPS_MAX_RANK];
    bool has_fill;
    double fill;
} ops_attrs;

typedef struct ops_operand {
    int32_t tensor; /* index into graph->tensors, or OPS_SCALAR */
    double scalar;  /* value when tensor == OPS_SCALAR */
} ops_operand;

typedef struct ops_tensor {
    char *name;
    ops_dtype dtype;  /* inputs: declared; node outputs: OPS_DT_NONE until validated */
    ops_shape shape;  /* inputs: declared; node outputs: rank 0 until validated */
    int32_t producer; /* node index, or -1 for a graph input */
    bool is_const;    /* weights: a candidate may ask for a pre-packed layout */
    bool is_output;
} ops_tensor;

typedef struct ops_node {
    ops_op op;
    int32_t out; /* tensor index */
    int n_in;
    ops_operand in[OPS_MAX_OPERANDS];
    ops_attrs attrs;
} ops_node;

typedef struct ops_name_index {
    int32_t *slot; /* open addressing: an index into the names, or -1 */
    uint32_t cap;  /* a power of two, or 0 */
    int n;         /* names 0 .. n - 1 are in the table */
} ops_name_index;

typedef struct ops_graph {
    char *name;
    char **syms; /* symbolic dimension names, in order of first appearance */
    int n_syms;
    size_t syms_cap;
    ops_tensor *tensors; /* graph inputs in declaration order, then node outputs */
    int n_tensors;
    size_t tensors_cap;
    ops_node *nodes; /* in source order (not necessarily topological) */
    int n_nodes;
    size_t nodes_cap;
    int32_t *outputs; /* tensor indices, in declaration order */
    int n_outputs;
    size_t outputs_cap;
    bool validated; /* set by ops_graph_validate: dtypes and shapes of every tensor inferred */
    /* Private to graph.c: name -> index hash tables over tensors and symbols, kept by the
     * functions that add them (lookups by name stay O(1), so parsing is linear in the graph's
     * size); unused (a linear scan) while small or when a caller appended by hand. Tensor and
     * symbol names never change once added. */
    ops_name_index tensor_index, sym_index;
} ops_graph;

/* Rules a graph can break; every ops_diag names one. */
typedef enum ops_rule {
    OPS_RULE_NONE = 0,
    OPS_RULE_SYNTAX, /* malformed JSON or msgpack */
    OPS_RULE_SCHEMA, /* missing field, wrong type, unknown key */
    OPS_RULE_UNKNOWN_OP,
    OPS_RULE_ARITY,
    OPS_RULE_DTYPE, /* unsupported dtype or mismatch between operands */
    OPS_RULE_BROADCAST,
    OPS_RULE_SHAPE, /* rank or shape not allowed by the op */
    OPS_RULE_UNBOUND_DIM,
    OPS_RULE_CONFLICT_DIM,
    OPS_RULE_CYCLE,
    OPS_RULE_UNDEFINED, /* reference to a tensor nobody defines */
    OPS_RULE_DUPLICATE, /* tensor defined twice */
    OPS_RULE_UNUSED,    /* input or node output that reaches no graph output */
    OPS_RULE_ATTR,      /* bad attribute value */
    OPS_RULE_COUNT
} ops_rule;

/* A graph error: which rule, where, and a one-line message that names the node, the tensor and
 * the rule, e.g. "node 1 (add -> t1): bad broadcast: 'bias' [255] vs 't0' [M, 256] at axis 1". */
typedef struct ops_diag {
    ops_rule rule;
    int node;        /* index in graph->nodes (source order), or -1 */
    char tensor[96]; /* the tensor at fault, or "" */
    char msg[512];
} ops_diag;

/* Fills d (when non-NULL) and returns -EINVAL. The message is prefixed with the node (when
 * node >= 0, using g for its op and output names) and the rule name. */
int ops_diag_set(ops_diag *d, const ops_graph *g, ops_rule rule, int node, const char *tensor,
                 const char *fmt, ...) KT_PRINTF(6, 7);
const char *ops_rule_name(ops_rule rule);
/* Private to ops/: copies tensor (NULL: "") into d->tensor, escaped when it is not clean text
 * (a name that failed its check) and cut between characters when long. */
void ops__diag_tensor(ops_diag *d, const char *tensor);

const ops_op_info *ops_op_info_get(ops_op op);
/* Looks an op up by JSON name and operand count ("max" with one operand is the reduction).
 * Returns OPS_OP_INVALID for an unknown name. */
ops_op ops_op_from_name(const char *name, int n_in);
const char *ops_dtype_name(ops_dtype dt);                  /* "f32", "f16", "bf16", "f64" */
int ops_dtype_from_name(const char *name, ops_dtype *out); /* 0 or -EINVAL */
size_t ops_dtype_size(ops_dtype dt);
/* Sets the documented defaults for op in *a (zeroing everything else). */
void ops_attrs_default(ops_op op, ops_attrs *a);

/* A convolution as a 3-d one: a conv2d is one of depth 1 (index 0 of each array is the depth,
 * 1 the height, 2 the width), so every consumer handles both ops with one set of loops. */
typedef struct ops_conv_geom {
    bool nhwc;                     /* channels last (NHWC, NDHWC); weight OHWI, ODHWI */
    int64_t n, c, k, groups;       /* batch, input and output channels, groups */
    int64_t cg, kg;                /* channels per group: in, out */
    int64_t in[3], ker[3], out[3]; /* input, filter and output extents */
    int stride[3], pad[3], dil[3], idil[3];
} ops_conv_geom;

/* Spatial dimensions of a conv op: 2 or 3. */
int ops_conv_spatial(ops_op op);
/* The geometry of conv node `op` with attributes a from the sizes of its input x, weight w and
 * output o (each of rank ops_conv_spatial(op) + 2). */
void ops_conv_geom_make(ops_op op, const ops_attrs *a, const int64_t *x, const int64_t *w,
                        const int64_t *o, ops_conv_geom *cg);
/* The same from a validated graph's shapes. */
void ops_conv_geom_of(const ops_graph *g, const ops_node *n, ops_conv_geom *cg);

/* Building. Every function returns an index >= 0 or a negative errno (-ENOMEM, -EEXIST for a
 * duplicate tensor name). */
ops_graph *ops_graph_new(const char *name);        /* NULL on ENOMEM */
int ops_graph_sym(ops_graph *g, const char *name); /* finds or adds a symbolic dimension */
int ops_graph_add_input(ops_graph *g, const char *name, ops_dtype dt, const ops_shape *shape,
                        bool is_const);
/* Adds a node with attrs (defaults when NULL) and creates its output tensor out_name. Operands
 * are set by the caller in g->nodes[i].in / n_in (they may name tensors added later). */
int ops_graph_add_node(ops_graph *g, ops_op op, const char *out_name, const ops_attrs *attrs);
int ops_graph_mark_output(ops_graph *g, int tensor);
int ops_graph_find_tensor(const ops_graph *g, const char *name); /* index or -1 */
/* True when a node of g reads tensor t as the operand of an op defined only for positive
 * values (log, sqrt, rsqrt): verification draws such an input positive, or every reference
 * value downstream would be NaN and nothing would be checked. */
bool ops_graph_needs_positive(const ops_graph *g, int t);
int64_t ops_shape_numel(const ops_shape *s); /* -1 when a dimension is unbound */
/* Same rank and the same size in every dimension (symbols not compared). */
bool ops_shape_same_sizes(const ops_shape *a, const ops_shape *b);
/* Formats a shape as "[M, 512]" (bound symbols print their value as "M=1024"). */
void ops_shape_format(const ops_graph *g, const ops_shape *s, char *buf, size_t len);

ops_graph *ops_graph_clone(const ops_graph *g); /* deep copy; NULL on ENOMEM */
/* Structural equality including names, attributes, inferred shapes and the validated flag. */
bool ops_graph_equal(const ops_graph *a, const ops_graph *b);
void ops_graph_free(ops_graph *g);

/* Host-side storage of one element of dtype dt (f16 and bf16 rounded to nearest even, NaN and
 * infinities kept), for data crossing to and from the GPU. */
void ops_dtype_store(ops_dtype dt, double v, void *dst);
double ops_dtype_load(ops_dtype dt, const void *src);
