/* The Unix socket: listening (a path we bind, or the socket systemd passes), accepting with the
 * peer's credentials, reading into a per-connection buffer that frame.c scans, and writing
 * replies with a cap on what may queue up. docs/protocol.md, "Framing". */
#include "kd.h"

#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#define READ_CHUNK   (64u << 10)
#define RX_MAX       ((size_t)KD_MAX_BUFFERED + READ_CHUNK) /* process() closes past this */
#define BACKLOG      1024
#define SOCKET_GROUP "ktune"

typedef struct kd_write {
    uv_write_t req;
    uv_buf_t buf;
    kd_conn *c;
} kd_write;

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf);
static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf);
static void on_pump(uv_idle_t *idle);

/* ---- listening ---- */

/* Refuses to take over a live daemon's socket; removes a stale one. */
static int clear_stale(const char *path, kt_err *err)
{
    struct stat st;
    if (lstat(path, &st) < 0)
        return 0;
    if (!S_ISSOCK(st.st_mode))
        return kt_err_set(err, -EEXIST, "%s exists and is not a socket", path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return kt_err_set(err, -errno, "socket: %s", strerror(errno));
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
    int rc = connect(fd, (struct sockaddr *)&sa, sizeof(sa));
    int e = errno;
    struct ucred peer = {.pid = 0, .uid = (uid_t)-1};
    socklen_t plen = sizeof(peer);
    if (rc == 0 && getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &peer, &plen) < 0)
        peer.uid = (uid_t)-1;
    close(fd);
    if (rc == 0)
        /* never taken over: what listens there may be another ktuned, or someone else's */
        return kt_err_set(err, -EADDRINUSE,
                          "%s is in use: pid %d (uid %u) listens on it, the file belongs to "
                          "uid %u; stop it or choose another --socket (docs/operations.md, "
                          "\"The socket\")",
                          path, (int)peer.pid, (unsigned)peer.uid, (unsigned)st.st_uid);
    if (e != ECONNREFUSED)
        return kt_err_set(err, -e, "%s: %s", path, strerror(e));
    kt_log_info(KD_LOG_SERVER, "removing the stale socket %s", path);
    if (unlink(path) < 0 && errno != ENOENT)
        return kt_err_set(err, -errno, "cannot remove the stale socket %s: %s", path,
                          strerror(errno));
    return 0;
}

/* Mode 0660 and group ktune (docs/protocol.md: membership of the group is the access control). */
static void set_access(const char *path)
{
    if (chmod(path, 0660) < 0)
        kt_log_warn(KD_LOG_SERVER, "chmod 0660 %s: %s", path, strerror(errno));
    struct group *gr = getgrnam(SOCKET_GROUP);
    if (!gr) {
        kt_log_warn(KD_LOG_SERVER,
                    "group '%s' does not exist: %s is open to group %u only (create the group "
                    "to grant access)",
                    SOCKET_GROUP, path, (unsigned)getegid());
        return;
    }
    if (chown(path, (uid_t)-1, gr->gr_gid) < 0)
        kt_log_warn(KD_LOG_SERVER, "cannot give %s to group %s: %s", path, SOCKET_GROUP,
                    strerror(errno));
}

static void on_connection(uv_stream_t *server, int status);

/* May the peer act on any job (docs/protocol.md, "Ownership")? Root, ktuned's own uid, and
 * members of the admin group: its gid, or one of its supplementary groups as the kernel had
 * them at connect(2) (SO_PEERGROUPS). A peer whose groups cannot be read is not an admin. */
static bool is_admin(const kd_daemon *d, int fd, const struct ucred *cred)
{
    if (cred->uid == 0 || cred->uid == geteuid())
        return true;
    if (!d->cfg->admin_set)
        return false;
    if (cred->gid == d->cfg->admin_gid)
        return true;
    gid_t few[64], *groups = few;
    socklen_t len = sizeof(few);
    int rc = getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups, &len);
    if (rc < 0 && errno == ERANGE && (groups = malloc(len ? len : 1))) /* len: what it needs */
        rc = getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups, &len);
    bool member = false;
    if (rc < 0)
        kt_log_warn(KD_LOG_SERVER, "pid %d uid %u: cannot read its groups (SO_PEERGROUPS): %s",
                    (int)cred->pid, (unsigned)cred->uid, groups ? strerror(errno) : "no memory");
    for (size_t i = 0; rc == 0 && i < len / sizeof(gid_t); i++)
        member |= groups[i] == d->cfg->admin_gid;
    if (groups != few)
        free(groups);
    return member;
}

