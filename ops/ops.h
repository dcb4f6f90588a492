/* ops: the public surface of the op-graph module. See ops/graph.h for the IR itself and
 * docs/formats.md for the JSON and msgpack schema and the signature. */
#pragma once

#include "graph.h"

#include <msgpack.h>

/* Limits every parser enforces (the msgpack form comes from untrusted daemon clients). */
#define OPS_MAX_GRAPH_BYTES   (16u << 20)        /* JSON text or msgpack buffer */
#define OPS_MAX_GRAPH_TENSORS 4096               /* graph inputs plus nodes */
#define OPS_MAX_NESTING       16                 /* containers inside the document */
#define OPS_MAX_NAME_LEN      255                /* tensor, graph and symbol names, in bytes */
#define OPS_MAX_DIM           ((int64_t)1 << 40) /* largest fixed or bound dimension */

/* ---- JSON and msgpack forms (ops/graph_json.c, ops/graph_msgpack.c) ----
 * Parsers check syntax and schema and resolve tensor names; they do not infer shapes (call
 * ops_graph_validate). On failure they return -EINVAL (or -ENOMEM) and fill d. Writers emit the
 * canonical form: every attribute of every node written explicitly, keys in a fixed order, so
 * write(parse(write(g))) is byte-identical to write(g) and parse(write(g)) equals g. */
int ops_graph_from_json(const char *text, size_t len, ops_graph **out, ops_diag *d);
/* Reads path with kt_read_file (a regular file of at most OPS_MAX_GRAPH_BYTES, refused before
 * reading otherwise) and parses it. d->msg does not name path, whatever failed: the caller
 * prints it once, as "PATH: <d->msg>". */
int ops_graph_from_json_file(const char *path, ops_graph **out, ops_diag *d);
int ops_graph_to_json(const ops_graph *g, char **out /* malloc'd, NUL-terminated */);
int ops_graph_from_msgpack(const void *buf, size_t len, ops_graph **out, ops_diag *d);
/* From an already unpacked object (the daemon's request body). */
int ops_graph_from_msgpack_object(const msgpack_object *obj, ops_graph **out, ops_diag *d);
int ops_graph_to_msgpack(const ops_graph *g, void **buf /* malloc'd */, size_t *len);
int ops_graph_pack(msgpack_packer *pk, const ops_graph *g);

/* ---- Validation, shape inference, binding, canonicalisation (ops/validate.c, ops/canon.c) ----
 * ops_graph_validate checks every rule of ops_rule, infers every tensor's dtype and shape with
 * symbolic dimensions, and sets g->validated. Idempotent. */
int ops_graph_validate(ops_graph *g, ops_diag *d);

/* Writes in order[0 .. g->n_nodes) the node indices in a topological order (producers before
 * consumers; deterministic: Kahn's algorithm, first the nodes that need no node output in
 * index order, then each node in the order it becomes ready). Fails with
 * OPS_RULE_CYCLE naming the tensors on a cycle, or OPS_RULE_UNDEFINED for an operand index out
 * of range. Needs no prior validation; order has room for g->n_nodes entries. */
int ops_graph_topo_order(const ops_graph *g, int32_t *order, ops_diag *d);

typedef struct ops_binding {
    const char *name;
    int64_t value;
} ops_binding;

/* Returns in *out a validated copy of g with the named symbols bound (shapes recomputed).
 * Unknown names, non-positive values and conflicting repeats are errors. Symbols left unbound
 * stay symbolic. */
int ops_graph_bind(const ops_graph *g, const ops_binding *b, int n, ops_graph **out, ops_diag *d);
/* Parses "NAME=VALUE" into b (b->name points into arg, which must outlive b). */
int ops_binding_parse(char *arg, ops_binding *b, kt_err *err);
/* Returns the name of the first unbound symbol reachable in g, or NULL when fully bound. */
const char *ops_graph_first_unbound(const ops_graph *g);

