/* The row family (being written; see issue "Candidates"). Until then it matches no group. */
#include "family.h"

static bool row_matches(const ops_group *grp)
{
    (void)grp;
    return false;
}

const ops_family ops_family_row = {
    .id = OPS_FAM_ROW,
    .name = "row",
    .matches = row_matches,
};
