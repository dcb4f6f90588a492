/* ktuned's configuration: one table of options, shared by the config file and the command line
 * (config.h). */
#include "config.h"

#include "ktune_config.h"

#include <ctype.h>
#include <dirent.h>
#include <grp.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* A setter checks value and stores it; on failure it writes why (one phrase) and returns -1. */
typedef int (*kd_setter)(kd_config *c, const char *value, char *why, size_t len);

typedef struct kd_option {
    const char *name; /* the long option without "--", and the config file key */
    kd_setter set;
    const char *arg, *help;
} kd_option;

static int copy_path(char *dst, size_t cap, const char *value, char *why, size_t len)
{
    if (!value[0])
        return snprintf(why, len, "expected a path"), -1;
    if (strlen(value) >= cap)
        return snprintf(why, len, "path longer than %zu bytes", cap - 1), -1;
    memcpy(dst, value, strlen(value) + 1);
    return 0;
}

static int set_socket(kd_config *c, const char *v, char *why, size_t len)
{
    return copy_path(c->socket, sizeof(c->socket), v, why, len);
}

static int set_cache(kd_config *c, const char *v, char *why, size_t len)
{
    return copy_path(c->cache, sizeof(c->cache), v, why, len);
}

static int set_worker(kd_config *c, const char *v, char *why, size_t len)
{
    if (copy_path(c->worker, sizeof(c->worker), v, why, len) < 0)
        return -1;
    if (access(v, X_OK) != 0)
        return snprintf(why, len, "%s is not an executable file", v), -1;
    return 0;
}

/* A decimal integer in lo..hi, the whole string. */
static bool parse_int(const char *s, long lo, long hi, long *out)
{
    char *end = NULL;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (end == s || *end || errno || v < lo || v > hi)
        return false;
    *out = v;
    return true;
}

static int set_gpus(kd_config *c, const char *v, char *why, size_t len)
{
    if (strcmp(v, "auto") == 0) {
        c->gpus_auto = true;
        c->n_gpus = 0;
        return 0;
    }
    char buf[512];
    if (strlen(v) >= sizeof(buf) || !v[0])
        return snprintf(why, len, "expected 'auto' or GPU indices like 0,1"), -1;
    memcpy(buf, v, strlen(v) + 1);
    int n = 0, gpus[KD_MAX_GPUS];
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        long idx = 0;
        while (isspace((unsigned char)*tok))
            tok++;
        if (!parse_int(tok, 0, KD_MAX_GPUS - 1, &idx))
            return snprintf(why, len, "'%s' is not a GPU index (0..%d)", tok, KD_MAX_GPUS - 1), -1;
        for (int i = 0; i < n; i++)
            if (gpus[i] == idx)
                return snprintf(why, len, "GPU %ld is listed twice", idx), -1;
        if (n == KD_MAX_GPUS)
            return snprintf(why, len, "more than %d GPUs", KD_MAX_GPUS), -1;
        gpus[n++] = (int)idx;
    }
    if (n == 0)
        return snprintf(why, len, "expected 'auto' or GPU indices like 0,1"), -1;
    c->gpus_auto = false;
    c->n_gpus = n;
    memcpy(c->gpus, gpus, sizeof(int) * (size_t)n);
    return 0;
}

static int set_compile_jobs(kd_config *c, const char *v, char *why, size_t len)
{
    long n = 0;
    if (strcmp(v, "auto") == 0) {
        c->compile_jobs = 0;
        return 0;
    }
    if (!parse_int(v, 1, 1024, &n))
        return snprintf(why, len, "expected 'auto' or a count 1..1024, not '%s'", v), -1;
    c->compile_jobs = (int)n;
    return 0;
}

static int set_max_clients(kd_config *c, const char *v, char *why, size_t len)
{
    long n = 0;
    if (!parse_int(v, 1, 1000000, &n))
        return snprintf(why, len, "expected a count 1..1000000, not '%s'", v), -1;
    c->max_clients = (int)n;
    return 0;
}

