// libnl-3 / libnl-route-3 (docs/linux.md §3): neighbour entries and link/address change notifications.
#include <netlink/netlink.h>
#include <netlink/socket.h>
#include <netlink/cache.h>
#include <netlink/route/link.h>
#include <netlink/route/addr.h>
#include <netlink/route/neighbour.h>
#include <linux/rtnetlink.h>
#include <linux/neighbour.h>
