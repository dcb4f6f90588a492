/* ktune cache ls|stats|check|export|import|merge|backup: read and maintain a kernel cache directly, with
 * no daemon.
 *
 * Damaged files: LMDB trusts its own pages, so every command checks the structure of the cache it
 * opens first (cache_check in a child process; what a reader relies on for reads, everything a
 * writer relies on before import and merge) and refuses a damaged one with one line. Should LMDB
 * still fault (a page damaged after the check), a SIGBUS/SIGSEGV handler prints the same kind of
 * line and exits 1 instead of dumping core. */
#include "cache/cache.h"
#include "cli.h"

#include <inttypes.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CACHE_DEFAULT_DIR "/var/lib/ktune/cache"

static const char cache_help[] =
    "usage: ktune cache COMMAND [--cache DIR] [--json] [ARGS]\n"
    "\n"
    "Reads and maintains a kernel cache directly; the daemon need not run.\n"
    "\n"
    "commands:\n"
    "  ls            list the cached kernels (best per key; --all adds runner-ups)\n"
    "  stats         print sizes and counts of the cache\n"
    "  check         check the file's structure and every stored value (exit 1 when damaged)\n"
    "  export FILE   write every kernel record into one bundle file\n"
    "  import FILE   restore a bundle: its keys take exactly the bundle's records\n"
    "  merge SRC     merge a cache directory or a bundle: the faster verified record wins\n"
    "  backup DIR    copy the whole cache (records, trial logs, job journal) into DIR, live\n"
    "\n"
    "options (every command):\n"
    "  --cache DIR   the cache directory (default: $KTUNE_CACHE, else " CACHE_DEFAULT_DIR ")\n"
    "  --json        machine-readable output on stdout\n"
    "  -h, --help    show help ('ktune cache COMMAND --help' for one command)\n";

static const char ls_help[] =
    "usage: ktune cache ls [--cache DIR] [--all] [--json]\n"
    "\n"
    "Lists the cached kernels in key order: GPU, signature prefix, bound shapes, precision,\n"
    "kernel family, median time and normwise error against the fp64 reference. Corrupt records\n"
    "are reported on stderr and skipped.\n"
    "\n"
    "options:\n"
    "  --cache DIR   the cache directory (default: $KTUNE_CACHE, else " CACHE_DEFAULT_DIR ")\n"
    "  --all         also list the runner-ups kept for each key (RANK column)\n"
    "  --json        print {\"cache\", \"records\": [...], \"corrupt\"} with every record field\n"
    "                but the source and cubin bytes\n"
    "  -h, --help    show this help\n";

static const char stats_help[] =
    "usage: ktune cache stats [--cache DIR] [--json]\n"
    "\n"
    "Prints key=value lines: schema version, map size and use, keys, records (runner-ups\n"
    "included), trials, jobs, corrupt records, reader slots.\n"
    "\n"
    "options:\n"
    "  --cache DIR   the cache directory (default: $KTUNE_CACHE, else " CACHE_DEFAULT_DIR ")\n"
    "  --json        print the same as one JSON object\n"
    "  -h, --help    show this help\n";

static const char check_help[] =
    "usage: ktune cache check [--cache DIR] [--json] [--timeout SECONDS]\n"
    "\n"
    "Checks the cache file in a child process: every LMDB page reachable from the current\n"
    "snapshot (page headers, node bounds, page numbers, key order, page ownership, the free\n"
    "list), then every stored record, trial and journal entry (checksum, decoding, key).\n"
    "Verdicts: ok (exit 0); damaged records: those are skipped by every reader, the rest is\n"
    "served (exit 1); damaged structure (exit 1): the file cannot be trusted, or, when the\n"
    "damage is in pages only a writer uses (the free list), readers still serve it but ktuned\n"
    "refuses to write to it. Safe while ktuned runs. docs/operations.md, \"A damaged cache\",\n"
    "says how to repair each.\n"
    "\n"
    "options:\n"
    "  --cache DIR   the cache directory (default: $KTUNE_CACHE, else " CACHE_DEFAULT_DIR ")\n"
    "  --json        print {\"cache\", \"verdict\", \"readable\", \"writable\", \"what\",\n"
    "                \"first_bad\", counts...}\n"
    "  --timeout S   give up after S seconds (default 600)\n"
    "  -h, --help    show this help\n";