static int set_max_clients_per_uid(kd_config *c, const char *v, char *why, size_t len)
{
    long n = 0;
    if (!parse_int(v, 1, 1000000, &n))
        return snprintf(why, len, "expected a count 1..1000000, not '%s'", v), -1;
    c->max_clients_per_uid = (int)n;
    return 0;
}

static int set_root_reserved(kd_config *c, const char *v, char *why, size_t len)
{
    long n = 0;
    if (!parse_int(v, 0, 1000000, &n))
        return snprintf(why, len, "expected a count 0..1000000, not '%s'", v), -1;
    c->root_reserved = (int)n;
    return 0;
}

static int set_idle_timeout(kd_config *c, const char *v, char *why, size_t len)
{
    if (strcmp(v, "off") == 0) {
        c->idle_timeout_s = 0;
        return 0;
    }
    double s = kd_parse_duration(v);
    if (s < 0.1 || s > 7 * 86400.0)
        return snprintf(why, len,
                        "expected 'off' or a duration from 0.1s to 7 days like 300, 5m or "
                        "1h, not '%s'",
                        v),
               -1;
    c->idle_timeout_s = s;
    return 0;
}

/* "268435456", "256M", "256MiB", "1G": bytes, the suffixes binary. */
static int set_max_buffered(kd_config *c, const char *v, char *why, size_t len)
{
    char *end = NULL;
    errno = 0;
    unsigned long long n = strtoull(v, &end, 10);
    unsigned shift = 0;
    if (end != v && v[0] != '-' && !errno) {
        static const struct {
            const char *suffix;
            unsigned shift;
        } units[] = {{"", 0},     {"B", 0},  {"K", 10},   {"KiB", 10}, {"M", 20},
                     {"MiB", 20}, {"G", 30}, {"GiB", 30}, {"T", 40},   {"TiB", 40}};
        bool known = false;
        for (size_t i = 0; i < KT_ARRAY_LEN(units) && !known; i++)
            if (strcmp(end, units[i].suffix) == 0)
                known = true, shift = units[i].shift;
        if (known && n <= (SIZE_MAX >> shift)) {
            size_t bytes = (size_t)n << shift;
            if (bytes >= KD_MIN_MAX_BUFFERED) {
                c->max_buffered = bytes;
                return 0;
            }
        }
    }
    return snprintf(why, len, "expected a size of at least %zuM like 256M or 1G, not '%s'",
                    KD_MIN_MAX_BUFFERED >> 20, v),
           -1;
}

static int set_log_level(kd_config *c, const char *v, char *why, size_t len)
{
    static const struct {
        const char *name;
        int level;
    } levels[] = {{"err", KT_LOG_ERR},      {"error", KT_LOG_ERR}, {"warn", KT_LOG_WARN},
                  {"warning", KT_LOG_WARN}, {"info", KT_LOG_INFO}, {"debug", KT_LOG_DEBUG}};
    for (size_t i = 0; i < KT_ARRAY_LEN(levels); i++) {
        if (strcmp(v, levels[i].name) == 0) {
            c->log_level = levels[i].level;
            return 0;
        }
    }
    return snprintf(why, len, "expected err, warn, info or debug, not '%s'", v), -1;
}

double kd_parse_duration(const char *s)
{
    return kt_parse_duration(s);
}

static int set_budget_max(kd_config *c, const char *v, char *why, size_t len)
{
    double s = kd_parse_duration(v);
    if (s < 1 || s > KD_DEFAULT_BUDGET_MAX)
        return snprintf(why, len,
                        "expected a duration from 1s to 24h like 600, 10m or 2h, not "
                        "'%s'",
                        v),
               -1;
    c->budget_max_s = s;
    return 0;
}

