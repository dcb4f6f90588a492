/* Integration tests of the `ktune` binary: runs it as a user would (argv in, stdout/stderr/exit
 * status out) on the example graphs. KTUNE_BIN and KTUNE_SOURCE_ROOT come from meson. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <jansson.h>
#include <dirent.h>
#include <stdbool.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cache/cache.h"
#include "cli_run.h"

/* Runs ktune with the given arguments (NULL-terminated). */
static run_result *run_ktune(const char *first, ...)
{
    const char *args[32];
    int n = 0;
    va_list ap;
    va_start(ap, first);
    for (const char *a = first; a; a = va_arg(ap, const char *)) {
        assert_true(n < 31);
        args[n++] = a;
    }
    va_end(ap);
    args[n] = NULL;
    return run_argv(args);
}

static int count_lines(const char *s)
{
    int n = 0;
    for (; *s; s++)
        n += *s == '\n';
    return n;
}

static json_t *parse_json_out(const run_result *r)
{
    json_error_t e;
    json_t *v = json_loads(r->out, 0, &e);
    if (!v)
        fail_msg("ktune printed invalid JSON (%s): %s", e.text, r->out);
    return v;
}

static void assert_signature(json_t *v)
{
    const char *sig = json_string_value(json_object_get(v, "signature"));
    assert_non_null(sig);
    assert_int_equal(strlen(sig), 64);
    assert_int_equal(strspn(sig, "0123456789abcdef"), 64);
}

static void test_check_gemm_json(void **state)
{
    run_result *r =
        run_ktune("check", example("gemm_bias_relu.json"), "--shape", "M=1024", "--json", NULL);
    assert_int_equal(r->status, 0);
    json_t *v = parse_json_out(r);
    assert_signature(v);
    json_t *out = json_array_get(json_object_get(v, "outputs"), 0);
    assert_string_equal(json_string_value(json_object_get(out, "name")), "Y");
    assert_string_equal(json_string_value(json_object_get(out, "dtype")), "f16");
    json_t *shape = json_object_get(out, "shape");
    assert_int_equal(json_array_size(shape), 2);
    assert_int_equal(json_integer_value(json_array_get(shape, 0)), 1024);
    assert_int_equal(json_integer_value(json_array_get(shape, 1)), 256);
    double flops = json_number_value(json_object_get(v, "flops"));
    assert_true(flops >= 2.0 * 1024 * 256 * 512);
    assert_true(flops < 2.0 * 1024 * 256 * 512 * 1.01);
    /* Minimum bytes: A, W, bias read once and Y written once, all f16. */
    double bytes = json_number_value(json_object_get(v, "bytes"));
    assert_true(bytes == 2.0 * (1024 * 512 + 512 * 256 + 256 + 1024 * 256));
    json_decref(v);
    free(r);
}

static void test_check_every_example(void **state)
{
    static const struct {
        const char *file, *shape, *out_dtype;
        int rank;
        long long dims[4];
    } cases[] = {
        {"gemm_bias_relu.json", "M=64", "f16", 2, {64, 256}},
        {"softmax.json", "M=4096,N=8192", "f32", 2, {4096, 8192}},
        {"layernorm.json", "M=8", "f32", 2, {8, 4096}},
        {"rmsnorm.json", "M=8192", "bf16", 2, {8192, 4096}},
        {"gelu_tanh_chain.json", "M=3,N=5", "f32", 2, {3, 5}},
        {"conv2d.json", "N=128", "f32", 4, {128, 16, 32, 32}},
        {"attention.json", "B=4,H=48,S=2048", "f16", 4, {4, 48, 2048, 64}},
        {"sum_lastaxis.json", "M=16,N=256", "f32", 1, {16}},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        run_result *r =
            run_ktune("check", example(cases[i].file), "--shape", cases[i].shape, "--json", NULL);
        if (r->status != 0)
            fail_msg("%s: exit %d: %s", cases[i].file, r->status, r->err);
        json_t *v = parse_json_out(r);
        assert_signature(v);
        json_t *out = json_array_get(json_object_get(v, "outputs"), 0);
        assert_string_equal(json_string_value(json_object_get(out, "dtype")), cases[i].out_dtype);
        json_t *shape = json_object_get(out, "shape");
        assert_int_equal(json_array_size(shape), cases[i].rank);
        for (int k = 0; k < cases[i].rank; k++)
            assert_int_equal(json_integer_value(json_array_get(shape, (size_t)k)),
                             cases[i].dims[k]);
        assert_true(json_number_value(json_object_get(v, "flops")) > 0);
        assert_true(json_number_value(json_object_get(v, "bytes")) > 0);
        assert_int_equal(json_array_size(json_object_get(v, "unbound")), 0);
        json_decref(v);
        free(r);
    }
}

