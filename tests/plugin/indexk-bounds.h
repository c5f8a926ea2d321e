/* indexk-bounds.h: error bounds the indexk tests hold the plugins to, derived from the
 * formats rather than guessed (see indexk-bounds.c for the derivations). */
#ifndef DSV4_TESTS_INDEXK_BOUNDS_H
#define DSV4_TESTS_INDEXK_BOUNDS_H

#include <stdint.h>

typedef enum indexk_fmt { INDEXK_F32, INDEXK_BF16, INDEXK_FP8 } indexk_fmt;

extern const char *const indexk_fmt_names[3];

/* Largest |stored - k| for value k stored in format fmt; scale is the fp8 row scale
 * (ignored by the other formats). */
double indexk_elem_bound(indexk_fmt fmt, float k, float scale);
/* The fp8 row scale stored at slot of a page (the e4m3 bytes come first, then scales). */
float indexk_fp8_scale(const uint8_t *page, uint32_t rows_per_page, uint32_t dim, uint32_t slot);

#endif
