/* libktune: the library's version, the graph handle (load, parse, accessors), job state names,
 * the default socket path and the error helpers every part of libktune shares. */
#include "libktune_internal.h"
#include "ktune_config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

KTUNE_EXPORT const char *ktune_version(void)
{
    return KTUNE_VERSION;
}

int ktune_err_from(ktune_error *e, int rc, const char *fmt, ...)
{
    if (!e)
        return rc;
    e->code = rc;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof(e->msg), fmt, ap);
    va_end(ap);
    /* One line: a message that quotes something multi-line keeps only its first line. */
    e->msg[strcspn(e->msg, "\r\n")] = '\0';
    return rc;
}

static const struct {
    int code;
    const char *name;
} errno_names[] = {
    {EINVAL, "EINVAL"},
    {ENOENT, "ENOENT"},
    {E2BIG, "E2BIG"},
    {EPROTO, "EPROTO"},
    {ENOSYS, "ENOSYS"},
    {EBUSY, "EBUSY"},
    {ENOSPC, "ENOSPC"},
    {ENODEV, "ENODEV"},
    {ENOMEM, "ENOMEM"},
    {ESHUTDOWN, "ESHUTDOWN"},
    {EACCES, "EACCES"},
    {EPERM, "EPERM"},
    {EEXIST, "EEXIST"},
    {EAGAIN, "EAGAIN"},
    {ETIMEDOUT, "ETIMEDOUT"},
    {EIO, "EIO"},
    {ECANCELED, "ECANCELED"},
    {ENOTSUP, "ENOTSUP"},
    {EBADMSG, "EBADMSG"},
    {ERANGE, "ERANGE"},
    {ENAMETOOLONG, "ENAMETOOLONG"},
    {EMFILE, "EMFILE"},
    {ENOBUFS, "ENOBUFS"},
    {EUSERS, "EUSERS"},
};

const char *ktune_errno_name(int neg_errno)
{
    for (size_t i = 0; i < sizeof(errno_names) / sizeof(errno_names[0]); i++)
        if (errno_names[i].code == -neg_errno)
            return errno_names[i].name;
    return "EIO";
}

int ktune_errno_from_name(const char *name)
{
    for (size_t i = 0; i < sizeof(errno_names) / sizeof(errno_names[0]); i++)
        if (strcmp(errno_names[i].name, name) == 0)
            return errno_names[i].code;
    return 0;
}

KTUNE_EXPORT const char *ktune_default_socket(void)
{
    const char *s = getenv("KTUNE_SOCKET");
    return s && s[0] ? s : "/run/ktune/ktuned.sock";
}

KTUNE_EXPORT const char *ktune_job_state_name(ktune_job_state s)
{
    static const char *const names[] = {"queued", "running", "done", "failed", "cancelled"};
    return (unsigned)s < sizeof(names) / sizeof(names[0]) ? names[s] : "unknown";
}

/* ---- graphs ---- */

static void graph_free_names(char **names, int n)
{
    if (!names)
        return;
    for (int i = 0; i < n; i++)
        free(names[i]);
    free(names);
}

KTUNE_EXPORT void ktune_graph_free(ktune_graph *g)
{
    if (!g)
        return;
    graph_free_names(g->in_names, g->n_in);
    graph_free_names(g->out_names, g->n_out);
    ops_graph_free(g->g);
    free(g);
}

