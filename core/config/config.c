/* config.c: from a read INI document to a typed dsv4_config (see config.h).
 *
 * Order of work: core defaults, every section classified (core, family selection, plugin
 * keys, unknown), the selected plugins looked up in the registry, their sections parsed
 * against their own schemas, sections of unselected plugins warned about, and finally the
 * selection every check hook sees. Nothing stops at the first problem. */
#include <config.h> /* HAVE_NCCL, HAVE_UCX; <> because core/config/config.h shadows "config.h" */

#include "core/config/config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/config/config_priv.h"
#include "core/config/schema.h"

/* Used when a family has no section: the indexer and the scheduler always exist; a
 * transport is only needed for PD roles and the host tier is opt-in, so those stay unset. */
static const char *const family_default[DSV4_FAMILY_COUNT] = {
    [DSV4_FAMILY_INDEXK] = "fp8",
    [DSV4_FAMILY_SCHED] = "fcfs",
};

static dsv4_config_priv *priv_of(const dsv4_config *conf)
{
    return (dsv4_config_priv *)((char *)conf - offsetof(dsv4_config_priv, pub));
}

const dsv4_ini *dsv4_config_ini(const dsv4_config *conf)
{
    return priv_of(conf)->ini;
}

int dsv4_config_line(const dsv4_config *conf, const char *section, const char *key)
{
    const dsv4_ini_section *sec =
        section ? dsv4_ini_section_find(dsv4_config_ini(conf), section) : NULL;
    if (!sec)
        return 0;
    const dsv4_ini_entry *e = key ? dsv4_ini_entry_find(sec, key) : NULL;
    return e ? e->line : sec->line;
}

/* "a, b, c" of a schema's keys, for unknown-key messages. */
static void key_list(const dsv4_option *opts, char *buf, size_t len)
{
    size_t w = 0;
    buf[0] = '\0';
    for (const dsv4_option *o = opts; o && o->key && w < len; o++)
        w += (size_t)snprintf(buf + w, len - w, "%s%s", o == opts ? "" : ", ", o->key);
}

/* Type every key of sec into dst through opts; unknown keys are errors. */
static void apply_section(const char *path, const dsv4_ini_section *sec, const dsv4_option *opts,
                          void *dst, dsv4_diags *diags)
{
    char why[512];
    for (size_t i = 0; sec && i < sec->n; i++) {
        const dsv4_ini_entry *e = &sec->v[i];
        const dsv4_option *opt = dsv4_schema_find(opts, e->key);
        if (!opt) {
            key_list(opts, why, sizeof(why));
            if (*why)
                dsv4_diags_add(diags, DSV4_DIAG_ERROR, path, e->line, sec->name, e->key,
                               "unknown key (expected one of %s)", why);
            else
                dsv4_diags_add(diags, DSV4_DIAG_ERROR, path, e->line, sec->name, e->key,
                               "unknown key (this section takes no keys)");
            continue;
        }
        if (dsv4_schema_set(opt, dst, e->value, why, sizeof(why)) != 0)
            dsv4_diags_add(diags, DSV4_DIAG_ERROR, path, e->line, sec->name, e->key, "%s", why);
    }
}

/* Options with no default must be given. */
static void require_keys(const char *path, const char *section_name, int section_line,
                         const dsv4_ini_section *sec, const dsv4_option *opts, dsv4_diags *diags)
{
    for (const dsv4_option *o = opts; o && o->key; o++)
        if (!o->def && !dsv4_ini_entry_find(sec, o->key))
            dsv4_diags_add(diags, DSV4_DIAG_ERROR, path, section_line, section_name, o->key,
                           "required key is missing (it has no default)");
}

static size_t opt_size(dsv4_opt_type type)
{
    switch (type) {
    case DSV4_OPT_BOOL: return sizeof(bool);
    case DSV4_OPT_INT:
    case DSV4_OPT_DURATION: return sizeof(int64_t);
    case DSV4_OPT_SIZE: return sizeof(uint64_t);
    case DSV4_OPT_ENUM: return sizeof(int);
    case DSV4_OPT_STRING:
    case DSV4_OPT_PATH: return sizeof(char *);
    }
    return SIZE_MAX;
}