static const char export_help[] =
    "usage: ktune cache export FILE [--cache DIR] [--keys DIR] [--json]\n"
    "\n"
    "Writes every kernel record (best and runner-ups, exact stored bytes) into the bundle FILE,\n"
    "replaced atomically, signed with this host's Ed25519 key (KEYS/bundle-signing.key, made on\n"
    "first export; give KEYS/bundle-signing.pub to the hosts that import). Corrupt and\n"
    "implausible records are reported and left out. Trials and jobs are not exported.\n"
    "\n"
    "options:\n"
    "  --cache DIR   the cache directory (default: $KTUNE_CACHE, else " CACHE_DEFAULT_DIR ")\n"
    "  --keys DIR    the key directory (default: $KTUNE_KEYS, else /etc/ktune for root, else\n"
    "                $XDG_CONFIG_HOME/ktune or ~/.config/ktune): docs/operations.md, \"Bundle\n"
    "                signatures\"\n"
    "  --json        print {\"file\", \"records\", \"signer\"}\n"
    "  -h, --help    show this help\n";

static const char import_help[] =
    "usage: ktune cache import FILE [--cache DIR] [--keys DIR] [--trust-unsigned] [--json]\n"
    "\n"
    "Restores the bundle FILE: every key in it gets exactly the bundle's records; other keys are\n"
    "untouched. The whole file is checked first: a damaged bundle, one signed by a key not in\n"
    "KEYS/trusted-keys/ (nor this host's own), an unsigned one, or one with a record faster than\n"
    "its problem's physical floor is refused with nothing written. Records keep the signer.\n"
    "Creates the cache when missing. To keep the faster of both sides, use merge.\n"
    "\n"
    "options:\n"
    "  --cache DIR   the cache directory (default: $KTUNE_CACHE, else " CACHE_DEFAULT_DIR ")\n"
    "  --keys DIR    the key directory (default: $KTUNE_KEYS, else /etc/ktune for root, else\n"
    "                $XDG_CONFIG_HOME/ktune or ~/.config/ktune): docs/operations.md, \"Bundle\n"
    "                signatures\"\n"
    "  --trust-unsigned  also accept an unsigned bundle or one signed by an unknown key\n"
    "                (its records say so in their signer)\n"
    "  --json        print {\"file\", \"records\"}\n"
    "  -h, --help    show this help\n";

static const char backup_help[] =
    "usage: ktune cache backup DIR [--cache DIR] [--json]\n"
    "\n"
    "Writes a consistent copy of the whole cache (kernel records with their runner-ups, trial\n"
    "logs, the job journal) to DIR/data.mdb: one snapshot, compacted, safe while ktuned runs.\n"
    "DIR is created when missing; an earlier backup there is replaced atomically, so a reader\n"
    "or a crash sees the old copy or the new. DIR is then a cache directory: point --cache (or\n"
    "ktuned) at it, or copy it back, to restore; a ktuned started on it resumes the journal's\n"
    "jobs from their trial logs. Unlike export, nothing is signed or left out: it is the\n"
    "operator's own copy (a Slurm task's checkpoint, docs/operations.md, \"A fleet\").\n"
    "\n"
    "options:\n"
    "  --cache DIR   the cache directory (default: $KTUNE_CACHE, else " CACHE_DEFAULT_DIR ")\n"
    "  --json        print {\"cache\", \"backup\", \"bytes\"}\n"
    "  -h, --help    show this help\n";

static const char merge_help[] =
    "usage: ktune cache merge SRC [--cache DIR] [--keys DIR] [--trust-unsigned] [--json]\n"
    "\n"
    "Merges SRC, a cache directory or a bundle file, into the cache in one transaction. Per key\n"
    "the records of both sides are ranked: faster median first, then smaller p90, then older,\n"
    "then smaller checksum; one record per schedule; best plus 3 runner-ups kept. Merging is\n"
    "deterministic and idempotent: merging the same source again changes nothing. A bundle is\n"
    "checked and refused as by import (signature, damage, physical floor); a source directory\n"
    "is the operator's own and needs no signature: its corrupt and implausible records are\n"
    "reported and skipped.\n"
    "\n"
    "options:\n"
    "  --cache DIR   the cache directory (default: $KTUNE_CACHE, else " CACHE_DEFAULT_DIR ")\n"
    "  --keys DIR    the key directory (default: $KTUNE_KEYS, else /etc/ktune for root, else\n"
    "                $XDG_CONFIG_HOME/ktune or ~/.config/ktune): docs/operations.md, \"Bundle\n"
    "                signatures\"\n"
    "  --trust-unsigned  also accept an unsigned bundle or one signed by an unknown key\n"
    "  --json        print {\"source\", \"read\", \"corrupt\", \"implausible\", \"keys\",\n"
    "                \"changed\"}\n"
    "  -h, --help    show this help\n";

typedef struct cache_args {
    char sub[16]; /* "cache ls", for usage errors */
    const char *dir;
    const char *operand; /* FILE or SRC */
    const char *keys;    /* --keys DIR, NULL: the default */
    bool json, all, trust_unsigned;
    double timeout_s; /* check: 0 for the default */
} cache_args;

