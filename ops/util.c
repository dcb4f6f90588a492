#include "util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    fprintf(stderr, "<2>ktune: internal invariant broken: %s (%s:%d)\n", expr, file, line);
    abort();
}

void kt_log(int level, const char *tag, const char *fmt, ...)
{
    if (level > kt_log_threshold)
        return;
    static const char *names[] = {[KT_LOG_ERR] = "error",
                                  [KT_LOG_WARN] = "warning",
                                  [KT_LOG_INFO] = "info",
                                  [KT_LOG_DEBUG] = "debug"};
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    /* One fprintf per line so concurrent processes sharing stderr do not interleave mid-line. */
    fprintf(stderr, "<%d>%s [%s] %s\n", level, names[level] ? names[level] : "log", tag, line);
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

int kt_read_file(const char *path, char **out, size_t *len, kt_err *err)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return kt_err_set(err, -errno, "%s: cannot open: %s", path, strerror(errno));
    char *buf = NULL;
    size_t cap = 0, n = 0;
    for (;;) {
        if (kt_grow(&buf, &cap, n + 4097, 1) < 0) {
            free(buf);
            fclose(f);
            return kt_err_set(err, -ENOMEM, "%s: out of memory reading file", path);
        }
        size_t got = fread(buf + n, 1, cap - n - 1, f);
        n += got;
        if (got == 0)
            break;
    }
    int rc = ferror(f) ? -EIO : 0;
    fclose(f);
    if (rc < 0) {
        free(buf);
        return kt_err_set(err, rc, "%s: read error", path);
    }
    buf[n] = '\0';
    *out = buf;
    if (len)
        *len = n;
    return 0;
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
    char *end = NULL;
    double v = strtod(s, &end);
    if (end == s || !(v > 0) || !isfinite(v))
        return -1;
    if (*end == '\0' || strcmp(end, "s") == 0)
        return v;
    if (strcmp(end, "m") == 0 || strcmp(end, "min") == 0)
        return v * 60;
    if (strcmp(end, "h") == 0)
        return v * 3600;
    return -1;
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

static bool ident_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

void kt_buf_replace_ident(kt_buf *b, const char *src, size_t len, const char *word,
                          const char *with)
{
    size_t wl = strlen(word);
    size_t i = 0, from = 0; /* copied up to i; searching from `from` */
    while (i < len) {
        const char *hit = wl ? strstr(src + from, word) : NULL;
        if (!hit || (size_t)(hit - src) + wl > len) {
            kt_buf_printf(b, "%.*s", (int)(len - i), src + i);
            break;
        }
        size_t at = (size_t)(hit - src);
        if ((at > 0 && ident_char(src[at - 1])) || (at + wl < len && ident_char(src[at + wl]))) {
            from = at + 1; /* inside a longer identifier */
            continue;
        }
        kt_buf_printf(b, "%.*s%s", (int)(at - i), src + i, with);
        i = from = at + wl;
    }
}

void kt_buf_free(kt_buf *b)
{
    free(b->data);
    *b = (kt_buf){0};
}
