// The liburing import shim.
//
// liburing 2.3's header imports into Swift only after <features.h> and
// <linux/io_uring.h>. Macros that are not plain literals (the IOSQE_* flags,
// built from enum bits) and the io_uring_for_each_cqe loop do not import, so
// they are re-exported here as static inline functions.
#ifndef RINGIO_CLIBURING_SHIM_H
#define RINGIO_CLIBURING_SHIM_H

#include <features.h>
#include <linux/io_uring.h>
#include <liburing.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <sys/stat.h>
#include <linux/stat.h>
#include <poll.h>
#include <signal.h>
#include <pthread.h>
#include <fcntl.h>
#include <unistd.h>
#include <sys/prctl.h>
#include <sys/ioctl.h>
#include <linux/fs.h>
#include <sys/uio.h>
#include <errno.h>
#include <sys/vfs.h>
#include <linux/futex.h>
#include <stdint.h>
#include <sys/epoll.h>
#include <time.h>
#include <sys/signalfd.h>
#include <sys/inotify.h>
#include <sys/wait.h>
#include <string.h>
#include <stdlib.h>

static inline unsigned cliburing_iosqe_fixed_file(void) { return IOSQE_FIXED_FILE; }
static inline unsigned cliburing_iosqe_io_drain(void) { return IOSQE_IO_DRAIN; }
static inline unsigned cliburing_iosqe_io_link(void) { return IOSQE_IO_LINK; }
static inline unsigned cliburing_iosqe_io_hardlink(void) { return IOSQE_IO_HARDLINK; }
static inline unsigned cliburing_iosqe_async(void) { return IOSQE_ASYNC; }
static inline unsigned cliburing_iosqe_cqe_skip_success(void) { return IOSQE_CQE_SKIP_SUCCESS; }

static inline unsigned cliburing_setup_single_issuer(void) { return IORING_SETUP_SINGLE_ISSUER; }
static inline unsigned cliburing_setup_defer_taskrun(void) { return IORING_SETUP_DEFER_TASKRUN; }
static inline unsigned cliburing_setup_coop_taskrun(void) { return IORING_SETUP_COOP_TASKRUN; }
static inline unsigned cliburing_setup_taskrun_flag(void) { return IORING_SETUP_TASKRUN_FLAG; }
/* With IORING_SETUP_TASKRUN_FLAG: the kernel holds completions that the next
   io_uring_enter posts (IORING_SQ_TASKRUN). A load, no system call. */
static inline int cliburing_sq_taskrun(struct io_uring *ring) {
    return (IO_URING_READ_ONCE(*ring->sq.kflags) & IORING_SQ_TASKRUN) != 0;
}
static inline unsigned cliburing_setup_cqsize(void) { return IORING_SETUP_CQSIZE; }
static inline unsigned cliburing_setup_submit_all(void) { return IORING_SETUP_SUBMIT_ALL; }

static inline unsigned cliburing_async_cancel_any(void) { return IORING_ASYNC_CANCEL_ANY; }
static inline unsigned cliburing_async_cancel_all(void) { return IORING_ASYNC_CANCEL_ALL; }

static inline unsigned cliburing_feat_nodrop(void) { return IORING_FEAT_NODROP; }
static inline unsigned cliburing_sq_cq_overflow(void) { return IORING_SQ_CQ_OVERFLOW; }

/// The number of entries io_uring_for_each_cqe would visit, without the macro.
static inline unsigned cliburing_cq_ready(struct io_uring *ring) { return io_uring_cq_ready(ring); }

/// Whether the kernel set the CQ-overflow flag (completions are held in the kernel).
static inline int cliburing_cq_has_overflow(struct io_uring *ring) {
    return (IO_URING_READ_ONCE(*ring->sq.kflags) & IORING_SQ_CQ_OVERFLOW) != 0;
}

/// Sets user_data to a pointer (a retained Swift object); io_uring_sqe_set_data takes void *.
/// `struct statx` under a name Swift can see (the struct and the function share a name).
typedef struct statx cliburing_statx_t;

