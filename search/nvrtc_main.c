/* ktune-nvrtc: the compile server a compile pool (search/compile.h) runs in each of its worker
 * processes. Started by the pool as `ktune-nvrtc ARCH` with its end of a socketpair as fd 3;
 * compiles what it reads there with NVRTC until the pool closes it. A program of its own, so
 * that the pool's processes never run a fork of a multithreaded caller. */
#include "compile.h"

#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
    if (argc != 2 || strncmp(argv[1], "sm_", 3) != 0) {
        fprintf(stderr, "usage: ktune-nvrtc ARCH (like sm_90a), started by a compile pool with "
                        "its socket as fd 3\n");
        return 2;
    }
    srch_compile_serve(3, argv[1]);
}