static void test_check_unbound_reports_null_cost(void **state)
{
    run_result *r = run_ktune("check", example("softmax.json"), "--json", NULL);
    assert_int_equal(r->status, 0);
    json_t *v = parse_json_out(r);
    assert_true(json_is_null(json_object_get(v, "flops")));
    assert_true(json_is_null(json_object_get(v, "bytes")));
    json_t *unbound = json_object_get(v, "unbound");
    assert_int_equal(json_array_size(unbound), 2);
    json_t *shape = json_object_get(json_array_get(json_object_get(v, "outputs"), 0), "shape");
    assert_string_equal(json_string_value(json_array_get(shape, 0)), "M");
    json_decref(v);
    free(r);
}

static void test_check_signature_independent_of_binding(void **state)
{
    run_result *a = run_ktune("check", example("rmsnorm.json"), "--shape", "M=1", "--json", NULL);
    run_result *b = run_ktune("check", example("rmsnorm.json"), "--shape", "M=77", "--json", NULL);
    json_t *va = parse_json_out(a), *vb = parse_json_out(b);
    assert_string_equal(json_string_value(json_object_get(va, "signature")),
                        json_string_value(json_object_get(vb, "signature")));
    json_decref(va);
    json_decref(vb);
    free(a);
    free(b);
}

static void test_check_renamed_graph_same_signature(void **state)
{
    /* The gemm example with every tensor renamed, nodes reversed and inputs reordered. */
    char path[] = "/tmp/ktune-cli-XXXXXX.json";
    int fd = mkstemps(path, 5);
    assert_true(fd >= 0);
    const char *text = "{\"name\": \"other\", \"inputs\": {"
                       "\"b\": {\"dtype\": \"f16\", \"shape\": [256], \"const\": true},"
                       "\"x\": {\"dtype\": \"f16\", \"shape\": [\"rows\", 512]},"
                       "\"w\": {\"dtype\": \"f16\", \"shape\": [512, 256], \"const\": true}},"
                       "\"nodes\": [{\"out\": \"out\", \"op\": \"relu\", \"in\": [\"s\"]},"
                       "{\"out\": \"s\", \"op\": \"add\", \"in\": [\"p\", \"b\"]},"
                       "{\"out\": \"p\", \"op\": \"matmul\", \"in\": [\"x\", \"w\"]}],"
                       "\"outputs\": [\"out\"]}";
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    run_result *a = run_ktune("check", example("gemm_bias_relu.json"), "--json", NULL);
    run_result *b = run_ktune("check", path, "--json", NULL);
    unlink(path);
    assert_int_equal(b->status, 0);
    json_t *va = parse_json_out(a), *vb = parse_json_out(b);
    assert_string_equal(json_string_value(json_object_get(va, "signature")),
                        json_string_value(json_object_get(vb, "signature")));
    json_decref(va);
    json_decref(vb);
    free(a);
    free(b);
}

static void test_check_broken_graph_one_line(void **state)
{
    run_result *r = run_ktune("check", example("broken/bad_broadcast.json"), NULL);
    assert_int_equal(r->status, 1);
    assert_int_equal(count_lines(r->err), 1);
    assert_non_null(strstr(r->err, "node 1"));
    assert_non_null(strstr(r->err, "bad broadcast"));
    assert_non_null(strstr(r->err, "bias"));
    assert_string_equal(r->out, "");
    free(r);
}

static void test_check_missing_file(void **state)
{
    run_result *r = run_ktune("check", "/nonexistent/graph.json", NULL);
    assert_int_equal(r->status, 1);
    assert_int_equal(count_lines(r->err), 1);
    assert_non_null(strstr(r->err, "/nonexistent/graph.json"));
    free(r);
}

static void test_check_unknown_dimension_binding(void **state)
{
    run_result *r = run_ktune("check", example("gemm_bias_relu.json"), "--shape", "Q=4", NULL);
    assert_int_equal(r->status, 1);
    assert_int_equal(count_lines(r->err), 1);
    assert_non_null(strstr(r->err, "Q"));
    free(r);
}

static void test_check_bad_shape_syntax(void **state)
{
    run_result *r = run_ktune("check", example("gemm_bias_relu.json"), "--shape", "M", NULL);
    assert_int_equal(r->status, 2);
    assert_int_equal(count_lines(r->err), 1);
    free(r);
}