static inline void cliburing_sqe_set_data64(struct io_uring_sqe *sqe, unsigned long long data) { sqe->user_data = data; }
static inline void cliburing_prep_statx(struct io_uring_sqe *sqe, int dfd, const char *path, int flags, unsigned mask, cliburing_statx_t *buf) {
    io_uring_prep_statx(sqe, dfd, path, flags, mask, buf);
}
static inline void cliburing_sqe_set_flags(struct io_uring_sqe *sqe, unsigned flags) { sqe->flags = (__u8)flags; }
static inline void cliburing_sqe_add_flags(struct io_uring_sqe *sqe, unsigned flags) { sqe->flags |= (__u8)flags; }

/// The raw statx system call (glibc's wrapper needs _GNU_SOURCE tricks in Swift).
static inline int cliburing_statx(int dirfd, const char *path, int flags, unsigned mask, cliburing_statx_t *buf) {
    return (int)syscall(SYS_statx, dirfd, path, flags, mask, buf);
}

/// renameat2 through the raw system call (glibc declares it only under _GNU_SOURCE).
static inline int cliburing_renameat2(int olddirfd, const char *oldpath, int newdirfd, const char *newpath, unsigned flags) {
    return (int)syscall(SYS_renameat2, olddirfd, oldpath, newdirfd, newpath, flags);
}

/// splice (glibc declares it only under _GNU_SOURCE).
static inline long cliburing_splice(int fd_in, long long *off_in, int fd_out, long long *off_out, size_t len, unsigned flags) {
    return syscall(SYS_splice, fd_in, off_in, fd_out, off_out, len, flags);
}

/// A close-on-exec pipe whose capacity is set to `size` where allowed;
/// returns the capacity, or -errno. (pipe2 and F_SETPIPE_SZ need _GNU_SOURCE.)
static inline int cliburing_sized_pipe(int fds[2], int size) {
    if (syscall(SYS_pipe2, fds, O_CLOEXEC) != 0) return -errno;
    int capacity = fcntl(fds[1], 1031 /* F_SETPIPE_SZ */, size);
    if (capacity < 0) capacity = fcntl(fds[1], 1032 /* F_GETPIPE_SZ */);
    return capacity < 0 ? 65536 : capacity;
}

static inline int cliburing_errno(void) { return errno; }

// glibc 2.32+: the symbolic name of an errno value ("ENOENT"), or NULL.
extern const char *strerrorname_np(int errnum);
static inline const char *cliburing_errno_name(int e) { return strerrorname_np(e); }

/// AT_EMPTY_PATH (glibc defines it only under _GNU_SOURCE).
static inline int cliburing_at_empty_path(void) { return 0x1000; /* AT_EMPTY_PATH */ }

/// O_DIRECT (glibc defines it only under _GNU_SOURCE).
static inline int cliburing_o_direct(void) { return __O_DIRECT; }

/// The logical block size of a block device (BLKSSZGET), or -errno.
static inline int cliburing_logical_block_size(int fd) {
    int size = 0;
    return ioctl(fd, BLKSSZGET, &size) == 0 ? size : -errno;
}

/// Sets IOSQE_FIXED_FILE on a prepared SQE whose fd is an index into the registered-file table.
static inline void cliburing_sqe_use_fixed_file(struct io_uring_sqe *sqe) { sqe->flags |= IOSQE_FIXED_FILE; }

