/* replay_main.c - run the fuzz harness over files without libFuzzer.
 *
 *     gcc -O1 -g -fsanitize=address,undefined -Iinclude \
 *         tests/fuzz/favor_fuzz.c tests/fuzz/replay_main.c -lm -o favor_replay
 *     ./favor_replay tests/fuzz/corpus tests/fuzz/repro
 *
 * Each argument is a file (or a directory, whose regular files are all run) fed
 * once to LLVMFuzzerTestOneInput, as libFuzzer would. An invariant violation
 * aborts with a message naming the scenario; the exit status is 0 when every
 * input ran. Works under valgrind (build without sanitizers). */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path)
{
    FILE *fp = fopen(path, "rb");
    unsigned char *buf;
    long len;
    size_t got;
    if (!fp) {
        perror(path);
        return 1;
    }
    if (fseek(fp, 0, SEEK_END) != 0 || (len = ftell(fp)) < 0 || fseek(fp, 0, SEEK_SET) != 0) {
        perror(path);
        fclose(fp);
        return 1;
    }
    buf = (unsigned char *)malloc(len ? (size_t)len : 1);
    if (!buf) {
        fclose(fp);
        return 1;
    }
    got = fread(buf, 1, (size_t)len, fp);
    fclose(fp);
    if (got != (size_t)len) {
        fprintf(stderr, "%s: short read\n", path);
        free(buf);
        return 1;
    }
    if (getenv("FAVOR_FUZZ_VERBOSE")) fprintf(stderr, "favor_replay: %s (%ld bytes)\n", path, len);
    LLVMFuzzerTestOneInput(buf, got);
    free(buf);
    return 0;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* the regular files of a directory, in name order (so runs are reproducible) */
static int run_dir(const char *dir, int *count)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    char **names = NULL;
    size_t n = 0, cap = 0, i;
    int bad = 0;
    if (!d) {
        perror(dir);
        return 1;
    }
    while ((e = readdir(d)) != NULL) {
        char *p;
        struct stat sb;
        size_t len = strlen(dir) + strlen(e->d_name) + 2;
        if (e->d_name[0] == '.') continue;
        p = (char *)malloc(len);
        if (!p) return 1;
        snprintf(p, len, "%s/%s", dir, e->d_name);
        if (stat(p, &sb) != 0 || !S_ISREG(sb.st_mode)) {
            free(p);
            continue;
        }
        if (n == cap) {
            char **nn;
            cap = cap ? 2 * cap : 64;
            nn = (char **)realloc(names, cap * sizeof *names);
            if (!nn) return 1;
            names = nn;
        }
        names[n++] = p;
    }
    closedir(d);
    if (n) qsort(names, n, sizeof *names, cmp_str);
    for (i = 0; i < n; ++i) {
        bad |= run_file(names[i]);
        ++*count;
        free(names[i]);
    }
    free(names);
    return bad;
}

int main(int argc, char **argv)
{
    int i, bad = 0, count = 0;
    if (argc < 2) {
        fprintf(stderr, "usage: %s FILE_OR_DIR...\n", argv[0]);
        return 2;
    }
    for (i = 1; i < argc; ++i) {
        struct stat sb;
        if (stat(argv[i], &sb) == 0 && S_ISDIR(sb.st_mode)) {
            bad |= run_dir(argv[i], &count);
        } else {
            bad |= run_file(argv[i]);
            ++count;
        }
    }
    fprintf(stderr, "favor_replay: %d input(s) run%s\n", count, bad ? ", some could not be read" : "");
    return bad ? 1 : 0;
}
