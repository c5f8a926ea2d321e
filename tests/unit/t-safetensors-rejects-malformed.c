/* t-safetensors-rejects-malformed: hostile or broken safetensors files are refused before
 * any tensor is handed out, each with a message naming the file and (where there is one)
 * the tensor; a well-formed file reads back its dtypes, shapes, data and metadata. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/model/safetensors.h"
#include "tests/tap.h"

static char dir[] = "/tmp/t-safetensors-XXXXXX";

/* Write a file: an 8-byte length (hlen, or strlen(header) when hlen is 0), the header,
 * then ndata zero bytes. */
static const char *craft(const char *name, uint64_t hlen, const char *header, size_t ndata)
{
    static char path[600];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *fp = fopen(path, "wb");
    if (!fp)
        bail_out("cannot create %s", path);
    uint64_t n = hlen ? hlen : strlen(header);
    for (int i = 0; i < 8; i++)
        fputc((int)(n >> (8 * i)) & 0xff, fp);
    fputs(header, fp);
    for (size_t i = 0; i < ndata; i++)
        fputc(0, fp);
    fclose(fp);
    return path;
}

static void rejects(const char *name, uint64_t hlen, const char *header, size_t ndata,
                    const char *want)
{
    char err[512] = "";
    const char *path = craft(name, hlen, header, ndata);
    dsv4_st_file *f = dsv4_st_open(path, err, sizeof(err));
    ok(f == NULL, "%s is refused", name);
    has_str(err, want, "%s: message says why", name);
    has_str(err, name, "%s: message names the file", name);
    dsv4_st_close(f);
}

int main(void)
{
    if (!mkdtemp(dir))
        bail_out("mkdtemp failed");
    plan(3 * 20 + 11);

    {
        char path[600], err[256] = "";
        snprintf(path, sizeof(path), "%s/short.safetensors", dir);
        FILE *fp = fopen(path, "wb");
        fputs("abc", fp);
        fclose(fp);
        ok(dsv4_st_open(path, err, sizeof(err)) == NULL, "short.safetensors is refused");
        has_str(err, "too short", "short.safetensors: message says why");
        has_str(err, "short.safetensors", "short.safetensors: message names the file");
    }
    rejects("truncated.safetensors", 4096, "{}", 0, "header length 4096 exceeds the file");
    rejects("huge.safetensors", (uint64_t)1 << 40, "{}", 0, "exceeds the limit");
    rejects("notjson.safetensors", 0, "{\"a\": [1,2", 0, "header is not valid JSON");
    rejects("array.safetensors", 0, "[1,2,3]", 0, "header is a JSON array, expected an object");
    rejects("entry.safetensors", 0, "{\"w\": 5}", 0, "w: header entry is a integer");
    rejects("nodtype.safetensors", 0, "{\"w\": {\"shape\": [1], \"data_offsets\": [0,4]}}", 4,
            "w: header entry needs dtype");
    rejects("dtype.safetensors", 0,
            "{\"w\": {\"dtype\": \"Q4_K\", \"shape\": [1], \"data_offsets\": [0,4]}}", 4,
            "w: unsupported dtype Q4_K");
    rejects("negshape.safetensors", 0,
            "{\"w\": {\"dtype\": \"F32\", \"shape\": [-1], \"data_offsets\": [0,4]}}", 4,
            "w: shape entries must be non-negative");
    rejects("reversed.safetensors", 0,
            "{\"w\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [8,4]}}", 8,
            "w: data_offsets [8,4] end before they begin");
    rejects("outside.safetensors", 0,
            "{\"w\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0,8]}}", 4,
            "w: data_offsets [0,8] outside the data area (4 bytes)");
    rejects("count.safetensors", 0,
            "{\"w\": {\"dtype\": \"F32\", \"shape\": [3], \"data_offsets\": [0,8]}}", 8,
            "w: data_offsets cover 8 bytes, but F32 [3] needs 12");
    rejects("overflow.safetensors", 0,
            "{\"w\": {\"dtype\": \"F32\", \"shape\": [4611686018427387904, 8], "
            "\"data_offsets\": [0,8]}}",
            8, "w: shape is too large");
    rejects("overlap.safetensors", 0,
            "{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0,8]},"
            " \"b\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [4,12]}}",
            12, "b: data_offsets [4,12] overlap a [0,8]");
    rejects("dup.safetensors", 0,
            "{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0,4]},"
            " \"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [4,8]}}",
            8, "names a tensor twice");
    rejects("offsets.safetensors", 0,
            "{\"w\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0]}}", 4,
            "w: data_offsets must be two non-negative integers");
    rejects("dims.safetensors", 0,
            "{\"w\": {\"dtype\": \"F32\", \"shape\": [1,1,1,1,1,1,1,1,1], "
            "\"data_offsets\": [0,4]}}",
            4, "w: shape has 9 dimensions");
    rejects("meta.safetensors", 0, "{\"__metadata__\": {\"format\": 1}}", 0,
            "__metadata__.format is a integer, expected a string");
    rejects("metaobj.safetensors", 0, "{\"__metadata__\": []}", 0,
            "__metadata__ is a array, expected an object");
    rejects("empty.safetensors", 0, "", 0, "header is not valid JSON");

    {
        char path[600], err[256] = "";
        snprintf(path, sizeof(path), "%s/absent.safetensors", dir);
        ok(dsv4_st_open(path, err, sizeof(err)) == NULL, "an absent file is refused");
        has_str(err, "absent.safetensors: cannot open", "message names the file");
    }

    /* A good file: two tensors, out of header order, with metadata. */
    const char *good =
        craft("good.safetensors", 0,
              "{\"__metadata__\": {\"format\": \"pt\"},"
              " \"z\": {\"dtype\": \"I64\", \"shape\": [1], \"data_offsets\": [4,12]},"
              " \"a\": {\"dtype\": \"BF16\", \"shape\": [2,1], \"data_offsets\": [0,4]},"
              " \"e\": {\"dtype\": \"U8\", \"shape\": [0], \"data_offsets\": [12,12]}}  ",
              12);
    char err[256] = "";
    dsv4_st_file *f = dsv4_st_open(good, err, sizeof(err));
    if (!ok(f != NULL, "good.safetensors opens"))
        bail_out("%s", err);
    is_int(dsv4_st_count(f), 3, "three tensors");
    is_str(dsv4_st_at(f, 0)->name, "a", "data order: a first");
    const dsv4_st_tensor *z = dsv4_st_find(f, "z");
    ok(z && z->dtype == DSV4_ST_I64 && z->ndim == 1 && z->shape[0] == 1 && z->nbytes == 8,
       "z is I64 [1], 8 bytes");
    const dsv4_st_tensor *a = dsv4_st_find(f, "a");
    ok(a && a->ndim == 2 && a->shape[0] == 2 && a->shape[1] == 1 && a->nelem == 2, "a is [2,1]");
    ok(z && a && (const char *)z->data - (const char *)a->data == 4,
       "data pointers follow the offsets");
    ok(dsv4_st_find(f, "b") == NULL, "an absent name is not found");
    is_str(dsv4_st_meta(f, "format"), "pt", "metadata format is pt");
    ok(dsv4_st_meta(f, "other") == NULL, "absent metadata is NULL");
    dsv4_st_close(f);

    char cmd[600];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        diag("could not remove %s", dir);
    return done_testing();
}
