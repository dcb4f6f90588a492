/* Helpers of the fault drills (drill_util.h). */
#include "drill_util.h"

#include "cache/cache.h"
#include "ops/ops.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <lmdb.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ---- the cache ---- */

typedef enum value_kind { V_RECORD, V_TRIAL, V_JOB } value_kind;

/* Verifies and decodes every value of one database; counts into *n and *bad. */
static int walk_db(MDB_txn *txn, const char *name, value_kind kind, drill_cache_report *r,
                   size_t *n, size_t *bad)
{
    MDB_dbi dbi;
    int mrc = mdb_dbi_open(txn, name, 0, &dbi);
    if (mrc == MDB_NOTFOUND)
        return 0;
    if (mrc != MDB_SUCCESS) {
        fprintf(stderr, "drill: cannot open database %s: %s\n", name, mdb_strerror(mrc));
        return -EBADMSG;
    }
    MDB_cursor *cur = NULL;
    if ((mrc = mdb_cursor_open(txn, dbi, &cur)) != MDB_SUCCESS) {
        fprintf(stderr, "drill: cursor on %s: %s\n", name, mdb_strerror(mrc));
        return -EBADMSG;
    }
    MDB_val k, v;
    for (mrc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); mrc == MDB_SUCCESS;
         mrc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        (*n)++;
        bool ok = cache_value_check(v.mv_data, v.mv_size);
        if (ok && kind == V_RECORD) {
            cache_record rec;
            cache_record_init(&rec);
            ok = cache_record_decode(v.mv_data, v.mv_size, &rec, NULL) == 0;
            cache_record_free(&rec);
        } else if (ok && kind == V_TRIAL) {
            cache_trial t;
            ok = cache_trial_decode(v.mv_data, v.mv_size, &t, NULL) == 0;
            if (ok && (unsigned)t.status < 8)
                r->trials_by_status[t.status]++;
        }
        if (!ok)
            (*bad)++;
    }
    mdb_cursor_close(cur);
    if (mrc != MDB_NOTFOUND) {
        fprintf(stderr, "drill: walking %s: %s\n", name, mdb_strerror(mrc));
        return -EBADMSG;
    }
    return 0;
}

static int raw_walk(const char *dir, drill_cache_report *r)
{
    MDB_env *env = NULL;
    MDB_txn *txn = NULL;
    int mrc = mdb_env_create(&env);
    if (mrc != MDB_SUCCESS)
        return -ENOMEM;
    mdb_env_set_maxdbs(env, 4);
    int rc = 0;
    if ((mrc = mdb_env_open(env, dir, MDB_RDONLY, 0664)) != MDB_SUCCESS) {
        fprintf(stderr, "drill: LMDB cannot open %s: %s\n", dir, mdb_strerror(mrc));
        rc = -EBADMSG;
        goto out;
    }
    if ((mrc = mdb_txn_begin(env, NULL, MDB_RDONLY, &txn)) != MDB_SUCCESS) {
        fprintf(stderr, "drill: LMDB read transaction on %s: %s\n", dir, mdb_strerror(mrc));
        rc = -EBADMSG;
        goto out;
    }
    if ((rc = walk_db(txn, "kernels", V_RECORD, r, &r->records, &r->records_bad)) == 0 &&
        (rc = walk_db(txn, "trials", V_TRIAL, r, &r->trials, &r->trials_bad)) == 0)
        rc = walk_db(txn, "jobs", V_JOB, r, &r->jobs, &r->jobs_bad);
    mdb_txn_abort(txn);
out:
    mdb_env_close(env);
    return rc;
}

static int count_record(const cache_record *rec, int rank, void *ctx)
{
    (void)rec, (void)rank;
    ((drill_cache_report *)ctx)->listed++;
    return 0;
}

static int count_job(const cache_job *j, void *ctx)
{
    drill_cache_report *r = ctx;
    if ((unsigned)j->state < 8)
        r->jobs_by_state[j->state]++;
    return 0;
}

