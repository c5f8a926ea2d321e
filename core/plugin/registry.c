/* registry.c: the plugin search path and the loading pipeline (registry.h, DESIGN.md §3).
 *
 * Every file that is looked at becomes an entry, loaded or not, so `dsv4ctl list` can show
 * why a plugin is missing. An entry's family/name come from its file name
 * dsv4-<family>-<name>.so ("?" when the file is not named that way); once the name stage
 * has passed they are also the descriptor's. Only loaded entries keep their dlopen handle.
 */
#include "config.h"

#include "core/plugin/registry.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/plugin/family.h"
#include "core/util/status.h"

/* The descriptor as ABI 1.0 defined it ends with `ops`; a plugin that claims less than
 * that was not built against any version of plugin.h. */
#define DESC_SIZE_1_0 (offsetof(dsv4_plugin_desc, ops) + sizeof(((dsv4_plugin_desc *)0)->ops))

#define FILE_PREFIX "dsv4-"
#define FILE_SUFFIX ".so"

struct entry {
    dsv4_plugin_entry pub;
    void *handle; /* only while pub.stage == DSV4_STAGE_OK */
    char *path;
    char *family; /* NULL when the file name is not dsv4-<family>-<name>.so */
    char *name;
    char *reason; /* NULL when ok */
};

struct dsv4_registry {
    const dsv4_host *host;
    struct entry **v; /* pointers, so entries handed out stay put while the array grows */
    size_t n, cap;
};

/* Directories already scanned, by identity, so a directory named twice in the search path
 * does not report every plugin in it as a duplicate of itself. */
struct dir_id {
    dev_t dev;
    ino_t ino;
};
struct seen_dirs {
    struct dir_id *v;
    size_t n;
};

dsv4_registry *dsv4_registry_new(const dsv4_host *host)
{
    dsv4_registry *reg = calloc(1, sizeof(*reg));

    if (!reg)
        return NULL;
    reg->host = host ? host : dsv4_host_default();
    return reg;
}

static void entry_free(struct entry *e)
{
    if (e->handle)
        dlclose(e->handle);
    free(e->path);
    free(e->family);
    free(e->name);
    free(e->reason);
    free(e);
}

void dsv4_registry_free(dsv4_registry *reg)
{
    if (!reg)
        return;
    /* Last loaded first, the reverse of dlopen order. */
    while (reg->n > 0)
        entry_free(reg->v[--reg->n]);
    free(reg->v);
    free(reg);
}

