#define _GNU_SOURCE
#include "CSleepProxyLinux.h"

#ifdef __linux__
#include <sched.h>
#include <stdio.h>

int csp_setns_net(int fd) { return setns(fd, CLONE_NEWNET); }

void csp_line_buffer_stdout(void) { setvbuf(stdout, NULL, _IOLBF, 0); }
#endif
