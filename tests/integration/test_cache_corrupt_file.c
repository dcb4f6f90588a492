/* Drill (issue 7): a damaged byte range in the cache file itself (data.mdb written with pwrite,
 * behind LMDB's back, as a bad disk block or a stray write would).
 *   1. Inside one record's stored value: that record is reported corrupt and never served --
 *      not by cache_get/cache_list, not by `ktune lookup` and `ktune cache ls --json`, not by the
 *      deploy-time runtime (ktune_rt_resolve, what ktune_lookup does without loading a module)
 *      -- while the other records are still served by all three.
 *   2. Over LMDB's own structures: both meta pages make every reader (CLI and runtime) fail
 *      with one clear line. Then every other page of the file in turn, overwritten whole, in a
 *      fresh copy each time (a fill byte, then random bytes): `ktune cache check`, `ktune cache
 *      ls`, `ktune lookup`, `ktune cache stats` and the runtime (open + resolve, in this process)
 *      each succeed, or fail with one line -- never crash (LMDB 0.9 trusts its pages, so every
 *      reader first runs cache_check, in a child process). When `ktune cache check` says ok,
 *      every reader must succeed; when it says the structure is damaged, every reader must
 *      refuse; and the runtime's check never forks this process (it spawns its checker).
 *      KTUNE_DRILL_NO_RANDOM_PAGES=1 leaves the random sweep out.
 * docs/RELIABILITY.md ("Drills") has the numbers. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <fcntl.h>
#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "cache/cache.h"
#include "client/libktune_internal.h"
#include "client/runtime_internal.h"
#include "drill_util.h"
#include "tests/unit/test_cache_util.h"

#define N_REC  3
#define VICTIM 1 /* index into ms */

static const int64_t ms[N_REC] = {256, 512, 1024};

typedef struct fixture {
    char *dir;
    char graph_path[1024];
    ktune_graph *g;
    cache_gpu gpu;
} fixture;

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof(*f));
    f->dir = tmpdir_new();
    const char *root = getenv("KTUNE_SOURCE_ROOT");
    snprintf(f->graph_path, sizeof(f->graph_path), "%s/examples/gemm_bias_relu.json",
             root ? root : ".");
    ktune_error err = {0};
    if (!f->dir || ktune_graph_load(f->graph_path, &f->g, &err) != 0) {
        fprintf(stderr, "setup: %s\n", err.msg);
        return -1;
    }
    test_gpu(&f->gpu, "NVIDIA H100 80GB HBM3");
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    ktune_graph_free(f->g);
    if (!getenv("KTUNE_KEEP_TMP"))
        tmpdir_free(f->dir);
    else
        free(f->dir);
    free(f);
    return 0;
}

/* The graph bound at M = m; the caller frees it. */
static ops_graph *bound_at(const fixture *f, int64_t m)
{
    ops_binding b = {"M", m};
    ops_graph *bound = NULL;
    ops_diag d = {0};
    if (ops_graph_bind(f->g->g, &b, 1, &bound, &d) != 0)
        fail_msg("bind M=%lld: %s", (long long)m, d.msg);
    return bound;
}

static void key_of(const fixture *f, int64_t m, cache_key *k)
{
    memset(k, 0, sizeof(*k));
    k->gpu = f->gpu;
    memcpy(k->sig, f->g->sig, OPS_SIG_BYTES);
    k->n_shapes = 1;
    snprintf(k->shapes[0].name, sizeof(k->shapes[0].name), "M");
    k->shapes[0].value = m;
    k->precision = OPS_PREC_EXACT;
    ops_graph *bound = bound_at(f, m);
    ops_diag d = {0};
    if (ops_graph_problem(bound, k->problem, NULL, NULL, &d) != 0)
        fail_msg("problem: %s", d.msg);
    ops_graph_free(bound);
}

/* N_REC records of gemm_bias_relu (one per M, each with a 3000-byte cubin: its value sits in
 * overflow pages of its own) and a few trials, through the cache API. */
