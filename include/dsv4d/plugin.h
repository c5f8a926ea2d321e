/* plugin.h: the dsv4d plugin ABI.
 *
 * Every plugin is one shared object, dsv4-<family>-<name>.so, that exports exactly one
 * symbol: `const dsv4_plugin_desc dsv4_plugin`. The daemon owns everything else: it parses
 * and validates the plugin's INI section against the descriptor's schema before any plugin
 * code runs, hands the plugin a const host table (the only way a plugin reaches the daemon),
 * and calls the hooks in the order probe -> check -> init -> (family ops) -> fini.
 *
 * Ownership: the descriptor, its schema and ops tables are static data of the plugin and
 * live as long as the .so is loaded. The config struct a plugin receives is owned by the
 * daemon (strings in it too) and outlives the plugin's state. The state returned by init
 * belongs to the plugin until fini.
 *
 * Compatibility: structs passed across the ABI start with `struct_size`. New fields are
 * only ever appended; a reader checks struct_size before touching a field past the first
 * version (DSV4_HAS_FIELD). The ABI major changes only when that rule is broken.
 */
#ifndef DSV4D_PLUGIN_H
#define DSV4D_PLUGIN_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DSV4_ABI_MAJOR 1
#define DSV4_ABI_MINOR 0

/* The exported symbol every plugin defines. */
#define DSV4_PLUGIN_SYMBOL "dsv4_plugin"

/* The build signature rejects plugins built with a different layout of the ABI structs:
 * ABI major, pointer and size_t width, byte order. Plugins take it from this header, so
 * rebuilding against a new header is what makes a plugin loadable again. */
#define DSV4_STR2_(x) #x
#define DSV4_STR_(x) DSV4_STR2_(x)
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define DSV4_SIG_ENDIAN_ "le"
#else
#define DSV4_SIG_ENDIAN_ "be"
#endif
#define DSV4_BUILD_SIGNATURE                                                                   \
    "dsv4-abi" DSV4_STR_(DSV4_ABI_MAJOR) "/ptr" DSV4_STR_(__SIZEOF_POINTER__) "/sz"              \
        DSV4_STR_(__SIZEOF_SIZE_T__) "/" DSV4_SIG_ENDIAN_

/* True when a struct of `size` bytes (its struct_size) holds `field` of `type`. */
#define DSV4_HAS_FIELD(ptr, type, field)                                                       \
    ((ptr)->struct_size >= offsetof(type, field) + sizeof(((type *)0)->field))

/* ---- status codes ------------------------------------------------------------------------
 * 0 is success; failures are negative: -errno where one fits, else this private range.
 * dsv4_strerror() (daemon side) turns any of them into text. */
enum {
    DSV4_OK = 0,
    DSV4_EBASE = -4096,
    DSV4_ECONFIG = DSV4_EBASE - 1,   /* configuration is invalid */
    DSV4_EABI = DSV4_EBASE - 2,      /* plugin ABI not supported */
    DSV4_ESIG = DSV4_EBASE - 3,      /* build signature mismatch */
    DSV4_EFAMILY = DSV4_EBASE - 4,   /* unknown family or family interface version */
    DSV4_ENAME = DSV4_EBASE - 5,     /* plugin name does not match its file name */
    DSV4_EDUP = DSV4_EBASE - 6,      /* a plugin of that family/name is already loaded */
    DSV4_EUNAVAIL = DSV4_EBASE - 7,  /* probe: cannot run here (no GPU, no library ...) */
    DSV4_EFORMAT = DSV4_EBASE - 8,   /* malformed input (file, message, header) */
    DSV4_ECHECKSUM = DSV4_EBASE - 9, /* data failed its checksum */
    DSV4_EPEER = DSV4_EBASE - 10,    /* peer refused or misbehaved */
    DSV4_ESTALE = DSV4_EBASE - 11,   /* stale generation / lease */
    DSV4_ELAST = DSV4_EBASE - 12,
};

/* ---- families ---------------------------------------------------------------------------- */
typedef enum dsv4_family {
    DSV4_FAMILY_INDEXK = 0,
    DSV4_FAMILY_TRANSPORT = 1,
    DSV4_FAMILY_HOSTCACHE = 2,
    DSV4_FAMILY_SCHED = 3,
    DSV4_FAMILY_COUNT
} dsv4_family;

/* Plugin flags. */
#define DSV4_PLUGIN_NEEDS_CUDA (1u << 0)    /* built with CUDA code paths */
#define DSV4_PLUGIN_NEEDS_GPU (1u << 1)     /* cannot run without a GPU */
#define DSV4_PLUGIN_EXPERIMENTAL (1u << 2)  /* listed, but marked experimental */
#define DSV4_PLUGIN_TEST_ONLY (1u << 3)     /* exists for tests (negative controls) */

/* ---- config schema -----------------------------------------------------------------------
 * One table per plugin (and per core section) drives parsing, defaults, range checks,
 * unknown-key errors, `dsv4ctl describe` and the man pages. Each option is stored at
 * `offset` in a config struct of `config_size` bytes that the daemon allocates:
 *   BOOL -> bool, INT -> int64_t, SIZE -> uint64_t (bytes), DURATION -> int64_t (ms),
 *   ENUM -> int (index into enum_values), STRING and PATH -> const char * (daemon-owned). */
