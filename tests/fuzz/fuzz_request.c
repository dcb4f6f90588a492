/* Fuzz target: ktuned's request path without a loop. The input is a client stream: the framing
 * scanner (daemon/frame.c) is fed the bytes in chunks, as reads would deliver them, and finds
 * each message's end and checks the depth cap, as server.c does; each complete message is
 * decoded with msgpack_unpack_next, the envelope checked (id, v, op: docs/protocol.md), the
 * frame helpers the memo, E2BIG reply and prep.c use (kd_frame_peek_id, kd_frame_map_values,
 * kd_frame_is_str, kd_frame_graph_tensors) run on its
 * bytes, and a `graph` argument goes through ops_graph_from_msgpack_object (or, for bin,
 * ops_graph_from_msgpack) + validate + signature as daemon/handlers.c's arg_graph does. The
 * envelope check and kd_arg_* live in proto.c next to the connection code (kd_dispatch needs a
 * live daemon and connection), so the envelope check is restated here from the protocol.
 * Invariants: the scanner's result does not depend on how the bytes are chunked; a message it
 * calls done is exactly one msgpack value for msgpack-c too; the peeked id is the decoded one. */
#include "fuzz.h"

#include "daemon/frame.h"
#include "ops/graph.h"
#include "ops/msgpack_util.h"
#include "ops/ops.h"

#include <msgpack.h>
#include <string.h>

static void check_graph(const msgpack_object *v)
{
    ops_graph *g = NULL;
    ops_diag d = {0};
    int rc;
    if (v->type == MSGPACK_OBJECT_MAP)
        rc = ops_graph_from_msgpack_object(v, &g, &d);
    else if (v->type == MSGPACK_OBJECT_BIN)
        rc = ops_graph_from_msgpack(v->via.bin.ptr, v->via.bin.size, &g, &d);
    else
        return;
    if (rc == 0)
        rc = ops_graph_validate(g, &d);
    uint8_t sig[OPS_SIG_BYTES];
    if (rc == 0)
        rc = ops_graph_signature(g, sig, &d);
    if (rc < 0)
        FUZZ_CHECK(d.msg[0]);
    if (rc == 0) {
        /* the msgpack writer's output reads back as the same graph */
        void *buf = NULL;
        size_t len = 0;
        ops_graph *back = NULL;
        uint8_t sig2[OPS_SIG_BYTES];
        FUZZ_CHECK(ops_graph_to_msgpack(g, &buf, &len) == 0);
        FUZZ_CHECK(ops_graph_from_msgpack(buf, len, &back, &d) == 0);
        FUZZ_CHECK(ops_graph_validate(back, &d) == 0);
        FUZZ_CHECK(ops_graph_signature(back, sig2, &d) == 0);
        FUZZ_CHECK(memcmp(sig, sig2, sizeof(sig)) == 0);
        ops_graph_free(back);
        free(buf);
    }
    ops_graph_free(g);
}

/* Equal as msgpack values (packed alike; unlike msgpack_object_equal, a NaN equals itself). */
static bool same_object(const msgpack_object *a, const msgpack_object *b)
{
    msgpack_sbuffer sa, sb;
    msgpack_sbuffer_init(&sa);
    msgpack_sbuffer_init(&sb);
    msgpack_packer pa, pb;
    msgpack_packer_init(&pa, &sa, msgpack_sbuffer_write);
    msgpack_packer_init(&pb, &sb, msgpack_sbuffer_write);
    bool same = msgpack_pack_object(&pa, *a) == 0 && msgpack_pack_object(&pb, *b) == 0 &&
                sa.size == sb.size && (sa.size == 0 || memcmp(sa.data, sb.data, sa.size) == 0);
    msgpack_sbuffer_destroy(&sa);
    msgpack_sbuffer_destroy(&sb);
    return same;
}

