/* The reference family (being written; see issue "Candidates"). Until then it matches no group. */
#include "family.h"

static bool reference_matches(const ops_group *grp)
{
    (void)grp;
    return false;
}

const ops_family ops_family_reference = {
    .id = OPS_FAM_REFERENCE,
    .name = "reference",
    .matches = reference_matches,
};