int kd_server_listen(kd_daemon *d, kt_err *err)
{
    const char *path = d->cfg->socket;
    int rc = uv_idle_init(&d->loop, &d->pump);
    if (rc < 0)
        return kt_err_set(err, -EIO, "uv_idle_init: %s", uv_strerror(rc));
    d->pump.data = d;
    rc = uv_pipe_init(&d->loop, &d->server, 0);
    if (rc < 0)
        return kt_err_set(err, -EIO, "uv_pipe_init: %s", uv_strerror(rc));
    d->server.data = d;
    d->listening = true;
    int fd = kd_notify_listen_fd();
    if (fd >= 0) {
        if ((rc = uv_pipe_open(&d->server, fd)) < 0)
            return kt_err_set(err, rc, "cannot use the socket systemd passed: %s", uv_strerror(rc));
        kt_log_info(KD_LOG_SERVER, "listening on the socket passed by systemd (fd %d)", fd);
    } else {
        if ((rc = clear_stale(path, err)) < 0)
            return rc;
        /* the parent directory: systemd's RuntimeDirectory, else make it */
        char dir[KD_SOCKET_PATH_MAX];
        snprintf(dir, sizeof(dir), "%s", path);
        char *slash = strrchr(dir, '/');
        if (slash && slash != dir) {
            *slash = '\0';
            if (mkdir(dir, 0755) < 0 && errno != EEXIST)
                kt_log_warn(KD_LOG_SERVER, "cannot create %s: %s", dir, strerror(errno));
        }
        mode_t old = umask(0117); /* the socket is born 0660: no window with wider access */
        rc = uv_pipe_bind(&d->server, path);
        umask(old);
        if (rc < 0)
            return kt_err_set(err, rc, "cannot bind %s: %s", path, uv_strerror(rc));
        d->socket_created = true;
        set_access(path);
    }
    if ((rc = uv_listen((uv_stream_t *)&d->server, BACKLOG, on_connection)) < 0)
        return kt_err_set(err, rc, "cannot listen on %s: %s", fd >= 0 ? "the passed socket" : path,
                          uv_strerror(rc));
    if (fd < 0)
        kt_log_info(KD_LOG_SERVER, "listening on %s", path);
    return 0;
}

void kd_server_stop_listening(kd_daemon *d)
{
    if (d->listening && !uv_is_closing((uv_handle_t *)&d->server))
        uv_close((uv_handle_t *)&d->server, NULL);
    d->listening = false;
    if (d->socket_created && unlink(d->cfg->socket) < 0 && errno != ENOENT)
        kt_log_warn(KD_LOG_SERVER, "cannot remove %s: %s", d->cfg->socket, strerror(errno));
    d->socket_created = false;
}

/* ---- connections ---- */

/* c waits for its turn (complete requests may be buffered). */
static void ready_add(kd_conn *c)
{
    kd_daemon *d = c->d;
    if (c->ready)
        return;
    c->ready = true;
    c->ready_next = NULL;
    c->ready_prev = d->ready_tail;
    if (d->ready_tail)
        d->ready_tail->ready_next = c;
    else
        d->ready_head = c;
    d->ready_tail = c;
    if (!uv_is_active((uv_handle_t *)&d->pump) && !uv_is_closing((uv_handle_t *)&d->pump))
        uv_idle_start(&d->pump, on_pump);
}

static void ready_remove(kd_conn *c)
{
    kd_daemon *d = c->d;
    if (!c->ready)
        return;
    if (c->ready_prev)
        c->ready_prev->ready_next = c->ready_next;
    else
        d->ready_head = c->ready_next;
    if (c->ready_next)
        c->ready_next->ready_prev = c->ready_prev;
    else
        d->ready_tail = c->ready_prev;
    c->ready = false;
    c->ready_prev = c->ready_next = NULL;
    if (!d->ready_head && uv_is_active((uv_handle_t *)&d->pump))
        uv_idle_stop(&d->pump);
}

