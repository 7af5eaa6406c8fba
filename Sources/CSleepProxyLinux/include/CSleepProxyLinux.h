// Linux declarations that Swift's Glibc module does not export (docs/linux.md §2, §7): packet sockets, classic
// BPF, Ethernet protocol numbers, interface flags, setns.
#ifndef C_SLEEP_PROXY_LINUX_H
#define C_SLEEP_PROXY_LINUX_H

#ifdef __linux__
#include <linux/filter.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <unistd.h>

/// Enters the network namespace open at `fd` on the calling thread only (setns is per-thread).
int csp_setns_net(int fd);

/// Bytes of heap in use (glibc mallinfo2().uordblks), for memory benchmarks.
size_t csp_heap_bytes_in_use(void);

/// glibc's allocator: at most two arenas (M_ARENA_MAX). By default every thread that allocates may get an arena
/// of its own, each keeping freed memory for itself; the daemon's threads pass packets between each other, so
/// most of that memory is freed in another arena than it came from.
void csp_malloc_limit_arenas(void);

/// Returns free heap memory to the system (malloc_trim(0)), after a large transient allocation.
void csp_malloc_trim(void);

/// Drops this process's page-table entries for the read-only, file-backed segments (code, constants) of every
/// object loaded now: the executable and its shared libraries (dl_iterate_phdr, MADV_DONTNEED). Their pages stay in
/// the page cache; what runs again faults back in. Writable segments, RELRO and objects with text relocations are
/// left alone, since their pages may differ from the file. Returns the bytes of address range advised.
size_t csp_release_readonly_segments(void);

/// Starts `path` with `argv` (NULL-terminated) and this process's environment, `input`, `output` and `error` as its
/// standard descriptors and no other (posix_spawn, closefrom 3), no signal blocked, SIGPIPE at its default, in a
/// process group of its own. Returns 0 with `*pid` set, or an errno value. For the tests' helpers: Foundation's
/// `Process.run()` reads /proc/self/fd past a buffer's end and crashes now and then (docs/testing.md).
int csp_spawn(pid_t *pid, const char *path, char *const argv[], int input, int output, int error);

/// Makes stdout line-buffered so that log lines reach journald or a pipe as they happen
/// (Swift 6 cannot touch the global `stdout` directly).
void csp_line_buffer_stdout(void);

/// Wake-on-LAN state of an interface (ETHTOOL_GWOL): 1 when magic-packet wake is enabled, 0 when it is not,
/// -1 when the driver cannot tell (errno says why; virtual interfaces answer EOPNOTSUPP).
int csp_wol_magic_enabled(const char *interface);

/// Makes every permitted capability effective (capget/capset): a binary with file capabilities and no effective
/// bit (`setcap cap_net_raw,cap_net_admin=ip`, as the container image ships it) starts with them permitted only.
/// Returns 0 when nothing needed raising or it worked, -1 with errno otherwise.
int csp_raise_permitted_capabilities(void);

/// The alignment direct I/O needs on the open file `fd` (statx STATX_DIOALIGN, Linux 6.1): `*memory` for the
/// buffer, `*offset` for the file offset and length. Returns 0 with both set when the file system supports direct
/// I/O for it, -1 otherwise (an older kernel, a file system without it: tmpfs before 6.6, overlayfs).
int csp_direct_io_alignment(int fd, unsigned int *memory, unsigned int *offset);

/// Sets (`on` nonzero) or clears O_DIRECT on the open file `fd` (fcntl F_SETFL). Returns 0, or -1 with errno.
int csp_set_direct_io(int fd, int on);

/// Names the calling thread (prctl PR_SET_NAME: the first 15 bytes), as `ps -T` and `top -H` show it.
void csp_set_thread_name(const char *name);

/// Raises the calling thread's nice value by `increment` (setpriority on its thread ID: on Linux each thread has its
/// own). Returns 0, or -1 with errno.
int csp_lower_thread_priority(int increment);

/// What `csp_receive_datagram` learned of one datagram besides its bytes.
struct csp_datagram_info {
    /// Where it came from (sockaddr_in or sockaddr_in6).
    struct sockaddr_storage source;
    /// Where it was sent, from IP_PKTINFO / IPV6_PKTINFO (a group for multicast); family AF_UNSPEC without it.
    struct sockaddr_storage destination;
    /// The interface it came in on (packet info); 0 without packet info.
    int interface_index;
    /// Nonzero when it was larger than the buffer (MSG_TRUNC) and was cut.
    int truncated;
    /// The socket's count of datagrams dropped for a full receive buffer (SO_RXQ_OVFL), when the datagram carried
    /// it; `has_dropped` says whether it did.
    unsigned int dropped;
    int has_dropped;
};

/// Receives one datagram from `fd` without waiting (MSG_DONTWAIT), with its packet info and the socket's drop count
/// (docs/busy-lan.md). Returns its length (at most `size`; see `truncated`), or -1 with errno (EAGAIN: none waits).
ssize_t csp_receive_datagram(int fd, void *buffer, size_t size, struct csp_datagram_info *info);

/// An eventfd, close-on-exec and non-blocking, for waking a thread that waits in poll(2); -1 with errno.
int csp_wake_descriptor(void);

/// SO_RXQ_OVFL, which older headers lack.
static inline int csp_so_rxq_ovfl(void) {
#ifdef SO_RXQ_OVFL
    return SO_RXQ_OVFL;
#else
    return 40;
#endif
}

static inline int csp_packet_ignore_outgoing(void) {
#ifdef PACKET_IGNORE_OUTGOING
    return PACKET_IGNORE_OUTGOING;
#else
    return 23;
#endif
}
#endif

#endif