/// Names the calling thread (what ps, top and gdb show); at most 15 bytes are kept.
static inline void cliburing_set_thread_name(const char *name) { prctl(PR_SET_NAME, (unsigned long)name, 0, 0, 0); }
/// prctl(PR_SET_TIMERSLACK): how late the kernel may end the calling thread's timed
/// sleeps to batch wake-ups (50 µs by default); 0, or -1 with errno set.
static inline int cliburing_set_timer_slack(unsigned long nanoseconds) { return prctl(PR_SET_TIMERSLACK, nanoseconds, 0, 0, 0); }
/// futex(FUTEX_WAIT_BITSET | FUTEX_PRIVATE_FLAG): sleeps while `*word == expected`
/// until a wake, a signal or the absolute CLOCK_MONOTONIC `deadline` (NULL: none);
/// 0, or -1 with errno set (EAGAIN: the word differed; ETIMEDOUT; EINTR).
static inline int cliburing_futex_wait(uint32_t *word, uint32_t expected, const struct timespec *deadline) {
    return (int)syscall(SYS_futex, word, FUTEX_WAIT_BITSET | FUTEX_PRIVATE_FLAG, expected, deadline, NULL, FUTEX_BITSET_MATCH_ANY);
}
/// futex(FUTEX_WAKE | FUTEX_PRIVATE_FLAG): wakes up to `count` threads asleep on
/// `word`; how many it woke, or -1 with errno set.
static inline int cliburing_futex_wake(uint32_t *word, int count) {
    return (int)syscall(SYS_futex, word, FUTEX_WAKE | FUTEX_PRIVATE_FLAG, count, NULL, NULL, 0);
}
/// The calling thread's kernel thread ID (equal to the process ID on the main thread).
static inline int cliburing_gettid(void) { return (int)syscall(SYS_gettid); }
/// The CPU the calling thread runs on now, or -1 (glibc reads it from the
/// thread's rseq area, no system call, where the kernel registered one).
extern int sched_getcpu(void);
static inline int cliburing_current_cpu(void) { return sched_getcpu(); }

/// openat2 with RESOLVE_CACHED: fails with EAGAIN instead of walking a path
/// that is not all in the dentry cache (Linux 5.12); -1 with ENOSYS where
/// the kernel headers lack openat2.
static inline int cliburing_open_cached(const char *path, int flags) {
#if defined(SYS_openat2) && __has_include(<linux/openat2.h>)
    struct { unsigned long long flags, mode, resolve; } how = { (unsigned long long)(unsigned)flags, 0, 0x20 /* RESOLVE_CACHED */ };
    return (int)syscall(SYS_openat2, AT_FDCWD, path, &how, sizeof how);
#else
    (void)path; (void)flags;
    errno = ENOSYS;
    return -1;
#endif
}

/// The type of the file system an open file is on (statfs's f_type, such
/// as 0xEF53 for ext2/3/4), or -1 with errno set.
static inline long long cliburing_fs_type(int fd) {
    struct statfs info;
    return fstatfs(fd, &info) == 0 ? (long long)info.f_type : -1;
}

/// fallocate(2) (declared by glibc only under _GNU_SOURCE): 0, or -1 with errno set.
static inline int cliburing_fallocate(int fd, int mode, long long offset, long long length) {
    return (int)syscall(SYS_fallocate, fd, mode, (off_t)offset, (off_t)length);
}

ssize_t preadv2(int fd, const struct iovec *iov, int iovcnt, off_t offset, int flags);

/// preadv2 with RWF_NOWAIT: fails with EAGAIN (or reads less) instead of
/// waiting for pages that are not in the page cache. The raw system call:
/// glibc's preadv2 is a cancellation point, and its enable/disable pair cost
/// a tenth of the call's user time in an awaited 4 KiB read (the library
/// never cancels threads). The offset goes as (low, high) words, as glibc
/// passes it; on a 64-bit kernel the high word is ignored.
static inline long cliburing_pread_nowait(int fd, void *buffer, size_t length, long long offset) {
    struct iovec v = { buffer, length };
    return syscall(SYS_preadv2, fd, &v, 1, (unsigned long)offset,
                   (unsigned long)((unsigned long long)offset >> 32 >> 32), 0x8 /* RWF_NOWAIT */);
}

