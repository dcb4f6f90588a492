/* The library family (being written; see issue "Candidates"). Until then it matches no group. */
#include "family.h"

static bool library_matches(const ops_group *grp)
{
    (void)grp;
    return false;
}

const ops_family ops_family_library = {
    .id = OPS_FAM_LIBRARY,
    .name = "library",
    .matches = library_matches,
};
