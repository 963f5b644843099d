/* cpu.h — which instruction set the forward pass's kernels run with.
 *
 * The kernels (matmul.c, matmul_q8.c, attention.c) come in a portable C
 * build that any CPU runs, an AVX2 build (x86-64 with AVX2, FMA and F16C),
 * and, for the weight products, an AVX-512 build (AVX-512F on top of
 * those; every other kernel, and float16 products of 1-3 rows, run their
 * AVX2 build there).  The 8-bit integer products of --dtype q8 have two
 * more, each a level of its own so that a test can force it: VNNI's
 * integer dot products on 256-bit vectors (AVX-VNNI) and on 512-bit ones
 * (AVX512_VNNI).  Every other kernel runs at a VNNI level as at the level
 * below it.
 * Which one runs is decided once, when a forward_state is created, from
 * what the CPU has and the one fact this module keeps: the instruction set
 * forced by --isa (GPT2D_ISA, read by settings.c like every option), for
 * tests, benchmarks, and telling a kernel bug from a model bug.  Nothing
 * else selects a kernel (no ifunc, no target_clones), so the path a test
 * forces is the path that runs.
 *
 * Threads: cpu_isa_force is called by main once, before any thread starts
 * (and by tests and benchmarks between cases, while no forward_state is
 * being created); everything else, from any thread. */
#ifndef GPT2D_CPU_H
#define GPT2D_CPU_H

#include <stdbool.h>

#include "core/error.h"

/* In order of what they add; a CPU need not run every level below the
 * best it runs (an AVX-512 CPU may lack AVX-VNNI), so ask cpu_isa_runs. */
typedef enum cpu_isa {
    CPU_ISA_PORTABLE,
    CPU_ISA_AVX2,        /* AVX2 + FMA + F16C */
    CPU_ISA_AVX2_VNNI,   /* and AVX-VNNI */
    CPU_ISA_AVX512,      /* AVX2's and AVX-512F, BW, VL */
    CPU_ISA_AVX512_VNNI, /* and AVX512_VNNI */
} cpu_isa;

#define CPU_ISA_COUNT 5

/* Whether this CPU runs `isa`'s kernels. */
bool cpu_isa_runs(cpu_isa isa);

/* The best this CPU runs. */
cpu_isa cpu_isa_supported(void);

/* "portable", "avx2", "avx2-vnni", "avx512", "avx512-vnni" -> *out; -1
 * for anything else. */
int cpu_isa_parse(const char *name, cpu_isa *out);
const char *cpu_isa_name(cpu_isa isa);

/* Every forward_state created from now on (and --matmul auto) uses `isa`;
 * -1 when this CPU cannot run it (nothing changes then). */
int cpu_isa_force(cpu_isa isa, gpt2d_error *err);

/* The kernels to use: the forced ones, else cpu_isa_supported(). */
cpu_isa cpu_isa_choose(void);

#endif