/* Reads from c exactly when it is neither closing, blocked on its replies, holding requests
 * that wait for a turn, nor waiting for a request handled off the loop. */
static void update_reading(kd_conn *c)
{
    bool want = !c->closing && !c->blocked && !c->ready && !c->busy &&
                !uv_is_closing((uv_handle_t *)&c->pipe);
    if (want && !c->reading) {
        int rc = uv_read_start((uv_stream_t *)&c->pipe, on_alloc, on_read);
        if (rc < 0) {
            char why[128];
            snprintf(why, sizeof(why), "cannot read: %s", uv_strerror(rc));
            kd_conn_close(c, why);
            return;
        }
        c->reading = true;
    } else if (!want && c->reading) {
        uv_read_stop((uv_stream_t *)&c->pipe);
        c->reading = false;
    }
}

static void on_close(uv_handle_t *h)
{
    kd_conn *c = h->data;
    kd_daemon *d = c->d;
    ready_remove(c);
    if (c->prev)
        c->prev->next = c->next;
    else if (d->conns == c)
        d->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    d->n_conns--;
    d->buffered -= c->rx_cap;
    if (c->busy) { /* a work item still points at c: kd_conn_work_done frees it */
        c->released = true;
        return;
    }
    free(c->rx);
    free(c);
}

bool kd_conn_work_done(kd_conn *c)
{
    c->busy = false;
    if (c->released) {
        free(c->rx);
        free(c);
        return false;
    }
    return true;
}

void kd_conn_resume(kd_conn *c)
{
    if (c->closing)
        return;
    if (!c->blocked)
        ready_add(c); /* requests may wait in rx: a turn (it reads again once drained) */
    update_reading(c);
}

/* For a connection accepted over the limit, never linked into d->conns. */
static void on_close_rejected(uv_handle_t *h)
{
    free(h->data);
}

/* Every close names the peer: a line about one client's behaviour must say whose it is. */
static void log_close(const kd_conn *c, const char *why)
{
    kt_log_info(KD_LOG_SERVER, "connection %llu (uid %u, pid %d) closed: %s",
                (unsigned long long)c->serial, (unsigned)c->uid, (int)c->pid, why);
}

void kd_conn_close(kd_conn *c, const char *why)
{
    if (!c->closing) {
        c->closing = true;
        if (why)
            log_close(c, why);
        if (c->n_watches)
            kd_jobs_forget_conn(c->d, c);
    }
    ready_remove(c);
    c->reading = false;
    if (!uv_is_closing((uv_handle_t *)&c->pipe)) {
        uv_read_stop((uv_stream_t *)&c->pipe);
        uv_close((uv_handle_t *)&c->pipe, on_close);
    }
}

void kd_server_close_all(kd_daemon *d)
{
    for (kd_conn *c = d->conns; c; c = c->next)
        kd_conn_close(c, NULL);
    if (d->pump.loop && !uv_is_closing((uv_handle_t *)&d->pump))
        uv_close((uv_handle_t *)&d->pump, NULL);
}

static void on_shutdown(uv_shutdown_t *req, int status)
{
    kd_conn *c = req->handle->data;
    free(req);
    kd_conn_close(c, NULL);
}

/* Closes after the replies queued so far are written (the E2BIG reply). */
static void close_after_flush(kd_conn *c, const char *why)
{
    if (c->closing)
        return;
    c->closing = true;
    log_close(c, why);
    if (c->n_watches)
        kd_jobs_forget_conn(c->d, c);
    ready_remove(c);
    c->reading = false;
    uv_read_stop((uv_stream_t *)&c->pipe);
    uv_shutdown_t *req = malloc(sizeof(*req));
    if (!req || uv_shutdown(req, (uv_stream_t *)&c->pipe, on_shutdown) < 0) {
        free(req);
        kd_conn_close(c, NULL);
    }
}

static void on_write(uv_write_t *req, int status)
{
    kd_write *w = (kd_write *)req;
    kd_conn *c = w->c;
    c->queued -= w->buf.len;
    c->d->buffered -= w->buf.len;
    c->active_ms = uv_now(&c->d->loop);
    free(w->buf.base);
    free(w);
    if (status < 0 && status != UV_ECANCELED && !c->closing) {
        char why[128];
        snprintf(why, sizeof(why), "write failed: %s", uv_strerror(status));
        kd_conn_close(c, why);
        return;
    }
    if (c->blocked && !c->closing && c->queued <= KD_QUEUED_LOW) {
        /* the client reads again: serve what it sent meanwhile, then read on */
        c->blocked = false;
        ready_add(c);
    }
}

