/* Work in progress (issue 5): filled by the service work. */
#include "ktune.h"
