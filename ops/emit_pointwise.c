/* The pointwise family (being written; see issue "Candidates"). Until then it matches no group. */
#include "family.h"

static bool pointwise_matches(const ops_group *grp)
{
    (void)grp;
    return false;
}

const ops_family ops_family_pointwise = {
    .id = OPS_FAM_POINTWISE,
    .name = "pointwise",
    .matches = pointwise_matches,
};