typedef struct subcommand {
    const char *name;
    const char *help;
    bool needs_operand, has_all, has_timeout, has_keys, has_trust;
    int (*run)(const cache_args *a);
} subcommand;

static int parse(int argc, char **argv, const subcommand *sc, cache_args *a)
{
    snprintf(a->sub, sizeof(a->sub), "cache %s", sc->name);
    for (int i = 2; i < argc; i++) {
        const char *arg = argv[i];
        if (cli_is_help(arg)) {
            fputs(sc->help, stdout);
            return -1;
        } else if (strcmp(arg, "--json") == 0) {
            a->json = true;
        } else if (sc->has_all && strcmp(arg, "--all") == 0) {
            a->all = true;
        } else if (sc->has_timeout && strcmp(arg, "--timeout") == 0) {
            if (++i == argc || (a->timeout_s = kt_parse_duration(argv[i])) <= 0)
                return cli_usage_error(a->sub, "--timeout needs a duration (\"90\", \"10m\")");
        } else if (sc->has_trust && strcmp(arg, "--trust-unsigned") == 0) {
            a->trust_unsigned = true;
        } else if (sc->has_keys && strcmp(arg, "--keys") == 0) {
            if (++i == argc || !argv[i][0])
                return cli_usage_error(a->sub, "--keys needs a directory");
            a->keys = argv[i];
        } else if (strcmp(arg, "--cache") == 0) {
            if (++i == argc)
                return cli_usage_error(a->sub, "--cache needs a directory");
            a->dir = argv[i];
        } else if (arg[0] == '-' && arg[1] != '\0') {
            return cli_usage_error(a->sub, "unknown option '%s'", arg);
        } else if (!sc->needs_operand || a->operand) {
            return cli_usage_error(a->sub, "unexpected argument '%s'", arg);
        } else {
            a->operand = arg;
        }
    }
    if (sc->needs_operand && !a->operand)
        return cli_usage_error(a->sub, "missing %s",
                               strcmp(sc->name, "merge") == 0    ? "SRC"
                               : strcmp(sc->name, "backup") == 0 ? "DIR"
                                                                 : "FILE");
    if (!a->dir || !a->dir[0]) {
        const char *env = getenv("KTUNE_CACHE");
        a->dir = env && env[0] ? env : CACHE_DEFAULT_DIR;
    }
    return CLI_OK;
}

/* ---- damaged files ---- */

static char crash_line[1200]; /* what the fault handler prints; set before the cache is opened */

static void on_fault(int sig)
{
    (void)sig;
    ssize_t n = write(STDERR_FILENO, crash_line, strlen(crash_line));
    (void)n;
    _exit(CLI_FAIL);
}

/* From here on, a fault inside LMDB on dir's pages ends the command with one line. */
static void guard_faults(const char *dir)
{
    snprintf(crash_line, sizeof(crash_line),
             "ktune: cache %.500s is damaged (LMDB structure unreadable): run `ktune cache check "
             "--cache %.500s`, then restore or rebuild it (docs/operations.md)\n",
             dir, dir);
    struct sigaction sa = {.sa_handler = on_fault};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGBUS, &sa, NULL);
    sigaction(SIGSEGV, &sa, NULL);
}

/* Checks the structure of the cache in dir before it is opened: what readers rely on, or (for a
 * write) everything a writer relies on. A missing cache passes (the open says so). */
static int check_before_open(const char *dir, bool for_write)
{
    cache_check_report rep;
    kt_err err = {0};
    int rc = cache_check(dir, for_write ? 0 : CACHE_CHECK_READER, 0, &rep, &err);
    if (rc == -ENOENT)
        return CLI_OK;
    if (rc < 0)
        return cli_error("%s", err.msg);
    if (for_write ? !cache_check_writable(&rep) : rep.verdict == CACHE_CHECK_DAMAGED_STRUCTURE)
        return cli_error("cache %s is damaged (%s): run `ktune cache check --cache %s`, then "
                         "restore or rebuild it (docs/operations.md)",
                         dir, rep.what, dir);
    return CLI_OK;
}

static int open_cache(const cache_args *a, unsigned flags, cache_env **env)
{
    kt_err err = {0};
    int rc = check_before_open(a->dir, !(flags & CACHE_RDONLY));
    if (rc)
        return rc;
    guard_faults(a->dir);
    rc = cache_open(a->dir, flags, NULL, env, &err);
    if (rc == -ENOENT && (flags & CACHE_RDONLY))
        return cli_error("no kernel cache in %s (set --cache DIR or $KTUNE_CACHE)", a->dir);
    if (rc < 0)
        return cli_error("%s", err.msg);
    return CLI_OK;
}

/* ---- ls ---- */

