/* schema.c: typed values from INI strings (see schema.h).
 *
 * Every parser here accepts exactly the syntax schema.h documents and nothing looser: no
 * leading/trailing junk, no silent wrap-around, no bare number where a unit is needed. The
 * reasons it writes are what the user reads after "file:line: [section] key: ", so they say
 * what was expected and quote what was found. */
#include "core/config/schema.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* A unit suffix and how many base units (bytes or milliseconds) it stands for. The
 * tables are ordered largest first so the range text picks the largest exact unit. */
typedef struct unit {
    const char *suffix;
    uint64_t scale;
} unit;

static const unit size_units[] = {
    {"T", 1ull << 40}, {"G", 1ull << 30}, {"M", 1ull << 20}, {"K", 1ull << 10}, {"", 1},
};
static const unit duration_units[] = {
    {"m", 60000},
    {"s", 1000},
    {"ms", 1},
};
#define N_UNITS(t) (sizeof(t) / sizeof((t)[0]))

const char *dsv4_opt_type_name(dsv4_opt_type type)
{
    switch (type) {
    case DSV4_OPT_BOOL: return "bool";
    case DSV4_OPT_INT: return "int";
    case DSV4_OPT_SIZE: return "size";
    case DSV4_OPT_DURATION: return "duration";
    case DSV4_OPT_ENUM: return "enum";
    case DSV4_OPT_STRING: return "string";
    case DSV4_OPT_PATH: return "path";
    }
    return "unknown";
}

const dsv4_option *dsv4_schema_find(const dsv4_option *opts, const char *key)
{
    for (const dsv4_option *o = opts; o && o->key; o++)
        if (strcmp(o->key, key) == 0)
            return o;
    return NULL;
}

/* Leading decimal digits of s as an unsigned number. Returns the number of characters
 * consumed (0 when s does not start with a digit); *overflow_p is set when the digits do
 * not fit in 64 bits. */
static size_t parse_digits(const char *s, uint64_t *value_p, bool *overflow_p)
{
    uint64_t v = 0;
    size_t n = 0;
    bool overflow = false;
    for (; s[n] >= '0' && s[n] <= '9'; n++) {
        unsigned d = (unsigned)(s[n] - '0');
        if (v > (UINT64_MAX - d) / 10)
            overflow = true;
        else
            v = v * 10 + d;
    }
    *value_p = v;
    *overflow_p = overflow;
    return n;
}

/* "<digits><suffix>" with suffix from units (matched case-sensitively, exactly). Returns
 * 0, -EINVAL on bad syntax or -ERANGE when the product does not fit in 64 bits. */
static int parse_scaled(const char *s, const unit *units, size_t n_units, uint64_t *value_p)
{
    uint64_t v;
    bool overflow;
    size_t n = parse_digits(s, &v, &overflow);
    if (n == 0)
        return -EINVAL;
    for (size_t i = 0; i < n_units; i++) {
        if (strcmp(s + n, units[i].suffix) != 0)
            continue;
        if (overflow || v > UINT64_MAX / units[i].scale)
            return -ERANGE;
        *value_p = v * units[i].scale;
        return 0;
    }
    return -EINVAL;
}

static int parse_bool(const char *s, bool *value_p)
{
    static const char *const yes[] = {"true", "yes", "on", "1"};
    static const char *const no[] = {"false", "no", "off", "0"};
    for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
        if (strcasecmp(s, yes[i]) == 0) {
            *value_p = true;
            return 0;
        }
        if (strcasecmp(s, no[i]) == 0) {
            *value_p = false;
            return 0;
        }
    }
    return -EINVAL;
}

static int parse_int(const char *s, int64_t *value_p)
{
    bool neg = *s == '-';
    const char *p = (*s == '-' || *s == '+') ? s + 1 : s;
    uint64_t v;
    bool overflow;
    size_t n = parse_digits(p, &v, &overflow);
    if (n == 0 || p[n] != '\0')
        return -EINVAL;
    if (overflow || v > (uint64_t)INT64_MAX + (neg ? 1 : 0))
        return -ERANGE;
    *value_p = neg ? (int64_t)(0 - v) : (int64_t)v;
    return 0;
}

