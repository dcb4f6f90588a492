/* scratch: emit one gemm candidate's CUDA source for a graph, shapes and schedule text */
#include "client/runtime_internal.h"
#include "ops/family.h"
#include "ops/ops.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
extern const ops_family ops_family_gemm;
int main(int argc, char **argv)
{
    ops_graph *g = NULL, *bound = NULL, *canon = NULL;
    ops_diag d = {0};
    kt_err err = {0};
    if (ops_graph_from_json_file(argv[1], &g, &d) < 0 || ops_graph_validate(g, &d) < 0) { fprintf(stderr, "%s\n", d.msg); return 1; }
    ops_binding b[8]; int n = 0;
    char *copy = strdup(argv[2]);
    for (char *save = NULL, *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
        if (ops_binding_parse(tok, &b[n++], &err) < 0) { fprintf(stderr, "%s\n", err.msg); return 1; }
    if (ops_graph_bind(g, b, n, &bound, &d) < 0 || ops_graph_canonicalize(bound, &canon, &d) < 0) { fprintf(stderr, "%s\n", d.msg); return 1; }
    ops_group grp;
    if (ops_group_init(&grp, canon, (1ull << canon->n_nodes) - 1, &d) < 0) { fprintf(stderr, "%s\n", d.msg); return 1; }
    ops_schedule s;
    if (ktune_rt_schedule_parse(argv[3], &s, &err) < 0) { fprintf(stderr, "%s\n", err.msg); return 1; }
    ops_device dev; ops_device_h100(&dev);
    const char *why = ops_family_gemm.prune(&grp, &s, &dev);
    if (why) { fprintf(stderr, "pruned: %s\n", why); return 1; }
    ops_emitted em;
    if (ops_family_gemm.emit(&grp, &s, &dev, &em, &d) < 0) { fprintf(stderr, "%s\n", d.msg); return 1; }
    fputs(em.source, stdout);
    const ops_kernel_launch *k = &em.kernels[0];
    fprintf(stderr, "entry %s grid %u block %u smem %u\n", k->entry, k->grid[0], k->block[0], k->smem_bytes);
    return 0;
}
