/* cache_check (cache/check.c): the structural and value check of a cache file.
 *   - a sound cache built by many transactions (puts that push records off, deletes, trials,
 *     journal entries: a free list in use) is ok, with the counts cache_stat gives;
 *   - a damaged value is "damaged records", the structure still ok;
 *   - every page of a cache overwritten in turn (a fill byte, zeros, random bytes): the check
 *     never crashes and never hangs, and whenever its reader mode (CACHE_CHECK_READER) does not
 *     say "damaged structure", a full LMDB read of the damaged copy (every cursor walk forwards
 *     and backwards, every point lookup, in a child) does not crash either: that verdict is what
 *     makes a reader safe; the full check is at least as strict;
 *   - damaged fields of the current meta page (magic intact) are found;
 *   - a writer committing in another process meanwhile never makes a sound cache look damaged;
 *   - a caller that ignores SIGCHLD, or has a SIGBUS handler of its own, still gets the verdict. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cache/cache.h"
#include "test_cache_util.h"

static void fill_job(cache_job *j, uint64_t id)
{
    memset(j, 0, sizeof(*j));
    j->id = id;
    j->state = CACHE_JOB_DONE;
    j->gpu = -1;
    snprintf(j->name, sizeof(j->name), "job_%llu", (unsigned long long)id);
    memset(j->sig, (int)id, sizeof(j->sig));
    j->n_shapes = 1;
    snprintf(j->shapes[0].name, sizeof(j->shapes[0].name), "M");
    j->shapes[0].value = 64;
    j->precision = OPS_PREC_EXACT;
    j->budget_s = 10;
    j->submitted = 1795000000;
}

/* n_keys keys with up to 4 ranked records each (3000-byte cubins: overflow pages), trials and
 * journal entries, over many write transactions; then a few keys deleted. Enough trials make the
 * trial tree two levels deep (branch pages). */
static void build(const char *dir, int n_keys, int per_key, int trials)
{
    cache_env *env = NULL;
    kt_err err = {0};
    if (cache_open(dir, 0, NULL, &env, &err) != 0)
        fail_msg("cache_open: %s", err.msg);
    for (int i = 0; i < n_keys; i++) {
        cache_key k;
        test_key(&k, "NVIDIA H100 80GB HBM3", (uint8_t)(i % 7), 64 + i);
        for (int r = 0; r < per_key; r++) {
            cache_record rec;
            char sched[64];
            snprintf(sched, sizeof(sched), "tile %d", r);
            test_record(&rec, &k, sched, 1000.0 + 37.0 * ((r * 5 + i) % 9), 3000, (uint8_t)(i + r));
            if (cache_put(env, &rec, NULL, &err) != 0)
                fail_msg("cache_put: %s", err.msg);
            cache_record_free(&rec);
        }
        for (int t = 0; t < trials; t++) {
            cache_trial tr = {.status = CACHE_TRIAL_OK, .time_ns = 1000.0 + t, .ts = 1};
            snprintf(tr.cand, sizeof(tr.cand), "g0 tile %d", t);
            if (cache_trial_append(env, &k, &tr, &err) != 0)
                fail_msg("cache_trial_append: %s", err.msg);
        }
        cache_job j;
        fill_job(&j, (uint64_t)i + 1);
        if (cache_job_put(env, &j, &err) != 0)
            fail_msg("cache_job_put: %s", err.msg);
    }
    for (int i = 0; i < n_keys; i += 5) {
        cache_key k;
        test_key(&k, "NVIDIA H100 80GB HBM3", (uint8_t)(i % 7), 64 + i);
        if (cache_delete(env, &k, &err) != 0)
            fail_msg("cache_delete: %s", err.msg);
    }
    cache_close(env);
}

static int setup(void **state)
{
    *state = tmpdir_new();
    return *state ? 0 : -1;
}

static int teardown(void **state)
{
    tmpdir_free(*state);
    return 0;
}

