#include "CRingIOTestSupport.h"

#include <malloc.h>

unsigned long ringio_test_heap_in_use(void) {
    struct mallinfo2 info = mallinfo2();
    return (unsigned long)(info.uordblks + info.hblkhd);
}
