/* The checks for untrusted text (ops/util.h): kt_name_check's UTF-8 and control-character rules
 * at their edges (overlong forms, surrogates, the last code point, C1 controls, cut sequences),
 * kt_escape's one-line output (every unsafe byte as \xNN, bounded, cut between characters), and
 * kt_log's line: "<N>" for the journal, a UTC time anywhere else. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ops/util.h"

/* kt_name_check of the bytes s (n of them, NULs included) with at most max bytes. */
static int check(const char *s, size_t n, size_t max, char *why, size_t len)
{
    kt_err e = {0};
    int rc = kt_name_check(s, n, max, &e);
    snprintf(why, len, "%s", e.msg);
    return rc;
}

#define NAME_OK(lit)                                                                               \
    do {                                                                                           \
        char why_[512];                                                                            \
        if (check(lit, sizeof(lit) - 1, 255, why_, sizeof(why_)) != 0)                             \
            fail_msg("%s: refused: %s", #lit, why_);                                               \
        assert_true(kt_text_clean(lit, sizeof(lit) - 1));                                          \
    } while (0)

#define NAME_BAD(lit, part)                                                                        \
    do {                                                                                           \
        char why_[512];                                                                            \
        if (check(lit, sizeof(lit) - 1, 255, why_, sizeof(why_)) != -EINVAL)                       \
            fail_msg("%s: accepted", #lit);                                                        \
        if (!strstr(why_, part))                                                                   \
            fail_msg("%s: '%s' does not say '%s'", #lit, why_, part);                              \
    } while (0)

static void test_name_utf8(void **state)
{
    (void)state;
    NAME_OK("x");
    NAME_OK("gemm_bias_relu.v2 (f16)");
    NAME_OK("a\\b"); /* a backslash is printable */
    NAME_OK("gr\xc3\xb6\xc3\x9f"
            "e");                /* größe */
    NAME_OK("\xc2\xa0");         /* U+00A0, the first code point after C1 */
    NAME_OK("\xe0\xa0\x80");     /* U+0800, the shortest three-byte form */
    NAME_OK("\xed\x9f\xbf");     /* U+D7FF, just below the surrogates */
    NAME_OK("\xee\x80\x80");     /* U+E000, just above them */
    NAME_OK("\xef\xbf\xbd");     /* U+FFFD */
    NAME_OK("\xf0\x90\x80\x80"); /* U+10000 */
    NAME_OK("\xf4\x8f\xbf\xbf"); /* U+10FFFF, the last code point */

    NAME_BAD("\xff", "not valid UTF-8 (byte 0)");
    NAME_BAD("ab\xc3\x28", "not valid UTF-8 (byte 2)"); /* a lead byte without its continuation */
    NAME_BAD("\x80", "not valid UTF-8");                /* a stray continuation byte */
    NAME_BAD("\xc0\xaf", "not valid UTF-8");            /* overlong '/' */
    NAME_BAD("\xc1\xbf", "not valid UTF-8");            /* overlong DEL */
    NAME_BAD("\xe0\x80\xaf", "not valid UTF-8");        /* overlong, three bytes */
    NAME_BAD("\xe0\x9f\xbf", "not valid UTF-8");        /* overlong U+07FF */
    NAME_BAD("\xf0\x80\x80\xaf", "not valid UTF-8");    /* overlong, four bytes */
    NAME_BAD("\xf0\x8f\xbf\xbf", "not valid UTF-8");    /* overlong U+FFFF */
    NAME_BAD("\xed\xa0\x80", "not valid UTF-8");        /* U+D800, a surrogate */
    NAME_BAD("\xed\xbf\xbf", "not valid UTF-8");        /* U+DFFF */
    NAME_BAD("\xed\xa0\xbd\xed\xb2\xa9", "not valid UTF-8"); /* a CESU-8 pair */
    NAME_BAD("\xf4\x90\x80\x80", "not valid UTF-8");         /* U+110000 */
    NAME_BAD("\xf5\x80\x80\x80", "not valid UTF-8");
    NAME_BAD("\xe2\x82", "not valid UTF-8 (byte 0)"); /* cut short at the end */
    NAME_BAD("\xf0\x9f\x98", "not valid UTF-8");
}

static void test_name_controls_and_length(void **state)
{
    (void)state;
    char why[512];
    NAME_BAD("a\nb", "U+000A (byte 1)");
    NAME_BAD("job\n<0>emerg forged", "U+000A");
    NAME_BAD("\x1b[2J", "U+001B (byte 0)");
    NAME_BAD("tab\there", "U+0009");
    NAME_BAD("del\x7f", "U+007F");
    NAME_BAD("c1 \xc2\x85", "U+0085 (byte 3)"); /* NEL */
    NAME_BAD("c1 \xc2\x9b"
             "2J",
             "U+009B"); /* CSI */
    NAME_BAD("c1 \xc2\x9f", "U+009F");
    NAME_BAD("", "empty");
    /* a NUL inside the bytes is a control character, not an end */
    assert_int_equal(check("a\0b", 3, 255, why, sizeof(why)), -EINVAL);
    assert_non_null(strstr(why, "U+0000"));
    assert_false(kt_text_clean("a\0b", 3));
    /* the limit is in bytes */
    assert_int_equal(check("\xc3\xa9\xc3\xa9", 4, 4, why, sizeof(why)), 0);
    assert_int_equal(check("\xc3\xa9\xc3\xa9"
                           "a",
                           5, 4, why, sizeof(why)),
                     -EINVAL);
    assert_non_null(strstr(why, "at most 4"));
    /* kt_text_clean: the same rules, empty allowed */
    assert_true(kt_text_clean("", 0));
    assert_false(kt_text_clean("\xed\xa0\x80", 3));
    assert_false(kt_text_clean("\xc2\x85", 2));
}

static const char *esc(const char *s, size_t n, unsigned flags)
{
    static char out[KT_ESC_MAX];
    return kt_escape(out, sizeof(out), s, n, flags);
}

#define ESC(lit) esc(lit, sizeof(lit) - 1, 0)

static void test_escape(void **state)
{
    (void)state;
    assert_string_equal(ESC("plain name"), "plain name");
    assert_string_equal(ESC("gr\xc3\xb6\xc3\x9f"
                            "e"),
                        "gr\xc3\xb6\xc3\x9f"
                        "e");
    assert_string_equal(ESC("x\n<0>emerg forged\x1b[2J"), "x\\x0a<0>emerg forged\\x1b[2J");
    assert_string_equal(ESC("a\\b"), "a\\x5cb"); /* so \x0a in a name is not a newline */
    assert_string_equal(ESC("del\x7f"), "del\\x7f");
    assert_string_equal(ESC("nul\0x"), "nul\\x00x");
    assert_string_equal(ESC("\xc2\x9b"
                            "2J"),
                        "\\xc2\\x9b2J"); /* C1: every byte */
    assert_string_equal(ESC("bad\xff\xfe"), "bad\\xff\\xfe");
    assert_string_equal(ESC("\xc0\xaf"), "\\xc0\\xaf");          /* overlong */
    assert_string_equal(ESC("\xed\xa0\x80"), "\\xed\\xa0\\x80"); /* surrogate */
    assert_string_equal(ESC("cut\xe2\x82"), "cut\\xe2\\x82");
    assert_string_equal(ESC("\xf0\x9f\x98\x80!"), "\xf0\x9f\x98\x80!");
    /* kept backslashes: text whose untrusted parts are escaped already */
    assert_string_equal(esc("op '\\x0a'\n", 10, KT_ESC_KEEP_BACKSLASH), "op '\\x0a'\\x0a");
    assert_string_equal(kt_escape_str((char[16]){0}, 16, NULL), "");
    /* the result is always clean text */
    const char all[] = "\x01\x1f\x7f\x80\xc2\x80\xe0\x80\x80\xf8\\";
    const char *e = ESC(all);
    assert_true(kt_text_clean(e, strlen(e)));
    assert_null(strchr(e, '\n'));
}

static void test_escape_bounded(void **state)
{
    (void)state;
    char out[16];
    /* fits exactly: 15 bytes */
    assert_string_equal(kt_escape(out, sizeof(out), "abcdefghijklmno", 15, 0), "abcdefghijklmno");
    /* one more: cut, with "..." and the NUL inside 16 bytes */
    assert_string_equal(kt_escape(out, sizeof(out), "abcdefghijklmnop", 16, 0), "abcdefghijkl...");
    /* never inside an escape */
    assert_string_equal(kt_escape(out, sizeof(out), "\n\n\n\n", 4, 0), "\\x0a\\x0a\\x0a...");
    /* never inside a character: é is two bytes */
    assert_string_equal(kt_escape(out, sizeof(out), "abcdefghijk\xc3\xa9xyz", 16, 0),
                        "abcdefghijk...");
    assert_true(kt_text_clean(out, strlen(out)));
    /* KT_ESC bounds long strings */
    char big[1000];
    memset(big, '\n', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    const char *e = KT_ESC(big);
    assert_true(strlen(e) < KT_ESC_MAX);
    assert_non_null(strstr(e, "..."));
}

/* What kt_log wrote to stderr while it pointed at a temporary file. */
static void log_line(bool journal, char *out, size_t len)
{
    char path[] = "/tmp/ktune-test-log-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    unlink(path);
    fflush(stderr);
    int saved = dup(STDERR_FILENO);
    assert_true(dup2(fd, STDERR_FILENO) >= 0);
    struct stat st;
    assert_int_equal(fstat(fd, &st), 0);
    char js[64];
    snprintf(js, sizeof(js), "%llu:%llu", (unsigned long long)st.st_dev,
             (unsigned long long)st.st_ino);
    if (journal)
        setenv("JOURNAL_STREAM", js, 1);
    else
        unsetenv("JOURNAL_STREAM");
    kt_log_warn("t", "hello %d\n<0>x", 7);
    fflush(stderr);
    dup2(saved, STDERR_FILENO);
    close(saved);
    unsetenv("JOURNAL_STREAM");
    ssize_t n = pread(fd, out, len - 1, 0);
    close(fd);
    assert_true(n > 0);
    out[n] = '\0';
}

static void test_log_line(void **state)
{
    (void)state;
    char line[256];
    log_line(true, line, sizeof(line));
    assert_string_equal(line, "<4>warning [t] hello 7\\x0a<0>x\n");
    log_line(false, line, sizeof(line));
    /* 2026-11-28T11:20:01.123Z warning [t] ... */
    int y, mo, d, h, mi, s, ms;
    char z;
    assert_int_equal(
        sscanf(line, "%4d-%2d-%2dT%2d:%2d:%2d.%3d%c", &y, &mo, &d, &h, &mi, &s, &ms, &z), 8);
    assert_true(y >= 2025 && z == 'Z');
    assert_string_equal(line + 24, " warning [t] hello 7\\x0a<0>x\n");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_name_utf8), cmocka_unit_test(test_name_controls_and_length),
        cmocka_unit_test(test_escape),    cmocka_unit_test(test_escape_bounded),
        cmocka_unit_test(test_log_line),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
