/* indexk-bounds.h: error bounds the indexk tests hold the plugins to, derived from the
 * formats rather than guessed (see indexk-bounds.c for the derivations), and the plugin
 * configuration of a test case. */
#ifndef DSV4_TESTS_INDEXK_BOUNDS_H
#define DSV4_TESTS_INDEXK_BOUNDS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum indexk_fmt { INDEXK_F32, INDEXK_BF16, INDEXK_FP8 } indexk_fmt;

struct dsv4_plugin_desc;
/* The configuration of the fmt plugin desc for a test case (plugtest_config): its defaults,
 * and for fp8 scale_format (NULL: f32) and query_format where not NULL. */
void *indexk_test_config(const struct dsv4_plugin_desc *desc, indexk_fmt fmt,
                         const char *scale_format, const char *query_format);

extern const char *const indexk_fmt_names[3];

/* Largest |stored - k| for value k stored in format fmt; scale is the fp8 row scale
 * (ignored by the other formats). */
double indexk_elem_bound(indexk_fmt fmt, float k, float scale);
/* The fp8 row scale stored at slot of a page (the e4m3 bytes come first, then scales). */
float indexk_fp8_scale(const uint8_t *page, uint32_t rows_per_page, uint32_t dim, uint32_t slot);
/* A query head q[0 .. dim) as the fp8 plugin scores it with query_format = e4m3, written
 * here from its documentation (man/dsv4d-indexk.5), not from the plugin's code:
 * out[d] = e4m3(q[d] / s) * s with s = max(largest finite |q[d]|, 1e-4) / 448, rounded up to
 * a power of two with pow2. Returns s (indexk_elem_bound(INDEXK_FP8, q[d], s) bounds
 * |out[d] - q[d]| for finite q[d]). */
float indexk_e4m3_query(const float *q, uint32_t dim, bool pow2, float *out);

#endif
