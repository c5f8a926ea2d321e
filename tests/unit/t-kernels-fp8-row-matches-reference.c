/* t-kernels-fp8-row-matches-reference: an fp8 KV row (kernels.h, spec §4.2, §5) is bit for
 * bit what an independent encoder written here produces: per block of 64 nope values the
 * scale 2^e with e the least integer where 448 * 2^e >= max(amax, 1e-4) (found by search,
 * not by exponent arithmetic), each value the nearest e4m3 (found by scanning every
 * e4m3 code, ties to the even code), the rope tail as nearest-even bf16 (from double),
 * then the scale bytes and zero padding. Covers zero blocks (the 1e-4 floor), exact ties,
 * a block whose amax is exactly 448 * 2^k and one just above it (no value saturates),
 * tiny values that land on e4m3 subnormals, and several geometries (584 bytes at D 512,
 * R 64). Decoding gives the reference's values, and row_round equals load(store). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "tests/tap.h"

/* e4m3fn code -> value, from the bit layout (bias 7, subnormals, 0x7f/0xff NaN). */
static double ref_e4m3_value(unsigned code)
{
    unsigned s = code >> 7, e = (code >> 3) & 15, m = code & 7;
    double v = e == 0 ? ldexp(m / 8.0, -6) : ldexp(1 + m / 8.0, (int)e - 7);
    return s ? -v : v;
}

/* Nearest e4m3 code to x (|x| <= 448), ties to the even code, by scanning all codes. */
static uint8_t ref_e4m3_encode(double x)
{
    unsigned best = 0;
    double bd = INFINITY;
    for (unsigned c = 0; c < 0x7f; c++) {
        double d = fabs(fabs(x) - ref_e4m3_value(c));
        if (d < bd || (d == bd && (c & 1) == 0 && (best & 1) == 1)) {
            bd = d;
            best = c;
        }
    }
    return (uint8_t)(best | (x < 0 || (x == 0 && signbit(x)) ? 0x80 : 0));
}

/* Nearest bf16 to a finite float, ties to even, from the two truncation neighbours. */
static uint16_t ref_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t lo = u & 0xffff0000u, hi = lo + 0x10000u;
    float flo, fhi;
    memcpy(&flo, &lo, 4);
    memcpy(&fhi, &hi, 4);
    double dl = fabs((double)f - flo), dh = fabs((double)fhi - f);
    if (dl < dh || (dl == dh && ((lo >> 16) & 1) == 0))
        return (uint16_t)(lo >> 16);
    return (uint16_t)(hi >> 16);
}

static int ref_scale_exp(const float *x)
{
    double amax = 1e-4f;
    for (int i = 0; i < 64; i++)
        amax = fmax(amax, fabs(x[i]));
    int e = -127;
    while (ldexp(448.0, e) < amax)
        e++;
    return e;
}

static size_t ref_row_bytes(size_t d, size_t r)
{
    size_t raw = (d - r) + 2 * r + (d - r) / 64;
    return (raw + 7) / 8 * 8;
}