static void test_sound(void **state)
{
    const char *dir = *state;
    build(dir, 40, 5, 3);
    cache_env *env = NULL;
    kt_err err = {0};
    cache_stats st;
    assert_int_equal(cache_open(dir, CACHE_RDONLY, NULL, &env, &err), 0);
    assert_int_equal(cache_stat(env, &st, &err), 0);
    cache_close(env);

    cache_check_report rep;
    int rc = cache_check(dir, CACHE_CHECK_VALUES, 0, &rep, &err);
    if (rc != 0)
        fail_msg("cache_check: %s", err.msg);
    if (rep.verdict != CACHE_CHECK_OK)
        fail_msg("a sound cache: %s: %s", cache_check_verdict_name(rep.verdict), rep.what);
    assert_int_equal(rep.records, st.records);
    assert_int_equal(rep.trials, st.trials);
    assert_int_equal(rep.jobs, st.jobs);
    assert_int_equal(rep.records_bad + rep.trials_bad + rep.jobs_bad + rep.meta_bad, 0);
    assert_int_equal(rep.signal, 0);
    assert_true(rep.free_pages > 0); /* the deletes and replacements freed pages */
    assert_true(rep.tree_pages + rep.free_pages + 2 <= rep.pages_used);
    print_message("sound: %zu records, %zu trials, %zu jobs; %zu of %zu pages in trees, %zu free; "
                  "%.4f s\n",
                  rep.records, rep.trials, rep.jobs, rep.tree_pages, rep.pages_used, rep.free_pages,
                  rep.seconds);
    /* structure only: no value counts */
    assert_int_equal(cache_check(dir, 0, 0, &rep, &err), 0);
    assert_int_equal(rep.verdict, CACHE_CHECK_OK);
    assert_int_equal(rep.records, 0);

    /* bad arguments and a missing cache */
    assert_int_equal(cache_check(NULL, 0, 0, &rep, &err), -EINVAL);
    assert_int_equal(cache_check(dir, 0x80, 0, &rep, &err), -EINVAL);
    char missing[1100];
    snprintf(missing, sizeof(missing), "%s/nothing-here", dir);
    assert_int_equal(cache_check(missing, 0, 0, &rep, &err), -ENOENT);
    assert_non_null(strstr(err.msg, "no kernel cache"));
}

/* Where the stored bytes of key (m) rank 0 lie in data.mdb (found by content). */
static off_t value_offset(const char *dir, int i, size_t *len)
{
    cache_key k;
    test_key(&k, "NVIDIA H100 80GB HBM3", (uint8_t)(i % 7), 64 + i);
    uint8_t key[CACHE_KEY_MAX + 1];
    size_t kl = 0;
    assert_int_equal(cache_key_encode(&k, key, sizeof(key), &kl, NULL), 0);
    key[kl++] = 0;
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi dbi;
    assert_int_equal(mdb_env_create(&env), 0);
    mdb_env_set_maxdbs(env, 4);
    assert_int_equal(mdb_env_open(env, dir, MDB_RDONLY, 0664), 0);
    assert_int_equal(mdb_txn_begin(env, NULL, MDB_RDONLY, &txn), 0);
    assert_int_equal(mdb_dbi_open(txn, "kernels", 0, &dbi), 0);
    MDB_val mk = {.mv_size = kl, .mv_data = key}, mv;
    assert_int_equal(mdb_get(txn, dbi, &mk, &mv), 0);
    uint8_t *val = malloc(mv.mv_size);
    memcpy(val, mv.mv_data, mv.mv_size);
    *len = mv.mv_size;
    mdb_txn_abort(txn);
    mdb_env_close(env);
    char path[1100];
    snprintf(path, sizeof(path), "%s/data.mdb", dir);
    uint8_t *file = NULL;
    size_t n = 0;
    assert_true(file_read(path, &file, &n));
    uint8_t *p = memmem(file, n, val, *len);
    assert_non_null(p);
    off_t off = (off_t)(p - file);
    free(file);
    free(val);
    return off;
}

static void overwrite(const char *dir, off_t off, const uint8_t *bytes, size_t n)
{
    char path[1200];
    int len = snprintf(path, sizeof(path), "%s/data.mdb", dir);
    assert_true(len > 0 && (size_t)len < sizeof(path));
    int fd = open(path, O_WRONLY);
    assert_true(fd >= 0);
    assert_int_equal(pwrite(fd, bytes, n, off), (ssize_t)n);
    close(fd);
}

