/* ktune: the command-line front end. Dispatches to one function per subcommand (cli.h). */
#include "cli.h"
#include "ktune_config.h"

#if KTUNE_HAVE_NVRTC
#include <nvrtc.h>
#endif
#include <stdlib.h>
#include <string.h>

static const struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} commands[] = {
    {"check", cli_check, "validate a graph; print its signature, output shapes, FLOPs, bytes"},
#if KTUNE_HAVE_NVRTC
    {"space", cli_space, "enumerate fusion partitions, families and pruned schedules"},
    {"compile", cli_compile, "emit candidates and compile them with NVRTC (no GPU needed)"},
#endif
    {"tune", cli_tune, "tune a graph on a GPU through ktuned (--local: in this process)"},
    {"batch", cli_batch, "submit a JSONL file of tuning jobs to ktuned and wait for them"},
    {"jobs", cli_jobs, "list ktuned's jobs"},
    {"status", cli_status, "show one job"},
    {"watch", cli_watch, "follow a job until it ends"},
    {"cancel", cli_cancel, "cancel a queued or running job"},
    {"gpus", cli_gpus, "list ktuned's GPUs"},
    {"stats", cli_stats, "show ktuned's state and its cache"},
    {"cache", cli_cache, "inspect, export, import and merge a kernel cache (no daemon needed)"},
    {"lookup", cli_lookup, "show the cached kernel a deployed program would get (no daemon)"},
    {"trials", cli_trials, "list the candidates a tuning job measured or rejected (no daemon)"},
    {"report", cli_report, "write a tuning job's HTML page: trials plotted, winner, source"},
};

static void print_help(FILE *f)
{
    fprintf(f, "usage: ktune [--version] [--help] COMMAND [ARGS]\n\n"
               "ktune tunes GPU kernels for op subgraphs and caches the fastest verified ones.\n\n"
               "commands:\n");
    for (size_t i = 0; i < KT_ARRAY_LEN(commands); i++)
        fprintf(f, "  %-8s %s\n", commands[i].name, commands[i].summary);
    fprintf(f, "\n'ktune help COMMAND' (or 'ktune COMMAND --help') shows a command's options; every\n"
               "option takes its value as '--opt value' or '--opt=value'. Most commands take --json.\n"
               "Exit status: 0 success, 1 failure, 2 usage error.\n");
}

/* Edit distance (insertions, deletions, substitutions, adjacent swaps) of two short words. */
static int distance(const char *a, const char *b)
{
    int la = (int)strlen(a), lb = (int)strlen(b);
    if (la > 31 || lb > 31)
        return 99;
    int d[32][32];
    for (int i = 0; i <= la; i++)
        for (int j = 0; j <= lb; j++) {
            if (!i || !j) {
                d[i][j] = i + j;
                continue;
            }
            int v = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
            v = d[i - 1][j] + 1 < v ? d[i - 1][j] + 1 : v;
            v = d[i][j - 1] + 1 < v ? d[i][j - 1] + 1 : v;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] && d[i - 2][j - 2] + 1 < v)
                v = d[i - 2][j - 2] + 1;
            d[i][j] = v;
        }
    return d[la][lb];
}

/* The command a mistyped name most likely meant: within two edits, or the one it begins; NULL
 * when none is close or two are equally close. */
static const char *nearest_command(const char *name)
{
    const char *best = NULL;
    int best_d = 3, ties = 0;
    for (size_t i = 0; i < KT_ARRAY_LEN(commands); i++) {
        int d = strncmp(commands[i].name, name, strlen(name)) == 0 && name[0] ? 1
                                                                                : distance(name, commands[i].name);
        if (d < best_d) {
            best = commands[i].name;
            best_d = d;
            ties = 0;
        } else if (d == best_d) {
            ties++;
        }
    }
    return ties ? NULL : best;
}

static int print_version(void)
{
    printf("ktune %s\n", KTUNE_VERSION);
#if KTUNE_HAVE_NVRTC
    int major = 0, minor = 0;
    if (nvrtcVersion(&major, &minor) == NVRTC_SUCCESS)
        printf("nvrtc %d.%d\n", major, minor);
#else
    printf("nvrtc not built in\n");
#endif
    return CLI_OK;
}

/* One grammar for every command's options: "--opt=value" is "--opt value" (split here, before
 * any command parses; "--" ends the options). *out is malloc'd, NULL-terminated. */
static char **split_inline_values(int argc, char **argv, int *out_argc)
{
    char **out = calloc((size_t)argc * 2 + 1, sizeof(*out));
    if (!out)
        return NULL;
    int n = 0;
    bool options = true;
    for (int i = 0; i < argc; i++) {
        char *a = argv[i], *eq = strchr(a, '=');
        if (options && strcmp(a, "--") == 0)
            options = false;
        if (options && i > 0 && strncmp(a, "--", 2) == 0 && eq && eq > a + 2) {
            *eq = '\0'; /* argv's strings are ours to change */
            out[n++] = a;
            out[n++] = eq + 1;
        } else {
            out[n++] = a;
        }
    }
    *out_argc = n;
    return out;
}

static int run(int argc, char **argv)
{
    if (argc < 2) {
        print_help(stderr);
        return CLI_USAGE;
    }
    if (cli_is_help(argv[1])) {
        print_help(stdout);
        return CLI_OK;
    }
    if (strcmp(argv[1], "--version") == 0)
        return print_version();
    /* ktune help [COMMAND]: the command's --help */
    bool help = strcmp(argv[1], "help") == 0;
    if (help && argc == 2) {
        print_help(stdout);
        return CLI_OK;
    }
    const char *name = help ? argv[2] : argv[1];
    for (size_t i = 0; i < KT_ARRAY_LEN(commands); i++) {
        if (strcmp(name, commands[i].name) != 0)
            continue;
        if (help) {
            char *h[] = {argv[2], "--help", NULL};
            return commands[i].run(2, h);
        }
        return commands[i].run(argc - 1, argv + 1);
    }
    const char *near = nearest_command(name);
    fprintf(stderr, "ktune: unknown command '%s'%s%s%s (see 'ktune --help')\n", name,
            near ? "; did you mean '" : "", near ? near : "", near ? "'?" : "");
    return CLI_USAGE;
}

/* The split arguments: a global, so that they stay reachable when a command exits the process
 * itself (exit after --help), as leak checkers see it. */
static char **split_argv;

int main(int argc, char **argv)
{
    split_argv = split_inline_values(argc, argv, &argc);
    if (!split_argv) {
        fprintf(stderr, "ktune: out of memory\n");
        return CLI_FAIL;
    }
    int rc = run(argc, split_argv);
    free(split_argv);
    return rc;
}