typedef enum dsv4_opt_type {
    DSV4_OPT_BOOL,
    DSV4_OPT_INT,
    DSV4_OPT_SIZE,
    DSV4_OPT_DURATION,
    DSV4_OPT_ENUM,
    DSV4_OPT_STRING,
    DSV4_OPT_PATH,
} dsv4_opt_type;

typedef struct dsv4_option {
    const char *key;
    dsv4_opt_type type;
    const char *def;                 /* default in INI syntax; NULL = required */
    int64_t min, max;                /* INT/SIZE/DURATION bounds (inclusive); min > max = none */
    const char *const *enum_values;  /* ENUM: NULL-terminated */
    const char *help;                /* one line, lowercase, no final period */
    size_t offset;                   /* where the value goes in the config struct */
} dsv4_option;

/* ---- the selection: what every check hook sees -------------------------------------------
 * The whole assembled pipeline, so combination rules can be declared by the plugin that
 * has them (e.g. transport/nccl needs device = cuda). Filled by the daemon. */
typedef enum dsv4_device { DSV4_DEVICE_AUTO, DSV4_DEVICE_CPU, DSV4_DEVICE_CUDA } dsv4_device;
typedef enum dsv4_role { DSV4_ROLE_UNIFIED, DSV4_ROLE_PREFILL, DSV4_ROLE_DECODE } dsv4_role;
typedef enum dsv4_kv_dtype { DSV4_KV_F32, DSV4_KV_BF16, DSV4_KV_FP8 } dsv4_kv_dtype;

typedef struct dsv4_selection {
    uint32_t struct_size;
    dsv4_device device;
    dsv4_role role;
    dsv4_kv_dtype kv_dtype;
    int cuda_device;                          /* ordinal, or -1 when not set */
    const char *names[DSV4_FAMILY_COUNT];     /* selected plugin per family (NULL = none) */
    const void *configs[DSV4_FAMILY_COUNT];   /* their parsed config structs */
    uint64_t flags[DSV4_FAMILY_COUNT];        /* their descriptor flags */
} dsv4_selection;

/* A check reports each violation through the diag sink; the daemon turns (section, key)
 * into `file:line: [section] key: message`. key may be NULL for a section-wide problem. */
typedef struct dsv4_diag dsv4_diag;
typedef void (*dsv4_report_fn)(dsv4_diag *diag, const char *section, const char *key,
                               const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* ---- the host table: everything a plugin may ask of the daemon ---------------------------- */
typedef enum dsv4_log_level {
    DSV4_LOG_ERROR,
    DSV4_LOG_WARN,
    DSV4_LOG_INFO,
    DSV4_LOG_DEBUG,
} dsv4_log_level;

struct dsv4_kv_layout; /* kv.h */

typedef struct dsv4_host {
    uint32_t struct_size;
    /* Logging; `subject` names who speaks ("transport/ucx"). */
    void (*log)(dsv4_log_level level, const char *subject, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));
    /* Aligned host memory (align a power of two); free takes NULL. */
    void *(*alloc)(size_t size, size_t align);
    void (*free)(void *p);
    /* Monotonic clock in nanoseconds. */
    uint64_t (*now_ns)(void);
    /* The KV layout of this daemon (NULL in dsv4ctl describe/validate). */
    const struct dsv4_kv_layout *kv;
    /* Device handles: the selection (device kind, CUDA ordinal) and, on CUDA, the
     * compute stream (a cudaStream_t) kernels are ordered on. */
    const dsv4_selection *selection;
    void *cuda_stream;
} dsv4_host;

/* ---- the descriptor ------------------------------------------------------------------------ */
typedef struct dsv4_plugin_desc {
    uint16_t abi_major;
    uint16_t abi_minor;
    uint32_t struct_size;            /* sizeof(dsv4_plugin_desc) the plugin was built with */
    const char *build_signature;     /* DSV4_BUILD_SIGNATURE */
    uint32_t family;                 /* dsv4_family */
    uint32_t family_version;         /* the family header's DSV4_<FAMILY>_VERSION */
    const char *name;                /* must match the file name dsv4-<family>-<name>.so */
    const char *version;
    const char *description;         /* one line */
    uint64_t flags;                  /* DSV4_PLUGIN_* */
    const dsv4_option *options;      /* terminated by an entry with key == NULL */
    size_t config_size;              /* bytes of the config struct the options fill */

    /* Can this plugin run here at all? 0, or DSV4_EUNAVAIL with the reason in why. */
    int (*probe)(const dsv4_host *host, char *why, size_t whylen);
    /* Combination rules: sees the whole selection and its own config; reports every
     * violation through report(diag, ...) and returns the number reported (0 = fine).
     * Runs in `dsv4ctl validate`: no GPU work, no side effects. */
    int (*check)(const dsv4_selection *sel, const void *config, dsv4_report_fn report,
                 dsv4_diag *diag);
    /* Create the plugin's state. 0 or a negative status; on failure, err holds why. */
    int (*init)(const dsv4_host *host, const void *config, void **state_p, char *err,
                size_t errlen);
    void (*fini)(void *state);
    const void *ops;                 /* the family's ops table (indexk.h, ...) */
} dsv4_plugin_desc;

extern const dsv4_plugin_desc dsv4_plugin;

#ifdef __cplusplus
}
#endif
#endif /* DSV4D_PLUGIN_H */
