/* ktune-worker: one process per GPU (CUDA_VISIBLE_DEVICES pins it), spawned by the supervisor
 * (search/supervisor.h); requests on stdin, replies on stdout, log on stderr. The protocol and
 * the exit statuses are srch_worker_main's (search/worker.h, search/worker.c): 0 after "quit" or
 * end of input, 2 for a malformed request stream, 3 after a sticky CUDA error. */
#include "search/worker.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-v") == 0 || strcmp(argv[i], "--verbose") == 0) {
            kt_log_threshold = KT_LOG_DEBUG;
        } else {
            kt_log_err("worker", "usage: ktune-worker [-v]  (speaks msgpack on stdin/stdout)");
            return 64;
        }
    }
    const char *lvl = getenv("KTUNE_WORKER_DEBUG");
    if (lvl && *lvl && strcmp(lvl, "0") != 0)
        kt_log_threshold = KT_LOG_DEBUG;
    int status = srch_worker_main(STDIN_FILENO, STDOUT_FILENO);
    /* After a sticky error the context is dead: skip the atexit handlers (CUPTI's among them),
     * which would talk to it. Replies are written with write(2), so nothing is buffered. */
    if (status == 3)
        _exit(status);
    return status;
}