static void write_cache(const fixture *f)
{
    cache_env *env = NULL;
    kt_err err = {0};
    if (cache_open(f->dir, 0, NULL, &env, &err) != 0)
        fail_msg("cache_open: %s", err.msg);
    for (int i = 0; i < N_REC; i++) {
        cache_key k;
        key_of(f, ms[i], &k);
        cache_record r;
        char sched[64];
        snprintf(sched, sizeof(sched), "gemm drill %d", i);
        test_record(&r, &k, sched, 1000.0 * (i + 1), 3000, (uint8_t)(i + 1));
        ops_graph *bound = bound_at(f, ms[i]);
        if (cache_record_set_problem(&r, bound, &err) != 0)
            fail_msg("set_problem: %s", err.msg);
        ops_graph_free(bound);
        free(r.layouts[0].layout); /* the runtime serves no packed layout it does not know */
        free(r.layouts);
        r.layouts = NULL;
        r.n_layouts = 0;
        if (cache_put(env, &r, NULL, &err) != 0)
            fail_msg("cache_put: %s", err.msg);
        cache_record_free(&r);
        for (int t = 0; t < 4; t++) {
            cache_trial tr = {.status = CACHE_TRIAL_OK, .time_ns = 1000.0 + t, .ts = 1};
            snprintf(tr.cand, sizeof(tr.cand), "g0 gemm drill %d", t);
            if (cache_trial_append(env, &k, &tr, &err) != 0)
                fail_msg("cache_trial_append: %s", err.msg);
        }
    }
    cache_close(env);
}

/* The file offset and length of the stored value of (m, rank 0) in data.mdb: where its bytes,
 * read through LMDB, occur in the file (exactly once: a value of its own overflow pages, written
 * once). */
static void value_offset(const fixture *f, int64_t m, off_t *off, size_t *len)
{
    cache_key k;
    key_of(f, m, &k);
    uint8_t key[CACHE_KEY_MAX + 1];
    size_t kl = 0;
    assert_int_equal(cache_key_encode(&k, key, sizeof(key), &kl, NULL), 0);
    key[kl++] = 0;
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi dbi;
    assert_int_equal(mdb_env_create(&env), 0);
    mdb_env_set_maxdbs(env, 4);
    assert_int_equal(mdb_env_open(env, f->dir, MDB_RDONLY, 0664), 0);
    assert_int_equal(mdb_txn_begin(env, NULL, MDB_RDONLY, &txn), 0);
    assert_int_equal(mdb_dbi_open(txn, "kernels", 0, &dbi), 0);
    MDB_val mk = {.mv_size = kl, .mv_data = key}, mv;
    assert_int_equal(mdb_get(txn, dbi, &mk, &mv), 0);
    uint8_t *val = malloc(mv.mv_size);
    assert_non_null(val);
    memcpy(val, mv.mv_data, mv.mv_size);
    *len = mv.mv_size;
    mdb_txn_abort(txn);
    mdb_env_close(env);

    char path[1100];
    snprintf(path, sizeof(path), "%s/data.mdb", f->dir);
    char *data = NULL;
    size_t n = 0;
    assert_int_equal(kt_read_file(path, (size_t)1 << 30, &data, &n, NULL), 0);
    const uint8_t *file = (const uint8_t *)data;
    int hits = 0;
    for (const uint8_t *p = file; (p = memmem(p, n - (size_t)(p - file), val, *len)); p++) {
        *off = (off_t)(p - file);
        hits++;
    }
    assert_int_equal(hits, 1);
    free(data);
    free(val);
}

static void overwrite(const char *dir, off_t off, const uint8_t *bytes, size_t n)
{
    char path[1100];
    snprintf(path, sizeof(path), "%s/data.mdb", dir);
    int fd = open(path, O_WRONLY);
    assert_true(fd >= 0);
    assert_int_equal(pwrite(fd, bytes, n, off), (ssize_t)n);
    close(fd);
}

/* Runs the ktune CLI; returns its exit status (fails the test on a signal or a timeout). */
static int cli(const char *what, char *const argv[], char *out, size_t len)
{
    int st = 0;
    if (drill_run(argv, -1, -1, 60.0, &st, out, len) < 0)
        fail_msg("%s: did not finish", what);
    if (WIFSIGNALED(st))
        fail_msg("%s: killed by signal %d (%s)", what, WTERMSIG(st), out);
    return WEXITSTATUS(st);
}

static const char *ktune_bin(void)
{
    const char *b = getenv("KTUNE_BIN");
    if (!b)
        fail_msg("KTUNE_BIN is not set");
    return b;
}

