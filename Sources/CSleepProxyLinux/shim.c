#define _GNU_SOURCE
#include "CSleepProxyLinux.h"

#ifdef __linux__
#include <malloc.h>
#include <sched.h>
#include <stdio.h>

int csp_setns_net(int fd) { return setns(fd, CLONE_NEWNET); }

size_t csp_heap_bytes_in_use(void) { return mallinfo2().uordblks; }

void csp_line_buffer_stdout(void) { setvbuf(stdout, NULL, _IOLBF, 0); }
#endif
