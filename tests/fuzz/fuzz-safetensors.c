/* fuzz-safetensors.c: the safetensors reader (core/model/safetensors.c) on any file: the
 * header length, the JSON header, dtypes, shapes and data offsets. An accepted file must
 * describe only bytes inside it: every tensor is read in full. */
#include "tests/fuzz/fuzz.h"

#include "core/model/safetensors.h"

/* Where the tensor bytes go, so that reading them is not optimised away. */
static volatile unsigned sink;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[512];
    dsv4_st_file *f = dsv4_st_open(dsv4_fuzz_file(data, size), err, sizeof(err));
    if (!f)
        return 0;
    unsigned sum = 0;
    for (size_t i = 0; i < dsv4_st_count(f); i++) {
        const dsv4_st_tensor *t = dsv4_st_at(f, i);
        if (t->nbytes != t->nelem * dsv4_st_dtype_size(t->dtype))
            dsv4_fuzz_fail("%s: %zu bytes for %llu elements", t->name, t->nbytes,
                           (unsigned long long)t->nelem);
        if (dsv4_st_find(f, t->name) != t)
            dsv4_fuzz_fail("%s: find does not return it", t->name);
        for (size_t b = 0; b < t->nbytes; b++)
            sum += ((const uint8_t *)t->data)[b];
    }
    dsv4_st_meta(f, "format");
    dsv4_st_close(f);
    sink = sum;
    return 0;
}
