#include "util.h"

#include "ktune_config.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int kt_log_threshold = KT_LOG_INFO;

int kt_err_set(kt_err *err, int code, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        err->code = code;
        vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
        va_end(ap);
    }
    return code;
}

void kt_require_failed(const char *expr, const char *file, int line)
{
    kt_log(KT_LOG_CRIT, "ktune", "internal invariant broken: %s (%s:%d)", expr, file, line);
    abort();
}

/* Whether stderr is the journal: systemd names the stream it gives a service in JOURNAL_STREAM
 * ("device:inode"), and a child that inherits both writes there too. */
static bool stderr_is_journal(void)
{
    const char *js = getenv("JOURNAL_STREAM");
    unsigned long long dev = 0, ino = 0;
    struct stat st;
    return js && sscanf(js, "%llu:%llu", &dev, &ino) == 2 && fstat(STDERR_FILENO, &st) == 0 &&
           (unsigned long long)st.st_dev == dev && (unsigned long long)st.st_ino == ino;
}

void kt_log(int level, const char *tag, const char *fmt, ...)
{
    if (level > kt_log_threshold)
        return;
    static const char *names[] = {[KT_LOG_CRIT] = "critical",
                                  [KT_LOG_ERR] = "error",
                                  [KT_LOG_WARN] = "warning",
                                  [KT_LOG_INFO] = "info",
                                  [KT_LOG_DEBUG] = "debug"};
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    /* A caller's stray newline or ESC must not start a line of its own (journald would read
     * "<0>..." as an emergency) nor drive a terminal: the last guard, callers escape their
     * untrusted parts with KT_ESC. */
    char safe[sizeof(line)];
    const char *text = line;
    if (!kt_text_clean(line, strlen(line)))
        text = kt_escape(safe, sizeof(safe), line, strlen(line), KT_ESC_KEEP_BACKSLASH);
    /* One fprintf per line so concurrent processes sharing stderr do not interleave mid-line.
     * journald reads the "<N>" prefix as the priority and stamps the time itself; anywhere
     * else (a terminal, a file, a pipe) the line starts with its UTC time instead. */
    const char *name = names[level] ? names[level] : "log";
    if (stderr_is_journal()) {
        fprintf(stderr, "<%d>%s [%s] %s\n", level, name, tag, text);
        return;
    }
    struct timespec ts;
    struct tm tm;
    char when[32] = "";
    clock_gettime(CLOCK_REALTIME, &ts);
    if (gmtime_r(&ts.tv_sec, &tm))
        strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%S", &tm);
    fprintf(stderr, "%s.%03ldZ %s [%s] %s\n", when, ts.tv_nsec / 1000000, name, tag, text);
}

/* The length of the well-formed UTF-8 sequence at s (n > 0 bytes available) and its code point,
 * or 0: a stray continuation byte, C0/C1/F5..FF, an overlong form, a surrogate, a code point
 * past U+10FFFF, or a sequence cut short (the Unicode standard, table 3-7). */
static size_t utf8_seq(const unsigned char *s, size_t n, uint32_t *cp)
{
    unsigned char c = s[0], lo = 0x80, hi = 0xbf;
    size_t len;
    uint32_t v;
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    if (c >= 0xc2 && c <= 0xdf) {
        len = 2, v = c & 0x1f;
    } else if (c >= 0xe0 && c <= 0xef) {
        len = 3, v = c & 0x0f;
        lo = c == 0xe0 ? 0xa0 : 0x80; /* E0 80..9F would be overlong */
        hi = c == 0xed ? 0x9f : 0xbf; /* ED A0..BF are the surrogates */
    } else if (c >= 0xf0 && c <= 0xf4) {
        len = 4, v = c & 0x07;
        lo = c == 0xf0 ? 0x90 : 0x80; /* F0 80..8F would be overlong */
        hi = c == 0xf4 ? 0x8f : 0xbf; /* F4 90.. is past U+10FFFF */
    } else {
        return 0;
    }
    if (n < len)
        return 0;
    for (size_t i = 1; i < len; i++) {
        unsigned char b = s[i];
        if (b < (i == 1 ? lo : 0x80) || b > (i == 1 ? hi : 0xbf))
            return 0;
        v = v << 6 | (b & 0x3f);
    }
    *cp = v;
    return len;
}