static int cli_lookup(const fixture *f, const char *dir, int64_t m, char *out, size_t len)
{
    char shape[64];
    snprintf(shape, sizeof(shape), "M=%lld", (long long)m);
    char *argv[] = {(char *)ktune_bin(), "lookup", (char *)f->graph_path,
                    "--shape",           shape,    "--cache",
                    (char *)dir,         "--json", NULL};
    return cli("ktune lookup", argv, out, len);
}

static int resolve(ktune_runtime *rt, const fixture *f, int64_t m, ktune_error *err)
{
    ktune_shape s[1] = {{"M", m}};
    ktune_kernel *k = NULL;
    ktune_match match;
    int rc =
        ktune_rt_resolve(rt, f->g, s, 1, NULL, 0, &f->gpu, 0, KTUNE_RT_NO_MEMO, &k, &match, err);
    ktune_rt_kernel_free(k);
    return rc;
}

static int count_lines(const char *s)
{
    int n = 0;
    for (; *s; s++)
        n += *s == '\n';
    return n;
}

static void test_value_range(void **state)
{
    fixture *f = *state;
    write_cache(f);
    off_t off = -1;
    size_t len = 0;
    value_offset(f, ms[VICTIM], &off, &len);
    /* 64 bytes in the middle of the value (inside the cubin), straight into the file */
    uint8_t junk[64];
    for (size_t i = 0; i < sizeof(junk); i++)
        junk[i] = (uint8_t)(0x5a ^ (i * 37));
    overwrite(f->dir, off + (off_t)(len / 2) - 32, junk, sizeof(junk));
    print_message("damaged bytes %lld..%lld of data.mdb, inside the %zu-byte value of M=%lld\n",
                  (long long)(off + (off_t)(len / 2) - 32),
                  (long long)(off + (off_t)(len / 2) + 31), len, (long long)ms[VICTIM]);

    /* the cache API */
    cache_env *env = NULL;
    kt_err err = {0};
    assert_int_equal(cache_open(f->dir, CACHE_RDONLY, NULL, &env, &err), 0);
    for (int i = 0; i < N_REC; i++) {
        cache_key k;
        key_of(f, ms[i], &k);
        cache_record r;
        cache_record_init(&r);
        int rc = cache_get(env, &k, 0, &r, &err);
        cache_record_free(&r);
        assert_int_equal(rc, i == VICTIM ? -EBADMSG : 0);
    }
    cache_close(env);
    drill_cache_report cr;
    assert_int_equal(drill_cache_check(f->dir, &cr), 0);
    assert_int_equal(cr.records, N_REC);
    assert_int_equal(cr.records_bad, 1);
    assert_int_equal(cr.listed, N_REC - 1);
    assert_int_equal(cr.listed_corrupt, 1);
    assert_int_equal(cr.trials_bad, 0);

    /* the CLI: lookup serves the others and refuses the victim; ls counts it corrupt */
    char out[16384];
    for (int i = 0; i < N_REC; i++) {
        int st = cli_lookup(f, f->dir, ms[i], out, sizeof(out));
        if (i == VICTIM) {
            if (st != 1)
                fail_msg("ktune lookup of the damaged record exited %d: %s", st, out);
        } else if (st != 0) {
            fail_msg("ktune lookup M=%lld exited %d: %s", (long long)ms[i], st, out);
        }
    }
    char *ls[] = {(char *)ktune_bin(), "cache", "ls", "--all", "--json", "--cache", f->dir, NULL};
    assert_int_equal(cli("ktune cache ls", ls, out, sizeof(out)), 0);
    /* stderr carries the warning line, stdout the JSON object: parse from its first brace */
    json_error_t je;
    json_t *j = json_loads(strchr(out, '{') ? strchr(out, '{') : out, JSON_DISABLE_EOF_CHECK, &je);
    if (!j)
        fail_msg("ktune cache ls --json: %s: %s", je.text, out);
    assert_int_equal(json_array_size(json_object_get(j, "records")), N_REC - 1);
    assert_int_equal(json_integer_value(json_object_get(j, "corrupt")), 1);
    json_decref(j);

    /* ktune cache check: damaged records, the rest sound */
    char *check[] = {(char *)ktune_bin(), "cache", "check", "--json", "--cache", f->dir, NULL};
    assert_int_equal(cli("ktune cache check", check, out, sizeof(out)), 1);
    j = json_loads(strchr(out, '{') ? strchr(out, '{') : out, JSON_DISABLE_EOF_CHECK, &je);
    if (!j)
        fail_msg("ktune cache check --json: %s: %s", je.text, out);
    assert_string_equal(json_string_value(json_object_get(j, "verdict")), "damaged_records");
    assert_int_equal(json_integer_value(json_object_get(j, "records")), N_REC);
    assert_int_equal(json_integer_value(json_object_get(j, "records_bad")), 1);
    assert_int_equal(json_integer_value(json_object_get(j, "trials_bad")), 0);
    assert_true(json_is_true(json_object_get(j, "readable")));
    assert_true(json_is_true(json_object_get(j, "writable")));
    json_decref(j);

    /* the deploy-time runtime */
    ktune_runtime *rt = NULL;
    ktune_error kerr = {0};
    assert_int_equal(ktune_runtime_open(f->dir, &rt, &kerr), 0);
    for (int i = 0; i < N_REC; i++) {
        int rc = resolve(rt, f, ms[i], &kerr);
        if (i == VICTIM) {
            assert_int_equal(rc, -EBADMSG);
            print_message("runtime on the damaged record: %s\n", kerr.msg);
        } else {
            assert_int_equal(rc, 0);
        }
    }
    ktune_runtime_close(rt);
}

