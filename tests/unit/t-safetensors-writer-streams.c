/* t-safetensors-writer-streams: what the writer declares and streams reads back through
 * the checked reader (dtypes, shapes, bytes); a stream with the wrong byte count fails and
 * leaves no file behind; duplicate names are refused. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/model/safetensors.h"
#include "tests/tap.h"

int main(void)
{
    char dir[] = "/tmp/t-stwriter-XXXXXX", path[600], err[512] = "";
    if (!mkdtemp(dir))
        bail_out("mkdtemp failed");
    plan(14);

    /* From memory: three dtypes, one of them a scalar. */
    float f[6] = {1, -2, 3.5f, 0, 1e-3f, 7};
    int64_t ids[2] = {5, -1};
    uint8_t sc = 127;
    dsv4_st_writer *w = dsv4_st_writer_new();
    int rc =
        dsv4_st_writer_add(w, "logits", DSV4_ST_F32, 3, (uint64_t[]){1, 2, 3}, f, err, sizeof(err));
    rc |= dsv4_st_writer_add(w, "ids", DSV4_ST_I64, 1, (uint64_t[]){2}, ids, err, sizeof(err));
    rc |= dsv4_st_writer_add(w, "scale", DSV4_ST_F8_E8M0, 0, NULL, &sc, err, sizeof(err));
    ok(rc == 0, "three tensors declared");
    ok(dsv4_st_writer_add(w, "ids", DSV4_ST_I32, 1, (uint64_t[]){2}, ids, err, sizeof(err)) != 0,
       "a second tensor named ids is refused");
    has_str(err, "ids: tensor declared twice", "and says so");
    snprintf(path, sizeof(path), "%s/mem.safetensors", dir);
    rc = dsv4_st_writer_write(w, path, err, sizeof(err));
    ok(rc == 0, "written from memory");
    dsv4_st_writer_free(w);
    dsv4_st_file *r = dsv4_st_open(path, err, sizeof(err));
    if (!ok(r != NULL, "reads back"))
        bail_out("%s", err);
    const dsv4_st_tensor *t = dsv4_st_find(r, "logits");
    ok(t && t->dtype == DSV4_ST_F32 && t->ndim == 3 && t->shape[2] == 3 &&
           memcmp(t->data, f, sizeof(f)) == 0,
       "logits F32 [1,2,3] with its values");
    t = dsv4_st_find(r, "ids");
    ok(t && t->dtype == DSV4_ST_I64 && memcmp(t->data, ids, sizeof(ids)) == 0, "ids I64 [2]");
    t = dsv4_st_find(r, "scale");
    ok(t && t->ndim == 0 && t->nelem == 1 && *(const uint8_t *)t->data == 127, "a scalar F8_E8M0");
    is_str(dsv4_st_meta(r, "format"), "pt", "metadata format pt");
    dsv4_st_close(r);

    /* Streamed in uneven pieces. */
    w = dsv4_st_writer_new();
    uint16_t bf[1000];
    for (int i = 0; i < 1000; i++)
        bf[i] = (uint16_t)(i * 37);
    dsv4_st_writer_add(w, "a", DSV4_ST_BF16, 2, (uint64_t[]){10, 100}, NULL, err, sizeof(err));
    dsv4_st_writer_add(w, "b", DSV4_ST_U8, 1, (uint64_t[]){3}, NULL, err, sizeof(err));
    snprintf(path, sizeof(path), "%s/stream.safetensors", dir);
    rc = dsv4_st_writer_begin(w, path, err, sizeof(err));
    rc |= dsv4_st_writer_put(w, bf, 999, err, sizeof(err));
    rc |= dsv4_st_writer_put(w, (const char *)bf + 999, 1001, err, sizeof(err));
    rc |= dsv4_st_writer_put(w, "xyz", 3, err, sizeof(err));
    rc |= dsv4_st_writer_end(w, err, sizeof(err));
    ok(rc == 0, "streamed in pieces");
    dsv4_st_writer_free(w);
    r = dsv4_st_open(path, err, sizeof(err));
    t = r ? dsv4_st_find(r, "a") : NULL;
    const dsv4_st_tensor *b = r ? dsv4_st_find(r, "b") : NULL;
    ok(t && b && memcmp(t->data, bf, sizeof(bf)) == 0 && memcmp(b->data, "xyz", 3) == 0,
       "streamed bytes read back in declaration order");
    dsv4_st_close(r);

    /* Too few bytes: an error, and neither the file nor its temporary remains. */
    w = dsv4_st_writer_new();
    dsv4_st_writer_add(w, "a", DSV4_ST_F32, 1, (uint64_t[]){4}, NULL, err, sizeof(err));
    snprintf(path, sizeof(path), "%s/short.safetensors", dir);
    rc = dsv4_st_writer_begin(w, path, err, sizeof(err));
    rc |= dsv4_st_writer_put(w, f, 8, err, sizeof(err));
    ok(rc == 0 && dsv4_st_writer_end(w, err, sizeof(err)) != 0, "ending 8 bytes short fails");
    has_str(err, "8 data bytes written, the declared tensors hold 16", "and says so");
    char tmp[620];
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    ok(access(path, F_OK) != 0 && access(tmp, F_OK) != 0, "no file is left behind");
    dsv4_st_writer_free(w);

    char cmd[600];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        diag("could not remove %s", dir);
    return done_testing();
}