static void test_help_and_usage(void **state)
{
    run_result *r = run_ktune("check", "--help", NULL);
    assert_int_equal(r->status, 0);
    assert_non_null(strstr(r->out, "usage: ktune check"));
    free(r);
    r = run_ktune("--help", NULL);
    assert_int_equal(r->status, 0);
    assert_non_null(strstr(r->out, "check"));
    assert_non_null(strstr(r->out, "cache"));
    free(r);
    r = run_ktune("frobnicate", NULL);
    assert_int_equal(r->status, 2);
    assert_int_equal(count_lines(r->err), 1);
    free(r);
    r = run_ktune("check", example("softmax.json"), "--bogus", NULL);
    assert_int_equal(r->status, 2);
    assert_int_equal(count_lines(r->err), 1);
    free(r);
}

static void test_check_text_output(void **state)
{
    run_result *r = run_ktune("check", example("conv2d.json"), "--shape", "N=2", NULL);
    assert_int_equal(r->status, 0);
    assert_non_null(strstr(r->out, "signature  "));
    assert_non_null(strstr(r->out, "output     Y f32 [N=2, 16, 32, 32]"));
    assert_non_null(strstr(r->out, "flops      "));
    free(r);
}

static void test_space_json(void **state)
{
    run_result *r =
        run_ktune("space", example("gemm_bias_relu.json"), "--shape", "M=1024", "--json", NULL);
    if (r->status != 0)
        fail_msg("exit %d: %s", r->status, r->err);
    json_t *v = parse_json_out(r);
    assert_true(json_integer_value(json_object_get(v, "candidates")) >= 500);
    assert_true(json_integer_value(json_object_get(v, "pruned")) > 0);
    json_t *fam = json_object_get(v, "families");
    assert_true(json_integer_value(json_object_get(fam, "gemm")) > 0);
    assert_true(json_integer_value(json_object_get(fam, "pointwise")) > 0);
    assert_int_equal(json_array_size(json_object_get(v, "partitions")), 4);
    json_decref(v);
    free(r);
    /* --device: another entry of the device table; a name not in it is an error */
    r = run_ktune("space", example("gemm_bias_relu.json"), "--shape", "M=1024", "--device",
                  "NVIDIA H200", "--json", NULL);
    if (r->status != 0)
        fail_msg("exit %d: %s", r->status, r->err);
    v = parse_json_out(r);
    assert_string_equal(json_string_value(json_object_get(v, "device")), "NVIDIA H200");
    json_decref(v);
    free(r);
    r = run_ktune("space", example("gemm_bias_relu.json"), "--shape", "M=1024", "--device",
                  "NVIDIA H300", NULL);
    assert_int_equal(r->status, 1);
    assert_int_equal(count_lines(r->err), 1);
    assert_non_null(strstr(r->err, "no device named 'NVIDIA H300'"));
    free(r);
    /* the search needs every dimension bound */
    r = run_ktune("space", example("gemm_bias_relu.json"), NULL);
    assert_int_equal(r->status, 1);
    assert_int_equal(count_lines(r->err), 1);
    assert_non_null(strstr(r->err, "--shape M="));
    free(r);
}

/* `ktune tune --local` refuses a graph the search cannot take before it starts a worker, with
 * the reason ktuned's submit gives (srch_graph_admit): 13 softmaxes are 65 nodes once
 * canonicalised. */
static void test_tune_local_refuses_large_graph(void **state)
{
    char path[] = "/tmp/ktune-cli-XXXXXX.json";
    int fd = mkstemps(path, 5);
    assert_true(fd >= 0);
    char text[4096];
    size_t off = (size_t)snprintf(text, sizeof(text),
                                  "{\"name\": \"softmaxes\", \"inputs\": {\"x\": {\"dtype\": "
                                  "\"f32\", \"shape\": [\"M\", 64]}}, \"nodes\": [");
    for (int i = 0; i < 13; i++) {
        char in[16] = "x";
        if (i)
            snprintf(in, sizeof(in), "s%d", i - 1);
        off += (size_t)snprintf(text + off, sizeof(text) - off,
                                "%s{\"out\": \"s%d\", \"op\": \"softmax\", \"in\": [\"%s\"]}",
                                i ? ", " : "", i, in);
    }
    off += (size_t)snprintf(text + off, sizeof(text) - off, "], \"outputs\": [\"s12\"]}");
    assert_true(off < sizeof(text));
    assert_int_equal(write(fd, text, off), (ssize_t)off);
    close(fd);
    run_result *r = run_ktune("tune", path, "--shape", "M=8", "--local", "--worker",
                              "/nonexistent/ktune-worker", NULL);
    unlink(path);
    if (strstr(r->err, "built without NVRTC")) {
        free(r);
        skip();
    }
    assert_int_equal(r->status, 1);
    assert_int_equal(count_lines(r->err), 1);
    if (!strstr(r->err, "graph has 65 nodes after canonicalisation; the search handles 64"))
        fail_msg("expected the search's refusal, got: %s", r->err);
    free(r);
}

