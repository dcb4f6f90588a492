/* The gemm family (being written; see issue "Candidates"). Until then it matches no group. */
#include "family.h"

static bool gemm_matches(const ops_group *grp)
{
    (void)grp;
    return false;
}

const ops_family ops_family_gemm = {
    .id = OPS_FAM_GEMM,
    .name = "gemm",
    .matches = gemm_matches,
};
