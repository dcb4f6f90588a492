/* Requests handled off the loop (kd.h, kd_prep_offload): a submit or lookup costs what its graph
 * does (parsing, validation, the signature's tie-breaking search, binding, the problem digest),
 * which the loop cannot spend while other clients wait. Such a request, and any request large
 * enough that decoding it is work, is decoded and prepared (kd_prep_run) on a libuv worker
 * thread, from its bytes where they lie in the connection's buffer (counted in max-buffered
 * there: the buffer is neither read into, moved nor freed while the connection is busy). Its
 * dispatch, the cache read or the job, and the reply stay on the loop, in the after-work
 * callback. The connection is busy meanwhile: nothing more of it is read or handled until that
 * reply is sent, so replies keep their order (server.c).
 *
 * Threads: prep_work runs on a libuv worker and touches only its kd_work (the request's bytes,
 * read only; its own msgpack zone and kd_prep; the tolerance factor copied from the config);
 * everything else, kd_conn included, is touched on the loop only. A connection closed meanwhile
 * is kept until prep_done (kd_conn_work_done). */
#include "kd.h"

#include <stdlib.h>
#include <string.h>

/* A submit or lookup whose graph has at most this many tensors (inputs plus nodes) is handled on
 * the loop: its work is well under a turn (KD_TURN_NS) and keeps the lookup memo's fast path. */
#define KD_PREP_INLINE_TENSORS 8
/* Any request larger than this is decoded off the loop, whatever its op. */
#define KD_PREP_INLINE_BYTES (64u << 10)

typedef struct kd_work {
    uv_work_t req; /* req.data = this */
    kd_conn *c;
    const uint8_t *bytes; /* the request, in c->rx: left alone while c is busy (kd.h) */
    size_t len;
    const char *op; /* "submit", "lookup", or NULL: decode only */
    double max_factor;
    msgpack_unpacked up;
    msgpack_unpack_return ur;
    size_t off;
    kd_prep prep;
} kd_work;

/* ---- the work ---- */

/* On a libuv worker thread: w only. */
static void prep_work(uv_work_t *req)
{
    kd_work *w = req->data;
    w->ur = msgpack_unpack_next(&w->up, (const char *)w->bytes, w->len, &w->off);
    if (w->ur != MSGPACK_UNPACK_SUCCESS || w->off != w->len || !w->op ||
        w->up.data.type != MSGPACK_OBJECT_MAP)
        return; /* reported, or dispatched without preparation, on the loop */
    kd_prep_run(&w->prep, &w->up.data, w->op, w->max_factor);
}

static void work_free(kd_work *w)
{
    kd_prep_free(&w->prep);
    msgpack_unpacked_destroy(&w->up);
    free(w);
}

/* On the loop: the dispatch and reply, as process() would have done them, then c's next turn. */
static void prep_done(uv_work_t *req, int status)
{
    kd_work *w = req->data;
    kd_conn *c = w->c;
    if (!kd_conn_work_done(c)) {
        work_free(w);
        return;
    }
    if (!c->closing) {
        if (status < 0)
            kd_conn_close(c, "request work cancelled");
        else if (w->ur == MSGPACK_UNPACK_SUCCESS && w->off == w->len)
            kd_dispatch(c, &w->up.data, w->bytes, w->len, w->op ? &w->prep : NULL);
        else
            kd_conn_close(c, w->ur == MSGPACK_UNPACK_NOMEM_ERROR
                                 ? "out of memory decoding a request"
                                 : "framing error: undecodable message");
    }
    work_free(w);
    kd_conn_resume(c);
}

bool kd_prep_offload(kd_conn *c, const uint8_t *msg, size_t len)
{
    static const char *const keys[] = {"op", "graph"};
    const uint8_t *vals[2] = {NULL, NULL};
    size_t lens[2] = {0, 0};
    const char *op = NULL;
    if (kd_frame_map_values(msg, len, keys, 2, vals, lens) && vals[0] && vals[1])
        op = kd_frame_is_str(vals[0], lens[0], "submit")   ? "submit"
             : kd_frame_is_str(vals[0], lens[0], "lookup") ? "lookup"
                                                           : NULL;
    /* a graph that cannot be sized is not small either: its errors are work too */
    int64_t tensors = op ? kd_frame_graph_tensors(vals[1], lens[1]) : 0;
    if (len <= KD_PREP_INLINE_BYTES && (!op || (tensors >= 0 && tensors <= KD_PREP_INLINE_TENSORS)))
        return false;
    kd_work *w = calloc(1, sizeof(*w));
    if (!w)
        return false; /* handled now: slower, not wrong */
    w->req.data = w;
    w->c = c;
    w->bytes = msg;
    w->len = len;
    w->op = op;
    w->max_factor = c->d->cfg->tolerance_max_factor;
    msgpack_unpacked_init(&w->up);
    if (uv_queue_work(&c->d->loop, &w->req, prep_work, prep_done) < 0) {
        work_free(w);
        return false;
    }
    c->busy = true;
    return true;
}
