/* log.c: one line per message on stderr, written with a single write so lines from
 * different threads do not interleave. */
#include "core/util/log.h"

#include <stdio.h>
#include <unistd.h>

static dsv4_log_level log_level = DSV4_LOG_INFO;

void dsv4_log_set_level(dsv4_log_level level)
{
    log_level = level;
}

dsv4_log_level dsv4_log_get_level(void)
{
    return log_level;
}

void dsv4_vlog(dsv4_log_level level, const char *subject, const char *fmt, va_list ap)
{
    static const char *const names[] = {"error", "warning", "info", "debug"};
    char line[2048];
    int n;

    if (level > log_level)
        return;
    n = snprintf(line, sizeof(line), "dsv4d: %s: %s: ", names[level], subject ? subject : "core");
    if (n < 0 || (size_t)n >= sizeof(line))
        return;
    int m = vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
    if (m < 0)
        return;
    n += m;
    if ((size_t)n >= sizeof(line) - 1)
        n = (int)sizeof(line) - 2;
    line[n++] = '\n';
    ssize_t w = write(STDERR_FILENO, line, (size_t)n);
    (void)w;
}

void dsv4_log(dsv4_log_level level, const char *subject, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    dsv4_vlog(level, subject, fmt, ap);
    va_end(ap);
}