static const char *base_name(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

/* Split dsv4-<family>-<name>.so; the family never holds a '-', the name may. */
static int parse_file_name(struct entry *e)
{
    const char *base = base_name(e->path);
    size_t len = strlen(base);
    size_t pre = strlen(FILE_PREFIX), suf = strlen(FILE_SUFFIX);

    if (len <= pre + suf || strncmp(base, FILE_PREFIX, pre) != 0 ||
        strcmp(base + len - suf, FILE_SUFFIX) != 0)
        return 0;
    const char *fam = base + pre;
    const char *end = base + len - suf;
    const char *dash = memchr(fam, '-', (size_t)(end - fam));
    if (!dash || dash == fam || dash + 1 == end)
        return 0;
    e->family = strndup(fam, (size_t)(dash - fam));
    e->name = strndup(dash + 1, (size_t)(end - dash - 1));
    if (!e->family || !e->name)
        return -ENOMEM;
    return 0;
}

static struct entry *entry_new(const char *path)
{
    struct entry *e = calloc(1, sizeof(*e));

    if (!e)
        return NULL;
    /* dlopen searches the library path for a name without a '/': make it a path. */
    if (strchr(path, '/'))
        e->path = strdup(path);
    else if (asprintf(&e->path, "./%s", path) < 0)
        e->path = NULL;
    if (!e->path || parse_file_name(e) != 0) {
        entry_free(e);
        return NULL;
    }
    e->pub.path = e->path;
    e->pub.family = e->family ? e->family : "?";
    e->pub.name = e->name ? e->name : "?";
    e->pub.reason = "";
    e->pub.detail = "";
    return e;
}

/* Record where loading stopped. The reason reads
 *   plugin <family>/<name> (<file>): <detail>
 * or `plugin <file>: <detail>` when the file name does not say which plugin it is. */
static int fail(struct entry *e, dsv4_load_stage stage, int status, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int fail(struct entry *e, dsv4_load_stage stage, int status, const char *fmt, ...)
{
    char *subject = NULL, *detail = NULL;
    va_list ap;
    int n;

    e->pub.stage = stage;
    e->pub.status = status;
    va_start(ap, fmt);
    n = vasprintf(&detail, fmt, ap);
    va_end(ap);
    if (n < 0)
        detail = NULL;
    if (e->family)
        n = asprintf(&subject, "plugin %s/%s (%s)", e->family, e->name, base_name(e->path));
    else
        n = asprintf(&subject, "plugin %s", base_name(e->path));
    if (n < 0)
        subject = NULL;
    if (detail && subject && asprintf(&e->reason, "%s: %s", subject, detail) >= 0) {
        e->pub.reason = e->reason;
        e->pub.detail = e->reason + strlen(subject) + 2;
    } else {
        e->reason = NULL;
        e->pub.reason = e->pub.detail = "out of memory while describing the failure";
    }
    free(subject);
    free(detail);
    return status;
}

/* The stages from the ABI on only read the descriptor. abi_major/abi_minor come first in
 * every version of it, so they are safe to read before the ABI is known to match. */
static int check_descriptor(const dsv4_registry *reg, struct entry *e, const dsv4_plugin_desc *d)
{
    const char *base = base_name(e->path);

    if (d->abi_major != DSV4_ABI_MAJOR)
        return fail(e, DSV4_STAGE_ABI, DSV4_EABI, "ABI %u.%u not supported (daemon %d.x)",
                    d->abi_major, d->abi_minor, DSV4_ABI_MAJOR);
    if (d->abi_minor > DSV4_ABI_MINOR)
        return fail(e, DSV4_STAGE_ABI, DSV4_EABI, "ABI %u.%u not supported (daemon %d.%d)",
                    d->abi_major, d->abi_minor, DSV4_ABI_MAJOR, DSV4_ABI_MINOR);
    if (d->struct_size < DESC_SIZE_1_0)
        return fail(e, DSV4_STAGE_SIZE, DSV4_EABI,
                    "descriptor too small (%u bytes, ABI 1.0 has %zu)", d->struct_size,
                    (size_t)DESC_SIZE_1_0);
    if (!d->build_signature || strcmp(d->build_signature, DSV4_BUILD_SIGNATURE) != 0)
        return fail(e, DSV4_STAGE_SIGNATURE, DSV4_ESIG,
                    "build signature mismatch (plugin %s, daemon %s)",
                    d->build_signature ? d->build_signature : "none", DSV4_BUILD_SIGNATURE);

    uint32_t have = dsv4_family_version(d->family);
    if (have == 0)
        return fail(e, DSV4_STAGE_FAMILY, DSV4_EFAMILY, "unknown family %u", d->family);
    const char *family = dsv4_family_name((dsv4_family)d->family);
    if (d->family_version == 0 || d->family_version > have)
        return fail(e, DSV4_STAGE_FAMILY, DSV4_EFAMILY, "%s interface %u not supported (daemon %u)",
                    family, d->family_version, have);

    if (!d->name || !d->name[0])
        return fail(e, DSV4_STAGE_NAME, DSV4_ENAME, "descriptor has no name");
    char *want = NULL;
    if (asprintf(&want, FILE_PREFIX "%s-%s" FILE_SUFFIX, family, d->name) < 0)
        return fail(e, DSV4_STAGE_NAME, -ENOMEM, "out of memory");
    if (strcmp(base, want) != 0) {
        int rc = fail(e, DSV4_STAGE_NAME, DSV4_ENAME, "descriptor is %s/%s (file name must be %s)",
                      family, d->name, want);
        free(want);
        return rc;
    }
    free(want);

    /* From here on the file is known to be family/name: the first file in search order
     * that claimed it (loaded, or loaded but unavailable here) keeps it. */
    for (size_t i = 0; i < reg->n; i++) {
        const struct entry *o = reg->v[i];
        if (o == e || !o->family || strcmp(o->family, e->family) != 0 ||
            strcmp(o->name, e->name) != 0)
            continue;
        if (o->pub.stage == DSV4_STAGE_OK || o->pub.stage == DSV4_STAGE_PROBE)
            return fail(e, DSV4_STAGE_DUPLICATE, DSV4_EDUP, "duplicate (already loaded from %s)",
                        o->path);
    }

    if (d->probe) {
        char why[256] = "";
        int rc = d->probe(reg->host, why, sizeof(why));
        why[sizeof(why) - 1] = '\0';
        if (rc != 0)
            return fail(e, DSV4_STAGE_PROBE, rc < 0 ? rc : DSV4_EUNAVAIL, "not available here (%s)",
                        why[0] ? why : dsv4_strerror(rc < 0 ? rc : DSV4_EUNAVAIL));
    }
    return 0;
}

static int run_pipeline(const dsv4_registry *reg, struct entry *e)
{
    struct stat st;
    int fd;

    if (stat(e->path, &st) != 0)
        return fail(e, DSV4_STAGE_FILE, -errno, "cannot read (%s)", strerror(errno));
    if (!S_ISREG(st.st_mode))
        return fail(e, DSV4_STAGE_FILE, -EINVAL, "not a regular file");
    fd = open(e->path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return fail(e, DSV4_STAGE_FILE, -errno, "cannot read (%s)", strerror(errno));
    close(fd);

    /* RTLD_NOW: an unresolvable symbol fails here, with its name, not at first call.
     * RTLD_LOCAL: plugins cannot see or interpose each other's symbols. */
    dlerror();
    void *h = dlopen(e->path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *why = dlerror();
        return fail(e, DSV4_STAGE_DLOPEN, DSV4_EFORMAT, "cannot load (%s)",
                    why ? why : "dlopen failed without a reason");
    }
    const dsv4_plugin_desc *d = dlsym(h, DSV4_PLUGIN_SYMBOL);
    if (!d) {
        dlclose(h);
        return fail(e, DSV4_STAGE_SYMBOL, DSV4_EFORMAT, "no %s symbol (not a dsv4d plugin)",
                    DSV4_PLUGIN_SYMBOL);
    }
    int rc = check_descriptor(reg, e, d);
    if (rc != 0) {
        dlclose(h);
        return rc;
    }
    e->handle = h;
    e->pub.desc = d;
    e->pub.stage = DSV4_STAGE_OK;
    e->pub.status = 0;
    return 0;
}

/* Add an entry for path and run the pipeline on it. Returns 0 with the entry, whatever the
 * pipeline said, or -ENOMEM when there is no entry to report it in. */
static int load(dsv4_registry *reg, const char *path, struct entry **e_p)
{
    if (reg->n == reg->cap) {
        size_t cap = reg->cap ? 2 * reg->cap : 16;
        struct entry **v = realloc(reg->v, cap * sizeof(*v));
        if (!v)
            return -ENOMEM;
        reg->v = v;
        reg->cap = cap;
    }
    struct entry *e = entry_new(path);
    if (!e)
        return -ENOMEM;
    reg->v[reg->n++] = e;
    run_pipeline(reg, e);
    *e_p = e;
    return 0;
}

int dsv4_registry_load_file(dsv4_registry *reg, const char *path, const dsv4_plugin_entry **entry_p)
{
    struct entry *e;
    int rc = load(reg, path, &e);

    if (rc != 0)
        return rc;
    *entry_p = &e->pub;
    return e->pub.status;
}

static int is_plugin_file(const struct dirent *d)
{
    size_t len = strlen(d->d_name);
    size_t pre = strlen(FILE_PREFIX), suf = strlen(FILE_SUFFIX);

    return len > pre + suf && strncmp(d->d_name, FILE_PREFIX, pre) == 0 &&
           strcmp(d->d_name + len - suf, FILE_SUFFIX) == 0;
}

/* Byte order, not the locale's collation, so every machine scans in the same order. */
static int by_name(const struct dirent **a, const struct dirent **b)
{
    return strcmp((*a)->d_name, (*b)->d_name);
}

/* Load every dsv4-*.so of dir. A directory that is missing or unreadable holds no plugins;
 * only running out of memory is an error. */
static int scan_dir(dsv4_registry *reg, const char *dir, struct seen_dirs *seen)
{
    struct dirent **names;
    struct stat st;
    int n, rc = 0;

    if (!dir || !dir[0] || stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return 0;
    for (size_t i = 0; i < seen->n; i++)
        if (seen->v[i].dev == st.st_dev && seen->v[i].ino == st.st_ino)
            return 0;
    void *v = realloc(seen->v, (seen->n + 1) * sizeof(*seen->v));
    if (!v)
        return -ENOMEM;
    seen->v = v;
    seen->v[seen->n].dev = st.st_dev;
    seen->v[seen->n].ino = st.st_ino;
    seen->n++;

    n = scandir(dir, &names, is_plugin_file, by_name);
    if (n < 0)
        return errno == ENOMEM ? -ENOMEM : 0;
    for (int i = 0; i < n; i++) {
        char *path = NULL;
        struct entry *e;
        if (rc == 0) {
            if (asprintf(&path, "%s/%s", dir, names[i]->d_name) < 0)
                rc = -ENOMEM;
            else
                rc = load(reg, path, &e);
            free(path);
        }
        free(names[i]);
    }
    free(names);
    return rc;
}

int dsv4_registry_scan(dsv4_registry *reg, const char *cli_dir, const char *conf_dir)
{
    struct seen_dirs seen = {NULL, 0};
    int rc = scan_dir(reg, cli_dir, &seen);

    /* The search path is the one environment knob dsv4d has (DESIGN.md §4). */
    const char *env = getenv("DSV4D_PLUGIN_PATH");
    if (rc == 0 && env) {
        char *list = strdup(env), *rest = list, *dir;
        if (!list)
            rc = -ENOMEM;
        while (rc == 0 && rest && (dir = strsep(&rest, ":")) != NULL)
            rc = scan_dir(reg, dir, &seen);
        free(list);
    }
    if (rc == 0)
        rc = scan_dir(reg, conf_dir, &seen);
    if (rc == 0)
        rc = scan_dir(reg, DSV4_PLUGIN_DIR, &seen);
    free(seen.v);
    return rc;
}

size_t dsv4_registry_count(const dsv4_registry *reg)
{
    return reg->n;
}

const dsv4_plugin_entry *dsv4_registry_entry(const dsv4_registry *reg, size_t i)
{
    return i < reg->n ? &reg->v[i]->pub : NULL;
}

const dsv4_plugin_desc *dsv4_registry_find(const dsv4_registry *reg, dsv4_family family,
                                           const char *name, const dsv4_plugin_entry **entry_p)
{
    const char *fam = dsv4_family_name(family);
    const dsv4_plugin_entry *failed = NULL;

    for (size_t i = 0; fam && i < reg->n; i++) {
        const struct entry *e = reg->v[i];
        if (!e->family || strcmp(e->family, fam) != 0 || strcmp(e->name, name) != 0)
            continue;
        if (e->pub.stage == DSV4_STAGE_OK) {
            if (entry_p)
                *entry_p = &e->pub;
            return e->pub.desc;
        }
        if (!failed)
            failed = &e->pub;
    }
    if (entry_p)
        *entry_p = failed;
    return NULL;
}
