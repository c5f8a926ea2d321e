/* replay.c: main() for the fuzz targets when libFuzzer is not linked (--enable-fuzzing
 * off). Runs LLVMFuzzerTestOneInput once over each file named on the command line, or
 * over each file in a named directory, so the corpus stays a regression test. Options
 * (arguments starting with '-', as libFuzzer takes them) are ignored: the same command
 * line replays a corpus with either build. */
#include "tests/fuzz/fuzz.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

__attribute__((weak)) int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    return 0;
}

static int run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
        return -1;
    }
    long n = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    /* Exactly n bytes, so reading past the input trips ASan as it does under libFuzzer. */
    uint8_t *buf = n >= 0 ? malloc(n ? (size_t)n : 1) : NULL;
    int bad = !buf || fseek(f, 0, SEEK_SET) != 0 || fread(buf, 1, (size_t)n, f) != (size_t)n;
    fclose(f);
    if (bad) {
        fprintf(stderr, "replay: %s: cannot read\n", path);
        free(buf);
        return -1;
    }
    LLVMFuzzerTestOneInput(buf, (size_t)n);
    free(buf);
    return 0;
}

static int name_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int run_dir(const char *dir, size_t *count_p)
{
    DIR *d = opendir(dir);
    if (!d) {
        fprintf(stderr, "replay: %s: %s\n", dir, strerror(errno));
        return -1;
    }
    char **names = NULL;
    size_t n = 0;
    int rc = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.')
            continue;
        char **more = realloc(names, (n + 1) * sizeof(*names));
        if (!more || !(more[n] = malloc(strlen(dir) + strlen(de->d_name) + 2))) {
            names = more ? more : names;
            rc = -1;
            break;
        }
        names = more;
        sprintf(names[n++], "%s/%s", dir, de->d_name);
    }
    closedir(d);
    if (rc == 0)
        qsort(names, n, sizeof(*names), name_cmp);
    for (size_t i = 0; i < n; i++) {
        if (rc == 0 && run_file(names[i]) != 0)
            rc = -1;
        free(names[i]);
    }
    free(names);
    *count_p += n;
    return rc;
}

int main(int argc, char **argv)
{
    LLVMFuzzerInitialize(&argc, &argv);
    size_t count = 0;
    for (int i = 1; i < argc; i++) {
        if (argv[i][0] == '-')
            continue;
        struct stat st;
        if (stat(argv[i], &st) != 0) {
            fprintf(stderr, "replay: %s: %s\n", argv[i], strerror(errno));
            return 1;
        }
        if (S_ISDIR(st.st_mode) ? run_dir(argv[i], &count) != 0 : run_file(argv[i]) != 0)
            return 1;
        count += !S_ISDIR(st.st_mode);
    }
    printf("replay: %zu inputs ran clean\n", count);
    return 0;
}