static bool is_control(uint32_t cp)
{
    return cp < 0x20 || (cp >= 0x7f && cp <= 0x9f);
}

int kt_name_check(const char *s, size_t len, size_t max, kt_err *err)
{
    if (len == 0)
        return kt_err_set(err, -EINVAL, "is empty");
    if (len > max)
        return kt_err_set(err, -EINVAL, "is %zu bytes; at most %zu are allowed", len, max);
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < len;) {
        uint32_t cp = 0;
        size_t n = utf8_seq(u + i, len - i, &cp);
        if (n == 0)
            return kt_err_set(err, -EINVAL, "is not valid UTF-8 (byte %zu)", i);
        if (is_control(cp))
            return kt_err_set(err, -EINVAL, "has the control character U+%04X (byte %zu)",
                              (unsigned)cp, i);
        i += n;
    }
    return 0;
}

bool kt_text_clean(const char *s, size_t len)
{
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < len;) {
        uint32_t cp = 0;
        size_t n = utf8_seq(u + i, len - i, &cp);
        if (n == 0 || is_control(cp))
            return false;
        i += n;
    }
    return true;
}

/* How one unit (a character, or a byte that is not part of one) is written: as is, or each of its
 * bytes as \xNN. Sets *unit to its length in s. */
static bool esc_raw(const unsigned char *s, size_t n, unsigned flags, size_t *unit)
{
    uint32_t cp = 0;
    size_t len = utf8_seq(s, n, &cp);
    *unit = len ? len : 1;
    return len > 0 && !is_control(cp) && !(cp == '\\' && !(flags & KT_ESC_KEEP_BACKSLASH));
}

char *kt_escape(char *out, size_t cap, const char *s, size_t len, unsigned flags)
{
    static const char digits[] = "0123456789abcdef";
    KT_REQUIRE(out && cap >= 8);
    const unsigned char *u = (const unsigned char *)s;
    size_t total = 0, unit;
    for (size_t i = 0; i < len; i += unit)
        total += esc_raw(u + i, len - i, flags, &unit) ? unit : 4 * unit;
    /* too long: cut between units, leaving room for "..." */
    bool cut = total >= cap;
    size_t limit = cut ? cap - 4 : cap - 1, o = 0;
    for (size_t i = 0; i < len; i += unit) {
        bool raw = esc_raw(u + i, len - i, flags, &unit);
        if (o + (raw ? unit : 4 * unit) > limit)
            break;
        for (size_t k = 0; k < unit; k++) {
            if (raw) {
                out[o++] = (char)u[i + k];
            } else {
                out[o++] = '\\';
                out[o++] = 'x';
                out[o++] = digits[u[i + k] >> 4];
                out[o++] = digits[u[i + k] & 15];
            }
        }
    }
    if (cut) {
        memcpy(out + o, "...", 3);
        o += 3;
    }
    out[o] = '\0';
    return out;
}

char *kt_escape_str(char *out, size_t cap, const char *s)
{
    return kt_escape(out, cap, s, s ? strlen(s) : 0, 0);
}

int kt_grow(void *items, size_t *cap, size_t need, size_t elem_size)
{
    void **p = items;
    if (need <= *cap)
        return 0;
    size_t ncap = *cap ? *cap : 8;
    while (ncap < need)
        ncap *= 2;
    void *n = realloc(*p, ncap * elem_size);
    if (!n)
        return -ENOMEM;
    memset((char *)n + *cap * elem_size, 0, (ncap - *cap) * elem_size);
    *p = n;
    *cap = ncap;
    return 0;
}

char *kt_strdup(const char *s)
{
    return s ? strdup(s) : NULL;
}

static bool is_executable(const char *path)
{
    return path && path[0] && access(path, X_OK) == 0;
}

/* The directory of path (a file's path) into dir; false when it has none. */
static bool dir_of(const char *path, char *dir, size_t cap)
{
    const char *slash = strrchr(path, '/');
    if (!slash || (size_t)(slash - path) >= cap)
        return false;
    memcpy(dir, path, (size_t)(slash - path));
    dir[slash - path] = '\0';
    return true;
}

