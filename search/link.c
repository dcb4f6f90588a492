/* A partition's groups linked into one module from their emitters' pieces (search/link.h). */
#include "link.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

void srch_link_suffix(int k, ops_group *grp)
{
    /* a partition has at most OPS_GROUP_MAX_NODES groups: the modulo only bounds the digits */
    snprintf(grp->entry_suffix, sizeof(grp->entry_suffix), "_g%u",
             (unsigned)k % OPS_GROUP_MAX_NODES);
}

/* The contract of one group's pieces: marked, in order, and every entry named with its suffix
 * (an emitter that ignored the suffix would collide with another group's kernel, or name one the
 * module does not define). */
static int check_pieces(const ops_emitted *e, int k, kt_err *err)
{
    if (!e->source || e->n_kernels < 1)
        return kt_err_set(err, -EINVAL,
                          "group %d of the partition has no kernels of its own (a cuBLASLt call "
                          "cannot join a module)",
                          k);
    size_t len = strlen(e->source);
    if (e->code_at == 0 || e->prelude_at > e->code_at || e->code_at > len)
        return kt_err_set(err, -EINVAL,
                          "group %d's emitter marked no pieces (prelude at %zu, code at %zu of %zu "
                          "bytes): it must emit the prelude with ops_emit_shared_prelude",
                          k, e->prelude_at, e->code_at, len);
    ops_group sfx = {0};
    srch_link_suffix(k, &sfx);
    size_t sl = strlen(sfx.entry_suffix);
    for (int j = 0; j < e->n_kernels; j++) {
        const char *entry = e->kernels[j].entry;
        size_t el = strlen(entry);
        if (el <= sl || strcmp(entry + el - sl, sfx.entry_suffix) != 0)
            return kt_err_set(err, -EINVAL,
                              "group %d's kernel %d is named '%s', without the entry suffix '%s' "
                              "its emitter was given",
                              k, j, KT_ESC(entry), sfx.entry_suffix);
    }
    return 0;
}

int srch_link_partition(const ops_emitted *em, int n, char **source, size_t *len, kt_err *err)
{
    *source = NULL;
    *len = 0;
    if (n < 1)
        return kt_err_set(err, -EINVAL, "a partition links at least one group");
    for (int k = 0; k < n; k++) {
        int rc = check_pieces(&em[k], k, err);
        if (rc < 0)
            return rc;
    }
    /* The prelude is emitted once: every group's must be the one it stands for. */
    size_t pl = em[0].code_at - em[0].prelude_at;
    for (int k = 1; k < n; k++)
        if (em[k].code_at - em[k].prelude_at != pl ||
            memcmp(em[k].source + em[k].prelude_at, em[0].source + em[0].prelude_at, pl) != 0)
            return kt_err_set(err, -EINVAL,
                              "group %d's prelude differs from group 0's; the module holds one "
                              "(emitters share ops_emit_prelude's)",
                              k);
    kt_buf b = {0};
    kt_buf_printf(&b, "/*\n * ktune partition: %d kernels in one module, launched in order\n */\n",
                  n);
    for (int k = 0; k < n; k++) {
        const ops_emitted *e = &em[k];
        /* the group's header comment (tensor names in it are escaped), the prelude once */
        kt_buf_printf(&b, "%.*s", (int)e->prelude_at, e->source);
        if (k == 0)
            kt_buf_printf(&b, "%.*s", (int)pl, e->source + e->prelude_at);
        /* the group's helpers are its own: a namespace keeps two groups' apart (entries are
         * extern "C", so their suffixes keep them apart) */
        kt_buf_printf(&b, "namespace ktune_g%d {\n\n%s\n} /* namespace ktune_g%d */\n", k,
                      e->source + e->code_at, k);
    }
    int rc = kt_buf_status(&b);
    if (rc < 0) {
        kt_buf_free(&b);
        return kt_err_set(err, rc, "out of memory linking the partition");
    }
    *len = b.len;
    *source = kt_buf_take(&b);
    return 0;
}
