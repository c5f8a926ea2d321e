/* tap.c: see tap.h. */
#include "tests/tap.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int planned = -1;
static int run;
static int failed;

void plan(int n)
{
    planned = n;
    printf("1..%d\n", n);
    fflush(stdout);
}

void skip_all(const char *why, ...)
{
    va_list ap;
    printf("1..0 # SKIP ");
    va_start(ap, why);
    vprintf(why, ap);
    va_end(ap);
    printf("\n");
    exit(0);
}

static bool report(bool cond, const char *file, int line, const char *fmt, va_list ap)
{
    run++;
    printf("%sok %d - ", cond ? "" : "not ", run);
    vprintf(fmt, ap);
    printf("\n");
    if (!cond) {
        failed++;
        printf("#   failed at %s:%d\n", file, line);
    }
    fflush(stdout);
    return cond;
}

bool ok_at(bool cond, const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    bool r = report(cond, file, line, fmt, ap);
    va_end(ap);
    return r;
}

bool is_int_at(long long got, long long want, const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    bool r = report(got == want, file, line, fmt, ap);
    va_end(ap);
    if (!r)
        printf("#   got: %lld\n#   expected: %lld\n", got, want);
    return r;
}

bool is_str_at(const char *got, const char *want, const char *file, int line, const char *fmt,
               ...)
{
    va_list ap;
    bool eq = got && want ? strcmp(got, want) == 0 : got == want;
    va_start(ap, fmt);
    bool r = report(eq, file, line, fmt, ap);
    va_end(ap);
    if (!r)
        printf("#   got: '%s'\n#   expected: '%s'\n", got ? got : "(null)", want ? want : "(null)");
    return r;
}

bool has_str_at(const char *got, const char *want, const char *file, int line, const char *fmt,
                ...)
{
    va_list ap;
    bool found = got && want && strstr(got, want) != NULL;
    va_start(ap, fmt);
    bool r = report(found, file, line, fmt, ap);
    va_end(ap);
    if (!r)
        printf("#   got: '%s'\n#   expected to contain: '%s'\n", got ? got : "(null)",
               want ? want : "(null)");
    return r;
}

void skip(int n, const char *why, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, why);
    vsnprintf(buf, sizeof(buf), why, ap);
    va_end(ap);
    for (int i = 0; i < n; i++)
        printf("ok %d # SKIP %s\n", ++run, buf);
    fflush(stdout);
}

void diag(const char *fmt, ...)
{
    va_list ap;
    printf("# ");
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    fflush(stdout);
}

void bail_out(const char *fmt, ...)
{
    va_list ap;
    printf("Bail out! ");
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    exit(255);
}

int done_testing(void)
{
    if (planned < 0) {
        printf("1..%d\n", run);
        planned = run;
    }
    if (run != planned)
        printf("# planned %d tests but ran %d\n", planned, run);
    fflush(stdout);
    return failed == 0 && run == planned ? 0 : 1;
}