/* The reference row, and its decoded values in dec. */
static void ref_encode(const float *x, size_t d, size_t r, uint8_t *row, float *dec)
{
    size_t nope = d - r, nb = nope / 64;
    memset(row, 0, ref_row_bytes(d, r));
    for (size_t b = 0; b < nb; b++) {
        int e = ref_scale_exp(x + 64 * b);
        row[nope + 2 * r + b] = (uint8_t)(e + 127);
        for (size_t i = 64 * b; i < 64 * b + 64; i++) {
            row[i] = ref_e4m3_encode(ldexp(x[i], -e));
            dec[i] = (float)ldexp(ref_e4m3_value(row[i]), e);
        }
    }
    for (size_t i = 0; i < r; i++) {
        uint16_t h = ref_bf16(x[nope + i]);
        row[nope + 2 * i] = (uint8_t)(h & 0xff);
        row[nope + 2 * i + 1] = (uint8_t)(h >> 8);
        uint32_t u = (uint32_t)h << 16;
        memcpy(&dec[nope + i], &u, 4);
    }
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static double uniform(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (double)(rng_state >> 11) / 9007199254740992.0;
}

/* A row with every interesting kind of block (see the file comment). */
static void fill(float *x, size_t d, size_t r, int variant)
{
    size_t nope = d - r;
    for (size_t i = 0; i < d; i++)
        x[i] = (float)((2 * uniform() - 1) * pow(10, 3 * uniform() - 2));
    for (size_t b = 0; b * 64 < nope; b++) {
        float *blk = x + 64 * b;
        switch ((b + (size_t)variant) % 6) {
        case 0: /* all zero (and one -0): scale from the 1e-4 floor */
            memset(blk, 0, 64 * sizeof(float));
            blk[5] = -0.0f;
            break;
        case 1: /* amax exactly 448 * 2^-3; values halfway between e4m3 neighbours */
            blk[0] = 56.0f;
            for (int i = 1; i < 64; i++) {
                unsigned c = (unsigned)(uniform() * 0x7d) + 1;
                double mid = (ref_e4m3_value(c) + ref_e4m3_value(c + 1)) / 2;
                blk[i] = (float)ldexp(i % 2 ? mid : -mid, -3);
            }
            break;
        case 2: /* amax just above 448 * 2^2: the scale steps up, nothing saturates */
            blk[7] = nextafterf(1792.0f, INFINITY);
            blk[8] = -1792.0f;
            break;
        case 3: /* a wide range: small values fall on e4m3 subnormals */
            blk[0] = 300.0f;
            for (int i = 1; i < 64; i++)
                blk[i] = (float)ldexp(2 * uniform() - 1, -(i % 16));
            break;
        case 4: /* below the floor: amax 3e-5, the scale is the floor's */
            for (int i = 0; i < 64; i++)
                blk[i] = (float)((2 * uniform() - 1) * 3e-5);
            break;
        default: break;
        }
    }
}

static void check_geometry(uint32_t d, uint32_t r, int variants)
{
    dsv4_k_rowfmt fmt = {DSV4_K_FP8, d, r};
    size_t bytes = dsv4_k_row_bytes(&fmt);
    ok(bytes == ref_row_bytes(d, r), "D %u R %u: %zu bytes a row", d, r, bytes);
    float *x = malloc(d * sizeof(float)), *dec = malloc(d * sizeof(float));
    float *got = malloc(d * sizeof(float)), *rnd = malloc(d * sizeof(float));
    uint8_t *row = malloc(bytes), *ref = malloc(bytes);
    int bad_bytes = 0, bad_dec = 0, bad_round = 0, saturated = 0;
    for (int v = 0; v < variants; v++) {
        fill(x, d, r, v);
        memset(row, 0xa5, bytes);
        dsv4_k_row_store(row, x, &fmt);
        ref_encode(x, d, r, ref, dec);
        if (memcmp(row, ref, bytes) != 0 && bad_bytes++ == 0)
            for (size_t i = 0; i < bytes; i++)
                if (row[i] != ref[i]) {
                    diag("variant %d: byte %zu is 0x%02x, reference 0x%02x", v, i, row[i], ref[i]);
                    break;
                }
        for (size_t i = 0; i < d - r; i++)
            saturated += (ref[i] & 0x7f) == 0x7f;
        dsv4_k_row_load(got, row, &fmt);
        bad_dec += memcmp(got, dec, d * sizeof(float)) != 0;
        memcpy(rnd, x, d * sizeof(float));
        dsv4_k_row_round(rnd, &fmt);
        bad_round += memcmp(rnd, dec, d * sizeof(float)) != 0;
    }
    ok(bad_bytes == 0 && saturated == 0,
       "D %u R %u: %d rows encode to the reference bytes (%d differ, %d NaN codes)", d, r, variants,
       bad_bytes, saturated);
    ok(bad_dec == 0, "D %u R %u: rows decode to the reference values (%d differ)", d, r, bad_dec);
    ok(bad_round == 0, "D %u R %u: row_round = load(store) (%d differ)", d, r, bad_round);
    free(x);
    free(dec);
    free(got);
    free(rnd);
    free(row);
    free(ref);
}

int main(void)
{
    plan(4 * 4 + 6);
    check_geometry(512, 64, 24);
    check_geometry(136, 8, 24);
    check_geometry(64, 0, 12);
    check_geometry(192, 128, 12);

    /* known values: the scale byte and codes of a hand-checked block */
    dsv4_k_rowfmt fmt = {DSV4_K_FP8, 64, 0};
    float x[64] = {0};
    uint8_t row[72];
    x[0] = 448.0f;   /* amax 448: e = 0 */
    x[1] = 17.0f;    /* between 16 and 18: tie, to the even code 16 (0x58) */
    x[2] = -19.0f;   /* between 18 and 20: tie, to the even code 20 (0xda) */
    x[3] = 0x1p-10f; /* half the smallest subnormal 2^-9: tie, to 0 */
    dsv4_k_row_store(row, x, &fmt);
    ok(row[64] == 127 && row[0] == 0x7e, "amax 448: scale byte 127 (2^0), 448 is code 0x7e");
    ok(row[1] == 0x58 && row[2] == 0xda && row[3] == 0x00,
       "ties go to the even code (0x%02x 0x%02x 0x%02x)", row[1], row[2], row[3]);
    ok(row[65] == 0 && row[71] == 0, "the padding is zero");
    memset(x, 0, sizeof(x));
    dsv4_k_row_store(row, x, &fmt);
    ok(row[64] == 127 - 22, "a zero block takes the 1e-4 floor: 2^ceil(log2(1e-4/448)) = 2^-22");

    dsv4_k_rowfmt odd = {DSV4_K_FP8, 100, 8}, wide = {DSV4_K_FP8, 8, 16};
    ok(dsv4_k_row_bytes(&odd) == 0 && dsv4_k_row_bytes(&wide) == 0,
       "nope dims not a multiple of 64 (92), or rope above dims, cannot be stored");
    dsv4_k_rowfmt bf = {DSV4_K_BF16, 512, 64}, f32 = {DSV4_K_F32, 512, 64};
    ok(dsv4_k_row_bytes(&bf) == 1024 && dsv4_k_row_bytes(&f32) == 2048,
       "bf16 and f32 rows of 512 are 1024 and 2048 bytes");
    return done_testing();
}