static int set_tolerance_max(kd_config *c, const char *v, char *why, size_t len)
{
    char *end = NULL;
    double f = strtod(v, &end);
    if (end == v || *end || !(f >= 1) || f > 1e9)
        return snprintf(why, len, "expected a factor from 1 to 1e9, not '%s'", v), -1;
    c->tolerance_max_factor = f;
    return 0;
}

/* A group name, or a numeric gid; the name is looked up now, so a typo stops the start. */
static int set_admin_group(kd_config *c, const char *v, char *why, size_t len)
{
    long gid = -1;
    if (!v[0] || strlen(v) >= sizeof(c->admin_group))
        return snprintf(why, len, "expected a group name or gid"), -1;
    struct group *gr = getgrnam(v);
    if (gr)
        gid = (long)gr->gr_gid;
    else if (!parse_int(v, 0, (long)UINT32_MAX - 1, &gid))
        return snprintf(why, len, "no group '%s' (getent group %s)", v, v), -1;
    c->admin_set = true;
    c->admin_gid = (gid_t)gid;
    memcpy(c->admin_group, v, strlen(v) + 1);
    return 0;
}

static const kd_option options[] = {
    {"socket", set_socket, "PATH",
     "listen here (default: $KTUNE_SOCKET, else " KD_DEFAULT_SOCKET
     "); unused under systemd socket activation"},
    {"cache", set_cache, "DIR",
     "the kernel cache and job journal (default: $KTUNE_CACHE, else " KD_DEFAULT_CACHE ")"},
    {"gpus", set_gpus, "LIST",
     "GPU indices like 0,1, or auto (default: those $CUDA_VISIBLE_DEVICES names, as under "
     "Slurm, else every GPU the driver lists)"},
    {"compile-jobs", set_compile_jobs, "N",
     "NVRTC compile processes in all, split across the GPUs (default: one per CPU)"},
    {"worker", set_worker, "PATH",
     "the ktune-worker executable (default: $KTUNE_WORKER, else next to ktuned)"},
    {"max-clients", set_max_clients, "N", "concurrent connections (default 4096)"},
    {"max-clients-per-uid", set_max_clients_per_uid, "N",
     "concurrent connections of one user; root is not limited (default 64)"},
    {"root-reserved-clients", set_root_reserved, "N",
     "of max-clients, the last N admit root only (default 8)"},
    {"idle-timeout", set_idle_timeout, "T",
     "close a connection idle this long: nothing pending, no watch (default 300s; off)"},
    {"max-buffered", set_max_buffered, "BYTES",
     "request and reply bytes buffered across all connections (default 256M)"},
    {"log-level", set_log_level, "LEVEL", "err, warn, info (default) or debug"},
    {"budget-max", set_budget_max, "T", "largest budget a job may ask for (default 24h)"},
    {"tolerance-max-factor", set_tolerance_max, "F",
     "how many times its dtype's default tolerance a job may ask for (default 10)"},
    {"admin-group", set_admin_group, "GROUP",
     "members may cancel any user's job and submit above priority 0 (default: root only)"},
};

static const kd_option *find_option(const char *name, size_t len)
{
    for (size_t i = 0; i < KT_ARRAY_LEN(options); i++)
        if (strlen(options[i].name) == len && strncmp(options[i].name, name, len) == 0)
            return &options[i];
    return NULL;
}

static void print_help(void)
{
    printf("usage: ktuned [--config PATH] [--OPTION VALUE ...]\n\n"
           "The ktune daemon: runs tuning jobs on this machine's GPUs for clients of its Unix\n"
           "socket (docs/protocol.md). Runs in the foreground (systemd Type=notify, socket\n"
           "activation). SIGTERM drains and exits; a restart resumes the job journal.\n\n"
           "options (also keys of the config file, `key = value`):\n");
    printf("  --%-21s %-6s %s\n", "config", "PATH",
           "the config file (default " KD_DEFAULT_CONFIG ", if present)");
    for (size_t i = 0; i < KT_ARRAY_LEN(options); i++)
        printf("  --%-21s %-6s %s\n", options[i].name, options[i].arg, options[i].help);
    printf("  --%-21s %-6s %s\n", "help", "", "show this help");
    printf("  --%-21s %-6s %s\n", "version", "", "print the version");
}