static void test_compile_json(void **state)
{
    run_result *r = run_ktune("compile", example("softmax.json"), "--shape", "M=64,N=1000",
                              "--limit", "6", "--jobs", "2", "--json", NULL);
    if (r->status != 0)
        fail_msg("exit %d: %s", r->status, r->err);
    json_t *v = parse_json_out(r);
    assert_int_equal(json_integer_value(json_object_get(v, "compiled")), 6);
    assert_int_equal(json_integer_value(json_object_get(v, "failed")), 0);
    assert_int_equal(json_integer_value(json_object_get(v, "spilled")), 0);
    assert_true(json_number_value(json_object_get(v, "seconds")) > 0);
    json_t *fam = json_object_get(v, "families");
    assert_int_equal(json_integer_value(json_object_get(json_object_get(fam, "row"), "compiled")),
                     3);
    json_decref(v);
    free(r);
    r = run_ktune("compile", example("softmax.json"), "--shape", "M=4,N=8", "--limit", "0", NULL);
    assert_int_equal(r->status, 2);
    assert_int_equal(count_lines(r->err), 1);
    free(r);
}

/* ---- files the CLI reads and writes (issue 16) ---- */

/* A fresh directory under /tmp, removed by rm_tree. */
static void make_tmp(char *dir, size_t len)
{
    snprintf(dir, len, "/tmp/ktune-cli-XXXXXX");
    assert_non_null(mkdtemp(dir));
}

static void rm_tree(const char *dir)
{
    char cmd[1200];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

static int count_of(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle))
        n++;
    return n;
}

static void put_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    assert_int_equal(fputs(text, f) >= 0, 1);
    assert_int_equal(fclose(f), 0);
}

static void expect_file(const char *path, const char *text)
{
    char buf[256] = {0};
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    if (n != strlen(text) || memcmp(buf, text, n) != 0)
        fail_msg("%s: '%s', expected '%s'", path, buf, text);
}

/* A refusal: exit 1, one line on stderr naming the path exactly once and saying what it is,
 * nothing on stdout. */
static void expect_refusal(const run_result *r, const char *path, const char *what)
{
    if (r->status != 1 || count_lines(r->err) != 1 || count_of(r->err, path) != 1 ||
        !strstr(r->err, what) || r->out[0])
        fail_msg("%s: exit %d, stderr '%s', stdout '%s' (wanted exit 1 and one line naming the "
                 "path once and saying '%s')",
                 path, r->status, r->err, r->out, what);
}

/* The directory holds exactly the names given (no temporary file left beside a target). */
static void expect_entries(const char *dir, const char *const *names, int n)
{
    DIR *d = opendir(dir);
    assert_non_null(d);
    int seen = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        bool known = false;
        for (int i = 0; i < n; i++)
            known |= strcmp(e->d_name, names[i]) == 0;
        if (!known)
            fail_msg("%s: unexpected entry '%s'", dir, e->d_name);
        seen++;
    }
    closedir(d);
    assert_int_equal(seen, n);
}

static mode_t kind_of(const char *path)
{
    struct stat st;
    assert_int_equal(lstat(path, &st), 0);
    return st.st_mode & S_IFMT;
}

/* `cache export` replaces a regular file or nothing; a FIFO, a device, a symbolic link or a
 * directory at the target is refused with one line and left exactly as it was. */
