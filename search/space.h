/* The candidate space of a graph: its fusion partitions into kernel groups, and per group the
 * schedules of every family that matches it, pruned by the device description and ranked by the
 * cost model (docs/search.md).
 *
 * Groups are independent once a partition is fixed, so each distinct group (node set) appears
 * once in srch_space.groups and is shared by every partition that contains it: the search tunes
 * a group once and a partition's cost is the sum of its groups'. */
#pragma once

#include "ops/family.h"

#define SRCH_MAX_PARTITIONS   4096
#define SRCH_EXHAUSTIVE_EDGES 16 /* above this many fusible edges, partitions come from rules */

typedef struct srch_family_space {
    ops_family_id family;
    ops_prune_counts counts; /* kept and pruned-by-reason */
    ops_schedule best;       /* the cost model's pick among the kept */
    ops_estimate best_est;
} srch_family_space;

typedef struct srch_group_space {
    ops_group group;
    int n_families; /* families matching the group (the reference family never counts) */
    srch_family_space fam[OPS_FAM_COUNT];
    int64_t candidates; /* kept schedules over all families */
    int best_family;    /* index into fam of the cheapest estimate, -1 when none kept */
    bool in_partition;  /* some partition uses it (others were judged, then not used) */
} srch_group_space;

typedef struct srch_partition {
    int n_groups;
    int32_t groups[OPS_GROUP_MAX_NODES]; /* indices into srch_space.groups, topological order */
    int n_intermediates;
    int32_t intermediates[OPS_GROUP_MAX_NODES]; /* tensors passed between groups */
    int64_t workspace_bytes;                    /* intermediates, each in its own slot */
    double est_seconds; /* sum of the groups' best estimates plus launch gaps */
} srch_partition;

typedef struct srch_space {
    ops_graph *g; /* the canonical bound graph the groups point into (owned) */
    ops_device dev;
    ops_precision precision;
    int n_groups;
    srch_group_space *groups;
    int n_partitions;
    srch_partition *partitions; /* sorted by est_seconds, cheapest first */
    bool exhaustive;            /* every partition was enumerated (not rule-based) */
    int64_t candidates;         /* kept (group, family, schedule) triples over distinct groups */
    int64_t pruned;
} srch_space;

/* Whether the search can take g at all, whatever its shapes and GPU: at most
 * OPS_GROUP_MAX_NODES nodes once canonicalised (node sets are 64-bit masks). g validated, bound
 * or not; O(nodes). 0, or -EINVAL with d: "graph has N nodes after canonicalisation; the search
 * handles 64". The one check behind srch_space_build, srch_tune (before it starts a worker) and
 * ktuned's submit and lookup, so all refuse such a graph alike, and early. */
int srch_graph_admit(const ops_graph *g, ops_diag *d);

/* Builds the space of a validated, fully bound graph (canonicalised inside). 0, or -EINVAL /
 * -ENOMEM with detail in d (e.g. a node no family can implement). */
int srch_space_build(const ops_graph *bound, const ops_device *dev, ops_precision precision,
                     srch_space **out, ops_diag *d);
void srch_space_free(srch_space *s);

/* One candidate: a schedule for a group, with its cost-model estimate. */
typedef struct srch_candidate {
    int group; /* index into srch_space.groups */
    ops_schedule schedule;
    ops_estimate est;
} srch_candidate;

/* Collects every kept candidate of the space (all groups, all families), ordered by group, then
 * by estimate (cheapest first), then by family and knob values. *out is malloc'd. */
int srch_space_candidates(const srch_space *s, srch_candidate **out, int64_t *n);

/* Picks up to limit candidates spread deterministically over every family present: the budget
 * is split evenly across families (left-overs to the families with more candidates) and each
 * family's share is taken at evenly spaced ranks of its cost-ordered list, so cheap and costly
 * schedules are both represented. Writes the chosen indices into idx (room for limit). */
int64_t srch_spread(const srch_candidate *c, int64_t n, const srch_space *s, int64_t limit,
                    int64_t *idx);

/* Partition enumeration, exposed for tests: calls legal(group mask) to decide whether a node
 * set can be one kernel. Fills masks (room for max) with the groups of each partition,
 * partitions separated by a 0 entry; returns the number of partitions or a negative errno. */
int srch_enumerate_partitions(const ops_graph *g, bool (*legal)(uint64_t mask, void *ctx),
                              void *ctx, uint64_t *masks, int max, bool *exhaustive);