typedef struct ls_row {
    char gpu[CACHE_GPU_NAME_MAX];
    char graph[KT_ESC_MAX]; /* the graph's name, escaped (a bundle's records are untrusted) */
    char sig[13];
    char shapes[256];
    const char *prec;
    char family[32];
    char time[32];
    char error[32];
    int rank;
} ls_row;

typedef struct ls_state {
    bool json;
    json_t *records;
    ls_row *rows;
    size_t n, cap;
} ls_state;

static void shapes_text(const cache_key *k, char *out, size_t cap)
{
    /* records store their shapes sorted by name */
    size_t off = 0;
    out[0] = '\0';
    for (int i = 0; i < k->n_shapes && off < cap; i++) {
        int n = snprintf(out + off, cap - off, "%s%s=%" PRId64, i ? "," : "", k->shapes[i].name,
                         k->shapes[i].value);
        if (n < 0)
            break;
        off += (size_t)n;
    }
    if (k->n_shapes == 0)
        snprintf(out, cap, "-");
}

static void format_time(double ns, char *out, size_t cap)
{
    if (ns < 1e3)
        snprintf(out, cap, "%.0f ns", ns);
    else if (ns < 1e6)
        snprintf(out, cap, "%.2f us", ns / 1e3);
    else
        snprintf(out, cap, "%.3f ms", ns / 1e6);
}

static json_t *record_json(const cache_record *r, int rank)
{
    char sig[2 * OPS_SIG_BYTES + 1], sm[32];
    kt_hex(r->key.sig, OPS_SIG_BYTES, sig);
    const cache_gpu *g = &r->key.gpu;
    snprintf(sm, sizeof(sm), "%d.%d", g->sm_major, g->sm_minor);
    json_t *gpu = json_pack("{s:s, s:s, s:i, s:I, s:i, s:i}", "name", g->name, "sm", sm, "sm_count",
                            g->sm_count, "memory_bytes", (json_int_t)g->mem_bytes, "driver_version",
                            g->driver_version, "cuda_version", g->cuda_version);
    json_t *shapes = json_object();
    for (int i = 0; shapes && i < r->key.n_shapes; i++)
        json_object_set_new(shapes, r->key.shapes[i].name,
                            json_integer((json_int_t)r->key.shapes[i].value));
    json_t *kernels = json_array();
    for (int i = 0; kernels && i < r->n_kernels; i++) {
        const cache_kernel *k = &r->kernels[i];
        json_array_append_new(
            kernels, json_pack("{s:s, s:[I,I,I], s:[I,I,I], s:I, s:i}", "entry", k->entry, "grid",
                               (json_int_t)k->grid[0], (json_int_t)k->grid[1],
                               (json_int_t)k->grid[2], "block", (json_int_t)k->block[0],
                               (json_int_t)k->block[1], (json_int_t)k->block[2], "smem_bytes",
                               (json_int_t)k->smem_bytes, "args", k->n_args));
    }
    json_t *layouts = json_array();
    for (int i = 0; layouts && i < r->n_layouts; i++)
        json_array_append_new(layouts, json_pack("{s:i, s:s}", "input", r->layouts[i].input,
                                                 "layout", r->layouts[i].layout));
    json_t *time =
        json_pack("{s:f, s:f, s:f, s:s, s:I}", "median_ns", r->time_ns, "p10_ns", r->time_p10_ns,
                  "p90_ns", r->time_p90_ns, "mode", r->timing == CACHE_TIMING_HOT ? "hot" : "cold",
                  "reps", (json_int_t)r->reps);
    json_t *verify = json_pack("{s:b, s:f, s:f, s:f}", "ok", r->verified, "err_norm", r->err_norm,
                               "err_max", r->err_max, "tolerance", r->tolerance);
    json_t *baseline =
        json_pack("{s:f, s:f}", "cublaslt_ns", r->cublaslt_ns, "naive_ns", r->naive_ns);
    /* "o" steals each reference, also when json_pack fails */
    return json_pack(
        "{s:i, s:o, s:s, s:o, s:s, s:s, s:s, s:s, s:o, s:o, s:o, s:o, s:o, s:I, "
        "s:I, s:I, s:s, s:i, s:I, s:o}",
        "rank", rank, "gpu", gpu, "signature", sig, "shapes", shapes, "precision",
        ops_precision_name(r->key.precision), "graph", r->graph_name ? r->graph_name : "", "family",
        r->family ? r->family : "", "schedule", r->schedule ? r->schedule : "", "time", time,
        "verify", verify, "baseline", baseline, "kernels", kernels, "layouts", layouts,
        "workspace_bytes", (json_int_t)r->workspace_bytes, "cubin_bytes", (json_int_t)r->cubin_len,
        "source_bytes", (json_int_t)r->source_len, "ktune_version",
        r->ktune_version ? r->ktune_version : "", "nvrtc_version", r->nvrtc_version, "created",
        (json_int_t)r->created, "signer", r->signer ? json_string(r->signer) : json_null());
}

