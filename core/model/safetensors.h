/* safetensors.h: read and write safetensors files (the checkpoint format of Hugging Face).
 *
 * Layout: an 8-byte little-endian header length n, n bytes of JSON (an object mapping each
 * tensor name to {dtype, shape, data_offsets: [begin, end]} plus an optional
 * "__metadata__" object of strings), then the data area; offsets are relative to it.
 *
 * Reading maps the file read-only and checks the whole header before anything is returned:
 * header length against the file size and a 100 MB cap, JSON types, known dtypes, shapes,
 * offsets inside the data area, byte counts equal to product(shape) * dtype size (with
 * overflow checks), no overlapping tensors, no duplicate names. A dsv4_st_file owns its
 * mapping; the tensors and their data pointers live until dsv4_st_close(). Data pointers
 * are not necessarily aligned for their dtype: read elements with memcpy.
 *
 * Writing streams: declare every tensor (name, dtype, shape) first, then either write them
 * all from memory (dsv4_st_writer_write) or begin, put the bytes in declaration order and
 * end (so a large checkpoint never has to be in memory at once). The file appears under
 * its name only when complete (written as NAME.tmp, then renamed). */
#ifndef DSV4_CORE_MODEL_SAFETENSORS_H
#define DSV4_CORE_MODEL_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#define DSV4_ST_MAX_DIMS 8
#define DSV4_ST_MAX_HEADER ((uint64_t)100 * 1000 * 1000)

typedef enum dsv4_st_dtype {
    DSV4_ST_F32,
    DSV4_ST_F16,
    DSV4_ST_BF16,
    DSV4_ST_F8_E4M3,
    DSV4_ST_F8_E8M0,
    DSV4_ST_I8,
    DSV4_ST_U8,
    DSV4_ST_I32,
    DSV4_ST_I64,
} dsv4_st_dtype;

typedef struct dsv4_st_tensor {
    const char *name;
    dsv4_st_dtype dtype;
    uint32_t ndim;
    uint64_t shape[DSV4_ST_MAX_DIMS];
    uint64_t nelem; /* product of shape (1 for a scalar) */
    uint64_t begin; /* offset in the data area */
    size_t nbytes;
    const void *data;
} dsv4_st_tensor;

typedef struct dsv4_st_file dsv4_st_file;
typedef struct dsv4_st_writer dsv4_st_writer;

/* "F32", "BF16" ... as written in headers. */
const char *dsv4_st_dtype_name(dsv4_st_dtype dtype);
size_t dsv4_st_dtype_size(dsv4_st_dtype dtype);
/* 0, or DSV4_EFORMAT for a name this reader does not know. */
int dsv4_st_dtype_parse(const char *name, dsv4_st_dtype *dtype_p);
/* "[4,64]" into buf; returns buf. */
const char *dsv4_st_shape_str(uint32_t ndim, const uint64_t *shape, char *buf, size_t len);

/* Open and check a file. NULL on failure with the reason in err, naming the file and,
 * where there is one, the tensor. */
dsv4_st_file *dsv4_st_open(const char *path, char *err, size_t errlen);
void dsv4_st_close(dsv4_st_file *f);
const char *dsv4_st_path(const dsv4_st_file *f);
size_t dsv4_st_count(const dsv4_st_file *f);
/* The i-th tensor in data order (ascending data offset). */
const dsv4_st_tensor *dsv4_st_at(const dsv4_st_file *f, size_t i);
/* NULL when the file has no tensor of that name. */
const dsv4_st_tensor *dsv4_st_find(const dsv4_st_file *f, const char *name);
/* A "__metadata__" string, or NULL. */
const char *dsv4_st_meta(const dsv4_st_file *f, const char *key);

dsv4_st_writer *dsv4_st_writer_new(void);
void dsv4_st_writer_free(dsv4_st_writer *w);
/* Declare a tensor. data (not copied, must live until the file is written) may be NULL
 * when the bytes will be streamed with dsv4_st_writer_put. 0, or DSV4_EFORMAT (duplicate
 * name, bad shape) / -ENOMEM with the reason in err. */
int dsv4_st_writer_add(dsv4_st_writer *w, const char *name, dsv4_st_dtype dtype, uint32_t ndim,
                       const uint64_t *shape, const void *data, char *err, size_t errlen);
/* Write every declared tensor from its data pointer. 0 or a negative code with err. */
int dsv4_st_writer_write(dsv4_st_writer *w, const char *path, char *err, size_t errlen);
/* Streaming: write the header, then the declared tensors' bytes in declaration order, in
 * pieces of any size, then end (which checks the byte count and renames into place). */
int dsv4_st_writer_begin(dsv4_st_writer *w, const char *path, char *err, size_t errlen);
int dsv4_st_writer_put(dsv4_st_writer *w, const void *bytes, size_t n, char *err, size_t errlen);
int dsv4_st_writer_end(dsv4_st_writer *w, char *err, size_t errlen);

#endif
