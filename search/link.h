/* A partition's groups linked into one CUDA module (one record, one cubin) from the pieces
 * their emitters return (ops_emitted in ops/family.h): the generated code is never searched or
 * rewritten; the emitters write each group's entry names with the suffix they are told. */
#pragma once

#include "ops/family.h"

/* The entry suffix the k-th group of a linked partition is emitted with ("_g<k>"); set it in
 * ops_group.entry_suffix before the group is emitted. */
void srch_link_suffix(int k, ops_group *grp);

/* Links em[0..n) (n >= 1: the candidates of a partition's groups in launch order, group k
 * emitted with srch_link_suffix(k)) into one module: a partition comment, group 0's header and
 * the shared prelude once, then each group's header and its own code in namespace ktune_g<k>.
 * The module defines exactly the kernels of em[0..n), under the names in their kernels[].entry.
 * 0 and *source (malloc'd, NUL-terminated, *len bytes), or -EINVAL with detail in err when a
 * piece breaks the contract (no kernels or no marked pieces, marks out of order, a prelude unlike
 * group 0's, an entry without its group's suffix) or -ENOMEM. */
int srch_link_partition(const ops_emitted *em, int n, char **source, size_t *len, kt_err *err);