/* One complete message of len bytes at msg, as the daemon handles it after framing. */
static void handle_message(const uint8_t *msg, size_t len)
{
    msgpack_unpacked up;
    msgpack_unpacked_init(&up);
    size_t off = 0;
    msgpack_unpack_return ur = msgpack_unpack_next(&up, (const char *)msg, len, &off);
    /* the scanner said these bytes are one whole value: msgpack-c must agree (or run out of
     * memory, which the daemon answers with ENOMEM) */
    FUZZ_CHECK(ur == MSGPACK_UNPACK_SUCCESS || ur == MSGPACK_UNPACK_NOMEM_ERROR);
    if (ur != MSGPACK_UNPACK_SUCCESS)
        goto out;
    FUZZ_CHECK(off == len);
    const msgpack_object *m = &up.data;
    FUZZ_CHECK(m->type == MSGPACK_OBJECT_MAP); /* the daemon refuses a non-map first byte */

    /* the peek (used for E2BIG replies) agrees with the decoded envelope */
    const msgpack_object *id = kt_mp_get(m, "id"), *v = kt_mp_get(m, "v"), *op = kt_mp_get(m, "op");
    uint64_t pid;
    /* (not the converse: msgpack-c reads a non-negative signed encoding, e.g. int32, as an
     * unsigned id, which the peek does not; an E2BIG reply to such a request carries id 0) */
    if (kd_frame_peek_id(msg, len, &pid)) {
        FUZZ_CHECK(id && id->type == MSGPACK_OBJECT_POSITIVE_INTEGER && id->via.u64 == pid);
    }
    /* the memo's raw-value lookup finds the same values as the decoder */
    static const char *const keys[] = {"op", "graph", "shapes", "gpu", "precision"};
    const uint8_t *vals[5];
    size_t lens[5];
    FUZZ_CHECK(kd_frame_map_values(msg, len, keys, 5, vals, lens));
    for (int i = 0; i < 5; i++) {
        const msgpack_object *dv = kt_mp_get(m, keys[i]);
        FUZZ_CHECK((vals[i] != NULL) == (dv != NULL));
        if (!vals[i])
            continue;
        FUZZ_CHECK(vals[i] >= msg && vals[i] + lens[i] <= msg + len);
        msgpack_unpacked one;
        msgpack_unpacked_init(&one);
        size_t o2 = 0;
        msgpack_unpack_return r2 = msgpack_unpack_next(&one, (const char *)vals[i], lens[i], &o2);
        if (r2 == MSGPACK_UNPACK_SUCCESS) {
            FUZZ_CHECK(o2 == lens[i]);
            FUZZ_CHECK(same_object(&one.data, dv));
        } else {
            FUZZ_CHECK(r2 == MSGPACK_UNPACK_NOMEM_ERROR);
        }
        msgpack_unpacked_destroy(&one);
    }

    /* the size prep.c reads from the graph's bytes agrees with the decoded graph map */
    const msgpack_object *gv = kt_mp_get(m, "graph");
    if (vals[1] && gv && gv->type == MSGPACK_OBJECT_MAP) {
        const msgpack_object *gi = kt_mp_get(gv, "inputs"), *gn = kt_mp_get(gv, "nodes");
        int64_t want = -1;
        if (gi && gn && (gi->type == MSGPACK_OBJECT_MAP || gi->type == MSGPACK_OBJECT_ARRAY) &&
            (gn->type == MSGPACK_OBJECT_MAP || gn->type == MSGPACK_OBJECT_ARRAY))
            want =
                (int64_t)(gi->type == MSGPACK_OBJECT_MAP ? gi->via.map.size : gi->via.array.size) +
                (int64_t)(gn->type == MSGPACK_OBJECT_MAP ? gn->via.map.size : gn->via.array.size);
        FUZZ_CHECK(kd_frame_graph_tensors(vals[1], lens[1]) == want);
    }
    if (vals[0])
        FUZZ_CHECK(kd_frame_is_str(vals[0], lens[0], "lookup") ==
                   (op && kt_mp_str_is(op, "lookup")));

    /* the envelope (docs/protocol.md: id unsigned, v == 1, op a string) */
    if (!id || id->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
        goto out;
    if (!v || v->type != MSGPACK_OBJECT_POSITIVE_INTEGER || v->via.u64 != 1)
        goto out;
    if (!op || op->type != MSGPACK_OBJECT_STR)
        goto out;
    const msgpack_object *g = kt_mp_get(m, "graph");
    if (g && g->type != MSGPACK_OBJECT_NIL)
        check_graph(g);
out:
    msgpack_unpacked_destroy(&up);
}

typedef struct scan_result {
    kd_scan_rc rc;
    size_t end;
} scan_result;

/* Scans one value at buf (avail bytes) feeding it in steps of `chunk` bytes. */
static scan_result scan_chunked(const uint8_t *buf, size_t avail, size_t chunk)
{
    kd_scan s;
    memset(&s, 0, sizeof(s));
    kd_scan_reset(&s);
    size_t have = 0;
    for (;;) {
        have = have + chunk < avail ? have + chunk : avail;
        kd_scan_rc rc = kd_scan_step(&s, buf, have);
        if (rc != KD_SCAN_MORE)
            return (scan_result){rc, rc == KD_SCAN_DONE ? s.pos : 0};
        FUZZ_CHECK(s.depth >= 0 && s.depth <= KD_MAX_DEPTH);
        if (have == avail)
            return (scan_result){KD_SCAN_MORE, 0};
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    /* the first byte picks the read size the stream arrives in (1..256 bytes) */
    size_t chunk = (size_t)data[0] + 1;
    const uint8_t *buf = data + 1;
    size_t len = size - 1, off = 0;
    while (off < len) {
        const uint8_t *msg = buf + off;
        size_t avail = len - off;
        if (avail > KD_MAX_REQUEST)
            avail = KD_MAX_REQUEST;
        if (!kd_frame_is_map(msg[0]))
            return 0; /* the daemon answers EPROTO and closes */
        scan_result a = scan_chunked(msg, avail, chunk);
        scan_result b = scan_chunked(msg, avail, avail); /* all at once */
        FUZZ_CHECK(a.rc == b.rc && a.end == b.end);
        if (a.rc != KD_SCAN_DONE)
            return 0; /* incomplete, not msgpack, or too deep: the connection ends */
        FUZZ_CHECK(a.end > 0 && a.end <= avail);
        handle_message(msg, a.end);
        off += a.end;
    }
    return 0;
}
