/* Private to ops/: the schema decoder and encoder that the JSON and msgpack forms share. Both
 * forms are converted to and from one jansson tree, so they accept exactly the same documents
 * and the writers emit the same canonical structure. Nothing outside ops/ includes this. */
#pragma once

#include "ops.h"

#include <jansson.h>

/* Decodes a document tree into a new graph (*out, owned by the caller). Checks nesting depth,
 * schema, op names, arity, attribute types and tensor references; fills d on failure. */
int ops__graph_from_tree(const json_t *root, ops_graph **out, ops_diag *d);

/* Builds the canonical document tree of g (*out, one reference owned by the caller). Returns 0,
 * -ENOMEM, or -EINVAL when g cannot be written (bad indices, a non-finite number). */
int ops__graph_to_tree(const ops_graph *g, json_t **out);

/* Fills d for a document that could not be read at all (node -1, no tensor). */
int ops__syntax_error(ops_diag *d, const char *fmt, ...) KT_PRINTF(2, 3);