int drill_cache_check(const char *dir, drill_cache_report *out)
{
    memset(out, 0, sizeof(*out));
    int rc = raw_walk(dir, out);
    if (rc < 0)
        return rc;
    /* journal entries: their decoder is cache_job_foreach's */
    cache_env *env = NULL;
    kt_err err = {0};
    if ((rc = cache_open(dir, 0, NULL, &env, &err)) < 0) {
        fprintf(stderr, "drill: cache_open %s: %s\n", dir, err.msg);
        return rc;
    }
    size_t job_bad = 0;
    if ((rc = cache_list(env, NULL, 0, false, count_record, out, &out->listed_corrupt, &err)) < 0 ||
        (rc = cache_job_foreach(env, count_job, out, &job_bad, &err)) < 0)
        fprintf(stderr, "drill: reading %s: %s\n", dir, err.msg);
    if (job_bad > out->jobs_bad)
        out->jobs_bad = job_bad;
    cache_close(env);
    return rc;
}

void drill_cache_describe(const drill_cache_report *r, char *buf, size_t len)
{
    snprintf(buf, len,
             "records %zu (%zu bad, %zu served, %zu skipped), trials %zu (%zu bad; ok %zu, fault "
             "%zu), jobs %zu (%zu bad; done %zu, failed %zu)",
             r->records, r->records_bad, r->listed, r->listed_corrupt, r->trials, r->trials_bad,
             r->trials_by_status[CACHE_TRIAL_OK], r->trials_by_status[CACHE_TRIAL_FAULT], r->jobs,
             r->jobs_bad, r->jobs_by_state[CACHE_JOB_DONE], r->jobs_by_state[CACHE_JOB_FAILED]);
}

/* ---- graphs ---- */

int drill_graph_msgpack(const char *json, void **mp, size_t *len)
{
    ops_graph *g = NULL;
    ops_diag d = {0};
    int rc = ops_graph_from_json(json, strlen(json), &g, &d);
    if (rc < 0) {
        fprintf(stderr, "drill: graph: %s\n", d.msg);
        return rc;
    }
    rc = ops_graph_to_msgpack(g, mp, len);
    ops_graph_free(g);
    return rc;
}

/* ---- processes ---- */

double drill_cpu_seconds(pid_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')'); /* the command name may hold spaces */
    if (!p)
        return -1;
    /* after ')': state (3), then fields 4..13, utime (14), stime (15) */
    unsigned long long ut = 0, st = 0;
    if (sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
        return -1;
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

int drill_count_fds(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
    DIR *d = opendir(path);
    if (!d)
        return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

int drill_run(char *const argv[], int uid, int gid, double timeout_s, int *status, char *out,
              size_t len)
{
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0)
        return -errno;
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        int e = errno;
        close(p[0]);
        close(p[1]);
        return -e;
    }
    if (pid == 0) {
        dup2(p[1], 1);
        dup2(p[1], 2);
        if (uid >= 0 &&
            (setgroups(0, NULL) < 0 || setresgid((gid_t)gid, (gid_t)gid, (gid_t)gid) < 0 ||
             setresuid((uid_t)uid, (uid_t)uid, (uid_t)uid) < 0)) {
            fprintf(stderr, "drill: cannot become uid %d gid %d: %s\n", uid, gid, strerror(errno));
            _exit(126);
        }
        execv(argv[0], argv);
        fprintf(stderr, "drill: exec %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    close(p[1]);
    size_t off = 0;
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int rc = 0;
    for (;;) {
        struct timespec t;
        clock_gettime(CLOCK_MONOTONIC, &t);
        double left =
            timeout_s - ((double)(t.tv_sec - t0.tv_sec) + (t.tv_nsec - t0.tv_nsec) * 1e-9);
        if (left <= 0) {
            kill(pid, SIGKILL);
            rc = -ETIMEDOUT;
            break;
        }
        struct pollfd pfd = {.fd = p[0], .events = POLLIN};
        if (poll(&pfd, 1, (int)(left * 1000) + 1) <= 0)
            continue;
        char buf[4096];
        ssize_t n = read(p[0], buf, sizeof(buf));
        if (n <= 0)
            break;
        size_t take = (size_t)n;
        if (len && off + take > len - 1)
            take = len - 1 - off;
        if (len)
            memcpy(out + off, buf, take);
        off += take;
    }
    if (len)
        out[off] = '\0';
    close(p[0]);
    int st = 0;
    waitpid(pid, &st, 0);
    if (status)
        *status = st;
    if (rc < 0)
        fprintf(stderr, "drill: %s did not exit within %.0f s\n", argv[0], timeout_s);
    return rc;
}