/// A per-thread cache of idle 4 KiB read blocks (the library's SmallBlocks):
/// a read that takes a block and a chunk that gives it back on the same
/// thread take no lock. At most CLIBURING_THREAD_BLOCKS blocks per thread;
/// a thread's blocks are freed when it ends (a pthread key's destructor).
#define CLIBURING_THREAD_BLOCKS 8
struct cliburing_block_cache { int count; int registered; void *blocks[CLIBURING_THREAD_BLOCKS]; };
static inline struct cliburing_block_cache *cliburing_thread_blocks(void) {
    static __thread struct cliburing_block_cache cache;
    return &cache;
}
static inline void cliburing_thread_blocks_free(void *p) {
    struct cliburing_block_cache *cache = (struct cliburing_block_cache *)p;
    while (cache->count > 0) free(cache->blocks[--cache->count]);
    // A block given back later (by another key's destructor) registers
    // again, and glibc runs this destructor once more.
    cache->registered = 0;
}
// (The state lives in function-local statics: Swift does not emit a
// header's file-scope statics. Each object file that calls these functions
// has its own copy, so only one Swift file, SmallBlocks.swift, calls them.)
static inline pthread_key_t *cliburing_thread_blocks_key(void) {
    static pthread_key_t key;
    return &key;
}
static inline void cliburing_thread_blocks_make_key(void) {
    pthread_key_create(cliburing_thread_blocks_key(), cliburing_thread_blocks_free);
}
static inline pthread_once_t *cliburing_thread_blocks_once(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    return &once;
}
/// An idle block of this thread's cache, or NULL.
static inline void *cliburing_thread_block_take(void) {
    struct cliburing_block_cache *cache = cliburing_thread_blocks();
    return cache->count > 0 ? cache->blocks[--cache->count] : NULL;
}
/// Keeps `block` in this thread's cache: 1, or 0 when the cache is full.
static inline int cliburing_thread_block_give(void *block) {
    struct cliburing_block_cache *cache = cliburing_thread_blocks();
    if (cache->count >= CLIBURING_THREAD_BLOCKS) return 0;
    if (!cache->registered) {
        // Once per thread: the destructor frees what the cache holds when
        // the thread ends.
        pthread_once(cliburing_thread_blocks_once(), cliburing_thread_blocks_make_key);
        if (pthread_setspecific(*cliburing_thread_blocks_key(), cache) != 0) return 0;
        cache->registered = 1;
    }
    cache->blocks[cache->count++] = block;
    return 1;
}

/// A per-thread slot for one retained object (the library's reusable
/// small-read chunk, DataChunk+SmallReads.swift): `release` is called on
/// what the slot holds when the thread ends. As with the blocks above, the
/// state lives in function-local statics, so only one Swift file calls these.
static inline void **cliburing_thread_object_slot(void) {
    static __thread void *slot;
    return &slot;
}
static inline int *cliburing_thread_object_registered(void) {
    static __thread int registered;
    return &registered;
}
static inline void (**cliburing_thread_object_releaser(void))(void *) {
    static void (*releaser)(void *);
    return &releaser;
}
static inline void cliburing_thread_object_free(void *p) {
    void **slot = (void **)p;
    void *object = *slot;
    *slot = 0;
    // A give after this (from another key's destructor) registers again,
    // and glibc runs this destructor once more.
    *cliburing_thread_object_registered() = 0;
    if (object && *cliburing_thread_object_releaser()) (*cliburing_thread_object_releaser())(object);
}
static inline pthread_key_t *cliburing_thread_object_key(void) {
    static pthread_key_t key;
    return &key;
}
static inline pthread_once_t *cliburing_thread_object_once(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    return &once;
}
static inline void cliburing_thread_object_make_key(void) {
    pthread_key_create(cliburing_thread_object_key(), cliburing_thread_object_free);
}
/// Takes what this thread's slot holds (NULL: nothing), leaving it empty.
static inline void *cliburing_thread_object_take(void) {
    void **slot = cliburing_thread_object_slot();
    void *object = *slot;
    *slot = 0;
    return object;
}
/// Puts `object` in this thread's empty slot: 1, or 0 when it could not
/// (the slot is full, or the thread-exit release could not be arranged).
/// `release` (the same function every time) is what the thread's end calls.
static inline int cliburing_thread_object_give(void *object, void (*release)(void *)) {
    void **slot = cliburing_thread_object_slot();
    if (*slot) return 0;
    int *registered = cliburing_thread_object_registered();
    if (!*registered) {
        *cliburing_thread_object_releaser() = release;
        pthread_once(cliburing_thread_object_once(), cliburing_thread_object_make_key);
        if (pthread_setspecific(*cliburing_thread_object_key(), slot) != 0) return 0;
        *registered = 1;
    }
    *slot = object;
    return 1;
}

/// IORING_OP_FIXED_FD_INSTALL (Linux 6.8; liburing 2.6 names it): a regular
/// fd, O_CLOEXEC, for the direct descriptor in table slot `slot`.
#define CLIBURING_OP_FIXED_FD_INSTALL 54
static inline void cliburing_prep_fixed_fd_install(struct io_uring_sqe *sqe, int slot) {
    io_uring_prep_rw(CLIBURING_OP_FIXED_FD_INSTALL, sqe, slot, NULL, 0, 0);
    sqe->flags |= IOSQE_FIXED_FILE;
}

