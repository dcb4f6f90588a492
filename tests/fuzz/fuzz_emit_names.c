/* Fuzz target: names reaching the emitters (issue 16). Byte 0 picks a graph of
 * tests/emit_names.h (one per family), byte 1 a schedule; the rest, split at NUL bytes, are up
 * to 8 payloads that become the graph's, its symbols' and its tensors' names (any bytes: the
 * parsers refuse control characters, the emitters must not rely on it). Invariants: every
 * payload's comment text (ops_emit_comment_text) is printable ASCII without '*', '/', a
 * backslash or '?' and fits its buffer; for every family that matches, two schedules emit the
 * same code (equal sources after splicing lines and removing comments) with these names as with
 * the names made plain, and so does the graph's fp64 reference program. */
#include "fuzz.h"
#include "tests/emit_names.h"

#define MAX_PAYLOADS 8

/* The canonical graphs and, per graph and family, its legal schedules on the H100: enumerated
 * once (they do not depend on names, which test_emit_names checks). */
static ops_graph *graphs[NAMES_N_GRAPHS];
static names_sched_list scheds[NAMES_N_GRAPHS][OPS_FAM_COUNT];
static ops_device dev;

static void init(void)
{
    static bool done;
    if (done)
        return;
    done = true;
    ops_device_h100(&dev);
    for (int i = 0; i < NAMES_N_GRAPHS; i++) {
        graphs[i] = names_graph(i);
        FUZZ_CHECK(graphs[i] != NULL);
        ops_group grp;
        ops_diag d = {0};
        uint64_t mask = (1ull << graphs[i]->n_nodes) - 1;
        FUZZ_CHECK(ops_group_init(&grp, graphs[i], mask, &d) == 0);
        for (int f = 0; f < OPS_FAM_COUNT; f++) {
            const ops_family *fam = ops_family_get((ops_family_id)f);
            if (fam->matches(&grp))
                FUZZ_CHECK(
                    ops_family_enumerate(fam, &grp, &dev, names_collect, &scheds[i][f], NULL) == 0);
        }
    }
}

static void check_comment_text(const char *s)
{
    char out[OPS_EMIT_COMMENT_MAX];
    FUZZ_CHECK(ops_emit_comment_text(s, out, sizeof(out)) == out);
    size_t n = strlen(out);
    FUZZ_CHECK(n < sizeof(out));
    for (size_t i = 0; i < n; i++)
        FUZZ_CHECK(out[i] >= 0x20 && out[i] <= 0x7e && !strchr("*/\\?", out[i]));
}

static void compare(int gi, int pick, const char *const *payloads, int n)
{
    ops_graph *gh = ops_graph_clone(graphs[gi]), *gp = ops_graph_clone(graphs[gi]);
    if (!gh || !gp || names_rename(gh, payloads, n, false) < 0 ||
        names_rename(gp, payloads, n, true) < 0)
        goto out; /* out of memory: not an invariant */
    ops_group hh, hp;
    ops_diag d = {0};
    uint64_t mask = (1ull << gh->n_nodes) - 1;
    FUZZ_CHECK(ops_group_init(&hh, gh, mask, &d) == 0);
    FUZZ_CHECK(ops_group_init(&hp, gp, mask, &d) == 0);
    for (int f = 0; f < OPS_FAM_COUNT; f++) {
        const ops_family *fam = ops_family_get((ops_family_id)f);
        const names_sched_list *l = &scheds[gi][f];
        FUZZ_CHECK(fam->matches(&hh) == fam->matches(&hp));
        FUZZ_CHECK(l->n == 0 || fam->matches(&hh));
        if (l->n == 0)
            continue;
        int which[2] = {0, pick % l->n};
        for (int k = 0; k < 2; k++) {
            ops_emitted eh = {0}, ep = {0};
            ops_diag dh = {0}, dp = {0};
            int rh = fam->emit(&hh, &l->s[which[k]], &dev, &eh, &dh);
            int rp = fam->emit(&hp, &l->s[which[k]], &dev, &ep, &dp);
            FUZZ_CHECK((rh < 0) == (rp < 0));
            if (rh == 0) {
                const char *why = names_same_code(eh.source, ep.source);
                if (why)
                    fprintf(stderr, "%s, schedule %d: %s\n", fam->name, which[k], why);
                FUZZ_CHECK(why == NULL);
            }
            ops_emitted_free(&eh);
            ops_emitted_free(&ep);
        }
    }
    const char *why = names_compare_reference(gh, gp);
    if (why)
        fprintf(stderr, "reference program: %s\n", why);
    FUZZ_CHECK(why == NULL);
out:
    ops_graph_free(gh);
    ops_graph_free(gp);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    init();
    if (size < 2)
        return 0;
    int gi = data[0] % NAMES_N_GRAPHS, pick = data[1];
    /* the payloads: the rest of the input split at NUL bytes, as C strings */
    char *text = malloc(size - 1);
    if (!text)
        return 0;
    memcpy(text, data + 2, size - 2);
    text[size - 2] = '\0';
    const char *payloads[MAX_PAYLOADS];
    int n = 0;
    for (size_t i = 0; i < size - 1 && n < MAX_PAYLOADS; i += strlen(text + i) + 1)
        payloads[n++] = text + i;
    for (int k = 0; k < n; k++)
        check_comment_text(payloads[k]);
    compare(gi, pick, payloads, n);
    free(text);
    return 0;
}