static void test_damaged_value(void **state)
{
    const char *dir = *state;
    build(dir, 6, 1, 3);
    size_t len = 0;
    off_t off = value_offset(dir, 3, &len);
    uint8_t junk[48];
    memset(junk, 0x5a, sizeof(junk));
    overwrite(dir, off + (off_t)len / 2, junk, sizeof(junk));
    cache_check_report rep;
    kt_err err = {0};
    assert_int_equal(cache_check(dir, CACHE_CHECK_VALUES, 0, &rep, &err), 0);
    assert_int_equal(rep.verdict, CACHE_CHECK_DAMAGED_VALUES);
    assert_int_equal(rep.records_bad, 1);
    assert_int_equal(rep.records, 4); /* 6 keys, keys 0 and 5 deleted */
    assert_non_null(strstr(rep.first_bad, "kernels: "));
    print_message("damaged value: %s\n", rep.what);
    assert_int_equal(cache_check(dir, 0, 0, &rep, &err), 0);
    assert_int_equal(rep.verdict, CACHE_CHECK_OK);
}

/* Reads the whole cache with LMDB in a child, the way any reader could: every named database
 * walked with a cursor, and every key found looked up again with mdb_get. Returns the child's
 * wait status. The child touches what a damaged page makes LMDB return, a wild pointer at times:
 * that read is the probe (does a reader crash?), so ASan must not turn it into a report of its
 * own (an address in ASan's internal region reads as "unknown-crash", not as a SIGSEGV). */
__attribute__((no_sanitize_address)) static int lmdb_read_all(const char *dir)
{
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        /* cmocka catches these in the test process: here they must end the child */
        static const int fatal[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT};
        for (size_t i = 0; i < sizeof(fatal) / sizeof(fatal[0]); i++)
            signal(fatal[i], SIG_DFL);
        alarm(20);
        MDB_env *env;
        if (mdb_env_create(&env) != 0)
            _exit(3);
        mdb_env_set_maxdbs(env, 4);
        if (mdb_env_open(env, dir, MDB_RDONLY, 0664) != 0)
            _exit(2);
        MDB_txn *txn;
        if (mdb_txn_begin(env, NULL, MDB_RDONLY, &txn) != 0)
            _exit(2);
        static const char *names[] = {"kernels", "trials", "jobs", "meta"};
        for (size_t d = 0; d < 4; d++) {
            MDB_dbi dbi;
            if (mdb_dbi_open(txn, names[d], 0, &dbi) != 0)
                continue;
            MDB_cursor *cur;
            if (mdb_cursor_open(txn, dbi, &cur) != 0)
                continue;
            MDB_val k, v;
            volatile uint8_t sink = 0;
            for (int rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0;
                 rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
                for (size_t i = 0; i < v.mv_size; i += 512)
                    sink ^= ((const uint8_t *)v.mv_data)[i];
                MDB_val k2 = k, v2;
                mdb_get(txn, dbi, &k2, &v2);
            }
            for (int rc = mdb_cursor_get(cur, &k, &v, MDB_LAST); rc == 0;
                 rc = mdb_cursor_get(cur, &k, &v, MDB_PREV))
                ;
            mdb_cursor_close(cur);
            (void)sink;
        }
        mdb_txn_abort(txn);
        mdb_env_close(env);
        _exit(0);
    }
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    return st;
}

static void copy_file(const char *from, const char *to)
{
    uint8_t *buf = NULL;
    size_t n = 0;
    assert_true(file_read(from, &buf, &n));
    assert_true(file_write(to, buf, n));
    free(buf);
}

