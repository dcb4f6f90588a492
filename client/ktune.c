/* ktune: the command-line front end. Dispatches to one function per subcommand (cli.h). */
#include "cli.h"
#include "ktune_config.h"

#if KTUNE_HAVE_NVRTC
#include <nvrtc.h>
#endif
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
    fprintf(f, "\nEvery command takes --help and --json. Exit status: 0 success, 1 failure, "
               "2 usage error.\n");
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

int main(int argc, char **argv)
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
    for (size_t i = 0; i < KT_ARRAY_LEN(commands); i++)
        if (strcmp(argv[1], commands[i].name) == 0)
            return commands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "ktune: unknown command '%s' (see 'ktune --help')\n", argv[1]);
    return CLI_USAGE;
}