static int ls_cb(const cache_record *r, int rank, void *ctx)
{
    ls_state *s = ctx;
    if (s->json) {
        json_t *o = record_json(r, rank);
        if (!o)
            return -ENOMEM;
        return json_array_append_new(s->records, o) == 0 ? 0 : -ENOMEM;
    }
    if (kt_grow(&s->rows, &s->cap, s->n + 1, sizeof(*s->rows)) < 0)
        return -ENOMEM;
    ls_row *row = &s->rows[s->n++];
    snprintf(row->gpu, sizeof(row->gpu), "%s", r->key.gpu.name);
    kt_escape_str(row->graph, sizeof(row->graph), r->graph_name ? r->graph_name : "-");
    char sig[2 * OPS_SIG_BYTES + 1];
    kt_hex(r->key.sig, OPS_SIG_BYTES, sig);
    snprintf(row->sig, sizeof(row->sig), "%.12s", sig);
    shapes_text(&r->key, row->shapes, sizeof(row->shapes));
    row->prec = ops_precision_name(r->key.precision);
    snprintf(row->family, sizeof(row->family), "%s", r->family ? r->family : "-");
    format_time(r->time_ns, row->time, sizeof(row->time));
    snprintf(row->error, sizeof(row->error), "%.2e", r->err_norm);
    row->rank = rank;
    return 0;
}

static int width(const ls_row *rows, size_t n, size_t off, int min)
{
    int w = min;
    for (size_t i = 0; i < n; i++) {
        int l = (int)strlen((const char *)rows + i * sizeof(*rows) + off);
        w = l > w ? l : w;
    }
    return w;
}

static void print_table(const ls_state *s, bool all)
{
    int wg = width(s->rows, s->n, offsetof(ls_row, gpu), 3);
    int wn = width(s->rows, s->n, offsetof(ls_row, graph), 5);
    int ws = width(s->rows, s->n, offsetof(ls_row, shapes), 6);
    int wf = width(s->rows, s->n, offsetof(ls_row, family), 6);
    int wt = width(s->rows, s->n, offsetof(ls_row, time), 4);
    if (all)
        printf("%-4s ", "RANK");
    printf("%-*s  %-*s  %-12s  %-*s  %-9s  %-*s  %*s  %s\n", wg, "GPU", wn, "GRAPH", "SIGNATURE",
           ws, "SHAPES", "PRECISION", wf, "FAMILY", wt, "TIME", "ERROR");
    for (size_t i = 0; i < s->n; i++) {
        const ls_row *r = &s->rows[i];
        if (all)
            printf("%-4d ", r->rank);
        printf("%-*s  %-*s  %-12s  %-*s  %-9s  %-*s  %*s  %s\n", wg, r->gpu, wn, r->graph, r->sig,
               ws, r->shapes, r->prec, wf, r->family, wt, r->time, r->error);
    }
}

static int run_ls(const cache_args *a)
{
    cache_env *env = NULL;
    int rc = open_cache(a, CACHE_RDONLY, &env);
    if (rc)
        return rc;
    ls_state s = {.json = a->json};
    if (a->json && !(s.records = json_array())) {
        cache_close(env);
        return cli_error("out of memory");
    }
    size_t corrupt = 0;
    kt_err err = {0};
    rc = cache_list(env, NULL, 0, !a->all, ls_cb, &s, &corrupt, &err);
    cache_close(env);
    if (rc < 0) {
        free(s.rows);
        json_decref(s.records);
        return rc == -ENOMEM && !err.msg[0] ? cli_error("out of memory listing %s", a->dir)
                                            : cli_error("%s", err.msg);
    }
    if (a->json) {
        return cli_print_json(json_pack("{s:s, s:o, s:I}", "cache", a->dir, "records", s.records,
                                        "corrupt", (json_int_t)corrupt));
    }
    if (s.n)
        print_table(&s, a->all);
    else
        printf("no kernels in %s\n", a->dir);
    free(s.rows);
    if (corrupt)
        fprintf(stderr, "ktune: %zu corrupt record%s skipped (see the warnings above)\n", corrupt,
                corrupt == 1 ? "" : "s");
    return CLI_OK;
}

/* ---- stats ---- */

static int count_cb(const cache_record *r, int rank, void *ctx)
{
    return 0;
}

