/* Placeholder: being written (issue 2). */
#include "ops.h"
