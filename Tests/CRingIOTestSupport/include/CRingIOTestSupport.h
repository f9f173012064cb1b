// C helpers for RingIO's tests only (not part of the library).
#ifndef RINGIO_TEST_SUPPORT_H
#define RINGIO_TEST_SUPPORT_H

/// Installs a seccomp filter on every thread of the calling process that makes
/// io_uring_setup fail with `error` (ENOSYS, EPERM, ...), as a container
/// policy would. Irreversible: call it only in a child process.
/// Returns 0, or -errno when the filter could not be installed.
int ringio_test_refuse_io_uring_setup(int error);

/// Bytes of the C heap in use (malloc's arenas and its mmapped blocks), for leak checks.
unsigned long ringio_test_heap_in_use(void);

/// Whether this process runs under AddressSanitizer or ThreadSanitizer (for timing bounds).
int ringio_test_under_sanitizer(void);

#endif
