#define _GNU_SOURCE
#include "CSleepProxyLinux.h"

#ifdef __linux__
#include <elf.h>
#include <link.h>
#include <malloc.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <errno.h>
#include <unistd.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <linux/ethtool.h>
#include <sys/syscall.h>
#include <linux/sockios.h>
#include <sys/eventfd.h>

int csp_setns_net(int fd) { return setns(fd, CLONE_NEWNET); }

ssize_t csp_receive_datagram(int fd, void *buffer, size_t size, struct csp_datagram_info *info) {
    memset(info, 0, sizeof(*info));
    struct iovec vector = {.iov_base = buffer, .iov_len = size};
    // Room for IPV6_PKTINFO (the larger of the two) and SO_RXQ_OVFL, with slack for one more we did not ask for.
    union {
        struct cmsghdr align;
        char bytes[CMSG_SPACE(sizeof(struct in6_pktinfo)) + CMSG_SPACE(sizeof(uint32_t)) + 64];
    } control;
    struct msghdr message = {
        .msg_name = &info->source,
        .msg_namelen = sizeof(info->source),
        .msg_iov = &vector,
        .msg_iovlen = 1,
        .msg_control = control.bytes,
        .msg_controllen = sizeof(control.bytes),
    };
    ssize_t length = recvmsg(fd, &message, MSG_DONTWAIT);
    if (length < 0) return -1;
    info->truncated = (message.msg_flags & MSG_TRUNC) != 0;
    for (struct cmsghdr *header = CMSG_FIRSTHDR(&message); header != NULL; header = CMSG_NXTHDR(&message, header)) {
        if (header->cmsg_level == IPPROTO_IP && header->cmsg_type == IP_PKTINFO
            && header->cmsg_len >= CMSG_LEN(sizeof(struct in_pktinfo))) {
            struct in_pktinfo packet;
            memcpy(&packet, CMSG_DATA(header), sizeof(packet));
            struct sockaddr_in *destination = (struct sockaddr_in *)&info->destination;
            destination->sin_family = AF_INET;
            destination->sin_addr = packet.ipi_addr;
            info->interface_index = packet.ipi_ifindex;
        } else if (header->cmsg_level == IPPROTO_IPV6 && header->cmsg_type == IPV6_PKTINFO
                   && header->cmsg_len >= CMSG_LEN(sizeof(struct in6_pktinfo))) {
            struct in6_pktinfo packet;
            memcpy(&packet, CMSG_DATA(header), sizeof(packet));
            struct sockaddr_in6 *destination = (struct sockaddr_in6 *)&info->destination;
            destination->sin6_family = AF_INET6;
            destination->sin6_addr = packet.ipi6_addr;
            info->interface_index = (int)packet.ipi6_ifindex;
        } else if (header->cmsg_level == SOL_SOCKET && header->cmsg_type == csp_so_rxq_ovfl()
                   && header->cmsg_len >= CMSG_LEN(sizeof(uint32_t))) {
            uint32_t dropped;
            memcpy(&dropped, CMSG_DATA(header), sizeof(dropped));
            info->dropped = dropped;
            info->has_dropped = 1;
        }
    }
    return length;
}

int csp_wake_descriptor(void) { return eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK); }

int csp_direct_io_alignment(int fd, unsigned int *memory, unsigned int *offset) {
#ifdef STATX_DIOALIGN
    struct statx info;
    if (statx(fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &info) != 0) return -1;
    if (!(info.stx_mask & STATX_DIOALIGN) || info.stx_dio_offset_align == 0 || info.stx_dio_mem_align == 0) return -1;
    *memory = info.stx_dio_mem_align;
    *offset = info.stx_dio_offset_align;
    return 0;
#else
    (void)fd; (void)memory; (void)offset;
    return -1;
#endif
}

int csp_set_direct_io(int fd, int on) {
    int flags = fcntl(fd, F_GETFL);
    if (flags < 0) return -1;
    return fcntl(fd, F_SETFL, on ? (flags | O_DIRECT) : (flags & ~O_DIRECT));
}

void csp_set_thread_name(const char *name) { prctl(PR_SET_NAME, (unsigned long)name, 0, 0, 0); }

int csp_lower_thread_priority(int increment) {
    pid_t thread = (pid_t)syscall(SYS_gettid);
    errno = 0;
    int current = getpriority(PRIO_PROCESS, (id_t)thread);
    if (current == -1 && errno != 0) return -1;
    return setpriority(PRIO_PROCESS, (id_t)thread, current + increment);
}

size_t csp_heap_bytes_in_use(void) { return mallinfo2().uordblks; }

