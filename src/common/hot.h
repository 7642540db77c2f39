// GS_HOT marks a function on a hot path that a driver call interrupts (the
// limiter's allocation and free paths): the compiler places every such
// function together (.text.hot), so the path touches few code pages. It
// matters where the driver flushes the TLB between calls (a 1 MiB munmap
// in the simulated driver flushes it whole).
#pragma once

#define GS_HOT __attribute__((hot))