int kt_find_exe(const char *given, const char *env_var, const char *name, char **out, kt_err *err)
{
    if (given) {
        if (!is_executable(given))
            return kt_err_set(err, -ENOENT, "%s: %s is not an executable file", name, given);
        return (*out = kt_strdup(given)) ? 0 : kt_err_set(err, -ENOMEM, "out of memory");
    }
    const char *env = getenv(env_var);
    if (env && env[0]) {
        if (!is_executable(env))
            return kt_err_set(err, -ENOENT, "$%s=%s is not an executable file", env_var, env);
        return (*out = kt_strdup(env)) ? 0 : kt_err_set(err, -ENOMEM, "out of memory");
    }
    /* where to look from: the running program, and the file holding this code when that is a
     * shared library another program loaded */
    char bases[2][PATH_MAX];
    int n_bases = 0;
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n > 0) {
        self[n] = '\0';
        if (dir_of(self, bases[n_bases], sizeof(bases[0])))
            n_bases++;
    }
    Dl_info info;
    char lib[PATH_MAX];
    if (dladdr((void *)kt_find_exe, &info) && info.dli_fname && realpath(info.dli_fname, lib) &&
        dir_of(lib, bases[n_bases], sizeof(bases[0])) &&
        (n_bases == 0 || strcmp(bases[0], bases[n_bases]) != 0))
        n_bases++;
    static const char *const rel[] = {"/", "/../search/", "/../cache/", "/../libexec/", "/../bin/"};
    char path[PATH_MAX + 64];
    for (int b = 0; b < n_bases; b++)
        for (size_t i = 0; i < KT_ARRAY_LEN(rel); i++) {
            if (snprintf(path, sizeof(path), "%s%s%s", bases[b], rel[i], name) >= (int)sizeof(path))
                continue;
            if (is_executable(path))
                return (*out = kt_strdup(path)) ? 0 : kt_err_set(err, -ENOMEM, "out of memory");
        }
    if (snprintf(path, sizeof(path), "%s/%s", KTUNE_LIBEXECDIR, name) < (int)sizeof(path) &&
        is_executable(path))
        return (*out = kt_strdup(path)) ? 0 : kt_err_set(err, -ENOMEM, "out of memory");
    return kt_err_set(
        err, -ENOENT,
        "cannot find %s next to %s (nor in ../search, ../cache, ../libexec, ../bin, %s); "
        "set $%s",
        name, n_bases ? bases[0] : "this program", KTUNE_LIBEXECDIR, env_var);
}

int kt_read_file(const char *path, size_t max, char **out, size_t *len, kt_err *err)
{
    *out = NULL;
    if (max >= SIZE_MAX - 1)
        max = SIZE_MAX - 2; /* room for the extra byte and the NUL */
    /* O_NONBLOCK: opening a FIFO must not wait for a writer before fstat can refuse it (it
     * changes nothing for the regular file read below). */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return kt_err_set(err, -errno, "cannot open: %s", strerror(errno));
    struct stat st;
    int rc = 0;
    if (fstat(fd, &st) < 0) {
        rc = kt_err_set(err, -errno, "cannot stat: %s", strerror(errno));
        goto out;
    }
    if (!S_ISREG(st.st_mode)) {
        rc = kt_err_set(err, S_ISDIR(st.st_mode) ? -EISDIR : -EINVAL, "is %s, not a regular file",
                        kt_file_kind(st.st_mode));
        goto out;
    }
    if ((uintmax_t)st.st_size > max) {
        rc = kt_err_set(err, -EFBIG, "is %jd bytes; at most %zu are accepted", (intmax_t)st.st_size,
                        max);
        goto out;
    }
    /* The size is a hint (the file may grow): read at most max + 1 bytes, so going over the
     * limit is seen without reading on. */
    size_t cap = (size_t)st.st_size + 2, n = 0;
    char *buf = malloc(cap);
    if (!buf) {
        rc = kt_err_set(err, -ENOMEM, "out of memory reading %jd bytes", (intmax_t)st.st_size);
        goto out;
    }
    for (;;) {
        if (n + 1 == cap) { /* full, and n <= max: grow, to at most max + 1 bytes and the NUL */
            size_t ncap = cap - 1 > max / 2 ? max + 2 : 2 * cap;
            char *nb = realloc(buf, ncap);
            if (!nb) {
                free(buf);
                rc = kt_err_set(err, -ENOMEM, "out of memory reading the file");
                goto out;
            }
            buf = nb;
            cap = ncap;
        }
        ssize_t got = read(fd, buf + n, cap - 1 - n);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0) {
            rc = kt_err_set(err, -errno, "read error: %s", strerror(errno));
            free(buf);
            goto out;
        }
        if (got == 0)
            break;
        n += (size_t)got;
        if (n > max) {
            free(buf);
            rc = kt_err_set(err, -EFBIG, "is over %zu bytes", max);
            goto out;
        }
    }
    buf[n] = '\0';
    *out = buf;
    if (len)
        *len = n;