static char *trim(char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    size_t n = strlen(s);
    while (n > 0 && isspace((unsigned char)s[n - 1]))
        s[--n] = '\0';
    return s;
}

/* Parses one line of the file in place; 0 (also for blank and comment lines) or -EINVAL. */
static int file_line(kd_config *c, char *line, const char *path, int lineno, kt_err *err)
{
    /* a comment starts at '#' at the start of the line or after white space */
    for (char *p = line; *p; p++) {
        if (*p == '#' && (p == line || isspace((unsigned char)p[-1]))) {
            *p = '\0';
            break;
        }
    }
    char *s = trim(line);
    if (!s[0])
        return 0;
    char *eq = strchr(s, '=');
    if (!eq)
        return kt_err_set(err, -EINVAL, "%s:%d: expected 'key = value'", path, lineno);
    *eq = '\0';
    char *key = trim(s), *value = trim(eq + 1);
    size_t vl = strlen(value);
    if (vl >= 2 && value[0] == '"' && value[vl - 1] == '"') {
        value[vl - 1] = '\0';
        value++;
    }
    const kd_option *o = find_option(key, strlen(key));
    if (!o)
        return kt_err_set(err, -EINVAL, "%s:%d: unknown key '%s'", path, lineno, key);
    char why[256];
    if (o->set(c, value, why, sizeof(why)) < 0)
        return kt_err_set(err, -EINVAL, "%s:%d: %s: %s", path, lineno, key, why);
    return 0;
}

static int load_file(kd_config *c, const char *path, bool explicit, kt_err *err)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        if (!explicit && errno == ENOENT)
            return 0;
        return kt_err_set(err, -EINVAL, "%s: cannot read the config file: %s", path,
                          strerror(errno));
    }
    snprintf(c->config, sizeof(c->config), "%s", path);
    char line[8192];
    int lineno = 0, rc = 0;
    while (rc == 0 && fgets(line, sizeof(line), f)) {
        lineno++;
        size_t n = strlen(line);
        if (n == sizeof(line) - 1 && line[n - 1] != '\n') {
            rc = kt_err_set(err, -EINVAL, "%s:%d: line longer than %zu bytes", path, lineno,
                            sizeof(line) - 2);
            break;
        }
        rc = file_line(c, line, path, lineno, err);
    }
    if (rc == 0 && ferror(f))
        rc = kt_err_set(err, -EINVAL, "%s: read error", path);
    fclose(f);
    return rc;
}

/* Splits "--name=value" or "--name value"; *consumed is 1 or 2 argv entries. */
static void cli_option(char **argv, int i, int argc, const char **name, size_t *name_len,
                       const char **value, int *consumed)
{
    const char *a = argv[i] + 2;
    const char *eq = strchr(a, '=');
    *name = a;
    *name_len = eq ? (size_t)(eq - a) : strlen(a);
    *consumed = 1;
    if (eq) {
        *value = eq + 1;
    } else if (i + 1 < argc) {
        *value = argv[i + 1];
        *consumed = 2;
    } else {
        *value = NULL;
    }
}