/* Write v in the largest unit of `units` that divides it exactly ("4K", "30s"). */
static void format_scaled(uint64_t v, const unit *units, size_t n_units, char *buf, size_t len)
{
    for (size_t i = 0; i < n_units; i++) {
        if (v != 0 && v % units[i].scale == 0) {
            snprintf(buf, len, "%" PRIu64 "%s", v / units[i].scale, units[i].suffix);
            return;
        }
    }
    snprintf(buf, len, "%" PRIu64 "%s", v, units[n_units - 1].suffix);
}

static bool has_range(const dsv4_option *opt)
{
    return opt->min <= opt->max;
}

/* One bound as the user writes it (sizes and durations with their unit). */
static void format_bound(const dsv4_option *opt, int64_t v, char *buf, size_t len)
{
    if (opt->type == DSV4_OPT_SIZE && v >= 0)
        format_scaled((uint64_t)v, size_units, N_UNITS(size_units), buf, len);
    else if (opt->type == DSV4_OPT_DURATION && v >= 0)
        format_scaled((uint64_t)v, duration_units, N_UNITS(duration_units), buf, len);
    else
        snprintf(buf, len, "%" PRId64, v);
}

void dsv4_schema_range_text(const dsv4_option *opt, char *buf, size_t len)
{
    if (len == 0)
        return;
    buf[0] = '\0';
    if (opt->type == DSV4_OPT_ENUM) {
        size_t w = 0;
        for (const char *const *e = opt->enum_values; e && *e && w < len; e++)
            w += (size_t)snprintf(buf + w, len - w, "%s%s", e == opt->enum_values ? "" : "|", *e);
        return;
    }
    if (opt->type != DSV4_OPT_INT && opt->type != DSV4_OPT_SIZE && opt->type != DSV4_OPT_DURATION)
        return;
    if (!has_range(opt))
        return;
    /* INT64_MIN / INT64_MAX as a bound mean "open on that side". */
    char lo[32] = "", hi[32] = "";
    if (opt->min != INT64_MIN)
        format_bound(opt, opt->min, lo, sizeof(lo));
    if (opt->max != INT64_MAX)
        format_bound(opt, opt->max, hi, sizeof(hi));
    snprintf(buf, len, "%s..%s", lo, hi);
}

/* The typed value of one option, before it is stored. */
typedef union value {
    bool b;
    int64_t i;
    uint64_t u;
    int e;
    char *s;
} value;

