/* The attention family (being written; see issue "Candidates"). Until then it matches no group. */
#include "family.h"

static bool attention_matches(const ops_group *grp)
{
    (void)grp;
    return false;
}

const ops_family ops_family_attention = {
    .id = OPS_FAM_ATTENTION,
    .name = "attention",
    .matches = attention_matches,
};