out:
    close(fd);
    return rc;
}

const char *kt_file_kind(unsigned mode)
{
    switch (mode & S_IFMT) {
    case S_IFREG:
        return "a regular file";
    case S_IFDIR:
        return "a directory";
    case S_IFIFO:
        return "a FIFO";
    case S_IFCHR:
    case S_IFBLK:
        return "a device";
    case S_IFLNK:
        return "a symbolic link";
    case S_IFSOCK:
        return "a socket";
    default:
        return "not a regular file";
    }
}

int kt_write_all(int fd, const void *data, size_t len)
{
    const char *p = data;
    while (len) {
        ssize_t w = write(fd, p, len);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return -errno;
        p += w;
        len -= (size_t)w;
    }
    return 0;
}

int kt_atomic_begin(kt_atomic_file *f, const char *path, unsigned mode, kt_err *err)
{
    f->fd = -1;
    f->path[0] = f->tmp[0] = '\0';
    if (!path || !path[0])
        return kt_err_set(err, -EINVAL, "no file name given");
    if (snprintf(f->path, sizeof(f->path), "%s", path) >= (int)sizeof(f->path))
        return kt_err_set(err, -ENAMETOOLONG, "%.200s...: path too long", path);
    /* Only a regular file or nothing is replaced. Between this lstat and the rename something
     * else may appear at path; that is acceptable, since rename replaces the directory entry
     * itself: a symbolic link put there is replaced, never the file it points to, and no FIFO
     * or device is ever opened. */
    struct stat st;
    if (lstat(path, &st) == 0) {
        if (!S_ISREG(st.st_mode))
            return kt_err_set(err, S_ISDIR(st.st_mode) ? -EISDIR : -EEXIST,
                              "%s: is %s; only a regular file is replaced", path,
                              kt_file_kind(st.st_mode));
    } else if (errno != ENOENT) {
        return kt_err_set(err, -errno, "%s: %s", path, strerror(errno));
    }
    /* The temporary file's name: the target's directory, a dot, the start of its base name,
     * and a number unique to this process and call; O_EXCL never reuses anyone's file. */
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    int dirlen = slash ? (int)(slash - path) + 1 : 0;
    static unsigned counter;
    for (int tries = 0;; tries++) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        unsigned nonce =
            (unsigned)ts.tv_nsec ^ (__atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED) << 20);
        if (snprintf(f->tmp, sizeof(f->tmp), "%.*s.%.64s.%ld.%08x.tmp", dirlen, path, base,
                     (long)getpid(), nonce) >= (int)sizeof(f->tmp))
            return kt_err_set(err, -ENAMETOOLONG, "%s: path too long", path);
        f->fd = open(f->tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, (mode_t)mode);
        if (f->fd >= 0)
            return 0;
        if (errno != EEXIST || tries == 100)
            break;
    }
    int rc = kt_err_set(err, -errno, "%s: cannot create a temporary file beside it: %s", path,
                        strerror(errno));
    f->tmp[0] = '\0';
    return rc;
}

