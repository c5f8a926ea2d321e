/* log.h: the daemon's logger. Messages are lowercase, subject first, detail in
 * parentheses, no final period (STYLE.md). Output goes to stderr, one line per call. */
#ifndef DSV4_CORE_LOG_H
#define DSV4_CORE_LOG_H

#include <dsv4d/plugin.h>

/* Messages above this level are dropped (default DSV4_LOG_INFO). */
void dsv4_log_set_level(dsv4_log_level level);
dsv4_log_level dsv4_log_get_level(void);

void dsv4_log(dsv4_log_level level, const char *subject, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void dsv4_vlog(dsv4_log_level level, const char *subject, const char *fmt, va_list ap);

#endif