/* Returns in *out a validated copy of g (which need not be validated itself) in which every
 * composite (softmax, log_softmax, logsumexp, layernorm, rmsnorm) is replaced by primitives,
 * transpose by permute, a reduction over axes that are not one run of adjacent ones by a chain
 * of reductions over runs, and an attention whose head is wider than the fused kernels take
 * (OPS_ATTENTION_FUSED_MAX_HEAD) by matmul, softmax, matmul. Graph inputs and outputs keep their
 * names and order. */
int ops_graph_canonicalize(const ops_graph *g, ops_graph **out, ops_diag *d);
/* The widest head (D and Dv) the attention family's fused kernels hold on chip. */
#define OPS_ATTENTION_FUSED_MAX_HEAD 256
/* The number of nodes ops_graph_canonicalize gives g, counted without building it (O(nodes)):
 * each composite as many primitives as it expands into. g must be validated. */
int ops_graph_canonical_nodes(const ops_graph *g);

/* ---- Signature (ops/signature.c) ----
 * The canonical signature: SHA-256 over a canonical serialisation of the canonicalised graph
 * with dimensions symbolic. Invariant to node order, tensor names and input/output declaration
 * order; sensitive to every op, attribute, dtype, edge and fixed-vs-symbolic dimension. */
int ops_graph_signature(const ops_graph *g, uint8_t sig[OPS_SIG_BYTES], ops_diag *d);
void ops_sha256(const void *data, size_t len, uint8_t digest[32]);
/* The identity of a bound problem: SHA-256 over the canonical serialisation of the canonicalised
 * graph with every symbolic dimension's bound value written beside its canonical symbol number
 * (-1 while unbound). Two bound graphs share it exactly when one is the other up to tensor and
 * symbol names, node order and declaration order, with equal sizes: X[M,N] and X[N,M] bound
 * M=1024,N=64 differ; so do x[M], z[N] bound the other way round. The canonical order of the
 * graph's inputs and outputs comes from the same labelling, so it accounts for the bound sizes:
 * input_rank[i] is the position of graph input i (tensor order) among the inputs, output_rank[j]
 * that of graph output j (declaration order) among the outputs, and two graphs with the same
 * problem agree on what (shape included) the input or output of each rank is. problem,
 * input_rank and output_rank may each be NULL; the arrays hold as many entries as g has inputs
 * (outputs). Returns 0 or a negative errno with d filled. */
int ops_graph_problem(const ops_graph *g, uint8_t problem[OPS_SIG_BYTES], int *input_rank,
                      int *output_rank, ops_diag *d);
/* ops_graph_problem's canonical order alone. On a graph with unbound dimensions it is the order
 * the signature numbers inputs and outputs in; once bound, it may put inputs of equal structure
 * but different sizes in another order (the launch order is that of the bound graph). */
int ops_graph_canonical_io(const ops_graph *g, int *input_rank, int *output_rank, ops_diag *d);

/* ---- fp64 reference interpreter and cost (ops/reference.c, ops/cost.c) ----
 * g must be validated and fully bound. inputs[i] holds graph input i (tensor order) as a dense
 * row-major array of doubles; outputs[j] receives graph output j and is allocated by the
 * caller with ops_shape_numel() elements. */
int ops_ref_run(const ops_graph *g, const double *const *inputs, double *const *outputs,
                ops_diag *d);

/* The default normwise tolerance for g's input and output dtypes under precision p
 * (docs/evaluation.md): f32 1e-5, tf32 5e-4 for graphs with a matmul, conv or attention, reduced
 * 2e-2, raised to 3e-3 when any input or output is f16 and to 2e-2 when any is bf16. What a job
 * with no tolerance of its own verifies against, and what a lookup asks for by default. */
double ops_default_tolerance(const ops_graph *g, ops_precision p);

typedef struct ops_cost {
    double flops; /* arithmetic of the canonical primitives, see docs/formats.md */
    double bytes; /* minimum traffic: every graph input read once, every output written once */
} ops_cost;
int ops_graph_cost(const ops_graph *g, ops_cost *out, ops_diag *d);
