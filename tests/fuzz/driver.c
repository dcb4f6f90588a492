/* The regression driver: without libFuzzer (a gcc build), each fuzz target is a plain program
 * that runs LLVMFuzzerTestOneInput over every file of the directories (or the files) named on
 * its command line, its committed corpus. It fails when an argument cannot be read or holds no
 * input at all; a broken invariant aborts inside the target. */
#include "fuzz.h"

#include <dirent.h>
#include <errno.h>
#include <string.h>
#include <sys/stat.h>

static int run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "%s: %s\n", path, strerror(errno));
        return -1;
    }
    uint8_t *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len == cap) {
            cap = cap ? cap * 2 : 4096;
            uint8_t *nb = realloc(buf, cap);
            if (!nb) {
                fprintf(stderr, "%s: out of memory\n", path);
                free(buf);
                fclose(f);
                return -1;
            }
            buf = nb;
        }
        size_t n = fread(buf + len, 1, cap - len, f);
        len += n;
        if (n == 0)
            break;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        fprintf(stderr, "%s: read error\n", path);
        free(buf);
        return -1;
    }
    /* a copy of exactly len bytes, so that an overread shows under a sanitizer */
    uint8_t *exact = malloc(len ? len : 1);
    if (!exact) {
        free(buf);
        return -1;
    }
    if (len)
        memcpy(exact, buf, len);
    free(buf);
    LLVMFuzzerTestOneInput(exact, len);
    free(exact);
    return 0;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Runs every regular file of dir in name order; returns how many ran, or -1. */
static long run_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) {
        fprintf(stderr, "%s: %s\n", dir, strerror(errno));
        return -1;
    }
    char **names = NULL;
    size_t n = 0, cap = 0;
    long ran = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            char **nn = realloc(names, cap * sizeof(*names));
            if (!nn)
                goto fail;
            names = nn;
        }
        if (!(names[n] = strdup(e->d_name)))
            goto fail;
        n++;
    }
    closedir(d);
    d = NULL;
    qsort(names, n, sizeof(*names), cmp_str);
    for (size_t i = 0; i < n; i++) {
        char path[4096];
        snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
        struct stat st;
        if (stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
            if (run_file(path) < 0)
                goto fail;
            ran++;
        }
    }
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
    return ran;
fail:
    if (d)
        closedir(d);
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
    return -1;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s CORPUS_DIR_OR_FILE...\n", argv[0]);
        return 2;
    }
    long total = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) < 0) {
            fprintf(stderr, "%s: %s\n", argv[i], strerror(errno));
            return 1;
        }
        long n = S_ISDIR(st.st_mode) ? run_dir(argv[i]) : (run_file(argv[i]) < 0 ? -1 : 1);
        if (n < 0)
            return 1;
        total += n;
    }
    if (total == 0) {
        fprintf(stderr, "%s: no inputs found\n", argv[0]);
        return 1;
    }
    printf("%s: %ld inputs ran, no invariant broken\n", argv[0], total);
    return 0;
}