/* "indexk" -> family; "indexk.fp8" -> family and "fp8" through plugin_p. -1 otherwise. */
static int section_family(const char *name, const char **plugin_p)
{
    const char *dot = strchr(name, '.');
    char fam[64];
    size_t n = dot ? (size_t)(dot - name) : strlen(name);
    if (n >= sizeof(fam) || (dot && dot[1] == '\0'))
        return -1;
    memcpy(fam, name, n);
    fam[n] = '\0';
    *plugin_p = dot ? dot + 1 : NULL;
    return dsv4_family_from_name(fam);
}

static const dsv4_config_section *core_section(const char *name)
{
    for (const dsv4_config_section *s = dsv4_config_sections; s->name; s++)
        if (strcmp(s->name, name) == 0)
            return s;
    return NULL;
}

static void unknown_section(const char *path, const dsv4_ini_section *sec, dsv4_diags *diags)
{
    char expected[256];
    size_t w = 0;
    for (const dsv4_config_section *s = dsv4_config_sections; s->name; s++)
        w += (size_t)snprintf(expected + w, sizeof(expected) - w, "%s, ", s->name);
    for (int f = 0; f < DSV4_FAMILY_COUNT && w < sizeof(expected); f++)
        w += (size_t)snprintf(expected + w, sizeof(expected) - w, "%s, ",
                              dsv4_family_name((dsv4_family)f));
    dsv4_diags_add(diags, DSV4_DIAG_ERROR, path, sec->line, sec->name, NULL,
                   "unknown section (expected one of %s<family>.<plugin>)", expected);
}

/* `[<family>] plugin = <name>`: the only key a family section has. */
static void family_section(dsv4_config *conf, int f, const dsv4_ini_section *sec, dsv4_diags *diags)
{
    for (size_t i = 0; i < sec->n; i++) {
        const dsv4_ini_entry *e = &sec->v[i];
        if (strcmp(e->key, "plugin") != 0) {
            dsv4_diags_add(diags, DSV4_DIAG_ERROR, conf->path, e->line, sec->name, e->key,
                           "unknown key (expected plugin; the plugin's own keys go in [%s.%s])",
                           sec->name, conf->plugin[f] ? conf->plugin[f] : "<plugin>");
            continue;
        }
        if (e->value[0] == '\0') {
            dsv4_diags_add(diags, DSV4_DIAG_ERROR, conf->path, e->line, sec->name, e->key,
                           "expected a plugin name, got an empty value");
            continue;
        }
        free((char *)conf->plugin[f]);
        conf->plugin[f] = strdup(e->value);
    }
}

/* Plugins that are built only with an optional library: naming the missing build beats
 * "not found" when one of them is selected. */
static const struct {
    dsv4_family family;
    const char *name, *without;
} conditional_plugins[] = {
#ifndef HAVE_NCCL
    {DSV4_FAMILY_TRANSPORT, "nccl", "NCCL (configure --with-nccl)"},
#endif
#ifndef HAVE_UCX
    {DSV4_FAMILY_TRANSPORT, "ucx", "UCX (configure --with-ucx)"},
#endif
    {DSV4_FAMILY_COUNT, NULL, NULL},
};

static const char *missing_build(dsv4_family f, const char *name)
{
    for (size_t i = 0; conditional_plugins[i].name; i++)
        if (conditional_plugins[i].family == f && strcmp(conditional_plugins[i].name, name) == 0)
            return conditional_plugins[i].without;
    return NULL;
}

