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
    /* A caller's stray newline or ESC must not start a line of its own (journald would read
     * "<0>..." as an emergency) nor drive a terminal: the last guard, callers escape their
     * untrusted parts with KT_ESC. */
    char safe[sizeof(line)];
    const char *text = line;
    if (!kt_text_clean(line, strlen(line)))
        text = kt_escape(safe, sizeof(safe), line, strlen(line), KT_ESC_KEEP_BACKSLASH);
    /* One fprintf per line so concurrent processes sharing stderr do not interleave mid-line. */
    fprintf(stderr, "<%d>%s [%s] %s\n", level, names[level] ? names[level] : "log", tag, text);
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

void kt_buf_free(kt_buf *b)
{
    free(b->data);
    *b = (kt_buf){0};
}
