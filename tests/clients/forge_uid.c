/* LD_PRELOAD'ed into a PMIx client, it states the user and group ids FORGE_UID and FORGE_GID
 * instead of its own, as a hostile client can (OpenPMIx 4 takes a TCP client's word for them)
 * (crates/tandem/tests/hostile.rs). */
#include <stdlib.h>
#include <sys/types.h>

static unsigned from(const char *k) {
    const char *s = getenv(k);
    return s ? (unsigned) atoi(s) : 0;
}
uid_t geteuid(void) { return from("FORGE_UID"); }
uid_t getuid(void) { return from("FORGE_UID"); }
gid_t getegid(void) { return from("FORGE_GID"); }
gid_t getgid(void) { return from("FORGE_GID"); }