/* Look the family's selected plugin up and parse its section into a fresh config struct. */
static void resolve_plugin(dsv4_config *conf, dsv4_family f, const dsv4_registry *reg,
                           dsv4_diags *diags)
{
    const dsv4_ini *ini = dsv4_config_ini(conf);
    const char *fam = dsv4_family_name(f);
    const char *name = conf->plugin[f];
    int line = dsv4_config_line(conf, fam, "plugin");
    const dsv4_plugin_entry *entry = NULL;
    const dsv4_plugin_desc *desc = reg ? dsv4_registry_find(reg, f, name, &entry) : NULL;
    if (!desc) {
        const char *without = missing_build(f, name);
        if (entry)
            dsv4_diags_add(diags, DSV4_DIAG_ERROR, conf->path, line, fam, "plugin", "%s",
                           entry->reason);
        else if (without)
            dsv4_diags_add(diags, DSV4_DIAG_ERROR, conf->path, line, fam, "plugin",
                           "plugin %s/%s is not built (this dsv4d was built without %s)", fam,
                           name, without);
        else
            dsv4_diags_add(diags, DSV4_DIAG_ERROR, conf->path, line, fam, "plugin",
                           "plugin %s/%s%s not found in the plugin search path (see dsv4ctl "
                           "list)",
                           fam, name, line ? "" : " (the default)");
        return;
    }

    char section[128], why[512];
    snprintf(section, sizeof(section), "%s.%s", fam, name);
    const dsv4_ini_section *sec = dsv4_ini_section_find(ini, section);
    int sec_line = sec ? sec->line : line;
    /* The options write into a struct we allocate from config_size: one that points
     * outside it would corrupt memory, so refuse the plugin instead. */
    for (const dsv4_option *o = desc->options; o && o->key; o++) {
        if (o->offset + opt_size(o->type) > desc->config_size || opt_size(o->type) == SIZE_MAX) {
            dsv4_diags_add(diags, DSV4_DIAG_ERROR, conf->path, sec_line, section, o->key,
                           "plugin %s/%s is broken (option outside its %zu-byte config struct)",
                           fam, name, desc->config_size);
            return;
        }
    }
    void *pconf = calloc(1, desc->config_size ? desc->config_size : 1);
    if (!pconf) {
        dsv4_diags_add(diags, DSV4_DIAG_ERROR, conf->path, sec_line, section, NULL, "%s",
                       strerror(ENOMEM));
        return;
    }
    conf->desc[f] = desc;
    conf->plugin_conf[f] = pconf;
    if (dsv4_schema_defaults(desc->options, pconf, why, sizeof(why)) != 0) {
        dsv4_diags_add(diags, DSV4_DIAG_ERROR, conf->path, sec_line, section, NULL,
                       "plugin %s/%s is broken (%s)", fam, name, why);
        return;
    }
    apply_section(conf->path, sec, desc->options, pconf, diags);
    require_keys(conf->path, section, sec_line, sec, desc->options, diags);
}

/* A [<family>.<name>] section for a plugin other than the selected one is ignored, which
 * the user most likely did not mean: say so. */
static void warn_unselected(const dsv4_config *conf, const dsv4_ini_section *sec, int f,
                            const char *plugin, dsv4_diags *diags)
{
    const char *fam = dsv4_family_name((dsv4_family)f);
    if (conf->plugin[f] && strcmp(conf->plugin[f], plugin) == 0)
        return;
    if (conf->plugin[f])
        dsv4_diags_add(diags, DSV4_DIAG_WARNING, conf->path, sec->line, sec->name, NULL,
                       "section for plugin %s/%s, which is not selected ([%s] plugin = %s); its "
                       "keys are ignored",
                       fam, plugin, fam, conf->plugin[f]);
    else
        dsv4_diags_add(diags, DSV4_DIAG_WARNING, conf->path, sec->line, sec->name, NULL,
                       "section for plugin %s/%s, which is not selected (no [%s] plugin); its "
                       "keys are ignored",
                       fam, plugin, fam);
}