static int atomic_commit(kt_atomic_file *f, bool replace, kt_err *err)
{
    KT_REQUIRE(f->fd >= 0);
    int rc = fsync(f->fd) < 0 ? -errno : 0;
    if (close(f->fd) < 0 && rc == 0)
        rc = -errno;
    f->fd = -1;
    if (rc == 0 && replace && rename(f->tmp, f->path) < 0)
        rc = -errno;
    if (rc == 0 && !replace && link(f->tmp, f->path) < 0)
        rc = -errno;
    if (!replace || rc < 0)
        unlink(f->tmp);
    if (rc == -EEXIST && !replace)
        return kt_err_set(err, rc, "%s: made by another process meanwhile", f->path);
    if (rc < 0)
        return kt_err_set(err, rc, "%s: cannot write: %s", f->path, strerror(-rc));
    /* The rename is durable once the directory is. */
    const char *slash = strrchr(f->path, '/');
    char dir[4096];
    snprintf(dir, sizeof(dir), "%.*s", slash ? (int)(slash - f->path) + (slash == f->path) : 1,
             slash ? f->path : ".");
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    /* EINVAL: a file system that cannot sync a directory (some FUSE ones); nothing to do. */
    if (dfd < 0 || (fsync(dfd) < 0 && errno != EINVAL))
        rc = kt_err_set(err, -errno, "%s: written, but its directory cannot be synced: %s", f->path,
                        strerror(errno));
    if (dfd >= 0)
        close(dfd);
    return rc;
}

int kt_atomic_commit(kt_atomic_file *f, kt_err *err)
{
    return atomic_commit(f, true, err);
}

int kt_atomic_commit_new(kt_atomic_file *f, kt_err *err)
{
    return atomic_commit(f, false, err);
}

void kt_atomic_abort(kt_atomic_file *f)
{
    if (f->fd >= 0)
        close(f->fd);
    f->fd = -1;
    if (f->tmp[0])
        unlink(f->tmp);
    f->tmp[0] = '\0';
}

int kt_write_file(const char *path, const void *data, size_t len, unsigned mode, kt_err *err)
{
    kt_atomic_file f;
    int rc = kt_atomic_begin(&f, path, mode, err);
    if (rc < 0)
        return rc;
    if ((rc = kt_write_all(f.fd, data, len)) < 0) {
        kt_atomic_abort(&f);
        return kt_err_set(err, rc, "%s: cannot write: %s", path, strerror(-rc));
    }
    return kt_atomic_commit(&f, err);
}

void kt_hex(const uint8_t *bytes, size_t n, char *out)
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[bytes[i] >> 4];
        out[2 * i + 1] = digits[bytes[i] & 15];
    }
    out[2 * n] = '\0';
}

double kt_parse_duration(const char *s)
{
    if (!s)
        return -1;
    /* Decimal only: strtod alone would also take a sign, "0x10", "inf", "nan" and "1e3". */
    size_t n = strspn(s, "0123456789");
    if (s[n] == '.')
        n += 1 + strspn(s + n + 1, "0123456789");
    if (n == 0 || (n == 1 && s[0] == '.'))
        return -1;
    double v = strtod(s, NULL), unit = -1;
    const char *end = s + n;
    if (*end == '\0' || strcmp(end, "s") == 0)
        unit = 1;
    else if (strcmp(end, "m") == 0 || strcmp(end, "min") == 0)
        unit = 60;
    else if (strcmp(end, "h") == 0)
        unit = 3600;
    v *= unit;
    return unit > 0 && isfinite(v) && v >= KT_DURATION_MIN_S ? v : -1;
}

static void buf_vappend(kt_buf *b, const char *fmt, va_list ap)
{
    if (b->oom)
        return;
    va_list ap2;
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap2);
    va_end(ap2);
    if (n < 0 || kt_grow(&b->data, &b->cap, b->len + (size_t)n + 1, 1) < 0) {
        b->oom = true;
        return;
    }
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    b->len += (size_t)n;
}

void kt_buf_printf(kt_buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    buf_vappend(b, fmt, ap);
    va_end(ap);
}

void kt_buf_line(kt_buf *b, const char *fmt, ...)
{
    kt_buf_printf(b, "%*s", b->indent, "");
    va_list ap;
    va_start(ap, fmt);
    buf_vappend(b, fmt, ap);
    va_end(ap);
    kt_buf_printf(b, "\n");
}

int kt_buf_status(const kt_buf *b)
{
    return b->oom ? -ENOMEM : 0;
}

char *kt_buf_take(kt_buf *b)
{
    char *s = b->oom ? NULL : b->data;
    if (b->oom)
        free(b->data);
    *b = (kt_buf){0};
    return s;
}

void kt_buf_free(kt_buf *b)
{
    free(b->data);
    *b = (kt_buf){0};
}

int64_t kt_wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}
