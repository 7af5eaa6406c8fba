#define _GNU_SOURCE
#include "CSleepProxyLinux.h"

#ifdef __linux__
#include <malloc.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <linux/capability.h>
#include <linux/ethtool.h>
#include <sys/syscall.h>
#include <linux/sockios.h>

int csp_setns_net(int fd) { return setns(fd, CLONE_NEWNET); }

void csp_set_thread_name(const char *name) { prctl(PR_SET_NAME, (unsigned long)name, 0, 0, 0); }

size_t csp_heap_bytes_in_use(void) { return mallinfo2().uordblks; }

void csp_malloc_limit_arenas(void) { mallopt(M_ARENA_MAX, 2); }

void csp_malloc_trim(void) { malloc_trim(0); }

void csp_line_buffer_stdout(void) { setvbuf(stdout, NULL, _IOLBF, 0); }

int csp_raise_permitted_capabilities(void) {
    struct __user_cap_header_struct header = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
    struct __user_cap_data_struct data[2];
    if (syscall(SYS_capget, &header, data) != 0) return -1;
    if (data[0].effective == data[0].permitted && data[1].effective == data[1].permitted) return 0;
    data[0].effective = data[0].permitted;
    data[1].effective = data[1].permitted;
    return (int)syscall(SYS_capset, &header, data);
}

int csp_wol_magic_enabled(const char *interface) {
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    struct ethtool_wolinfo wol;
    memset(&wol, 0, sizeof wol);
    wol.cmd = ETHTOOL_GWOL;
    struct ifreq request;
    memset(&request, 0, sizeof request);
    strncpy(request.ifr_name, interface, IFNAMSIZ - 1);
    request.ifr_data = (char *)&wol;
    int result = ioctl(fd, SIOCETHTOOL, &request);
    close(fd);
    if (result < 0) return -1;
    return (wol.wolopts & WAKE_MAGIC) ? 1 : 0;
}
#endif