void csp_malloc_limit_arenas(void) {
    mallopt(M_ARENA_MAX, 2);
    // Fixed thresholds instead of glibc's sliding ones: freeing one large block (the journal read at start, 9 MB
    // at 10,000 hosts) raises the mmap threshold to its size and the trim threshold to twice that, after which
    // up to 18 MB freed at the top of the heap stays resident for good (docs/memory.md). 128 KiB is glibc's
    // default; the heap is trimmed past 1 MiB of free space at its top.
    mallopt(M_MMAP_THRESHOLD, 128 * 1024);
    mallopt(M_TRIM_THRESHOLD, 1024 * 1024);
}

void csp_malloc_trim(void) { malloc_trim(0); }

// Whether the object's dynamic section asks for text relocations: then its "read-only" pages were written at load.
static int csp_has_text_relocations(const struct dl_phdr_info *info) {
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *phdr = &info->dlpi_phdr[i];
        if (phdr->p_type != PT_DYNAMIC) continue;
        for (const ElfW(Dyn) *dyn = (const ElfW(Dyn) *)(info->dlpi_addr + phdr->p_vaddr); dyn->d_tag != DT_NULL; dyn++) {
            if (dyn->d_tag == DT_TEXTREL) return 1;
            if (dyn->d_tag == DT_FLAGS && (dyn->d_un.d_val & DF_TEXTREL)) return 1;
        }
    }
    return 0;
}

static int csp_release_object(struct dl_phdr_info *info, size_t size, void *context) {
    (void)size;
    size_t *released = context;
    // The vDSO is the kernel's, not a file.
    if (info->dlpi_name != NULL && strstr(info->dlpi_name, "linux-vdso") != NULL) return 0;
    if (csp_has_text_relocations(info)) return 0;
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *load = &info->dlpi_phdr[i];
        if (load->p_type != PT_LOAD || (load->p_flags & PF_W) || load->p_memsz == 0) continue;
        // Whole pages inside the segment only: a page it shares with a neighbour is left as it is.
        uintptr_t start = (info->dlpi_addr + load->p_vaddr + page - 1) & ~(page - 1);
        uintptr_t end = (info->dlpi_addr + load->p_vaddr + load->p_memsz) & ~(page - 1);
        if (end <= start) continue;
        int overlapsRelro = 0;
        for (int j = 0; j < info->dlpi_phnum; j++) {
            const ElfW(Phdr) *relro = &info->dlpi_phdr[j];
            if (relro->p_type != PT_GNU_RELRO) continue;
            uintptr_t relroStart = info->dlpi_addr + relro->p_vaddr, relroEnd = relroStart + relro->p_memsz;
            if (relroStart < end && start < relroEnd) overlapsRelro = 1;
        }
        if (overlapsRelro) continue;
        if (madvise((void *)start, end - start, MADV_DONTNEED) == 0) *released += end - start;
    }
    return 0;
}

size_t csp_release_readonly_segments(void) {
    size_t released = 0;
    // dl_iterate_phdr holds the loader's lock: no object can be unloaded (and its range reused) meanwhile.
    dl_iterate_phdr(csp_release_object, &released);
    return released;
}

extern char **environ;

int csp_spawn(pid_t *pid, const char *path, char *const argv[], int input, int output, int error) {
    posix_spawn_file_actions_t actions;
    posix_spawnattr_t attributes;
    int result = posix_spawn_file_actions_init(&actions);
    if (result != 0) return result;
    result = posix_spawnattr_init(&attributes);
    if (result != 0) {
        posix_spawn_file_actions_destroy(&actions);
        return result;
    }
    sigset_t none, pipe;
    sigemptyset(&none);
    sigemptyset(&pipe);
    sigaddset(&pipe, SIGPIPE);
    if (result == 0) result = posix_spawn_file_actions_adddup2(&actions, input, 0);
    if (result == 0) result = posix_spawn_file_actions_adddup2(&actions, output, 1);
    if (result == 0) result = posix_spawn_file_actions_adddup2(&actions, error, 2);
    if (result == 0) result = posix_spawn_file_actions_addclosefrom_np(&actions, 3);
    if (result == 0) result = posix_spawnattr_setsigmask(&attributes, &none);
    if (result == 0) result = posix_spawnattr_setsigdefault(&attributes, &pipe);
    if (result == 0) result = posix_spawnattr_setpgroup(&attributes, 0);
    if (result == 0)
        result = posix_spawnattr_setflags(
            &attributes, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP);
    if (result == 0) result = posix_spawn(pid, path, &actions, &attributes, argv, environ);
    posix_spawnattr_destroy(&attributes);
    posix_spawn_file_actions_destroy(&actions);
    return result;
}

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
