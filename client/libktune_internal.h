/* Private to libktune: the definition of the opaque graph handle that client.c, libktune.c and
 * runtime.c share, the one translation of an internal result into a ktune_error, and the few
 * entry points the CLI and the tests use below the public API (hidden in libktune.so). */
#pragma once

#include "ktune.h"
#include "ops/ops.h"

struct ktune_graph {
    ops_graph *g; /* validated, symbolic */
    char name[128];
    char sig_hex[65];
    uint8_t sig[OPS_SIG_BYTES];
    uint8_t decl[OPS_SIG_BYTES]; /* SHA-256 of the graph as declared (canonical JSON, names and
                                    order included): the runtime's memo tells graphs apart by it */
    int n_in, n_out;
    char **in_names, **out_names; /* declared order (what callers pass tensors in) */
};

/* Fills e (may be NULL) with rc and the formatted one-line message and returns rc. */
int ktune_err_from(ktune_error *e, int rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Makes a ktune_graph of g, which it takes over in every case (freed on failure): validates it
 * (when not yet), computes its signature and canonical io order. Failure: -EINVAL or -ENOMEM
 * with the validator's message prefixed by `what` (a file name, or NULL). */
int ktune_graph_wrap(ops_graph *g, const char *what, ktune_graph **out, ktune_error *err);

/* The errno name the protocol uses for a negative errno ("EINVAL"), and back (0 when the name
 * is not one we know). */
const char *ktune_errno_name(int neg_errno);
int ktune_errno_from_name(const char *name);

/* Builds a client on an already connected stream socket fd (which it takes over: closed by
 * ktune_disconnect, or here on failure) and says hello. `what` names the peer in messages
 * (the socket path). ktune_connect is socket() + connect() + this; tests hand it one end of a
 * socketpair whose other end plays the daemon. */
int ktune_client_from_fd(int fd, const char *what, ktune_client **out, ktune_error *err);

/* What the daemon said in its hello reply; valid while c is. */
typedef struct ktune_hello {
    char version[32];
    int protocol;
    int64_t pid, uid;
    int gpus;
} ktune_hello;
const ktune_hello *ktune_client_hello(const ktune_client *c);