/* Parse s for opt into *v. On failure writes the reason and returns DSV4_ECONFIG. */
static int parse_value(const dsv4_option *opt, const char *s, value *v, char *err, size_t errlen)
{
    char range[256];
    int rc;
    switch (opt->type) {
    case DSV4_OPT_BOOL:
        if (parse_bool(s, &v->b) == 0)
            return 0;
        snprintf(err, errlen, "expected a boolean (true/false, yes/no, on/off, 1/0), got '%s'", s);
        return DSV4_ECONFIG;
    case DSV4_OPT_INT:
        rc = parse_int(s, &v->i);
        if (rc == -EINVAL) {
            snprintf(err, errlen, "expected an integer like 42, got '%s'", s);
            return DSV4_ECONFIG;
        }
        break;
    case DSV4_OPT_SIZE:
        rc = parse_scaled(s, size_units, N_UNITS(size_units), &v->u);
        if (rc == -EINVAL) {
            snprintf(err, errlen, "expected a size like 64M (suffix K, M, G or T), got '%s'", s);
            return DSV4_ECONFIG;
        }
        break;
    case DSV4_OPT_DURATION:
        rc = parse_scaled(s, duration_units, N_UNITS(duration_units), &v->u);
        if (rc == -EINVAL) {
            snprintf(err, errlen, "expected a duration like 500ms, 30s or 5m, got '%s'", s);
            return DSV4_ECONFIG;
        }
        if (rc == 0 && v->u > INT64_MAX)
            rc = -ERANGE;
        v->i = (int64_t)v->u;
        break;
    case DSV4_OPT_ENUM:
        for (int i = 0; opt->enum_values && opt->enum_values[i]; i++) {
            if (strcmp(s, opt->enum_values[i]) == 0) {
                v->e = i;
                return 0;
            }
        }
        dsv4_schema_range_text(opt, range, sizeof(range));
        snprintf(err, errlen, "expected one of %s, got '%s'", range, s);
        return DSV4_ECONFIG;
    case DSV4_OPT_PATH:
        if (*s == '\0') {
            snprintf(err, errlen, "expected a path, got an empty value");
            return DSV4_ECONFIG;
        }
        /* fall through */
    case DSV4_OPT_STRING:
        v->s = strdup(s);
        if (!v->s) {
            snprintf(err, errlen, "out of memory");
            return -ENOMEM;
        }
        return 0;
    default:
        snprintf(err, errlen, "option type %d is not known to this daemon", (int)opt->type);
        return DSV4_ECONFIG;
    }

    /* INT, SIZE and DURATION: syntax was fine; now overflow and the declared range. */
    dsv4_schema_range_text(opt, range, sizeof(range));
    if (rc == -ERANGE) {
        snprintf(err, errlen, "'%s' is too large%s%s%s", s, *range ? " (expected " : "", range,
                 *range ? ")" : "");
        return DSV4_ECONFIG;
    }
    if (has_range(opt)) {
        bool below, above;
        if (opt->type == DSV4_OPT_SIZE) {
            below = opt->min > 0 && v->u < (uint64_t)opt->min;
            above = opt->max < 0 || v->u > (uint64_t)opt->max;
        } else {
            below = v->i < opt->min;
            above = v->i > opt->max;
        }
        if (below || above) {
            snprintf(err, errlen, "'%s' is out of range (expected %s)", s, range);
            return DSV4_ECONFIG;
        }
    }
    return 0;
}

int dsv4_schema_set(const dsv4_option *opt, void *conf, const char *value_text, char *err,
                    size_t errlen)
{
    value v;
    int rc = parse_value(opt, value_text, &v, err, errlen);
    if (rc != 0)
        return rc;
    char *field = (char *)conf + opt->offset;
    switch (opt->type) {
    case DSV4_OPT_BOOL: memcpy(field, &v.b, sizeof(bool)); break;
    case DSV4_OPT_INT:
    case DSV4_OPT_DURATION: memcpy(field, &v.i, sizeof(int64_t)); break;
    case DSV4_OPT_SIZE: memcpy(field, &v.u, sizeof(uint64_t)); break;
    case DSV4_OPT_ENUM: memcpy(field, &v.e, sizeof(int)); break;
    case DSV4_OPT_STRING:
    case DSV4_OPT_PATH: {
        /* Every string in a conf struct came from here (defaults or a value), so the old
         * one is ours to free. */
        char *old;
        memcpy(&old, field, sizeof(old));
        free(old);
        memcpy(field, &v.s, sizeof(char *));
        break;
    }
    }
    return 0;
}

int dsv4_schema_defaults(const dsv4_option *opts, void *conf, char *err, size_t errlen)
{
    char why[512];
    for (const dsv4_option *o = opts; o && o->key; o++) {
        if (!o->def)
            continue;
        int rc = dsv4_schema_set(o, conf, o->def, why, sizeof(why));
        if (rc != 0) {
            snprintf(err, errlen, "default of %s is invalid (%s)", o->key, why);
            return rc == -ENOMEM ? rc : DSV4_ECONFIG;
        }
    }
    return 0;
}

void dsv4_schema_release(const dsv4_option *opts, void *conf)
{
    for (const dsv4_option *o = opts; o && o->key; o++) {
        if (o->type != DSV4_OPT_STRING && o->type != DSV4_OPT_PATH)
            continue;
        char *field = (char *)conf + o->offset;
        char *s;
        memcpy(&s, field, sizeof(s));
        free(s);
        s = NULL;
        memcpy(field, &s, sizeof(s));
    }
}