static void test_page_sweep(void **state)
{
    const char *dir = *state;
    build(dir, 12, 3, 40);
    char src[1100], copy[1100], dst[1200];
    snprintf(src, sizeof(src), "%s/data.mdb", dir);
    snprintf(copy, sizeof(copy), "%s/copy", dir);
    mkdir(copy, 0755);
    snprintf(dst, sizeof(dst), "%s/data.mdb", copy);
    struct stat sb;
    assert_int_equal(stat(src, &sb), 0);
    long ps = sysconf(_SC_PAGESIZE);
    size_t pages = (size_t)sb.st_size / (size_t)ps;
    uint8_t *fill = malloc((size_t)ps);
    assert_non_null(fill);
    int verdicts[3] = {0}, unsafe_ok = 0, readable = 0, refused_crash = 0;
    {
        /* the trial tree has branch pages */
        MDB_env *env;
        MDB_txn *txn;
        MDB_dbi dbi;
        MDB_stat ms;
        assert_int_equal(raw_open(dir, &env, &txn, &dbi, "trials"), 0);
        assert_int_equal(mdb_stat(txn, dbi, &ms), 0);
        assert_true(ms.ms_depth >= 2);
        mdb_txn_abort(txn);
        mdb_env_close(env);
    }
    unsigned seed = 7;
    for (int mode = 0; mode < 3; mode++) {
        for (size_t p = 2; p < pages; p++) {
            for (long i = 0; i < ps; i++) {
                seed = seed * 1103515245u + 12345u;
                fill[i] = mode == 0 ? 0xa5 : mode == 1 ? 0 : (uint8_t)(seed >> 16);
            }
            copy_file(src, dst);
            overwrite(copy, (off_t)(p * (size_t)ps), fill, (size_t)ps);
            cache_check_report rep;
            kt_err err = {0};
            int rc = cache_check(copy, CACHE_CHECK_VALUES, 20, &rep, &err);
            if (rc != 0)
                fail_msg("page %zu mode %d: cache_check: %s", p, mode, err.msg);
            if (rep.signal)
                fail_msg("page %zu mode %d: the check itself crashed: %s", p, mode, rep.what);
            verdicts[rep.verdict]++;
            /* what readers rely on: a subset of the above */
            cache_check_report rd;
            if (cache_check(copy, CACHE_CHECK_READER, 20, &rd, &err) != 0)
                fail_msg("page %zu mode %d: reader check: %s", p, mode, err.msg);
            if (rd.signal)
                fail_msg("page %zu mode %d: the reader check crashed: %s", p, mode, rd.what);
            if (rep.verdict != CACHE_CHECK_DAMAGED_STRUCTURE)
                assert_int_not_equal(rd.verdict, CACHE_CHECK_DAMAGED_STRUCTURE);
            if (rd.verdict == CACHE_CHECK_DAMAGED_STRUCTURE) {
                /* refused: how often LMDB would indeed have crashed on it */
                int st = lmdb_read_all(copy);
                refused_crash += WIFSIGNALED(st);
                continue;
            }
            readable += rep.verdict == CACHE_CHECK_DAMAGED_STRUCTURE;
            int st = lmdb_read_all(copy);
            if (WIFSIGNALED(st)) {
                print_message("page %zu mode %d: verdicts %s / reader %s, but LMDB crashed "
                              "(signal %d)\n",
                              p, mode, cache_check_verdict_name(rep.verdict),
                              cache_check_verdict_name(rd.verdict), WTERMSIG(st));
                unsafe_ok++;
            }
        }
    }
    print_message("%zu pages x 3 fills: %d ok, %d damaged records, %d damaged structure (%d of "
                  "them still readable); %d verdicts that LMDB then crashed on; LMDB crashes on "
                  "%d of the copies refused\n",
                  pages - 2, verdicts[0], verdicts[1], verdicts[2], readable, unsafe_ok,
                  refused_crash);
    assert_int_equal(unsafe_ok, 0);
    assert_true(verdicts[2] > 0);
    free(fill);
}

/* Damage inside the current meta page that leaves its magic intact (LMDB opens such a file and
 * trusts every field): a root page number past the end, and a transaction id of the other
 * parity (LMDB's reader would then use the older meta page, whose pages may be reused). */
static void test_meta_fields(void **state)
{
    const char *dir = *state;
    build(dir, 5, 2, 3);
    char src[1100], copy[1100], dst[1200];
    snprintf(src, sizeof(src), "%s/data.mdb", dir);
    snprintf(copy, sizeof(copy), "%s/copy", dir);
    mkdir(copy, 0755);
    snprintf(dst, sizeof(dst), "%s/data.mdb", copy);
    long ps = sysconf(_SC_PAGESIZE);
    uint8_t *file = NULL;
    size_t n = 0;
    assert_true(file_read(src, &file, &n));
    uint64_t t0, t1;
    memcpy(&t0, file + 144, 8); /* page header 16 + magic, version, address, mapsize 24 + 2 dbs */
    memcpy(&t1, file + ps + 144, 8);
    off_t cur = t1 > t0 ? ps : 0;
    uint64_t txnid = t1 > t0 ? t1 : t0;
    static const struct {
        off_t at; /* in the current meta page */
        uint64_t value;
        const char *expect;
    } cases[] = {
        {128, 1u << 30, "outside the file"}, /* the main database's root */
        {144, 0, "meta page"},               /* the txnid, parity flipped below */
    };
    for (size_t c = 0; c < 2; c++) {
        uint64_t v = c == 1 ? txnid + 1001 : cases[c].value;
        char path[1200];
        snprintf(path, sizeof(path), "%s/lock.mdb", copy);
        unlink(path);
        assert_true(file_write(dst, file, n));
        overwrite(copy, cur + cases[c].at, (const uint8_t *)&v, 8);
        cache_check_report rep;
        kt_err err = {0};
        int rc = cache_check(copy, 0, 10, &rep, &err);
        if (rc != 0)
            fail_msg("meta case %zu: %s", c, err.msg);
        assert_int_equal(rep.verdict, CACHE_CHECK_DAMAGED_STRUCTURE);
        if (!strstr(rep.what, cases[c].expect))
            fail_msg("meta case %zu: %s", c, rep.what);
        print_message("meta case %zu: %s\n", c, rep.what);
        assert_int_equal(cache_check(copy, CACHE_CHECK_READER, 10, &rep, &err), 0);
        assert_int_equal(rep.verdict, CACHE_CHECK_DAMAGED_STRUCTURE);
    }
    free(file);
}