int ktune_graph_wrap(ops_graph *og, const char *what, ktune_graph **out, ktune_error *err)
{
    ops_diag d = {0};
    int rc = 0;
    int *in_rank = NULL, *out_rank = NULL;
    char *seen = NULL;
    const char *pre = what ? what : "", *sep = what ? ": " : "";
    *out = NULL;
    ktune_graph *g = calloc(1, sizeof(*g));
    if (!g) {
        ops_graph_free(og);
        return ktune_err_from(err, -ENOMEM, "%s%sout of memory", pre, sep);
    }
    g->g = og;
    if ((rc = ops_graph_validate(og, &d)) < 0 || (rc = ops_graph_signature(og, g->sig, &d)) < 0) {
        rc = ktune_err_from(err, rc, "%s%s%s", pre, sep, d.msg);
        goto fail;
    }
    kt_hex(g->sig, OPS_SIG_BYTES, g->sig_hex);
    char *json = NULL;
    if ((rc = ops_graph_to_json(og, &json)) < 0) {
        rc = ktune_err_from(err, rc, "%s%sout of memory", pre, sep);
        goto fail;
    }
    ops_sha256(json, strlen(json), g->decl);
    free(json);
    snprintf(g->name, sizeof(g->name), "%s", og->name ? og->name : "");
    for (int t = 0; t < og->n_tensors; t++)
        g->n_in += og->tensors[t].producer < 0;
    g->n_out = og->n_outputs;
    in_rank = calloc((size_t)g->n_in + 1, sizeof(int));
    out_rank = calloc((size_t)g->n_out + 1, sizeof(int));
    g->in_names = calloc((size_t)g->n_in + 1, sizeof(char *));
    g->out_names = calloc((size_t)g->n_out + 1, sizeof(char *));
    if (!in_rank || !out_rank || !g->in_names || !g->out_names) {
        rc = ktune_err_from(err, -ENOMEM, "%s%sout of memory", pre, sep);
        goto fail;
    }
    if ((rc = ops_graph_canonical_io(og, in_rank, out_rank, &d)) < 0) {
        rc = ktune_err_from(err, rc, "%s%s%s", pre, sep, d.msg);
        goto fail;
    }
    /* The canonical order must be a permutation (ktune_lookup maps the caller's declared order
     * onto it); the names are kept in declared order, the one callers see. */
    if (!(seen = calloc((size_t)(g->n_in + g->n_out) + 1, 1)))
        goto oom;
    for (int i = 0; i < g->n_in + g->n_out; i++) {
        int r = i < g->n_in ? in_rank[i] : out_rank[i - g->n_in];
        int n = i < g->n_in ? g->n_in : g->n_out, base = i < g->n_in ? 0 : g->n_in;
        if (r < 0 || r >= n || seen[base + r])
            goto not_perm;
        seen[base + r] = 1;
    }
    for (int t = 0, i = 0; t < og->n_tensors; t++)
        if (og->tensors[t].producer < 0 && !(g->in_names[i++] = kt_strdup(og->tensors[t].name)))
            goto oom;
    for (int j = 0; j < g->n_out; j++)
        if (!(g->out_names[j] = kt_strdup(og->tensors[og->outputs[j]].name)))
            goto oom;
    free(seen);
    free(in_rank);
    free(out_rank);
    *out = g;
    return 0;
not_perm: /* e.g. one tensor declared as an output twice */
    rc = ktune_err_from(err, -EINVAL,
                        "%s%sno canonical order of the graph's inputs and outputs "
                        "(is a tensor listed twice?)",
                        pre, sep);
    goto fail;
oom:
    rc = ktune_err_from(err, -ENOMEM, "%s%sout of memory", pre, sep);
fail:
    free(seen);
    free(in_rank);
    free(out_rank);
    ktune_graph_free(g);
    return rc;
}

KTUNE_EXPORT int ktune_graph_load(const char *path, ktune_graph **out, ktune_error *err)
{
    if (err)
        *err = (ktune_error){0};
    if (!out)
        return ktune_err_from(err, -EINVAL, "ktune_graph_load: out is NULL");
    *out = NULL;
    if (!path || !path[0])
        return ktune_err_from(err, -EINVAL, "ktune_graph_load: no path given");
    ops_graph *og = NULL;
    ops_diag d = {0};
    int rc = ops_graph_from_json_file(path, &og, &d);
    if (rc < 0)
        return ktune_err_from(err, rc, "%s: %s", path, d.msg);
    return ktune_graph_wrap(og, path, out, err);
}

KTUNE_EXPORT int ktune_graph_parse(const char *json, size_t len, ktune_graph **out,
                                   ktune_error *err)
{
    if (err)
        *err = (ktune_error){0};
    if (!out)
        return ktune_err_from(err, -EINVAL, "ktune_graph_parse: out is NULL");
    *out = NULL;
    if (!json)
        return ktune_err_from(err, -EINVAL, "ktune_graph_parse: json is NULL");
    if (len == 0)
        len = strlen(json);
    ops_graph *og = NULL;
    ops_diag d = {0};
    int rc = ops_graph_from_json(json, len, &og, &d);
    if (rc < 0)
        return ktune_err_from(err, rc, "graph: %s", d.msg);
    return ktune_graph_wrap(og, "graph", out, err);
}

KTUNE_EXPORT const char *ktune_graph_name(const ktune_graph *g)
{
    return g ? g->name : NULL;
}

KTUNE_EXPORT const char *ktune_graph_signature(const ktune_graph *g)
{
    return g ? g->sig_hex : NULL;
}

KTUNE_EXPORT int ktune_graph_n_inputs(const ktune_graph *g)
{
    return g ? g->n_in : 0;
}

KTUNE_EXPORT int ktune_graph_n_outputs(const ktune_graph *g)
{
    return g ? g->n_out : 0;
}

KTUNE_EXPORT const char *ktune_graph_input_name(const ktune_graph *g, int i)
{
    return g && i >= 0 && i < g->n_in ? g->in_names[i] : NULL;
}

KTUNE_EXPORT const char *ktune_graph_output_name(const ktune_graph *g, int i)
{
    return g && i >= 0 && i < g->n_out ? g->out_names[i] : NULL;
}
