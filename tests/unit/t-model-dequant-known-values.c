/* t-model-dequant-known-values: the loader's dequantisation against values worked out by
 * hand (independently of the generator): FP8 128x128 block scales in E8M0 and F32 indexed
 * by block row and column, MXFP4 low nibble = even column with one scale per 32 inputs,
 * expert slices of merged [E, rows, cols] tensors, BF16. */
#include "config.h"

#include <string.h>

#include "core/model/dequant.h"
#include "tests/tap.h"

static dsv4_st_tensor tensor(dsv4_st_dtype dt, uint32_t nd, uint64_t a, uint64_t b, uint64_t c,
                             const void *data)
{
    dsv4_st_tensor t = {.name = "t", .dtype = dt, .ndim = nd, .shape = {a, b, c}, .data = data};
    return t;
}

static unsigned char q8[130 * 260];
static float out[130 * 260];

int main(void)
{
    plan(15);

    /* FP8 [130, 260]: blocks [2, 3]; every element 1.0 (0x38) except one -1.0 (0xb8). */
    memset(q8, 0x38, sizeof(q8));
    q8[129 * 260 + 259] = 0xb8;
    const unsigned char e8[6] = {127, 128, 129, 130, 131, 132}; /* 1 2 4 8 16 32 */
    dsv4_st_tensor w = tensor(DSV4_ST_F8_E4M3, 2, 130, 260, 0, q8);
    dsv4_st_tensor s = tensor(DSV4_ST_F8_E8M0, 2, 2, 3, 0, e8);
    dsv4_wsrc src = {.t = &w, .scale = &s, .rows = 130, .cols = 260};
    dsv4_dequant_rows(&src, 0, 130, out);
    ok(out[0] == 1 && out[127] == 1 && out[128] == 2 && out[255] == 2 && out[256] == 4 &&
           out[259] == 4,
       "fp8 row 0: block columns 0..127, 128..255, 256..259 scale 1, 2, 4");
    ok(out[127 * 260 + 255] == 2 && out[128 * 260] == 8 && out[129 * 260 + 200] == 16,
       "fp8 rows 127 / 128: block rows 0 and 1");
    is_int((int)out[129 * 260 + 259], -32, "fp8 last element: -1.0 times scale 32");
    dsv4_dequant_rows(&src, 128, 2, out);
    ok(out[0] == 8 && out[2 * 260 - 1] == -32, "fp8 from row 128: block row 1 scales");

    const float f32s[6] = {0.5f, 1.5f, 2.5f, 3.5f, 4.5f, 5.5f};
    s = tensor(DSV4_ST_F32, 2, 2, 3, 0, f32s);
    dsv4_dequant_rows(&src, 0, 130, out);
    ok(out[0] == 0.5f && out[200] == 1.5f && out[258] == 2.5f && out[128 * 260 + 1] == 3.5f &&
           out[129 * 260 + 259] == -5.5f,
       "fp8 with F32 block scales");

    /* MXFP4 [2, 64] packed as U8 [2, 32], scales [2, 2]. */
    unsigned char q4[2 * 32] = {0};
    q4[0] = 0x21;                                     /* col 0: 0.5, col 1: 1.0 */
    q4[16] = 0x7f;                                    /* col 32: -6, col 33: 6 */
    q4[32 + 31] = 0x9a;                               /* row 1, col 62: -1.0, col 63: -0.5 */
    const unsigned char s4[4] = {127, 128, 126, 129}; /* row 0: 1, 2; row 1: 0.5, 4 */
    dsv4_st_tensor w4 = tensor(DSV4_ST_U8, 2, 2, 32, 0, q4);
    dsv4_st_tensor sc4 = tensor(DSV4_ST_F8_E8M0, 2, 2, 2, 0, s4);
    dsv4_wsrc s4src = {.t = &w4, .scale = &sc4, .rows = 2, .cols = 64};
    dsv4_dequant_rows(&s4src, 0, 2, out);
    ok(out[0] == 0.5f && out[1] == 1.0f && out[2] == 0, "fp4: low nibble is the even column");
    ok(out[32] == -12 && out[33] == 12, "fp4: second group of 32 uses its own scale (2)");
    ok(out[64 + 62] == -4 && out[64 + 63] == -2, "fp4: row 1 uses row 1's scales (4)");
    w4.dtype = DSV4_ST_I8;
    dsv4_dequant_rows(&s4src, 1, 1, out);
    ok(out[62] == -4 && out[63] == -2 && out[0] == 0, "fp4 as I8, rows from 1");

    /* Merged experts: [2, 4, 64] packed [2, 4, 32] with scales [2, 4, 2]; expert 1, rows
     * 2..3 (the "up" half of a gate_up_proj with I = 2). */
    unsigned char m4[2 * 4 * 32] = {0};
    unsigned char ms[2 * 4 * 2];
    memset(ms, 127, sizeof(ms));
    m4[(1 * 4 + 2) * 32] = 0x05;      /* expert 1, row 2, col 0: 3.0 */
    ms[(1 * 4 + 3) * 2 + 1] = 130;    /* expert 1, row 3, group 1: scale 8 */
    m4[(1 * 4 + 3) * 32 + 31] = 0x30; /* expert 1, row 3, col 63: 1.5 */
    dsv4_st_tensor wm = tensor(DSV4_ST_I8, 3, 2, 4, 32, m4);
    dsv4_st_tensor sm = tensor(DSV4_ST_F8_E8M0, 3, 2, 4, 2, ms);
    dsv4_wsrc msrc = {.t = &wm, .scale = &sm, .mat = 1, .rows = 4, .cols = 64};
    dsv4_dequant_rows(&msrc, 2, 2, out);
    ok(out[0] == 3 && out[64 + 63] == 12, "merged fp4 experts: expert 1, rows 2..3");

    /* Merged FP8 [2, 130, 4] with block scales [2, 2, 1]. */
    static unsigned char m8[2 * 130 * 4];
    memset(m8, 0x38, sizeof(m8));
    const float ms8[4] = {1, 2, 3, 4};
    dsv4_st_tensor w8 = tensor(DSV4_ST_F8_E4M3, 3, 2, 130, 4, m8);
    dsv4_st_tensor s8 = tensor(DSV4_ST_F32, 3, 2, 2, 1, ms8);
    dsv4_wsrc m8src = {.t = &w8, .scale = &s8, .mat = 1, .rows = 130, .cols = 4};
    dsv4_dequant_rows(&m8src, 127, 2, out);
    ok(out[0] == 3 && out[4] == 4, "merged fp8: expert 1 block rows at the 128 boundary");

    /* BF16 and F32, with an expert offset. */
    const uint16_t bf[4] = {0x3f80, 0xc040, 0x0000, 0x4120}; /* 1, -3, 0, 10 */
    dsv4_st_tensor wb = tensor(DSV4_ST_BF16, 3, 2, 1, 2, bf);
    dsv4_wsrc bsrc = {.t = &wb, .mat = 1, .rows = 1, .cols = 2};
    dsv4_dequant_rows(&bsrc, 0, 1, out);
    ok(out[0] == 0 && out[1] == 10, "bf16, expert 1");
    bsrc.mat = 0;
    dsv4_dequant_rows(&bsrc, 0, 1, out);
    ok(out[0] == 1 && out[1] == -3, "bf16, expert 0");
    const float f[4] = {1.25f, -2, 3, 4};
    dsv4_st_tensor wf = tensor(DSV4_ST_F32, 2, 2, 2, 0, f);
    dsv4_wsrc fsrc = {.t = &wf, .rows = 2, .cols = 2};
    dsv4_dequant_rows(&fsrc, 1, 1, out);
    ok(out[0] == 3 && out[1] == 4, "f32 row 1");
    dsv4_dequant_rows(&fsrc, 0, 1, out);
    ok(out[0] == 1.25f && out[1] == -2, "f32 row 0");
    return done_testing();
}
