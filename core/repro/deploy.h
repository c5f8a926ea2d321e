/* deploy.h: starting and stopping one dsv4d for dsv4ctl matrix.
 *
 * A deployment is a dsv4d child process with its configuration and log in a folder the
 * caller owns. Start returns once the daemon logs that it listens (or fails, with the
 * log's last lines as the reason); stop sends SIGTERM, waits at most grace_ms, then
 * SIGKILLs, and always reaps the child. Children also get SIGKILL if dsv4ctl itself dies
 * (PR_SET_PDEATHSIG), so no run leaves a daemon behind. */
#ifndef DSV4_CORE_REPRO_DEPLOY_H
#define DSV4_CORE_REPRO_DEPLOY_H

#include <stddef.h>

typedef struct dsv4_deploy dsv4_deploy;

/* Write ini into dir/name.ini and start dsv4d on it with DSV4D_PLUGIN_PATH=plugin_dir
 * (NULL: inherited), its stderr in dir/name.log. ini's [server] listen (and a prefill
 * server's [pd] listen) is 127.0.0.1:0: the daemon binds a port the kernel picks, and the
 * ports it logs are the ones used, so no port can be taken between choosing and binding.
 * NULL with err filled when it exits or does not listen within timeout_ms (it is then
 * stopped). */
dsv4_deploy *dsv4_deploy_start(const char *dsv4d, const char *plugin_dir, const char *dir,
                               const char *name, const char *ini, int timeout_ms, char *err,
                               size_t errlen);

/* "http://127.0.0.1:PORT": the HTTP API the daemon logged it listens on. */
const char *dsv4_deploy_url(const dsv4_deploy *d);

/* "127.0.0.1:PORT" a prefill server logged it accepts decode servers on; "" for the
 * other roles. */
const char *dsv4_deploy_pd_addr(const dsv4_deploy *d);

/* Stop, reap and free d (NULL is fine). 0 when it exited on SIGTERM within grace_ms,
 * -ETIMEDOUT when it had to be killed. */
int dsv4_deploy_stop(dsv4_deploy *d, int grace_ms);

#endif