/* What one connection may keep buffered once the total is over max-buffered: an equal part,
 * and at least one request of the largest size. */
static size_t conn_share(const kd_daemon *d)
{
    size_t part = d->cfg->max_buffered / (size_t)(d->n_conns > 0 ? d->n_conns : 1);
    return part > KD_MAX_REQUEST ? part : KD_MAX_REQUEST;
}

int kd_conn_send(kd_conn *c, msgpack_sbuffer *sb)
{
    char *data = sb->data;
    size_t len = sb->size, alloc = sb->alloc;
    sb->data = NULL;
    sb->size = sb->alloc = 0;
    if (c->closing || uv_is_closing((uv_handle_t *)&c->pipe)) {
        free(data);
        return -EPIPE;
    }
    if (c->queued + len > KD_MAX_QUEUED) {
        free(data);
        char why[128];
        snprintf(why, sizeof(why),
                 "more than %u bytes of replies unread (a client that never "
                 "reads)",
                 KD_MAX_QUEUED);
        kd_conn_close(c, why);
        return -ENOBUFS;
    }
    kd_daemon *d = c->d;
    size_t share = conn_share(d);
    if (c->queued + len > share && d->buffered + len > d->cfg->max_buffered) {
        free(data);
        char why[200];
        snprintf(why, sizeof(why),
                 "%zu bytes of replies unread, over its share of %zu bytes while %zu bytes are "
                 "buffered in all (max-buffered %zu)",
                 c->queued + len, share, d->buffered + len, d->cfg->max_buffered);
        kd_conn_close(c, why);
        return -ENOBUFS;
    }
    if (alloc - len > 4096) {
        /* msgpack's buffer grows by doubling from 8 KiB: give the slack back while it waits */
        char *shrunk = realloc(data, len ? len : 1);
        if (shrunk)
            data = shrunk;
    }
    kd_write *w = malloc(sizeof(*w));
    if (!w) {
        free(data);
        kd_conn_close(c, "out of memory queueing a reply");
        return -ENOMEM;
    }
    w->c = c;
    w->buf = uv_buf_init(data, (unsigned)len);
    int rc = uv_write(&w->req, (uv_stream_t *)&c->pipe, &w->buf, 1, on_write);
    if (rc < 0) {
        free(data);
        free(w);
        char why[128];
        snprintf(why, sizeof(why), "write failed: %s", uv_strerror(rc));
        kd_conn_close(c, why);
        return -EPIPE;
    }
    c->queued += len;
    d->buffered += len;
    if (!c->blocked && c->queued > KD_QUEUED_HIGH) {
        c->blocked = true;
        ready_remove(c);
        update_reading(c);
    }
    return 0;
}

/* ---- reading ---- */

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    kd_conn *c = h->data;
    if (c->rx_off > 0 && c->rx_off == c->rx_len)
        c->rx_off = c->rx_len = 0;
    if (c->rx_cap - c->rx_len < READ_CHUNK) {
        /* compact, then grow; the cap check in process() bounds the size */
        if (c->rx_off > 0) {
            memmove(c->rx, c->rx + c->rx_off, c->rx_len - c->rx_off);
            c->rx_len -= c->rx_off;
            c->rx_off = 0;
        }
        size_t cap = c->rx_cap ? c->rx_cap : READ_CHUNK;
        while (cap - c->rx_len < READ_CHUNK)
            cap *= 2;
        if (cap > RX_MAX && c->rx_len + READ_CHUNK <= RX_MAX)
            cap = RX_MAX; /* doubling would reserve 8 MiB for the largest request */
        kd_daemon *d = c->d;
        /* the first chunk is always granted (a small request is never refused); growth
         * beyond it only within max-buffered */
        if (cap > READ_CHUNK && d->buffered + (cap - c->rx_cap) > d->cfg->max_buffered) {
            c->starved = true;
            *buf = uv_buf_init(NULL, 0); /* on_read gets UV_ENOBUFS */
            return;
        }
        uint8_t *rx = cap == c->rx_cap ? c->rx : realloc(c->rx, cap);
        if (!rx) {
            *buf = uv_buf_init(NULL, 0); /* libuv reports UV_ENOBUFS to on_read */
            return;
        }
        d->buffered += cap - c->rx_cap;
        c->rx = rx;
        c->rx_cap = cap;
    }
    *buf = uv_buf_init((char *)c->rx + c->rx_len, (unsigned)(c->rx_cap - c->rx_len));
}

