/* The conv family (being written; see issue "Candidates"). Until then it matches no group. */
#include "family.h"

static bool conv_matches(const ops_group *grp)
{
    (void)grp;
    return false;
}

const ops_family ops_family_conv = {
    .id = OPS_FAM_CONV,
    .name = "conv",
    .matches = conv_matches,
};