static int run_stats(const cache_args *a)
{
    cache_env *env = NULL;
    int rc = open_cache(a, CACHE_RDONLY, &env);
    if (rc)
        return rc;
    cache_stats st;
    size_t corrupt = 0;
    kt_err err = {0};
    rc = cache_stat(env, &st, &err);
    if (rc == 0) /* a full read: every record's checksum */
        rc = cache_list(env, NULL, 0, false, count_cb, NULL, &corrupt, &err);
    cache_close(env);
    if (rc < 0)
        return cli_error("%s", err.msg);
    if (a->json) {
        return cli_print_json(json_pack(
            "{s:s, s:i, s:I, s:I, s:i, s:I, s:I, s:I, s:I, s:I, s:i, s:i}", "cache", a->dir,
            "schema_version", (int)st.schema_version, "map_size", (json_int_t)st.map_size,
            "map_used", (json_int_t)st.map_used, "page_size", (int)st.page_size, "keys",
            (json_int_t)st.keys, "records", (json_int_t)st.records, "trials", (json_int_t)st.trials,
            "jobs", (json_int_t)st.jobs, "corrupt", (json_int_t)corrupt, "readers_used",
            (int)st.readers_used, "readers_max", (int)st.readers_max));
    }
    printf("cache=%s\nschema_version=%u\nmap_size=%zu\nmap_used=%zu\n"
           "page_size=%u\nkeys=%zu\nrecords=%zu\ntrials=%zu\njobs=%zu\ncorrupt=%zu\n"
           "readers_used=%u\nreaders_max=%u\n",
           a->dir, st.schema_version, st.map_size, st.map_used, st.page_size, st.keys, st.records,
           st.trials, st.jobs, corrupt, st.readers_used, st.readers_max);
    return CLI_OK;
}

/* ---- check ---- */

static int run_check(const cache_args *a)
{
    cache_check_report rep;
    kt_err err = {0};
    int rc =
        cache_check(a->dir, CACHE_CHECK_VALUES, a->timeout_s > 0 ? a->timeout_s : 600, &rep, &err);
    if (rc == -ENOENT)
        return cli_error("no kernel cache in %s (set --cache DIR or $KTUNE_CACHE)", a->dir);
    if (rc < 0)
        return cli_error("%s", err.msg);
    bool ok = rep.verdict == CACHE_CHECK_OK;
    /* Damage in pages only a writer uses (the free list, an overflow header, page ownership)
     * leaves the cache readable: say so, since readers then keep serving it. */
    bool readable = rep.verdict != CACHE_CHECK_DAMAGED_STRUCTURE;
    if (!readable) {
        cache_check_report rd;
        readable = cache_check(a->dir, CACHE_CHECK_READER, a->timeout_s > 0 ? a->timeout_s : 600,
                               &rd, &err) == 0 &&
                   rd.verdict != CACHE_CHECK_DAMAGED_STRUCTURE;
    }
    if (a->json) {
        rc = cli_print_json(json_pack(
            "{s:s, s:s, s:b, s:b, s:s, s:s, s:i, s:I, s:i, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, "
            "s:I, s:I, s:I, s:I, s:I, s:f}",
            "cache", a->dir, "verdict", cache_check_verdict_name(rep.verdict), "readable", readable,
            "writable", cache_check_writable(&rep), "what", rep.what, "first_bad", rep.first_bad,
            "signal", rep.signal, "txnid", (json_int_t)rep.txnid, "page_size", (int)rep.page_size,
            "file_bytes", (json_int_t)rep.file_bytes, "pages_used", (json_int_t)rep.pages_used,
            "tree_pages", (json_int_t)rep.tree_pages, "free_pages", (json_int_t)rep.free_pages,
            "records", (json_int_t)rep.records, "records_bad", (json_int_t)rep.records_bad,
            "records_implausible", (json_int_t)rep.records_implausible, "trials",
            (json_int_t)rep.trials, "trials_bad", (json_int_t)rep.trials_bad, "jobs",
            (json_int_t)rep.jobs, "jobs_bad", (json_int_t)rep.jobs_bad, "meta_bad",
            (json_int_t)rep.meta_bad, "overflow_bad", (json_int_t)rep.overflow_bad, "seconds",
            rep.seconds));
        return rc ? rc : ok ? CLI_OK : CLI_FAIL;
    }
    printf("cache %s: %s\n", a->dir,
           ok                                          ? "ok"
           : rep.verdict == CACHE_CHECK_DAMAGED_VALUES ? "damaged records"
           : readable ? "damaged structure (in pages only a writer uses: still readable)"
                      : "damaged structure");
    if (rep.verdict != CACHE_CHECK_DAMAGED_STRUCTURE) {
        printf("  snapshot %" PRIu64 ": %zu bytes, %zu pages of %u bytes in use (%zu in trees, %zu "
               "free)\n",
               rep.txnid, rep.file_bytes, rep.pages_used, rep.page_size, rep.tree_pages,
               rep.free_pages);
        printf("  records %zu (%zu bad, %zu of them implausible), trials %zu (%zu bad), journal "
               "entries %zu (%zu bad), "
               "meta values bad %zu, large values with a damaged header %zu\n",
               rep.records, rep.records_bad, rep.records_implausible, rep.trials, rep.trials_bad,
               rep.jobs, rep.jobs_bad, rep.meta_bad, rep.overflow_bad);
    }
    printf("  checked in %.3f s\n", rep.seconds);
    if (rep.verdict == CACHE_CHECK_DAMAGED_STRUCTURE && readable)
        return cli_error("cache %s is damaged: %s: readers still serve it, ktuned will not write "
                         "to it; export its records and import them into a new cache "
                         "(docs/operations.md)",
                         a->dir, rep.what);
    if (rep.verdict == CACHE_CHECK_DAMAGED_STRUCTURE)
        return cli_error("cache %s is damaged: %s: the file cannot be trusted; restore it from a "
                         "bundle or a copy, or move it aside and rebuild it (docs/operations.md)",
                         a->dir, rep.what);
    if (rep.verdict == CACHE_CHECK_DAMAGED_VALUES)
        return cli_error("cache %s has damaged values: %s: readers skip them and serve the rest%s; "
                         "`ktune cache export` then `import` into a new cache leaves them out "
                         "(docs/operations.md)",
                         a->dir, rep.what,
                         cache_check_writable(&rep) ? "" : ", ktuned will not write to it");
    return CLI_OK;
}

