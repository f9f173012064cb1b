#include "CRingIOTestSupport.h"

#include <malloc.h>
#include <stddef.h>

// Under AddressSanitizer and ThreadSanitizer malloc is the sanitizer's, and
// mallinfo2 reports zeros; their allocator says what is in use instead. Weak:
// absent (null) in an ordinary build.
extern size_t __sanitizer_get_current_allocated_bytes(void) __attribute__((weak));

unsigned long ringio_test_heap_in_use(void) {
    if (__sanitizer_get_current_allocated_bytes) {
        return (unsigned long)__sanitizer_get_current_allocated_bytes();
    }
    struct mallinfo2 info = mallinfo2();
    return (unsigned long)(info.uordblks + info.hblkhd);
}

int ringio_test_under_sanitizer(void) {
    return __sanitizer_get_current_allocated_bytes != 0;
}
