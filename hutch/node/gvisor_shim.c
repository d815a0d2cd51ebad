/* hutch's gVisor shim for the desktop template, loaded into every dynamic program of its boxes
 * through /etc/ld.so.preload. It answers two calls the way Linux does where runsc 20240729's
 * sentry differs; everything else goes straight to libc.
 *
 * close_range(first, ~0U, flags): Linux clamps `last` to the descriptor table; the sentry answers
 * EINVAL for a `last` above INT_MAX. GLib's child spawn closes descriptors with close_range(3,
 * G_MAXUINT, 0) and falls back only on ENOSYS, so every g_spawn (XFCE's session, panel, launchers)
 * failed with "Failed to close file descriptor for child process (Invalid argument)". Clamping
 * `last` to INT_MAX is the same call as Linux's (no descriptor is above it).
 *
 * ioctl(master, TIOCPKT, &on): the sentry's pseudo-terminals have no packet mode (ENOTTY), and
 * VTE (xfce4-terminal) refuses to open a terminal without it ("Inappropriate ioctl for device").
 * Packet mode adds one status byte before the data of each read() of the master; the shim keeps
 * the mode per descriptor and adds the byte itself, always TIOCPKT_DATA (0): the sentry cannot
 * report flow-control changes, which VTE only uses to show ^S/^Q state.
 *
 * Async-signal-safe where it must be (close_range runs in a forked child before exec).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

int close_range(unsigned int first, unsigned int last, int flags) {
    if (last > INT_MAX)
        last = INT_MAX;
    return (int)syscall(SYS_close_range, first, last, flags);
}

#define PACKET_FDS 4096 /* a terminal's master is an early descriptor; past this, no emulation */
static struct { dev_t dev; ino_t ino; } packet[PACKET_FDS]; /* ino 0: not in packet mode */
static ssize_t (*next_read)(int, void *, size_t);

__attribute__((constructor)) static void shim_init(void) {
    next_read = (ssize_t(*)(int, void *, size_t))dlsym(RTLD_NEXT, "read");
}

int ioctl(int fd, unsigned long request, ...) {
    va_list ap;
    va_start(ap, request);
    void *arg = va_arg(ap, void *);
    va_end(ap);
    long r = syscall(SYS_ioctl, fd, request, arg);
    if (r == -1 && errno == ENOTTY && request == TIOCPKT && fd >= 0 && fd < PACKET_FDS && arg != NULL) {
        int n;
        struct stat st;
        if (syscall(SYS_ioctl, fd, TIOCGPTN, &n) != 0 || fstat(fd, &st) != 0) { /* a terminal's master only */
            errno = ENOTTY;
            return -1;
        }
        packet[fd].dev = st.st_dev;
        packet[fd].ino = *(int *)arg ? st.st_ino : 0;
        return 0;
    }
    return (int)r;
}

/* Whether fd is the master that was put in packet mode (not a descriptor reusing its number). */
static int packet_mode(int fd) {
    struct stat st;
    if (fd < 0 || fd >= PACKET_FDS || packet[fd].ino == 0)
        return 0;
    if (fstat(fd, &st) == 0 && st.st_dev == packet[fd].dev && st.st_ino == packet[fd].ino)
        return 1;
    packet[fd].ino = 0;
    return 0;
}

ssize_t read(int fd, void *buf, size_t count) {
    if (!next_read) /* called by a library's constructor before this one's */
        shim_init();
    if (!packet_mode(fd) || count < 2)
        return next_read(fd, buf, count);
    ssize_t n = next_read(fd, (char *)buf + 1, count - 1);
    if (n <= 0)
        return n;
    ((char *)buf)[0] = 0; /* TIOCPKT_DATA */
    return n + 1;
}