static void fill_selection(dsv4_config *conf)
{
    dsv4_selection *sel = &conf->selection;
    memset(sel, 0, sizeof(*sel));
    sel->struct_size = sizeof(*sel);
    sel->device = (dsv4_device)conf->core.device;
    sel->role = (dsv4_role)conf->server.role;
    sel->kv_dtype = (dsv4_kv_dtype)conf->model.kv_dtype;
    sel->cuda_device = (int)conf->core.cuda_device;
    for (int f = 0; f < DSV4_FAMILY_COUNT; f++) {
        sel->names[f] = conf->plugin[f];
        sel->configs[f] = conf->plugin_conf[f];
        sel->flags[f] = conf->desc[f] ? conf->desc[f]->flags : 0;
    }
}

/* Everything after reading: takes ownership of ini. */
static dsv4_config *build(dsv4_ini *ini, const dsv4_registry *reg, dsv4_diags *diags)
{
    dsv4_config_priv *priv = calloc(1, sizeof(*priv));
    if (!priv || (ini->path && !(priv->pub.path = strdup(ini->path)))) {
        dsv4_diags_add(diags, DSV4_DIAG_ERROR, ini->path, 0, NULL, NULL, "%s", strerror(ENOMEM));
        free(priv);
        dsv4_ini_free(ini);
        return NULL;
    }
    priv->ini = ini;
    dsv4_config *conf = &priv->pub;
    char why[512];
    for (const dsv4_config_section *s = dsv4_config_sections; s->name; s++)
        if (dsv4_schema_defaults(s->options, (char *)conf + s->offset, why, sizeof(why)) != 0)
            dsv4_diags_add(diags, DSV4_DIAG_ERROR, NULL, 0, s->name, NULL, "%s", why);
    for (int f = 0; f < DSV4_FAMILY_COUNT; f++)
        conf->plugin[f] = family_default[f] ? strdup(family_default[f]) : NULL;

    const char *plugin;
    for (size_t i = 0; i < ini->n; i++) {
        const dsv4_ini_section *sec = &ini->v[i];
        const dsv4_config_section *core = core_section(sec->name);
        int f = section_family(sec->name, &plugin);
        if (core)
            apply_section(conf->path, sec, core->options, (char *)conf + core->offset, diags);
        else if (f >= 0 && !plugin)
            family_section(conf, f, sec, diags);
        else if (f < 0)
            unknown_section(conf->path, sec, diags);
    }
    for (int f = 0; f < DSV4_FAMILY_COUNT; f++)
        if (conf->plugin[f])
            resolve_plugin(conf, (dsv4_family)f, reg, diags);
    for (size_t i = 0; i < ini->n; i++) {
        int f = section_family(ini->v[i].name, &plugin);
        if (f >= 0 && plugin)
            warn_unselected(conf, &ini->v[i], f, plugin, diags);
    }
    fill_selection(conf);
    return conf;
}

dsv4_config *dsv4_config_load(const char *path, const dsv4_registry *reg, dsv4_diags *diags)
{
    dsv4_ini *ini = dsv4_ini_read(path, diags);
    return ini ? build(ini, reg, diags) : NULL;
}

dsv4_config *dsv4_config_defaults(const dsv4_registry *reg, dsv4_diags *diags)
{
    dsv4_ini *ini = calloc(1, sizeof(*ini));
    if (!ini) {
        dsv4_diags_add(diags, DSV4_DIAG_ERROR, NULL, 0, NULL, NULL, "%s", strerror(ENOMEM));
        return NULL;
    }
    return build(ini, reg, diags);
}

void dsv4_config_free(dsv4_config *conf)
{
    if (!conf)
        return;
    for (const dsv4_config_section *s = dsv4_config_sections; s->name; s++)
        dsv4_schema_release(s->options, (char *)conf + s->offset);
    for (int f = 0; f < DSV4_FAMILY_COUNT; f++) {
        if (conf->plugin_conf[f])
            dsv4_schema_release(conf->desc[f]->options, conf->plugin_conf[f]);
        free(conf->plugin_conf[f]);
        free((char *)conf->plugin[f]);
    }
    free(conf->path);
    dsv4_config_priv *priv = priv_of(conf);
    dsv4_ini_free(priv->ini);
    free(priv);
}