static void test_export_target_kinds(void **state)
{
    char t[64], cache[128], p[16][256];
    make_tmp(t, sizeof(t));
    snprintf(cache, sizeof(cache), "%s/cache", t);
    cache_env *env = NULL;
    kt_err err = {0};
    if (cache_open(cache, 0, NULL, &env, &err) < 0)
        fail_msg("cache_open: %s", err.msg);
    cache_close(env);
    const char *names[] = {"cache", "fifo", "target", "link", "dir", "old.ktb", "new.ktb", "null"};
    for (int i = 0; i < 8; i++)
        snprintf(p[i], sizeof(p[i]), "%s/%s", t, names[i]);
    const char *fifo = p[1], *target = p[2], *link = p[3], *dir = p[4], *old = p[5], *fresh = p[6],
               *dev = p[7];
    /* the signing key goes into a directory of the test's, not this host's /etc/ktune */
    char keys[64];
    make_tmp(keys, sizeof(keys));
    setenv("KTUNE_KEYS", keys, 1);

    assert_int_equal(mkfifo(fifo, 0644), 0);
    run_result *r = RUN("cache", "export", fifo, "--cache", cache);
    expect_refusal(r, fifo, "is a FIFO");
    assert_int_equal(kind_of(fifo), S_IFIFO);
    free(r);

    put_file(target, "precious\n");
    assert_int_equal(symlink("target", link), 0);
    r = RUN("cache", "export", link, "--cache", cache);
    expect_refusal(r, link, "is a symbolic link");
    assert_int_equal(kind_of(link), S_IFLNK);
    expect_file(target, "precious\n");
    free(r);

    assert_int_equal(mkdir(dir, 0755), 0);
    r = RUN("cache", "export", dir, "--cache", cache);
    expect_refusal(r, dir, "is a directory");
    assert_int_equal(kind_of(dir), S_IFDIR);
    free(r);

    /* A device: our own node with /dev/null's numbers rather than /dev/null itself, so that a
     * regression replaces a file of this test and not the machine's /dev/null. Needs root
     * (CAP_MKNOD); skipped otherwise. */
    int n_names = 7;
    if (geteuid() == 0 && mknod(dev, S_IFCHR | 0666, makedev(1, 3)) == 0) {
        n_names = 8;
        r = RUN("cache", "export", dev, "--cache", cache);
        expect_refusal(r, dev, "is a device");
        assert_int_equal(kind_of(dev), S_IFCHR);
        free(r);
    } else {
        print_message("export onto a device: skipped (needs root and CAP_MKNOD)\n");
    }

    /* A regular file is replaced, a missing one created; nothing is left beside them. */
    put_file(old, "old\n");
    r = RUN("cache", "export", old, "--cache", cache);
    if (r->status != 0)
        fail_msg("export onto a regular file: exit %d: %s", r->status, r->err);
    free(r);
    r = RUN("cache", "export", fresh, "--cache", cache);
    if (r->status != 0)
        fail_msg("export onto nothing: exit %d: %s", r->status, r->err);
    free(r);
    for (int i = 5; i <= 6; i++) {
        char head[9] = {0};
        FILE *f = fopen(p[i], "rb");
        assert_non_null(f);
        assert_int_equal(fread(head, 1, 8, f), 8);
        fclose(f);
        assert_string_equal(head, "KTBUNDLE");
        assert_int_equal(kind_of(p[i]), S_IFREG);
    }
    expect_entries(t, names, n_names);
    rm_tree(t);
    rm_tree(keys);
    unsetenv("KTUNE_KEYS");
}

/* `compile --emit DIR` writes each source the same way: what is at a candidate's name in DIR
 * and is not a regular file (here a FIFO, which an fopen would wait on forever, and a symbolic
 * link, which it would write through) is refused with one warning and left as it was. */
static void test_compile_emit_targets(void **state)
{
    char t[64], emit[128], fifo[256], link[256], target[128];
    make_tmp(t, sizeof(t));
    snprintf(emit, sizeof(emit), "%s/emit", t);
    snprintf(target, sizeof(target), "%s/target", t);
    put_file(target, "precious\n");
    assert_int_equal(mkdir(emit, 0755), 0);
    /* --limit 2 picks a pointwise and a row candidate, in that order; --quiet: no progress
     * lines, so stderr holds the two warnings only. */
    snprintf(fifo, sizeof(fifo), "%s/cand-00000-pointwise.cu", emit);
    snprintf(link, sizeof(link), "%s/cand-00001-row.cu", emit);
    assert_int_equal(mkfifo(fifo, 0644), 0);
    assert_int_equal(symlink("../target", link), 0);
    run_result *r = run_argv_limited(
        (const char *const[]){"compile", example("softmax.json"), "--shape", "M=64,N=1000",
                              "--limit", "2", "--jobs", "1", "--emit", emit, "--quiet", NULL},
        (run_limits){.alarm_s = 60});
    if (r->status != 0 || count_lines(r->err) != 2 || count_of(r->err, fifo) != 1 ||
        count_of(r->err, link) != 1 || !strstr(r->err, "is a FIFO") ||
        !strstr(r->err, "is a symbolic link"))
        fail_msg("exit %d, stderr '%s'", r->status, r->err);
    assert_int_equal(kind_of(fifo), S_IFIFO);
    assert_int_equal(kind_of(link), S_IFLNK);
    expect_file(target, "precious\n");
    const char *names[] = {"cand-00000-pointwise.cu", "cand-00001-row.cu"};
    expect_entries(emit, names, 2);
    free(r);
    rm_tree(t);
}