/* A message too large: the E2BIG reply when its id can be read, then the connection closes. */
static void too_large(kd_conn *c, const uint8_t *msg, size_t len, bool complete)
{
    uint64_t id = 0;
    if (kd_frame_peek_id(msg, len, &id)) {
        char msgtext[128];
        snprintf(msgtext, sizeof(msgtext), "request larger than %u bytes", KD_MAX_REQUEST);
        msgpack_sbuffer sb;
        msgpack_sbuffer_init(&sb);
        kd_pack_error_reply(&sb, id, "E2BIG", msgtext);
        kd_conn_send(c, &sb);
        msgpack_sbuffer_destroy(&sb);
    }
    char why[160];
    snprintf(why, sizeof(why), "%s larger than %u bytes",
             complete ? "request" : "incomplete request", KD_MAX_REQUEST);
    close_after_flush(c, why);
}

/* The request being received needs more buffer than max-buffered leaves: the ENOBUFS reply when
 * its id can be read, then the connection closes (the rest of the request is never read, so
 * the stream cannot be resynchronised; docs/protocol.md, "Framing"). */
static void short_of_memory(kd_conn *c)
{
    kd_daemon *d = c->d;
    const uint8_t *msg = c->rx + c->rx_off;
    size_t avail = c->rx_len - c->rx_off;
    uint64_t id = 0;
    char text[200];
    snprintf(text, sizeof(text),
             "ktuned is short of memory for requests: %zu bytes are buffered across "
             "connections (max-buffered %zu); retry later",
             d->buffered, d->cfg->max_buffered);
    if (kd_frame_peek_id(msg, avail, &id)) {
        msgpack_sbuffer sb;
        msgpack_sbuffer_init(&sb);
        kd_pack_error_reply(&sb, id, "ENOBUFS", text);
        kd_conn_send(c, &sb);
        msgpack_sbuffer_destroy(&sb);
    }
    char why[200];
    snprintf(why, sizeof(why),
             "a request past %zu bytes refused: %zu bytes buffered across connections "
             "(max-buffered %zu)",
             avail, d->buffered, d->cfg->max_buffered);
    close_after_flush(c, why);
}

typedef enum turn_end {
    TURN_DRAINED, /* no complete request left in rx: read more */
    TURN_BUDGET,  /* KD_BURST requests handled, or KD_TURN_NS spent; more may wait */
    TURN_STOPPED, /* blocked on its replies, or closing */
} turn_end;

/* Scans and handles up to budget complete requests buffered, for KD_TURN_NS at most once one is
 * handled (a graph's lookup costs what its size does: the count alone would let a few large ones
 * hold the loop). */