int kd_config_load(kd_config *c, int argc, char **argv, kt_err *err)
{
    memset(c, 0, sizeof(*c));
    const char *env_socket = getenv("KTUNE_SOCKET"), *env_cache = getenv("KTUNE_CACHE");
    snprintf(c->socket, sizeof(c->socket), "%s",
             env_socket && env_socket[0] ? env_socket : KD_DEFAULT_SOCKET);
    snprintf(c->cache, sizeof(c->cache), "%s",
             env_cache && env_cache[0] ? env_cache : KD_DEFAULT_CACHE);
    c->gpus_auto = true;
    c->max_clients = KD_DEFAULT_MAX_CLIENTS;
    c->max_clients_per_uid = KD_DEFAULT_PER_UID;
    c->root_reserved = -1; /* not given: KD_DEFAULT_ROOT_RESERVED, at most half of max-clients */
    c->idle_timeout_s = KD_DEFAULT_IDLE_TIMEOUT;
    c->max_buffered = KD_DEFAULT_MAX_BUFFERED;
    c->log_level = KT_LOG_INFO;
    c->budget_max_s = KD_DEFAULT_BUDGET_MAX;
    c->tolerance_max_factor = KD_DEFAULT_TOLERANCE_MAX;

    /* First pass: --help, --version, --config; everything must look like an option. */
    const char *config = NULL;
    for (int i = 1; i < argc;) {
        if (strncmp(argv[i], "--", 2) != 0 || !argv[i][2])
            return kt_err_set(err, -EINVAL, "unexpected argument '%s' (see --help)", argv[i]);
        const char *name, *value;
        size_t nl;
        int used;
        cli_option(argv, i, argc, &name, &nl, &value, &used);
        if ((nl == 4 && strncmp(name, "help", 4) == 0)) {
            print_help();
            return KD_CONFIG_EXIT;
        }
        if (nl == 7 && strncmp(name, "version", 7) == 0) {
            printf("ktuned %s\n", KTUNE_VERSION);
            return KD_CONFIG_EXIT;
        }
        if (!value)
            return kt_err_set(err, -EINVAL, "--%.*s needs a value", (int)nl, name);
        if (nl == 6 && strncmp(name, "config", 6) == 0)
            config = value;
        else if (!find_option(name, nl))
            return kt_err_set(err, -EINVAL, "unknown option '--%.*s' (see --help)", (int)nl, name);
        i += used;
    }
    int rc = load_file(c, config ? config : KD_DEFAULT_CONFIG, config != NULL, err);
    if (rc < 0)
        return rc;
    /* Second pass: the command line wins over the file. */
    for (int i = 1; i < argc;) {
        const char *name, *value;
        size_t nl;
        int used;
        cli_option(argv, i, argc, &name, &nl, &value, &used);
        const kd_option *o = find_option(name, nl);
        char why[256];
        if (o && o->set(c, value, why, sizeof(why)) < 0)
            return kt_err_set(err, -EINVAL, "--%s: %s", o->name, why);
        i += used;
    }
    if (c->root_reserved < 0)
        c->root_reserved = KD_DEFAULT_ROOT_RESERVED < c->max_clients / 2 ? KD_DEFAULT_ROOT_RESERVED
                                                                         : c->max_clients / 2;
    else if (c->root_reserved >= c->max_clients)
        return kt_err_set(err, -EINVAL,
                          "root-reserved-clients (%d) must be below max-clients (%d): other "
                          "users would get no connection at all",
                          c->root_reserved, c->max_clients);
    return KD_CONFIG_RUN;
}

int kd_auto_gpus(const char *proc_dir, const char *visible, int *out, int cap)
{
    int listed = -1; /* GPUs the driver lists; -1: no such directory here */
    DIR *dir = opendir(proc_dir);
    if (dir) {
        listed = 0;
        for (struct dirent *e; (e = readdir(dir));)
            listed += e->d_name[0] != '.';
        closedir(dir);
    }
    int n = listed < 0 ? 1 : listed;
    if (visible) {
        /* CUDA numbers the devices CUDA_VISIBLE_DEVICES names 0, 1, ... and stops at the first
         * entry it cannot use ("-1" is the common way to hide all) */
        int named = 0;
        for (const char *p = visible; *p && *p != '-' && *p != ','; named++) {
            p += strcspn(p, ",");
            p += *p == ',';
        }
        n = listed < 0 || named < listed ? named : listed;
    }
    if (n > cap)
        n = cap;
    for (int i = 0; i < n; i++)
        out[i] = i;
    if (n == 0) /* none visible: GPU 0, whose worker then says why it has no device */
        out[n++] = 0;
    return n;
}