/* check and batch refuse what is not a regular file, or is over the limit, before reading it,
 * with one line naming the path once. */
static void test_read_refusals(void **state)
{
    char t[64], dir[128], big[128], fifo[128];
    make_tmp(t, sizeof(t));
    snprintf(dir, sizeof(dir), "%s/graphs.json", t);
    snprintf(big, sizeof(big), "%s/big.json", t);
    snprintf(fifo, sizeof(fifo), "%s/fifo.json", t);
    assert_int_equal(mkdir(dir, 0755), 0);
    assert_int_equal(mkfifo(fifo, 0644), 0);
    /* 17 MiB of hole: over the 16 MiB graph limit (docs/formats.md), no disk used. */
    int fd = open(big, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    assert_true(fd >= 0);
    assert_int_equal(ftruncate(fd, 17 << 20), 0);
    close(fd);

    /* A regression would read /dev/zero until memory runs out, or wait on the FIFO for a
     * writer: the limits turn either into a failed test. Address space is not limited under
     * AddressSanitizer, which reserves terabytes of it. */
    run_limits lim = {.alarm_s = 30};
#if !defined(__SANITIZE_ADDRESS__)
    lim.address_space = (rlim_t)1 << 30;
#endif
    static const struct {
        const char *sub, *path, *what;
    } cases[] = {
        {"check", "/dev/zero", "is a device"}, {"check", "@dir", "is a directory"},
        {"check", "@fifo", "is a FIFO"},       {"check", "@big", "at most 16777216"},
        {"batch", "/dev/zero", "is a device"}, {"batch", "@dir", "is a directory"},
        {"batch", "@fifo", "is a FIFO"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const char *path = strcmp(cases[i].path, "@dir") == 0    ? dir
                           : strcmp(cases[i].path, "@fifo") == 0 ? fifo
                           : strcmp(cases[i].path, "@big") == 0  ? big
                                                                 : cases[i].path;
        bool batch = strcmp(cases[i].sub, "batch") == 0; /* never reaches the socket */
        run_result *r =
            run_argv_limited((const char *const[]){cases[i].sub, path, batch ? "--socket" : NULL,
                                                   "/nonexistent/ktuned.sock", NULL},
                             lim);
        expect_refusal(r, path, cases[i].what);
        free(r);
    }
    /* The big file is refused by its size, not after reading it: no more memory than a small
     * graph takes (reading it would add its 17 MiB). */
    run_result *small = RUN("check", example("softmax.json"));
    assert_int_equal(small->status, 0);
    run_result *r = RUN("check", big);
    assert_int_equal(r->status, 1);
    if (r->maxrss_kb > small->maxrss_kb + 8192)
        fail_msg("check of a 17 MiB file peaked at %ld KiB, a small graph at %ld KiB", r->maxrss_kb,
                 small->maxrss_kb);
    free(r);
    free(small);
    rm_tree(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_check_gemm_json),
        cmocka_unit_test(test_check_every_example),
        cmocka_unit_test(test_check_unbound_reports_null_cost),
        cmocka_unit_test(test_check_signature_independent_of_binding),
        cmocka_unit_test(test_check_renamed_graph_same_signature),
        cmocka_unit_test(test_check_broken_graph_one_line),
        cmocka_unit_test(test_check_missing_file),
        cmocka_unit_test(test_check_unknown_dimension_binding),
        cmocka_unit_test(test_check_bad_shape_syntax),
        cmocka_unit_test(test_help_and_usage),
        cmocka_unit_test(test_check_text_output),
        cmocka_unit_test(test_space_json),
        cmocka_unit_test(test_compile_json),
        cmocka_unit_test(test_export_target_kinds),
        cmocka_unit_test(test_read_refusals),
        cmocka_unit_test(test_compile_emit_targets),
        cmocka_unit_test(test_tune_local_refuses_large_graph),
    };
    return cmocka_run_group_tests_name("ktune CLI", tests, NULL, NULL);
}