/* ---- export / import / merge ---- */

/* The key directory: --keys, $KTUNE_KEYS, /etc/ktune for root (ktuned's configuration
 * directory), else $XDG_CONFIG_HOME/ktune or ~/.config/ktune. */
static const char *keys_dir(const cache_args *a, char *buf, size_t cap)
{
    const char *env = getenv("KTUNE_KEYS");
    if (a->keys)
        return a->keys;
    if (env && env[0])
        return env;
    if (geteuid() == 0)
        return "/etc/ktune";
    const char *xdg = getenv("XDG_CONFIG_HOME"), *home = getenv("HOME");
    if (xdg && xdg[0])
        snprintf(buf, cap, "%s/ktune", xdg);
    else
        snprintf(buf, cap, "%s/.config/ktune", home && home[0] ? home : ".");
    return buf;
}

/* Trusted: every KEYS/trusted-keys/NAME.pub, and this host's own public key. */
static int load_trust(const cache_args *a, cache_trust *t, char *where, size_t cap)
{
    char buf[4096], own[4200];
    const char *dir = keys_dir(a, buf, sizeof(buf));
    snprintf(where, cap, "%s/" CACHE_TRUSTED_DIR, dir);
    t->where = where;
    t->trust_unsigned = a->trust_unsigned;
    kt_err err = {0};
    if (cache_trust_add_dir(t, where, &err) < 0)
        return cli_error("%s", err.msg);
    snprintf(own, sizeof(own), "%s/" CACHE_SIGN_PUBLIC_FILE, dir);
    uint8_t pk[CACHE_SIGN_PUBLIC_BYTES];
    if (cache_public_key_read(own, pk, NULL) == 0 && cache_trust_add(t, pk) < 0)
        return cli_error("out of memory");
    return CLI_OK;
}

static int run_export(const cache_args *a)
{
    cache_env *env = NULL;
    int rc = open_cache(a, CACHE_RDONLY, &env);
    if (rc)
        return rc;
    size_t n = 0;
    kt_err err = {0};
    char buf[4096];
    const char *dir = keys_dir(a, buf, sizeof(buf));
    cache_signer key;
    bool created = false;
    if ((rc = cache_signer_open(dir, true, &key, &created, &err)) < 0) {
        cache_close(env);
        return cli_error("cannot load or make the bundle signing key: %s", err.msg);
    }
    char id[CACHE_KEY_ID_LEN];
    cache_key_id(key.pk, id);
    rc = cache_export(env, a->operand, &key, &n, &err);
    cache_signer_clear(&key);
    cache_close(env);
    if (rc < 0)
        return cli_error("%s", err.msg);
    if (created)
        fprintf(stderr,
                "ktune: made the bundle signing key %s in %s; hosts that import these bundles "
                "trust it by holding a copy of %s/" CACHE_SIGN_PUBLIC_FILE
                " in their trusted-keys directory\n",
                id, dir, dir);
    if (a->json)
        return cli_print_json(json_pack("{s:s, s:s, s:I, s:s}", "cache", a->dir, "file", a->operand,
                                        "records", (json_int_t)n, "signer", id));
    printf("exported %zu record%s from %s to %s, signed by %s\n", n, n == 1 ? "" : "s", a->dir,
           a->operand, id);
    return CLI_OK;
}