static turn_end process(kd_conn *c, int budget)
{
    uint64_t t0 = uv_hrtime();
    for (int handled = 0;; handled++) {
        if (c->closing || c->blocked || c->busy)
            return TURN_STOPPED;
        if (c->rx_off >= c->rx_len)
            return TURN_DRAINED;
        if (handled == budget || (handled > 0 && uv_hrtime() - t0 >= KD_TURN_NS))
            return TURN_BUDGET;
        const uint8_t *msg = c->rx + c->rx_off;
        size_t avail = c->rx_len - c->rx_off;
        if (c->scan.pos == 0 && !kd_frame_is_map(msg[0])) {
            kd_conn_close(c, "framing error: a message is not a msgpack map");
            return TURN_STOPPED;
        }
        kd_scan_rc rc = kd_scan_step(&c->scan, msg, avail);
        if (rc == KD_SCAN_BAD) {
            kd_conn_close(c, "framing error: bytes that are not msgpack");
            return TURN_STOPPED;
        }
        if (rc == KD_SCAN_DEEP) {
            char why[96];
            snprintf(why, sizeof(why), "framing error: nesting deeper than %d", KD_MAX_DEPTH);
            kd_conn_close(c, why);
            return TURN_STOPPED;
        }
        if (rc == KD_SCAN_MORE) {
            if (avail > KD_MAX_BUFFERED) {
                too_large(c, msg, avail, false);
                return TURN_STOPPED;
            }
            return TURN_DRAINED;
        }
        size_t size = c->scan.pos;
        if (size > KD_MAX_REQUEST) {
            too_large(c, msg, size, true);
            return TURN_STOPPED;
        }
        if (kd_prep_offload(c, msg, size)) { /* handled off the loop: c is busy until then */
            c->rx_off += size;
            kd_scan_reset(&c->scan);
            continue;
        }
        msgpack_unpacked up;
        msgpack_unpacked_init(&up);
        size_t off = 0;
        msgpack_unpack_return ur = msgpack_unpack_next(&up, (const char *)msg, size, &off);
        if (ur == MSGPACK_UNPACK_SUCCESS && off == size) {
            kd_dispatch(c, &up.data, msg, size, NULL);
        } else {
            kd_conn_close(c, ur == MSGPACK_UNPACK_NOMEM_ERROR ? "out of memory decoding a request"
                                                              : "framing error: undecodable "
                                                                "message");
        }
        msgpack_unpacked_destroy(&up);
        c->rx_off += size;
        kd_scan_reset(&c->scan);
    }
}

/* An empty request buffer is given back: an idle connection holds no buffer. */
static void rx_release(kd_conn *c)
{
    if (c->rx_off < c->rx_len || !c->rx)
        return;
    c->d->buffered -= c->rx_cap;
    free(c->rx);
    c->rx = NULL;
    c->rx_off = c->rx_len = c->rx_cap = 0;
}

/* One turn of c: a burst of its requests, then what it waits for next. */
static void take_turn(kd_conn *c)
{
    turn_end end = process(c, KD_BURST);
    if (end == TURN_DRAINED)
        rx_release(c);
    switch (end) {
    case TURN_BUDGET:
        ready_add(c);
        break;
    case TURN_DRAINED:
    case TURN_STOPPED:
        ready_remove(c);
        break;
    }
    update_reading(c);
}

/* The idle handle: one turn for each connection that was waiting when this pass began (those
 * that get back in line wait for the next pass, after a poll for everyone's I/O). */
static void on_pump(uv_idle_t *idle)
{
    kd_daemon *d = idle->data;
    kd_conn *last = d->ready_tail;
    for (kd_conn *c = d->ready_head; c;) {
        kd_conn *next = c->ready_next;
        bool was_last = c == last;
        ready_remove(c);
        take_turn(c);
        if (was_last)
            break;
        c = next;
    }
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
    kd_conn *c = s->data;
    if (n == 0 || c->closing)
        return;
    if (n == UV_ENOBUFS && c->starved) {
        short_of_memory(c);
        return;
    }
    if (n < 0) {
        if (n == UV_EOF) {
            kd_conn_close(c, c->rx_len > c->rx_off ? "client closed mid-message" : NULL);
        } else {
            char why[128];
            snprintf(why, sizeof(why), "read failed: %s", uv_strerror((int)n));
            kd_conn_close(c, why);
        }
        return;
    }
    c->rx_len += (size_t)n;
    c->active_ms = uv_now(&c->d->loop);
    take_turn(c);
}

/* Why a connection from uid may not be admitted now (a line for its refusal), or NULL. */
static const char *admission(const kd_daemon *d, uid_t uid, char *buf, size_t len)
{
    const kd_config *cfg = d->cfg;
    if (d->n_conns >= cfg->max_clients) {
        snprintf(buf, len, "too many connections (%d, the max-clients limit)", d->n_conns);
        return buf;
    }
    if (uid == 0)
        return NULL; /* root: the reserved connections, and no per-user limit */
    if (d->n_conns >= cfg->max_clients - cfg->root_reserved) {
        snprintf(buf, len,
                 "too many connections (%d; the last %d of max-clients %d are kept for root)",
                 d->n_conns, cfg->root_reserved, cfg->max_clients);
        return buf;
    }
    int held = 0;
    for (const kd_conn *c = d->conns; c; c = c->next)
        held += c->uid == uid && !c->closing;
    if (held >= cfg->max_clients_per_uid) {
        snprintf(buf, len, "too many connections (uid %u holds %d, the max-clients-per-uid limit)",
                 (unsigned)uid, held);
        return buf;
    }
    return NULL;
}

