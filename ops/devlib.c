/* The device library's embedded headers: lookup, and inlining them into a source. */
#include "devlib.h"
#include "devlib_data.h" /* generated: the arrays, sized */
#include "ops.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

const int ops_devlib_count = OPS_DEVLIB_COUNT;

const char *ops_devlib_find(const char *name)
{
    for (int i = 0; i < ops_devlib_count; i++)
        if (strcmp(ops_devlib_names[i], name) == 0)
            return ops_devlib_data[i];
    return NULL;
}

void ops_devlib_digest(uint8_t out[32])
{
    /* chained: acc = sha256(acc | sha256(name) | sha256(text)) per header, no allocation */
    uint8_t acc[32] = {0}, h[96];
    for (int i = 0; i < ops_devlib_count; i++) {
        memcpy(h, acc, 32);
        ops_sha256(ops_devlib_names[i], strlen(ops_devlib_names[i]), h + 32);
        ops_sha256(ops_devlib_data[i], strlen(ops_devlib_data[i]), h + 64);
        ops_sha256(h, sizeof(h), acc);
    }
    memcpy(out, acc, 32);
}

/* The header name of a line `#include "ktune/..."` (spaces allowed around '#'), copied into
 * name; false for any other line. */
static bool include_line(const char *line, size_t len, char *name, size_t cap)
{
    const char *p = line, *end = line + len;
    while (p < end && (*p == ' ' || *p == '\t'))
        p++;
    if (p == end || *p++ != '#')
        return false;
    while (p < end && (*p == ' ' || *p == '\t'))
        p++;
    if ((size_t)(end - p) < 8 || strncmp(p, "include", 7) != 0)
        return false;
    p += 7;
    while (p < end && (*p == ' ' || *p == '\t'))
        p++;
    if (p == end || *p++ != '"')
        return false;
    const char *q = memchr(p, '"', (size_t)(end - p));
    if (!q || (size_t)(q - p) < 6 || strncmp(p, "ktune/", 6) != 0 || (size_t)(q - p) >= cap)
        return false;
    memcpy(name, p, (size_t)(q - p));
    name[q - p] = '\0';
    return true;
}

static bool pragma_once(const char *line, size_t len)
{
    return len >= 12 && strncmp(line, "#pragma once", 12) == 0;
}

static int inline_into(kt_buf *b, const char *src, bool *done, int depth, kt_err *err)
{
    if (depth > ops_devlib_count) /* each header once: deeper is impossible */
        return kt_err_set(err, -ELOOP, "device library: includes nest too deep");
    for (const char *line = src; *line;) {
        const char *nl = strchr(line, '\n');
        size_t len = nl ? (size_t)(nl - line) : strlen(line);
        char name[128];
        if (include_line(line, len, name, sizeof(name))) {
            int k = 0;
            while (k < ops_devlib_count && strcmp(ops_devlib_names[k], name) != 0)
                k++;
            if (k == ops_devlib_count)
                return kt_err_set(err, -ENOENT,
                                  "device library: no header '%s' (ops/device/ holds the ones "
                                  "there are)",
                                  name);
            if (!done[k]) {
                done[k] = true;
                kt_buf_printf(b, "/* ---- %s (ktune device library) ---- */\n", name);
                int rc = inline_into(b, ops_devlib_data[k], done, depth + 1, err);
                if (rc < 0)
                    return rc;
                kt_buf_printf(b, "/* ---- end of %s ---- */\n", name);
            }
        } else if (!(depth > 0 && pragma_once(line, len))) {
            kt_buf_printf(b, "%.*s%s", (int)len, line, nl ? "\n" : "");
        }
        line = nl ? nl + 1 : line + len;
    }
    return 0;
}

int ops_devlib_inline(const char *src, char **out, kt_err *err)
{
    kt_buf b = {0};
    bool *done = calloc((size_t)ops_devlib_count + 1, sizeof(bool));
    *out = NULL;
    if (!done)
        return kt_err_set(err, -ENOMEM, "out of memory");
    int rc = inline_into(&b, src, done, 0, err);
    free(done);
    if (rc == 0 && (rc = kt_buf_status(&b)) < 0)
        kt_err_set(err, rc, "out of memory");
    if (rc < 0) {
        kt_buf_free(&b);
        return rc;
    }
    *out = kt_buf_take(&b);
    if (!*out) /* an empty source */
        *out = strdup("");
    return *out ? 0 : kt_err_set(err, -ENOMEM, "out of memory");
}