static void copy_file(const char *from, const char *to)
{
    int a = open(from, O_RDONLY), b = open(to, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    assert_true(a >= 0 && b >= 0);
    char buf[65536];
    ssize_t n;
    while ((n = read(a, buf, sizeof(buf))) > 0)
        assert_int_equal(write(b, buf, (size_t)n), n);
    close(a);
    close(b);
}

/* A fresh copy of the cache in f->dir/copy with page `page` overwritten by bytes. */
static void damaged_copy(const fixture *f, char *copy, size_t cap, off_t at, const uint8_t *bytes,
                         size_t n)
{
    snprintf(copy, cap, "%s/copy", f->dir);
    mkdir(copy, 0755);
    char a[1100], b[1100];
    snprintf(a, sizeof(a), "%s/data.mdb", f->dir);
    snprintf(b, sizeof(b), "%s/data.mdb", copy);
    copy_file(a, b);
    snprintf(b, sizeof(b), "%s/lock.mdb", copy);
    unlink(b);
    overwrite(copy, at, bytes, n);
}

/* ktuned on a cache with a damaged structure: refuses to start (before it writes anything) with
 * one line naming the cache and the repair, exit status 1. */
static void daemon_refuses(const char *copy, const char *what)
{
    const char *bin = getenv("KTUNED_BIN");
    if (!bin)
        fail_msg("KTUNED_BIN is not set");
    char sock[1200], out[16384];
    snprintf(sock, sizeof(sock), "%s/ktuned.sock", copy);
    char *argv[] = {(char *)bin, "--socket", sock,       "--cache",    (char *)copy,
                    "--gpus",    "0",        "--worker", "/bin/false", NULL};
    int st = 0;
    if (drill_run(argv, -1, -1, 30.0, &st, out, sizeof(out)) < 0)
        fail_msg("%s: ktuned did not stop on a damaged cache", what);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 1 || !strstr(out, "cannot start: cache ") ||
        !strstr(out, "is damaged") || !strstr(out, "ktune cache check"))
        fail_msg("%s: ktuned on a damaged cache: status 0x%x: %s", what, st, out);
    print_message("%s: ktuned: %s", what, strstr(out, "cannot start"));
}

typedef struct sweep {
    int checks[3];      /* `ktune cache check` verdicts: ok, damaged records, damaged structure */
    int writer_only;    /* damaged structure in pages only a writer uses: still readable */
    int daemon_refused; /* ktuned started on copies with a damaged structure (one per kind) */
    bool daemon_tried[2];
    int clean_failures; /* readers that refused with one line */
    int runtime_refused;
    int runtime_forks; /* fork()s of this process during the runtime's opens: must stay 0 */
} sweep;

/* fork()s of this process (pthread_atfork runs on every fork, never on posix_spawn): the
 * runtime's check of a cache must not fork its caller (issue 16: a PyTorch process's threads
 * and memory), whatever the cache holds. */
static atomic_int forks_seen;
static void count_fork(void)
{
    atomic_fetch_add(&forks_seen, 1);
}

/* Every reader on a damaged copy: `ktune cache check`, ls, lookup and stats, then the runtime in
 * this process. A crash, a hang, or a failure without one clear line fails the test; so does a
 * reader that disagrees with the check's verdict. */