static int run_backup(const cache_args *a)
{
    cache_env *env = NULL;
    int rc = open_cache(a, CACHE_RDONLY, &env);
    if (rc)
        return rc;
    size_t bytes = 0;
    kt_err err = {0};
    rc = cache_backup(env, a->operand, &bytes, &err);
    cache_close(env);
    if (rc < 0)
        return cli_error("%s", err.msg);
    if (a->json)
        return cli_print_json(json_pack("{s:s, s:s, s:I}", "cache", a->dir, "backup", a->operand,
                                        "bytes", (json_int_t)bytes));
    printf("backed up %s to %s/data.mdb (%zu bytes)\n", a->dir, a->operand, bytes);
    return CLI_OK;
}

static int run_import(const cache_args *a)
{
    cache_trust trust = {0};
    char where[4200];
    int rc = load_trust(a, &trust, where, sizeof(where));
    cache_env *env = NULL;
    if (rc || (rc = open_cache(a, 0, &env))) {
        cache_trust_free(&trust);
        return rc;
    }
    size_t n = 0;
    kt_err err = {0};
    rc = cache_import(env, a->operand, &trust, &n, &err);
    cache_trust_free(&trust);
    cache_close(env);
    if (rc < 0)
        return cli_error("%s", err.msg);
    if (a->json)
        return cli_print_json(json_pack("{s:s, s:s, s:I}", "cache", a->dir, "file", a->operand,
                                        "records", (json_int_t)n));
    printf("imported %zu record%s from %s into %s\n", n, n == 1 ? "" : "s", a->operand, a->dir);
    return CLI_OK;
}

static int run_merge(const cache_args *a)
{
    struct stat sb;
    int rc;
    if (stat(a->operand, &sb) == 0 && S_ISDIR(sb.st_mode) &&
        (rc = check_before_open(a->operand, false)))
        return rc;
    cache_trust trust = {0};
    char where[4200];
    cache_env *env = NULL;
    if ((rc = load_trust(a, &trust, where, sizeof(where))) || (rc = open_cache(a, 0, &env))) {
        cache_trust_free(&trust);
        return rc;
    }
    cache_merge_stats st = {0};
    kt_err err = {0};
    rc = cache_merge(env, a->operand, &trust, &st, &err);
    cache_trust_free(&trust);
    cache_close(env);
    if (rc < 0)
        return cli_error("%s", err.msg);
    if (a->json)
        return cli_print_json(json_pack("{s:s, s:s, s:I, s:I, s:I, s:I, s:I}", "cache", a->dir,
                                        "source", a->operand, "read", (json_int_t)st.read,
                                        "corrupt", (json_int_t)st.corrupt, "implausible",
                                        (json_int_t)st.implausible, "keys", (json_int_t)st.keys,
                                        "changed", (json_int_t)st.changed));
    printf("merged %s into %s: %zu records read, %zu keys, %zu changed", a->operand, a->dir,
           st.read, st.keys, st.changed);
    if (st.corrupt)
        printf(", %zu corrupt skipped", st.corrupt);
    if (st.implausible)
        printf(", %zu implausible skipped", st.implausible);
    printf("\n");
    return CLI_OK;
}

static const subcommand subcommands[] = {
    {"ls", ls_help, false, true, false, false, false, run_ls},
    {"stats", stats_help, false, false, false, false, false, run_stats},
    {"check", check_help, false, false, true, false, false, run_check},
    {"export", export_help, true, false, false, true, false, run_export},
    {"import", import_help, true, false, false, true, true, run_import},
    {"merge", merge_help, true, false, false, true, true, run_merge},
    {"backup", backup_help, true, false, false, false, false, run_backup},
};

int cli_cache(int argc, char **argv)
{
    if (argc < 2)
        return cli_usage_error("cache",
                               "missing command (ls, stats, check, export, import, merge)");
    if (cli_is_help(argv[1])) {
        fputs(cache_help, stdout);
        return CLI_OK;
    }
    /* the library's info lines (map growth) are noise on a terminal; warnings stay */
    if (kt_log_threshold > KT_LOG_WARN)
        kt_log_threshold = KT_LOG_WARN;
    for (size_t i = 0; i < KT_ARRAY_LEN(subcommands); i++) {
        if (strcmp(argv[1], subcommands[i].name) != 0)
            continue;
        cache_args a = {0};
        int rc = parse(argc, argv, &subcommands[i], &a);
        if (rc < 0)
            return CLI_OK; /* --help printed */
        if (rc)
            return rc;
        return subcommands[i].run(&a);
    }
    return cli_usage_error(
        "cache", "unknown command '%s' (ls, stats, check, export, import, merge)", argv[1]);
}
