/* args.h: the number options dsv4ctl repro and matrix share. */
#ifndef DSV4_CORE_REPRO_ARGS_H
#define DSV4_CORE_REPRO_ARGS_H

#include <stdint.h>

/* s as a decimal number in [min, max]. 0, or -EINVAL (not a number) / -ERANGE. */
int dsv4_arg_uint(const char *s, uint64_t min, uint64_t max, uint64_t *v_p);

#endif
