/* tap.h: a small TAP producer for C tests run under automake's tap-driver.
 *
 *   plan(3); ok(x == 1, "x is one"); is_int(got, want, "..."); return done_testing();
 *
 * Failures print the expected and actual values as TAP diagnostics ("# ..."). */
#ifndef DSV4_TESTS_TAP_H
#define DSV4_TESTS_TAP_H

#include <stdbool.h>
#include <stdint.h>

void plan(int n);
void skip_all(const char *why, ...) __attribute__((format(printf, 1, 2), noreturn));
bool ok_at(bool cond, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
bool is_int_at(long long got, long long want, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
bool is_str_at(const char *got, const char *want, const char *file, int line, const char *fmt,
               ...) __attribute__((format(printf, 5, 6)));
/* got contains want as a substring */
bool has_str_at(const char *got, const char *want, const char *file, int line, const char *fmt,
                ...) __attribute__((format(printf, 5, 6)));
void skip(int n, const char *why, ...) __attribute__((format(printf, 2, 3)));
void diag(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void bail_out(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
/* Exit status for main: 0 when every test passed and the plan was met. */
int done_testing(void);

#define ok(cond, ...) ok_at((cond), __FILE__, __LINE__, __VA_ARGS__)
#define is_int(got, want, ...) is_int_at((long long)(got), (long long)(want), __FILE__, __LINE__, __VA_ARGS__)
#define is_str(got, want, ...) is_str_at((got), (want), __FILE__, __LINE__, __VA_ARGS__)
#define has_str(got, want, ...) has_str_at((got), (want), __FILE__, __LINE__, __VA_ARGS__)

#endif