/// Whether the ring's kernel has what a linked open -> read -> install ->
/// close chain on a direct descriptor needs: OPENAT and CLOSE with a file
/// index (5.15) and FIXED_FD_INSTALL (6.8).
static inline int cliburing_supports_direct_chain(struct io_uring *ring) {
    struct io_uring_probe *probe = io_uring_get_probe_ring(ring);
    if (!probe) return 0;
    int ok = io_uring_opcode_supported(probe, IORING_OP_OPENAT)
        && io_uring_opcode_supported(probe, IORING_OP_CLOSE)
        && io_uring_opcode_supported(probe, CLIBURING_OP_FIXED_FD_INSTALL);
    io_uring_free_probe(probe);
    return ok;
}

int ppoll(struct pollfd *fds, nfds_t nfds, const struct timespec *timeout, const sigset_t *sigmask);

/// Waits up to `nanoseconds` for `fd` to become readable (ppoll: declared
/// by glibc only under _GNU_SOURCE): 1 when it did, 0 on timeout, -errno.
static inline int cliburing_wait_readable(int fd, long long nanoseconds) {
    struct pollfd p = { fd, POLLIN, 0 };
    struct timespec t = { (time_t)(nanoseconds / 1000000000), (long)(nanoseconds % 1000000000) };
    int rc = ppoll(&p, 1, &t, 0);
    return rc < 0 ? -errno : rc;
}

/// Bytes ready to read on `fd` (FIONREAD; ioctl is variadic, which Swift
/// cannot call), or -errno.
static inline int cliburing_bytes_readable(int fd) {
    int n = 0;
    return ioctl(fd, FIONREAD, &n) == 0 ? n : -errno;
}

/// epoll_ctl with the entry's events and 64-bit data (epoll_event is
/// packed on x86_64), or -errno.
static inline int cliburing_epoll_ctl(int epfd, int op, int fd, uint32_t events, uint64_t data) {
    struct epoll_event e;
    e.events = events;
    e.data.u64 = data;
    return epoll_ctl(epfd, op, fd, &e) == 0 ? 0 : -errno;
}

/// epoll_wait into separate arrays of data and events (at most 64), or -errno.
static inline int cliburing_epoll_wait(int epfd, uint64_t *data, uint32_t *events, int max, int timeout) {
    struct epoll_event e[64];
    if (max > 64) max = 64;
    int n = epoll_wait(epfd, e, max, timeout);
    if (n < 0) return -errno;
    for (int i = 0; i < n; i++) { data[i] = e[i].data.u64; events[i] = e[i].events; }
    return n;
}

/// epoll_pwait2 (Linux 5.11) into separate arrays (at most 64), waiting up to
/// timeout_ns nanoseconds (-1: without end), or -errno (-ENOSYS where the
/// kernel or the headers lack it). x86_64 and aarch64: struct timespec is
/// the kernel's __kernel_timespec.
static inline int cliburing_epoll_pwait2(int epfd, uint64_t *data, uint32_t *events, int max, int64_t timeout_ns) {
#ifdef SYS_epoll_pwait2
    struct epoll_event e[64];
    if (max > 64) max = 64;
    struct timespec ts;
    struct timespec *tp = NULL;
    if (timeout_ns >= 0) {
        ts.tv_sec = (time_t)(timeout_ns / 1000000000);
        ts.tv_nsec = (long)(timeout_ns % 1000000000);
        tp = &ts;
    }
    long n = syscall(SYS_epoll_pwait2, epfd, e, max, tp, NULL, (size_t)0);
    if (n < 0) return -errno;
    for (long i = 0; i < n; i++) { data[i] = e[i].data.u64; events[i] = e[i].events; }
    return (int)n;
#else
    (void)epfd; (void)data; (void)events; (void)max; (void)timeout_ns;
    return -ENOSYS;
#endif
}

/// epoll_create1(EPOLL_CLOEXEC), or -errno.
static inline int cliburing_epoll_create(void) {
    int fd = epoll_create1(EPOLL_CLOEXEC);
    return fd >= 0 ? fd : -errno;
}

