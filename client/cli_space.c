/* ktune space: the candidate space of a graph — fusion partitions, the families matching each
 * kernel group, candidates kept and pruned by reason, and the cost model's picks. */
#include "cli.h"
#include "search/space.h"
#include "search/tune.h"

#include <stdlib.h>
#include <string.h>

static const char space_help[] =
    "usage: ktune space GRAPH.json --shape NAME=VALUE ... [--precision P] [--device NAME]\n"
    "                   [--list] [--json]\n"
    "\n"
    "Enumerates the fusion partitions of the graph into kernel groups, the kernel families\n"
    "(pointwise, row, gemm, conv, attention, library) that can implement each group, and their\n"
    "schedules pruned against the device (default: the H100 of docs/search.md). Prints how many\n"
    "candidates were kept and why the others were pruned, and the cost model's best estimate per\n"
    "group and partition. Needs every dimension bound; no GPU needed.\n"
    "\n"
    "options:\n"
    "  --shape NAME=VALUE  bind a symbolic dimension (repeat, or separate with commas)\n"
    "  --precision P       exact (default), tf32 or reduced: which math paths are allowed\n"
    "  --device NAME       the device to prune and estimate for, by its CUDA name: \"NVIDIA\n"
    "                      H100 80GB HBM3\" (default) or \"NVIDIA H200\"\n"
    "  --list              also list every kept candidate with its estimate\n"
    "  --json              one JSON object: candidates, pruned, families (name -> count),\n"
    "                      partitions, groups (and list with --list: each candidate's group,\n"
    "                      id as the trial log names it, schedule and estimate)\n"
    "  -h, --help          show this help\n";

typedef struct space_opts {
    bool list;
    const char *device;
} space_opts;

static int space_extra(void *ctx, const char *opt, const char *value)
{
    space_opts *o = ctx;
    if (strcmp(opt, "--list") == 0) {
        o->list = true;
        return 1;
    }
    if (strcmp(opt, "--device") == 0) {
        if (!value)
            return cli_usage_error("space", "--device needs a device name");
        o->device = value;
        return 2;
    }
    return 0;
}

/* "t0 = matmul(A, W); Y = relu(t0)" */
static void group_text(const ops_group *grp, char *buf, size_t len)
{
    const ops_graph *g = grp->g;
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < grp->n_nodes && used < len; i++) {
        const ops_node *n = &g->nodes[grp->nodes[i]];
        used += (size_t)snprintf(buf + used, len - used, "%s%s = %s(", i ? "; " : "",
                                 g->tensors[n->out].name, ops_op_info_get(n->op)->name);
        for (int k = 0; k < n->n_in && used < len; k++) {
            if (n->in[k].tensor == OPS_SCALAR)
                used += (size_t)snprintf(buf + used, len - used, "%s%g", k ? ", " : "",
                                         n->in[k].scalar);
            else
                used += (size_t)snprintf(buf + used, len - used, "%s%s", k ? ", " : "",
                                         g->tensors[n->in[k].tensor].name);
        }
        if (used < len)
            used += (size_t)snprintf(buf + used, len - used, ")");
    }
}

static void family_totals(const srch_space *s, int64_t *per_family)
{
    for (int gi = 0; gi < s->n_groups; gi++) {
        if (!s->groups[gi].in_partition)
            continue;
        for (int f = 0; f < s->groups[gi].n_families; f++)
            per_family[s->groups[gi].fam[f].family] += s->groups[gi].fam[f].counts.kept;
    }
}

static json_t *pruned_json(const ops_prune_counts *c)
{
    json_t *o = json_object();
    for (int r = 0; r < c->n_reasons; r++)
        json_object_set_new(o, c->reasons[r].reason, json_integer(c->reasons[r].count));
    return o;
}

static int print_json(const srch_space *s, const srch_candidate *cand, int64_t n_cand)
{
    json_t *root = json_object(), *families = json_object(), *groups = json_array(),
           *parts = json_array();
    int64_t per_family[OPS_FAM_COUNT] = {0};
    family_totals(s, per_family);
    for (int f = 0; f < OPS_FAM_COUNT; f++)
        if (per_family[f])
            json_object_set_new(families, ops_family_get((ops_family_id)f)->name,
                                json_integer(per_family[f]));
    char text[2048], sched[256];
    for (int gi = 0; gi < s->n_groups; gi++) {
        const srch_group_space *gs = &s->groups[gi];
        group_text(&gs->group, text, sizeof(text));
        json_t *fams = json_object();
        for (int f = 0; f < gs->n_families; f++) {
            const srch_family_space *fs = &gs->fam[f];
            json_t *fo = json_pack("{s:I, s:o}", "kept", (json_int_t)fs->counts.kept, "pruned",
                                   pruned_json(&fs->counts));
            if (fs->counts.kept) {
                ops_schedule_format(&fs->best, sched, sizeof(sched));
                json_object_set_new(fo, "best",
                                    json_pack("{s:s, s:f}", "schedule", sched, "est_us",
                                              fs->best_est.seconds * 1e6));
            }
            json_object_set_new(fams, ops_family_get(fs->family)->name, fo);
        }
        json_array_append_new(groups,
                              json_pack("{s:i, s:s, s:b, s:I, s:o}", "index", gi, "nodes", text,
                                        "in_partition", gs->in_partition, "candidates",
                                        (json_int_t)gs->candidates, "families", fams));
    }
    for (int p = 0; p < s->n_partitions; p++) {
        const srch_partition *part = &s->partitions[p];
        json_t *gl = json_array(), *inter = json_array();
        for (int i = 0; i < part->n_groups; i++)
            json_array_append_new(gl, json_integer(part->groups[i]));
        for (int i = 0; i < part->n_intermediates; i++)
            json_array_append_new(inter, json_string(s->g->tensors[part->intermediates[i]].name));
        json_array_append_new(parts,
                              json_pack("{s:o, s:o, s:I, s:f}", "groups", gl, "intermediates",
                                        inter, "workspace_bytes", (json_int_t)part->workspace_bytes,
                                        "est_us", part->est_seconds * 1e6));
    }
    json_object_set_new(root, "graph", json_string(s->g->name));
    json_object_set_new(root, "precision", json_string(ops_precision_name(s->precision)));
    json_object_set_new(root, "device", json_string(s->dev.name));
    json_object_set_new(root, "candidates", json_integer(s->candidates));
    json_object_set_new(root, "pruned", json_integer(s->pruned));
    json_object_set_new(root, "families", families);
    json_object_set_new(root, "exhaustive", json_boolean(s->exhaustive));
    json_object_set_new(root, "partitions", parts);
    json_object_set_new(root, "groups", groups);
    if (cand) {
        json_t *list = json_array();
        for (int64_t i = 0; i < n_cand; i++) {
            char id[CACHE_CAND_MAX]; /* the trial log's name for it (ktune trials) */
            ops_schedule_format(&cand[i].schedule, sched, sizeof(sched));
            srch_candidate_id(s->groups[cand[i].group].group.mask, &cand[i].schedule, id);
            json_array_append_new(list, json_pack("{s:i, s:s, s:s, s:f}", "group", cand[i].group,
                                                  "id", id, "schedule", sched, "est_us",
                                                  cand[i].est.seconds * 1e6));
        }
        json_object_set_new(root, "list", list);
    }
    return cli_print_json(root);
}

