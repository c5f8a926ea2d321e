/* checkpoint.c: one safetensors file or a sharded set behind an index (weight_map). */
#include "config.h"

#include "core/model/checkpoint.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/util/status.h"

#define INDEX_NAME "model.safetensors.index.json"

struct dsv4_ckpt {
    dsv4_st_file **files;
    size_t n;
    json_t *weight_map; /* NULL for a single file */
};

void dsv4_ckpt_close(dsv4_ckpt *c)
{
    if (!c)
        return;
    for (size_t i = 0; i < c->n; i++)
        dsv4_st_close(c->files[i]);
    free(c->files);
    json_decref(c->weight_map);
    free(c);
}

/* Open dir/name and append it. */
static int add_file(dsv4_ckpt *c, const char *dir, const char *name, char *err, size_t errlen)
{
    char path[4096];
    if ((size_t)snprintf(path, sizeof(path), "%s/%s", dir, name) >= sizeof(path)) {
        snprintf(err, errlen, "%s/%s: path too long", dir, name);
        return -ENAMETOOLONG;
    }
    dsv4_st_file **v = realloc(c->files, (c->n + 1) * sizeof(*v));
    if (!v) {
        snprintf(err, errlen, "%s: out of memory", path);
        return -ENOMEM;
    }
    c->files = v;
    if (!(c->files[c->n] = dsv4_st_open(path, err, errlen)))
        return DSV4_EFORMAT;
    c->n++;
    return 0;
}

/* A file's name within the folder (every file is opened as dir/name). */
static const char *file_name(const dsv4_st_file *f)
{
    return strrchr(dsv4_st_path(f), '/') + 1;
}

/* The shard index of file name fn, opening it on first use. */
static int shard_of(dsv4_ckpt *c, const char *dir, const char *fn, size_t *idx_p, char *err,
                    size_t errlen)
{
    for (size_t i = 0; i < c->n; i++) {
        if (strcmp(file_name(c->files[i]), fn) == 0) {
            *idx_p = i;
            return 0;
        }
    }
    /* Shards are plain names in the folder: no paths, nothing hidden. */
    if (!fn[0] || fn[0] == '.' || strchr(fn, '/')) {
        snprintf(err, errlen, "%s/" INDEX_NAME ": shard name '%s' is not a plain file name", dir,
                 fn);
        return DSV4_EFORMAT;
    }
    int rc = add_file(c, dir, fn, err, errlen);
    *idx_p = c->n - 1;
    return rc;
}

static int open_index(dsv4_ckpt *c, const char *dir, const char *path, char *err, size_t errlen)
{
    json_error_t jerr;
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) {
        snprintf(err, errlen, "%s: not valid JSON (%s, line %d)", path, jerr.text, jerr.line);
        return DSV4_EFORMAT;
    }
    json_t *wm = json_object_get(root, "weight_map");
    if (!json_is_object(wm)) {
        snprintf(err, errlen, "%s: weight_map is missing or not an object", path);
        json_decref(root);
        return DSV4_EFORMAT;
    }
    c->weight_map = json_incref(wm);
    json_decref(root);
    const char *name;
    json_t *v;
    json_object_foreach(c->weight_map, name, v)
    {
        size_t idx;
        if (!json_is_string(v)) {
            snprintf(err, errlen, "%s: weight_map.%s is not a file name", path, name);
            return DSV4_EFORMAT;
        }
        int rc = shard_of(c, dir, json_string_value(v), &idx, err, errlen);
        if (rc)
            return rc;
        if (!dsv4_st_find(c->files[idx], name)) {
            snprintf(err, errlen, "%s: %s is mapped to %s, which does not hold it", path, name,
                     json_string_value(v));
            return DSV4_EFORMAT;
        }
    }
    if (c->n == 0) {
        snprintf(err, errlen, "%s: weight_map is empty", path);
        return DSV4_EFORMAT;
    }
    return 0;
}

dsv4_ckpt *dsv4_ckpt_open(const char *dir, char *err, size_t errlen)
{
    dsv4_ckpt *c = calloc(1, sizeof(*c));
    if (!c) {
        snprintf(err, errlen, "%s: out of memory", dir);
        return NULL;
    }
    char path[4096];
    snprintf(path, sizeof(path), "%s/" INDEX_NAME, dir);
    int rc;
    if (access(path, F_OK) == 0) {
        rc = open_index(c, dir, path, err, errlen);
    } else {
        snprintf(path, sizeof(path), "%s/model.safetensors", dir);
        if (access(path, F_OK) != 0) {
            snprintf(err, errlen, "%s: no model.safetensors or " INDEX_NAME, dir);
            rc = -ENOENT;
        } else {
            rc = add_file(c, dir, "model.safetensors", err, errlen);
        }
    }
    if (rc) {
        dsv4_ckpt_close(c);
        return NULL;
    }
    return c;
}

const dsv4_st_tensor *dsv4_ckpt_find(const dsv4_ckpt *c, const char *name,
                                     const dsv4_st_file **file_p)
{
    const dsv4_st_file *f = c->files[0];
    if (c->weight_map) {
        const char *fn = json_string_value(json_object_get(c->weight_map, name));
        if (!fn)
            return NULL;
        for (size_t i = 0; i < c->n; i++)
            if (strcmp(file_name(c->files[i]), fn) == 0)
                f = c->files[i];
    }
    const dsv4_st_tensor *t = dsv4_st_find(f, name);
    if (t && file_p)
        *file_p = f;
    return t;
}