/// EPOLLIN, EPOLLOUT, EPOLLONESHOT and the epoll_ctl operations.
static inline uint32_t cliburing_epollin(void) { return EPOLLIN; }
static inline uint32_t cliburing_epolloneshot(void) { return EPOLLONESHOT; }
static inline int cliburing_epoll_ctl_add(void) { return EPOLL_CTL_ADD; }
static inline int cliburing_epoll_ctl_mod(void) { return EPOLL_CTL_MOD; }
static inline int cliburing_epoll_ctl_del(void) { return EPOLL_CTL_DEL; }

/// The capacity of the pipe `fd` is an end of (F_GETPIPE_SZ), or -errno.
static inline int cliburing_pipe_capacity(int fd) {
    int n = fcntl(fd, 1032 /* F_GETPIPE_SZ */);
    return n >= 0 ? n : -errno;
}

/// Sends `sig` to thread `tid` of this process (tgkill), keeping errno
/// (called from a signal handler). 0 or -1.
static inline int cliburing_tgkill(int tid, int sig) {
    int saved = errno;
    int rc = (int)syscall(SYS_tgkill, getpid(), tid, sig);
    errno = saved;
    return rc;
}

/// Installs `handler` for `sig` (SA_RESTART, every signal blocked while it
/// runs); the previous action goes to `old`. 0 or -errno.
static inline int cliburing_install_handler(int sig, void (*handler)(int), struct sigaction *old) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = handler;
    sigfillset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    return sigaction(sig, &sa, old) == 0 ? 0 : -errno;
}

/// Puts back the action `old` of `sig`. 0 or -errno.
static inline int cliburing_restore_action(int sig, const struct sigaction *old) {
    return sigaction(sig, old, 0) == 0 ? 0 : -errno;
}

/// pidfd_open(2) (Linux 5.3): an fd that becomes readable when `pid` ends, or -errno.
static inline int cliburing_pidfd_open(int pid) {
#ifdef SYS_pidfd_open
    long fd = syscall(SYS_pidfd_open, pid, 0);
#else
    long fd = syscall(434, pid, 0);
#endif
    return fd >= 0 ? (int)fd : -errno;
}

/// The raw wait status (as waitpid gives it) of the ended child behind
/// `pidfd`, without reaping it (waitid P_PIDFD, WEXITED|WNOHANG|WNOWAIT,
/// Linux 5.4); -ECHILD for a process that is not our child, -EAGAIN when it
/// has not ended.
static inline int cliburing_pidfd_wait_status(int pidfd) {
    siginfo_t info;
    memset(&info, 0, sizeof info);
    if (waitid((idtype_t)3 /* P_PIDFD */, (id_t)pidfd, &info, WEXITED | WNOHANG | WNOWAIT) != 0) return -errno;
    if (info.si_pid == 0) return -EAGAIN;
    switch (info.si_code) {
    case CLD_EXITED: return (info.si_status & 0xff) << 8;
    case CLD_KILLED: return info.si_status & 0x7f;
    case CLD_DUMPED: return (info.si_status & 0x7f) | 0x80;
    default: return -EAGAIN;
    }
}

/// The signal number of a signalfd record.
static inline int cliburing_signalfd_signal(const struct signalfd_siginfo *info) { return (int)info->ssi_signo; }

#include <string.h>

/// The last `c` in the `n` bytes at `s`: glibc's vectorised `memrchr`, a
/// GNU function that <string.h> declares only under _GNU_SOURCE, which
/// this module is not built with (without the declaration C would take it
/// to return `int` and cut the pointer to 32 bits).
extern void *memrchr(const void *s, int c, size_t n);
static inline void *cliburing_memrchr(const void *s, int c, size_t n) { return memrchr(s, c, n); }

/// The raw getdents64 system call (glibc's wrapper is not visible to Swift):
/// fills `buffer` with `struct linux_dirent64` records; returns the bytes
/// filled, 0 at the end, or -1 with errno set.
static inline long cliburing_getdents64(int fd, void *buffer, unsigned long count) {
    return syscall(SYS_getdents64, fd, buffer, count);
}


#endif
