/* ktune-cache-check: the process cache_check starts to read a cache file that may be damaged
 * (cache/check.c). Not for people: `ktune cache check DIR` is the command. */
#include "cache/cache.h"

int main(int argc, char **argv)
{
    return cache_check_serve(argc, argv);
}
