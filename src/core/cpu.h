/* cpu.h — which instruction set the forward pass's kernels run with.
 *
 * The kernels (matmul.c, attention.c) come in a portable C build that any
 * CPU runs, an AVX2 build (x86-64 with AVX2, FMA and F16C), and, for the
 * weight products, an AVX-512 build (AVX-512F on top of those; every other
 * kernel, and float16 products of 1-3 rows, run their AVX2 build there).  Which one runs is decided
 * once, when a forward_state is created, from what the CPU has and the
 * GPT2D_ISA environment variable (portable, avx2 or avx512), which forces a
 * path: for tests, benchmarks, and telling a kernel bug from a model bug.  Nothing else selects a kernel (no ifunc, no target_clones),
 * so the path a test forces is the path that runs.  Pure functions of the
 * CPU and the environment; any thread. */
#ifndef GPT2D_CPU_H
#define GPT2D_CPU_H

#include "core/error.h"

/* In order: a CPU that runs one runs every one before it. */
typedef enum cpu_isa {
    CPU_ISA_PORTABLE,
    CPU_ISA_AVX2,               /* AVX2 + FMA + F16C */
    CPU_ISA_AVX512,             /* and AVX-512F */
} cpu_isa;

#define CPU_ISA_COUNT 3

/* The best this CPU runs. */
cpu_isa cpu_isa_supported(void);

/* "portable", "avx2", "avx512" -> *out; -1 for anything else. */
int cpu_isa_parse(const char *name, cpu_isa *out);
const char *cpu_isa_name(cpu_isa isa);

/* The kernels to use: GPT2D_ISA when set (an error when it names no ISA or
 * one this CPU lacks), else cpu_isa_supported(). */
int cpu_isa_choose(cpu_isa *out, gpt2d_error *err);

#endif
