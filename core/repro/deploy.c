/* deploy.c: one dsv4d child for dsv4ctl matrix (deploy.h). */
#include "config.h"

#include "core/repro/deploy.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/util/clock.h"

struct dsv4_deploy {
    pid_t pid;
    char url[64];
    char pd_addr[32]; /* "127.0.0.1:PORT" a prefill server accepts decode servers on, or "" */
};

/* The port the line of log beginning with prefix names (prefix ends just before it), or -1. */
static int logged_port(const char *log, const char *prefix)
{
    const char *p = strstr(log, prefix);
    if (!p)
        return -1;
    char *end;
    long port = strtol(p + strlen(prefix), &end, 10);
    return *end == '\n' && port >= 1 && port <= 65535 ? (int)port : -1;
}

/* The whole log (malloc'd, NUL-terminated) or NULL. */
static char *read_log(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return NULL;
    char *buf = NULL;
    size_t n = 0, cap = 0, r;
    do {
        if (cap - n < 4096) {
            char *b = realloc(buf, cap + 65536);
            if (!b)
                break;
            buf = b;
            cap += 65536;
        }
        r = fread(buf + n, 1, cap - n - 1, f);
        n += r;
    } while (r > 0);
    fclose(f);
    if (buf)
        buf[n] = '\0';
    return buf;
}

/* The reason a start failed: the log's last lines, joined. */
static void log_tail(const char *path, char *err, size_t errlen, const char *what)
{
    char *log = read_log(path);
    char *tail = log ? log : "";
    if (log) {
        size_t n = strlen(log);
        while (n > 0 && log[n - 1] == '\n')
            log[--n] = '\0';
        tail = n > 300 ? log + n - 300 : log;
        for (char *p = tail; *p; p++)
            if (*p == '\n')
                *p = ' ';
    }
    snprintf(err, errlen, "dsv4d %s (log %s: %s)", what, path, tail);
    free(log);
}

static void child_exec(const char *dsv4d, const char *plugin_dir, const char *ini, const char *log)
{
    /* no daemon may outlive the harness that started it */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    int null = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (fd < 0 || null < 0 || dup2(fd, 2) < 0 || dup2(null, 1) < 0 || dup2(null, 0) < 0)
        _exit(127);
    if (plugin_dir)
        setenv("DSV4D_PLUGIN_PATH", plugin_dir, 1);
    execl(dsv4d, dsv4d, "-c", ini, (char *)NULL);
    fprintf(stderr, "dsv4ctl: cannot run %s (%s)\n", dsv4d, strerror(errno));
    _exit(127);
}

dsv4_deploy *dsv4_deploy_start(const char *dsv4d, const char *plugin_dir, const char *dir,
                               const char *name, const char *ini, int timeout_ms, char *err,
                               size_t errlen)
{
    char ini_path[1024], log_path[1024];
    snprintf(ini_path, sizeof(ini_path), "%s/%s.ini", dir, name);
    snprintf(log_path, sizeof(log_path), "%s/%s.log", dir, name);
    FILE *f = fopen(ini_path, "w");
    if (!f || fputs(ini, f) < 0 || fclose(f) != 0) {
        snprintf(err, errlen, "deploy %s: cannot write (%s)", ini_path, strerror(errno));
        return NULL;
    }
    dsv4_deploy *d = calloc(1, sizeof(*d));
    if (!d) {
        snprintf(err, errlen, "deploy: out of memory");
        return NULL;
    }
    fflush(NULL);
    d->pid = fork();
    if (d->pid < 0) {
        snprintf(err, errlen, "deploy %s: fork failed (%s)", name, strerror(errno));
        free(d);
        return NULL;
    }
    if (d->pid == 0)
        child_exec(dsv4d, plugin_dir, ini_path, log_path);
    long long deadline = (long long)dsv4_now_ms() + timeout_ms;
    for (;;) {
        int st;
        if (waitpid(d->pid, &st, WNOHANG) == d->pid) {
            log_tail(log_path, err, errlen, "exited before it listened");
            free(d);
            return NULL;
        }
        char *log = read_log(log_path);
        int port = log ? logged_port(log, "dsv4d: info: http: listening on 127.0.0.1:") : -1;
        if (port > 0) {
            snprintf(d->url, sizeof(d->url), "http://127.0.0.1:%d", port);
            int pd_port =
                logged_port(log, "dsv4d: info: pd: prefill role: accepting decode servers on "
                                 "127.0.0.1:");
            if (pd_port > 0)
                snprintf(d->pd_addr, sizeof(d->pd_addr), "127.0.0.1:%d", pd_port);
        }
        free(log);
        if (port > 0)
            return d;
        if ((long long)dsv4_now_ms() > deadline) {
            log_tail(log_path, err, errlen, "did not listen in time");
            dsv4_deploy_stop(d, 1000);
            return NULL;
        }
        usleep(50000);
    }
}

const char *dsv4_deploy_url(const dsv4_deploy *d)
{
    return d->url;
}

const char *dsv4_deploy_pd_addr(const dsv4_deploy *d)
{
    return d->pd_addr;
}

int dsv4_deploy_stop(dsv4_deploy *d, int grace_ms)
{
    if (!d)
        return 0;
    int rc = 0, st;
    kill(d->pid, SIGTERM);
    long long deadline = (long long)dsv4_now_ms() + grace_ms;
    while (waitpid(d->pid, &st, WNOHANG) == 0) {
        if ((long long)dsv4_now_ms() > deadline) {
            kill(d->pid, SIGKILL);
            waitpid(d->pid, &st, 0);
            rc = -ETIMEDOUT;
            break;
        }
        usleep(20000);
    }
    free(d);
    return rc;
}
