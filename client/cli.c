#include "cli.h"

#include <string.h>

int cli_error(const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    fprintf(stderr, "ktune: %s\n", line);
    return CLI_FAIL;
}

int cli_usage_error(const char *sub, const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    fprintf(stderr, "ktune %s: %s (see 'ktune %s --help')\n", sub, line, sub);
    return CLI_USAGE;
}

int cli_print_json(json_t *v)
{
    if (!v)
        return cli_error("out of memory building JSON output");
    int rc = json_dumpf(v, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17));
    json_decref(v);
    fputc('\n', stdout);
    return rc == 0 ? CLI_OK : cli_error("cannot write JSON to stdout");
}

bool cli_is_help(const char *s)
{
    return strcmp(s, "--help") == 0 || strcmp(s, "-h") == 0;
}