/* Tells a refused client why before closing: an unsolicited error with id 0, which a client
 * reads where it expects its hello reply (docs/protocol.md, "Connections"). The socket is
 * fresh, so the short message fits its buffer; if not, the close alone says it. */
static void send_refusal(uv_pipe_t *pipe, const char *code, const char *text)
{
    uv_os_fd_t fd = -1;
    if (uv_fileno((uv_handle_t *)pipe, &fd) < 0)
        return;
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    kd_pack_error_reply(&sb, 0, code, text);
    if (sb.data)
        (void)!send(fd, sb.data, sb.size, MSG_DONTWAIT | MSG_NOSIGNAL);
    msgpack_sbuffer_destroy(&sb);
}

void kd_server_tick(kd_daemon *d)
{
    if (d->cfg->idle_timeout_s <= 0)
        return;
    uint64_t now = uv_now(&d->loop), limit = (uint64_t)(d->cfg->idle_timeout_s * 1e3);
    for (kd_conn *c = d->conns; c; c = c->next) {
        /* idle: no request partly or wholly received, no reply queued, no watch */
        if (c->closing || c->ready || c->blocked || c->busy || c->queued || c->n_watches ||
            c->rx_off < c->rx_len || now - c->active_ms < limit)
            continue;
        char why[96];
        snprintf(why, sizeof(why), "idle for %.1f s (idle-timeout)",
                 (double)(now - c->active_ms) * 1e-3);
        kd_conn_close(c, why);
    }
}

static void on_connection(uv_stream_t *server, int status)
{
    kd_daemon *d = server->data;
    if (status < 0) {
        kt_log_warn(KD_LOG_SERVER, "accept: %s", uv_strerror(status));
        return;
    }
    kd_conn *c = calloc(1, sizeof(*c));
    if (!c) {
        kt_log_err(KD_LOG_SERVER, "out of memory accepting a connection");
        return;
    }
    c->d = d;
    c->pipe.data = c;
    c->uid = (uid_t)-1; /* unknown: no root privileges */
    uv_pipe_init(&d->loop, &c->pipe, 0);
    int rc = uv_accept(server, (uv_stream_t *)&c->pipe);
    if (rc < 0) {
        kt_log_warn(KD_LOG_SERVER, "accept: %s", uv_strerror(rc));
        uv_close((uv_handle_t *)&c->pipe, on_close_rejected);
        return;
    }
    uv_os_fd_t fd = -1;
    struct ucred cred = {0};
    socklen_t len = sizeof(cred);
    if (uv_fileno((uv_handle_t *)&c->pipe, &fd) == 0 &&
        getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0) {
        c->pid = cred.pid;
        c->uid = cred.uid;
        c->gid = cred.gid;
        c->admin = is_admin(d, fd, &cred);
    }
    char text[160];
    const char *code = "EUSERS", *refused = NULL;
    if (d->stopping) {
        code = "ESHUTDOWN";
        refused = "ktuned is shutting down";
    } else {
        refused = admission(d, c->uid, text, sizeof(text));
    }
    if (refused) {
        send_refusal(&c->pipe, code, refused);
        if (d->rejected++ % 1000 == 0) /* at most one line per 1000 refusals */
            kt_log_warn(KD_LOG_SERVER,
                        "refusing a connection from uid %u pid %d: %s; %llu refused so far",
                        (unsigned)c->uid, (int)c->pid, refused, (unsigned long long)d->rejected);
        uv_close((uv_handle_t *)&c->pipe, on_close_rejected);
        return;
    }
    c->serial = ++d->conn_serial;
    c->active_ms = uv_now(&d->loop);
    c->next = d->conns;
    if (d->conns)
        d->conns->prev = c;
    d->conns = c;
    d->n_conns++;
    kt_log_info(KD_LOG_SERVER, "connection %llu from pid %d uid %u gid %u%s",
                (unsigned long long)c->serial, (int)c->pid, (unsigned)c->uid, (unsigned)c->gid,
                c->admin ? " (admin)" : "");
    update_reading(c);
}
