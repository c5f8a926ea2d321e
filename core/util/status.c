/* status.c: text for dsv4d status codes. */
#include "core/util/status.h"

#include <string.h>

const char *dsv4_strerror(int status)
{
    switch (status) {
    case DSV4_OK: return "success";
    case DSV4_ECONFIG: return "invalid configuration";
    case DSV4_EABI: return "plugin ABI not supported";
    case DSV4_ESIG: return "build signature mismatch";
    case DSV4_EFAMILY: return "unknown plugin family or family version";
    case DSV4_ENAME: return "plugin name does not match its file name";
    case DSV4_EDUP: return "duplicate plugin";
    case DSV4_EUNAVAIL: return "not available here";
    case DSV4_EFORMAT: return "malformed input";
    case DSV4_ECHECKSUM: return "checksum mismatch";
    case DSV4_EPEER: return "peer error";
    case DSV4_ESTALE: return "stale lease";
    default: break;
    }
    if (status < 0 && status > DSV4_EBASE)
        return strerror(-status);
    return "unknown status";
}