static void readers(const fixture *f, const char *copy, const char *what, sweep *sw)
{
    char out[16384], shape[64];
    snprintf(shape, sizeof(shape), "M=%lld", (long long)ms[0]);
    char *check[] = {(char *)ktune_bin(), "cache", "check", "--cache", (char *)copy, NULL};
    char *ls[] = {(char *)ktune_bin(), "cache", "ls", "--all", "--cache", (char *)copy, NULL};
    char *lookup[] = {(char *)ktune_bin(), "lookup", (char *)f->graph_path,
                      "--shape",           shape,    "--cache",
                      (char *)copy,        NULL};
    char *stats[] = {(char *)ktune_bin(), "cache", "stats", "--cache", (char *)copy, NULL};
    char **cmds[] = {check, ls, lookup, stats};
    int verdict = -1;
    /* what readers rely on (the CLI's reads and the runtime check this much before opening):
     * damage only a writer would meet (the free list) leaves the cache readable */
    cache_check_report rd;
    kt_err err = {0};
    if (cache_check(copy, CACHE_CHECK_READER, 20, &rd, &err) != 0)
        fail_msg("%s: cache_check: %s", what, err.msg);
    bool readable = rd.verdict != CACHE_CHECK_DAMAGED_STRUCTURE;
    for (int c = 0; c < 4; c++) {
        int st = cli(what, cmds[c], out, sizeof(out)); /* fails the test on a signal */
        if (st > 1)
            fail_msg("%s: ktune %s exit status %d: %s", what, cmds[c][1], st, out);
        if (c == 0) {
            verdict = st == 0                         ? 0
                      : strstr(out, "damaged values") ? 1
                      : strstr(out, "is damaged: ")   ? 2
                                                      : -1;
            if (verdict < 0)
                fail_msg("%s: ktune cache check exited %d without a verdict: %s", what, st, out);
            if (verdict != 2 && !readable)
                fail_msg("%s: the check calls it readable, the reader check does not: %s", what,
                         rd.what);
            if (verdict == 2 && readable != (strstr(out, "readers still serve it") != NULL))
                fail_msg("%s: ktune cache check misreports readability: %s", what, out);
            sw->checks[verdict]++;
            sw->writer_only += verdict == 2 && readable;
            if (verdict == 2 && !sw->daemon_tried[readable]) {
                daemon_refuses(copy, what);
                sw->daemon_tried[readable] = true;
                sw->daemon_refused++;
            }
            continue;
        }
        /* lookup also says that there is no GPU here, and warns about each record it skips */
        if (st == 1 && ((c != 2 && count_lines(out) > 2) || !strstr(out, "ktune: ")))
            fail_msg("%s: ktune %s failed without one clear line: %s", what, cmds[c][1], out);
        if (verdict == 0 && st != 0)
            fail_msg("%s: check says ok, but ktune %s %s failed: %s", what, cmds[c][1], cmds[c][2],
                     out);
        if (!readable && st == 0)
            fail_msg("%s: the structure is damaged for readers, but ktune %s %s read it: %s", what,
                     cmds[c][1], cmds[c][2], out);
        if (readable && c != 2 && st != 0)
            fail_msg("%s: readable, but ktune %s %s failed: %s", what, cmds[c][1], cmds[c][2], out);
        if (!readable && !strstr(out, "is damaged"))
            fail_msg("%s: ktune %s refused without naming the damage: %s", what, cmds[c][1], out);
        sw->clean_failures += st != 0;
    }
    /* the deploy-time runtime, in this process: refuses a damaged structure at open */
    ktune_runtime *rt = NULL;
    ktune_error kerr = {0};
    int forks0 = atomic_load(&forks_seen);
    int rc = ktune_runtime_open(copy, &rt, &kerr);
    sw->runtime_forks += atomic_load(&forks_seen) - forks0;
    if (rc < 0) {
        if (readable)
            fail_msg("%s: runtime refused a readable cache: %s", what, kerr.msg);
        if (!strstr(kerr.msg, "is damaged") || strchr(kerr.msg, '\n'))
            fail_msg("%s: runtime refused without one clear line: %s", what, kerr.msg);
        sw->runtime_refused++;
        return;
    }
    if (!readable)
        fail_msg("%s: the runtime opened a cache whose structure readers cannot trust", what);
    rc = resolve(rt, f, ms[0], &kerr);
    if (rc != 0 && rc != -EBADMSG && rc != -ENOENT)
        fail_msg("%s: runtime resolve: %d %s", what, rc, kerr.msg);
    if (verdict == 0 && rc != 0)
        fail_msg("%s: check says ok, but the runtime did not serve M=%lld: %s", what,
                 (long long)ms[0], kerr.msg);
    ktune_runtime_close(rt);
}

