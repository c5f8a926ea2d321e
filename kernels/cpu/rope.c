/* rope.c: partial interleaved rotary embedding with the YaRN frequency ramp (spec §3.3).
 *
 * Frequencies and angles are computed in fp32 the way Hugging Face does (fp32 inverse
 * frequencies, fp32 angle = position * frequency, fp32 cos/sin), because at long
 * positions the rounding of the angle is what parity depends on. */
#include "kernels/kernels.h"

#include <math.h>

/* The dimension index at which a frequency completes `rotations` turns over L0 tokens. */
static double dsv4_yarn_corr(double rotations, uint32_t dims, double theta, double l0)
{
    return (dims * log(l0 / (rotations * 2.0 * M_PI))) / (2.0 * log(theta));
}

void dsv4_k_rope_freqs(const dsv4_rope_params *p, float *freq)
{
    uint32_t half = p->dims / 2;
    float lo = 0, hi = 0;

    if (p->yarn) {
        double l = floor(dsv4_yarn_corr(p->beta_fast, p->dims, p->theta, p->original_max_pos));
        double h = ceil(dsv4_yarn_corr(p->beta_slow, p->dims, p->theta, p->original_max_pos));
        lo = (float)(l < 0 ? 0 : l);
        hi = (float)(h > p->dims - 1 ? p->dims - 1 : h);
        if (hi == lo)
            hi += 0.001f;
    }
    for (uint32_t i = 0; i < half; i++) {
        float exponent = (float)(2 * i) / (float)p->dims;
        float pos_freq = (float)pow(p->theta, (double)exponent);
        float extrapolated = 1.0f / pos_freq;
        if (!p->yarn) {
            freq[i] = extrapolated;
            continue;
        }
        float interpolated = 1.0f / ((float)p->factor * pos_freq);
        float ramp = ((float)i - lo) / (hi - lo);
        ramp = ramp < 0 ? 0 : ramp > 1 ? 1 : ramp;
        float keep = 1.0f - ramp; /* HF's inv_freq_extrapolation_factor */
        freq[i] = interpolated * (1.0f - keep) + extrapolated * keep;
    }
}

void dsv4_k_rope(float *x, const float *freq, uint32_t dims, int64_t pos, bool inverse)
{
    float fpos = (float)pos;
    for (uint32_t i = 0; i < dims / 2; i++) {
        float angle = fpos * freq[i];
        float c = cosf(angle), s = sinf(angle);
        if (inverse)
            s = -s;
        float a = x[2 * i], b = x[2 * i + 1];
        x[2 * i] = a * c - b * s;
        x[2 * i + 1] = a * s + b * c;
    }
}
