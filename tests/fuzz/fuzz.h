/* fuzz.h: what the libFuzzer targets in tests/fuzz share.
 *
 * Each fuzz-*.c defines LLVMFuzzerTestOneInput (and, where it needs one-time setup,
 * LLVMFuzzerInitialize). Built with --enable-fuzzing they link libFuzzer's main; otherwise
 * replay.c supplies a main that runs every corpus file given on the command line once, so
 * `make check` keeps each committed input (seeds and fixed findings) passing. */
#ifndef DSV4_TESTS_FUZZ_FUZZ_H
#define DSV4_TESTS_FUZZ_FUZZ_H

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

/* The readers under test take a path, so the input becomes a file: an anonymous memory
 * file (memfd) rewritten with data on every call, named "/proc/self/fd/<n>". Each call
 * returns the same path; the target aborts when the file cannot be written. */
const char *dsv4_fuzz_file(const uint8_t *data, size_t size);

/* Abort with a message: a target's own check (a round trip that does not hold) failed. */
__attribute__((noreturn, format(printf, 1, 2))) void dsv4_fuzz_fail(const char *fmt, ...);

#endif