static void print_text(const srch_space *s, const srch_candidate *cand, int64_t n_cand)
{
    char text[2048], sched[256];
    int64_t per_family[OPS_FAM_COUNT] = {0};
    family_totals(s, per_family);
    printf("graph       %s (%d nodes after canonicalisation), precision %s, device %s\n",
           s->g->name, s->g->n_nodes, ops_precision_name(s->precision), s->dev.name);
    printf("partitions  %d%s\n", s->n_partitions,
           s->exhaustive ? " (all fusions tried)" : " (rule-based: too many fusions to try all)");
    printf("candidates  %lld kept, %lld pruned\n", (long long)s->candidates, (long long)s->pruned);
    printf("families   ");
    for (int f = 0; f < OPS_FAM_COUNT; f++)
        if (per_family[f])
            printf(" %s %lld", ops_family_get((ops_family_id)f)->name, (long long)per_family[f]);
    printf("\n");
    for (int p = 0; p < s->n_partitions; p++) {
        const srch_partition *part = &s->partitions[p];
        printf("\npartition %d: %d kernel%s, est %.2f us, workspace %lld B\n", p + 1,
               part->n_groups, part->n_groups == 1 ? "" : "s", part->est_seconds * 1e6,
               (long long)part->workspace_bytes);
        for (int i = 0; i < part->n_groups; i++) {
            const srch_group_space *gs = &s->groups[part->groups[i]];
            group_text(&gs->group, text, sizeof(text));
            printf("  group %d: %s\n", part->groups[i], text);
            for (int f = 0; f < gs->n_families; f++) {
                const srch_family_space *fs = &gs->fam[f];
                printf("    %-10s kept %-6lld", ops_family_get(fs->family)->name,
                       (long long)fs->counts.kept);
                for (int r = 0; r < fs->counts.n_reasons; r++)
                    printf(" %s %lld", fs->counts.reasons[r].reason,
                           (long long)fs->counts.reasons[r].count);
                if (fs->counts.kept) {
                    ops_schedule_format(&fs->best, sched, sizeof(sched));
                    printf("\n               best %.2f us: %s", fs->best_est.seconds * 1e6, sched);
                }
                printf("\n");
            }
        }
    }
    if (cand) {
        printf("\ncandidates (group, estimate, schedule):\n");
        for (int64_t i = 0; i < n_cand; i++) {
            ops_schedule_format(&cand[i].schedule, sched, sizeof(sched));
            printf("  %3d %10.2f us  %s\n", cand[i].group, cand[i].est.seconds * 1e6, sched);
        }
    }
}

int cli_space(int argc, char **argv)
{
    space_opts o = {0};
    cli_graph_args a = {.sub = "space", .help = space_help};
    int rc = cli_parse_graph_args(argc, argv, &a, space_extra, &o);
    if (rc != CLI_OK)
        return rc;
    ops_graph *g = NULL, *bound = NULL;
    if ((rc = cli_load_graph(&a, &g, &bound)) != CLI_OK)
        return rc;
    ops_device dev;
    ops_device_h100(&dev);
    if (o.device && ops_device_find(o.device, &dev) < 0) {
        ops_graph_free(g);
        ops_graph_free(bound);
        return cli_error("--device: no device named '%s' (the table has \"NVIDIA H100 80GB "
                         "HBM3\" and \"NVIDIA H200\")",
                         o.device);
    }
    srch_space *s = NULL;
    srch_candidate *cand = NULL;
    int64_t n_cand = 0;
    ops_diag d = {0};
    if (srch_space_build(bound, &dev, a.precision, &s, &d) < 0) {
        rc = cli_error("%s: %s", a.path, d.msg);
        goto out;
    }
    if (o.list && srch_space_candidates(s, &cand, &n_cand) < 0) {
        rc = cli_error("out of memory listing candidates");
        goto out;
    }
    if (a.json) {
        rc = print_json(s, cand, n_cand);
    } else {
        print_text(s, cand, n_cand);
        rc = CLI_OK;
    }
out:
    free(cand);
    srch_space_free(s);
    ops_graph_free(bound);
    ops_graph_free(g);
    return rc;
}