/* A writer in another process commits records while the check runs again and again. */
static void test_live_writer(void **state)
{
    const char *dir = *state;
    build(dir, 4, 2, 3);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        cache_env *env = NULL;
        if (cache_open(dir, 0, NULL, &env, NULL) != 0)
            _exit(1);
        struct timespec t0, t;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        for (int i = 0;; i++) {
            clock_gettime(CLOCK_MONOTONIC, &t);
            if (t.tv_sec - t0.tv_sec >= 2)
                break;
            cache_key k;
            test_key(&k, "NVIDIA H100 80GB HBM3", (uint8_t)(i % 3), 1000 + i % 50);
            cache_record rec;
            char sched[64];
            snprintf(sched, sizeof(sched), "tile %d", i % 6);
            test_record(&rec, &k, sched, 500.0 + i % 17, 2000 + (size_t)(i % 5) * 1500, (uint8_t)i);
            int rc = cache_put(env, &rec, NULL, NULL);
            cache_record_free(&rec);
            if (rc != 0)
                _exit(1);
            if (i % 7 == 0)
                cache_delete(env, &k, NULL);
        }
        cache_close(env);
        _exit(0);
    }
    int checks = 0;
    for (;;) {
        cache_check_report rep;
        kt_err err = {0};
        int rc = cache_check(dir, checks % 2 ? CACHE_CHECK_VALUES : 0, 0, &rep, &err);
        if (rc != 0)
            fail_msg("check %d under a writer: %s", checks, err.msg);
        if (rep.verdict != CACHE_CHECK_OK)
            fail_msg("check %d under a writer: %s: %s", checks,
                     cache_check_verdict_name(rep.verdict), rep.what);
        checks++;
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid) {
            assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
            break;
        }
    }
    print_message("%d checks during 2 s of commits: all ok\n", checks);
    assert_true(checks > 1);
}

static void on_bus(int sig)
{
    (void)sig;
    _exit(99); /* a caller's own handler: the check's child must not run it */
}

static void test_caller_signals(void **state)
{
    const char *dir = *state;
    build(dir, 3, 1, 3);
    struct sigaction old_chld, old_bus, sa = {.sa_handler = SIG_IGN};
    sigaction(SIGCHLD, &sa, &old_chld);
    sa.sa_handler = on_bus;
    sigaction(SIGBUS, &sa, &old_bus);
    cache_check_report rep;
    kt_err err = {0};
    int rc = cache_check(dir, CACHE_CHECK_VALUES, 0, &rep, &err);
    sigaction(SIGCHLD, &old_chld, NULL);
    sigaction(SIGBUS, &old_bus, NULL);
    if (rc != 0)
        fail_msg("cache_check with SIGCHLD ignored: %s", err.msg);
    assert_int_equal(rep.verdict, CACHE_CHECK_OK);
    assert_int_equal(rep.records, 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_sound, setup, teardown),
        cmocka_unit_test_setup_teardown(test_damaged_value, setup, teardown),
        cmocka_unit_test_setup_teardown(test_page_sweep, setup, teardown),
        cmocka_unit_test_setup_teardown(test_meta_fields, setup, teardown),
        cmocka_unit_test_setup_teardown(test_live_writer, setup, teardown),
        cmocka_unit_test_setup_teardown(test_caller_signals, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
