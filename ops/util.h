/* Shared low-level helpers for every ktune module: the error-detail struct, the two assertion
 * tiers, logging, and growable arrays. Nothing here allocates behind the caller's back except
 * kt_grow(), whose contract is documented below. */
#pragma once

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__)
#define KT_PRINTF(fmt, args) __attribute__((format(printf, fmt, args)))
#define KT_UNUSED            __attribute__((unused))
#define KT_EXPORT            __attribute__((visibility("default")))
#else
#define KT_PRINTF(fmt, args)
#define KT_UNUSED
#define KT_EXPORT
#endif

#define KT_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* Human-readable detail for a failed call. Functions return 0 or a negative errno and, when the
 * caller passed a non-NULL kt_err, fill it with the same code and a one-line message. */
typedef struct kt_err {
    int code;      /* negative errno, 0 when no error was recorded */
    char msg[512]; /* one line, no trailing newline */
} kt_err;

/* Records code and message into err (when non-NULL) and returns code, so callers can write
 * `return kt_err_set(err, -EINVAL, "...")`. */
int kt_err_set(kt_err *err, int code, const char *fmt, ...) KT_PRINTF(3, 4);

/* Always-on fatal check for broken internal invariants (never for input validation). */
#define KT_REQUIRE(cond)                                                                           \
    do {                                                                                           \
        if (!(cond))                                                                               \
            kt_require_failed(#cond, __FILE__, __LINE__);                                          \
    } while (0)
_Noreturn void kt_require_failed(const char *expr, const char *file, int line);

/* Logging: one line per call, "<level> [tag] message", to stderr. Under systemd, stderr goes to
 * the journal, which adds its own timestamp; the <N> prefix is the sd-daemon priority. */
enum kt_log_level {
    KT_LOG_CRIT = 2,
    KT_LOG_ERR = 3,
    KT_LOG_WARN = 4,
    KT_LOG_INFO = 6,
    KT_LOG_DEBUG = 7
};
extern int kt_log_threshold; /* messages above this level are dropped; default KT_LOG_INFO */
/* One line on stderr, "LEVEL [tag] text": prefixed "<N>" (the syslog priority journald reads)
 * when stderr is the journal (JOURNAL_STREAM names it), else by its UTC time,
 * "2026-11-28T11:20:01.123Z info [tag] text". Control bytes in text are escaped. */
void kt_log(int level, const char *tag, const char *fmt, ...) KT_PRINTF(3, 4);
#define kt_log_err(tag, ...)   kt_log(KT_LOG_ERR, tag, __VA_ARGS__)
#define kt_log_warn(tag, ...)  kt_log(KT_LOG_WARN, tag, __VA_ARGS__)
#define kt_log_info(tag, ...)  kt_log(KT_LOG_INFO, tag, __VA_ARGS__)
#define kt_log_debug(tag, ...) kt_log(KT_LOG_DEBUG, tag, __VA_ARGS__)

/* ---- untrusted text: names and echoed strings (docs/protocol.md, "Names") ---- */

/* Checks a name (graph, tensor, symbol or job name) of len bytes: at least one and at most max
 * bytes of well-formed UTF-8 (no overlong forms, no surrogates, nothing past U+10FFFF), with no
 * control character (C0, DEL, C1) and no NUL. Returns 0, or -EINVAL with err->msg saying what is
 * wrong and where as a phrase ("is not valid UTF-8 (byte 3)") for the caller's message. */
int kt_name_check(const char *s, size_t len, size_t max, kt_err *err);

/* True when s[0..len) is well-formed UTF-8 without control characters: what kt_escape copies
 * unchanged, backslashes aside. */
bool kt_text_clean(const char *s, size_t len);

/* For text whose untrusted parts were escaped already (a log line, a daemon's error message):
 * backslashes are kept, so earlier escapes are not doubled. */
#define KT_ESC_KEEP_BACKSLASH 1u

/* Writes s[0..len) into out (cap >= 8 bytes, always NUL-terminated) as one line that is safe for
 * a terminal, a log and a strict UTF-8 decoder: control characters (C0, DEL, and each byte of a
 * C1), backslashes (unless flags has KT_ESC_KEEP_BACKSLASH) and bytes that are not part of
 * well-formed UTF-8 become \xNN; the rest is copied. When it does not fit, it is cut between
 * characters and ends in "...". s may be NULL when len is 0. Returns out. */
char *kt_escape(char *out, size_t cap, const char *s, size_t len, unsigned flags);

/* kt_escape of a NUL-terminated string (NULL reads as ""). */
char *kt_escape_str(char *out, size_t cap, const char *s);

/* An escaped copy of s in a buffer that lives until the end of the enclosing block, for one
 * printf-style argument: kt_err_set(err, -EINVAL, "unknown op '%s'", KT_ESC(op)). Bounded to
 * KT_ESC_MAX - 1 bytes, so messages with untrusted parts keep a bounded length. */
#define KT_ESC_MAX 128
#define KT_ESC(s)  kt_escape_str((char[KT_ESC_MAX]){0}, KT_ESC_MAX, (s))

/* Ensures the array *items (of elements of elem_size bytes, *cap allocated) has room for need
 * elements, growing geometrically. Returns 0 or -ENOMEM, leaving the old array intact on
 * failure. New slots are zeroed. */
int kt_grow(void *items, size_t *cap, size_t need, size_t elem_size);

/* strdup that returns NULL on NULL input; NULL on allocation failure otherwise. */
char *kt_strdup(const char *s);

/* Finds one of ktune's helper executables (ktune-worker, ktune-nvrtc, ktune-cache-check): given
 * when not NULL; else $env_var; else name next to the running program or to the binary holding
 * this code (libktune.so, loaded by Python), or in ../search, ../cache (the build tree) or
 * ../libexec or ../bin beside either; else in the configured libexec directory (an install). 0 with
 * *out malloc'd, or -ENOENT/-ENOMEM with the reason in err. Any thread. */
int kt_find_exe(const char *given, const char *env_var, const char *name, char **out, kt_err *err);

/* write(2) until all len bytes are out (EINTR retried). 0, or the negative errno of the failed
 * write. */
int kt_write_all(int fd, const void *data, size_t len);

/* Reads the whole regular file at path, of at most max bytes, into a malloc'd, NUL-terminated
 * buffer; the caller frees *out. Anything but a regular file (directory, FIFO, device) is
 * refused (-EISDIR, -EINVAL) before reading, and so is a file over max bytes (-EFBIG), both by
 * its size and by reading at most max + 1 bytes, so /dev/zero or a huge sparse file costs
 * nothing. err->msg does not name path: the caller prints it once, as "PATH: <msg>". */
int kt_read_file(const char *path, size_t max, char **out, size_t *len, kt_err *err);

/* "a directory", "a FIFO", "a device", "a symbolic link", "a socket" or "a regular file" for
 * an st_mode, for one-line messages. */
const char *kt_file_kind(unsigned mode);

/* Replacing a user-named file: every command that writes a file goes through these, so a
 * failure leaves the target as it was and nothing but a regular file is ever replaced.
 *
 * kt_atomic_begin() refuses, with a one-line err naming the path and what it is, a target that
 * exists and is not a regular file (-EEXIST for a FIFO, a device, a symbolic link; -EISDIR for
 * a directory), then creates a temporary file beside it (same directory, O_EXCL, the given mode
 * less the umask). The caller writes through f->fd (open for reading and writing, so it may
 * also mmap it), then calls kt_atomic_commit(), which fsyncs the file, renames it over the
 * target and fsyncs the directory; or kt_atomic_abort(). Both close the file; on any failure
 * the temporary file is removed and the target is untouched (except that a failed directory
 * fsync comes after the rename). f is owned by the caller; one thread at a time per f. */
typedef struct kt_atomic_file {
    int fd;          /* the temporary file; -1 when none is open */
    char path[4096]; /* the target */
    char tmp[4096];  /* the temporary file beside it */
} kt_atomic_file;
int kt_atomic_begin(kt_atomic_file *f, const char *path, unsigned mode, kt_err *err);
int kt_atomic_commit(kt_atomic_file *f, kt_err *err);
void kt_atomic_abort(kt_atomic_file *f);
/* kt_atomic_commit for a file that must not replace another: links the temporary file to the
 * target (which fails when it exists) instead of renaming it over. -EEXIST, with the temporary
 * file removed and the target untouched, when another process made the target first. */
int kt_atomic_commit_new(kt_atomic_file *f, kt_err *err);
/* The whole of data into path, through the three calls above. */
int kt_write_file(const char *path, const void *data, size_t len, unsigned mode, kt_err *err);

/* Lowercase hex of n bytes into out (2n+1 bytes). */
void kt_hex(const uint8_t *bytes, size_t n, char *out);

/* Parses a duration in seconds: a decimal number (digits with an optional fraction; no sign,
 * exponent, hex, inf or nan), alone or followed by "s", "m"/"min" (minutes) or "h" (hours):
 * "90", "1.5m", "2h". Returns the seconds, or -1 for anything else, including a duration under
 * KT_DURATION_MIN_S (zero, "0.0001"): every duration here is a budget or a timeout, and one
 * under a millisecond is a mistake, not a request. */
#define KT_DURATION_MIN_S 0.001
double kt_parse_duration(const char *s);

/* The wall-clock time in unix milliseconds (CLOCK_REALTIME): trial log stamps and the instants
 * compared with them. */
int64_t kt_wall_ms(void);

/* A growable text buffer for code generation and formatting. After any failed append the buffer
 * is marked failed (oom) and later appends are no-ops, so emitters check once at the end. */
typedef struct kt_buf {
    char *data; /* NUL-terminated; NULL until the first append */
    size_t len, cap;
    int indent; /* spaces emitted by kt_buf_line before its text */
    bool oom;
} kt_buf;
void kt_buf_printf(kt_buf *b, const char *fmt, ...) KT_PRINTF(2, 3);
/* Appends indent spaces, the formatted text and a newline. */
void kt_buf_line(kt_buf *b, const char *fmt, ...) KT_PRINTF(2, 3);
/* Returns 0, or -ENOMEM when an append failed. */
int kt_buf_status(const kt_buf *b);
/* Hands the string to the caller (who frees it) and resets b. NULL when nothing was appended. */
char *kt_buf_take(kt_buf *b);
void kt_buf_free(kt_buf *b);