static void test_lmdb_structures(void **state)
{
    fixture *f = *state;
    write_cache(f);
    char data[1100], copy[1100];
    snprintf(data, sizeof(data), "%s/data.mdb", f->dir);
    struct stat sb;
    assert_int_equal(stat(data, &sb), 0);
    long ps = sysconf(_SC_PAGESIZE); /* LMDB's page size is the OS page size */
    size_t pages = (size_t)sb.st_size / (size_t)ps;
    uint8_t *fill = malloc((size_t)ps * 2);
    assert_non_null(fill);
    memset(fill, 0xa5, (size_t)ps * 2);

    /* both meta pages: every reader refuses the file with one clear line */
    damaged_copy(f, copy, sizeof(copy), 0, fill, (size_t)ps * 2);
    char out[16384];
    char *ls[] = {(char *)ktune_bin(), "cache", "ls", "--cache", copy, NULL};
    assert_int_equal(cli("ktune cache ls (meta pages)", ls, out, sizeof(out)), 1);
    assert_non_null(strstr(out, "is damaged"));
    assert_non_null(strstr(out, "not an LMDB file"));
    assert_int_equal(count_lines(out), 1);
    print_message("both meta pages damaged: %s", out);
    ktune_runtime *rt = NULL;
    ktune_error kerr = {0};
    assert_true(ktune_runtime_open(copy, &rt, &kerr) < 0);
    assert_null(rt);
    print_message("runtime: %s\n", kerr.msg);

    /* every page in turn, with a fill byte, then with random bytes */
    sweep sw = {0};
    for (size_t p = 2; p < pages; p++) {
        damaged_copy(f, copy, sizeof(copy), (off_t)(p * (size_t)ps), fill, (size_t)ps);
        char what[64];
        snprintf(what, sizeof(what), "page %zu of %zu filled", p, pages);
        readers(f, copy, what, &sw);
    }
    sweep filled = sw;
    if (!getenv("KTUNE_DRILL_NO_RANDOM_PAGES")) {
        unsigned seed = 1;
        for (size_t p = 2; p < pages; p++) {
            for (long i = 0; i < ps; i++) {
                seed = seed * 1103515245u + 12345u;
                fill[i] = (uint8_t)(seed >> 16);
            }
            damaged_copy(f, copy, sizeof(copy), (off_t)(p * (size_t)ps), fill, (size_t)ps);
            char what[64];
            snprintf(what, sizeof(what), "page %zu of %zu random", p, pages);
            readers(f, copy, what, &sw);
        }
    }
    print_message("pages 2..%zu, each filled with 0xa5 (then random bytes), 4 CLI readers and the "
                  "runtime each, 0 crashes: check verdicts ok %d (%d), damaged records %d (%d), "
                  "damaged structure %d (%d), of which readable (writer-only damage) %d (%d); "
                  "clean one-line CLI failures %d (%d); runtime refused %d (%d); ktuned "
                  "refused to start on %d\n",
                  pages - 1, filled.checks[0], sw.checks[0] - filled.checks[0], filled.checks[1],
                  sw.checks[1] - filled.checks[1], filled.checks[2],
                  sw.checks[2] - filled.checks[2], filled.writer_only,
                  sw.writer_only - filled.writer_only, filled.clean_failures,
                  sw.clean_failures - filled.clean_failures, filled.runtime_refused,
                  sw.runtime_refused - filled.runtime_refused, sw.daemon_refused);
    assert_int_equal(sw.daemon_refused, 2); /* one unreadable, one writer-only damage */
    if (sw.runtime_forks)
        fail_msg("the runtime's cache check forked this process %d times", sw.runtime_forks);
    free(fill);
}

int main(void)
{
    if (pthread_atfork(count_fork, NULL, NULL) != 0)
        return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_value_range, setup, teardown),
        cmocka_unit_test_setup_teardown(test_lmdb_structures, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
