/* cpu.c — the kernels' instruction set (see cpu.h). */
#include "config.h"

#include "core/cpu.h"

#include <stdatomic.h>
#if defined(__x86_64__)
#include <cpuid.h>
#endif
#include <string.h>

#include "core/half.h"

#if defined(__x86_64__)
/* AVX-VNNI: CPUID leaf 7, subleaf 1, EAX bit 4 (asked directly: not every
 * compiler's __builtin_cpu_supports knows its name; the OS's saving of
 * the ymm state is what "avx2" already asked). */
static bool has_avx_vnni(void)
{
    unsigned eax, ebx, ecx, edx;
    if (__get_cpuid_max(0, NULL) < 7)
        return false;
    __cpuid_count(7, 1, eax, ebx, ecx, edx);
    return (eax >> 4) & 1u;
}
#endif

bool cpu_isa_runs(cpu_isa isa)
{
    if (isa == CPU_ISA_PORTABLE)
        return true;
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (!(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
          half_uses_f16c()))
        return false;
    /* libgcc also asks the OS (XGETBV) whether it saves zmm state */
    const bool avx512 = __builtin_cpu_supports("avx512f") &&
                        __builtin_cpu_supports("avx512bw") &&
                        __builtin_cpu_supports("avx512vl");
    switch (isa) {
    case CPU_ISA_AVX2:
        return true;
    case CPU_ISA_AVX2_VNNI:
        return has_avx_vnni();
    case CPU_ISA_AVX512:
        return avx512;
    case CPU_ISA_AVX512_VNNI:
        return avx512 && __builtin_cpu_supports("avx512vnni");
    default:
        return false;
    }
#else
    return false;
#endif
}

cpu_isa cpu_isa_supported(void)
{
    for (int isa = CPU_ISA_COUNT - 1; isa > CPU_ISA_PORTABLE; isa--)
        if (cpu_isa_runs((cpu_isa)isa))
            return (cpu_isa)isa;
    return CPU_ISA_PORTABLE;
}

int cpu_isa_parse(const char *name, cpu_isa *out)
{
    for (int i = 0; i < CPU_ISA_COUNT; i++)
        if (strcmp(name, cpu_isa_name((cpu_isa)i)) == 0) {
            *out = (cpu_isa)i;
            return 0;
        }
    return -1;
}

const char *cpu_isa_name(cpu_isa isa)
{
    switch (isa) {
    case CPU_ISA_AVX2:
        return "avx2";
    case CPU_ISA_AVX2_VNNI:
        return "avx2-vnni";
    case CPU_ISA_AVX512:
        return "avx512";
    case CPU_ISA_AVX512_VNNI:
        return "avx512-vnni";
    default:
        return "portable";
    }
}

/* The forced instruction set, -1: none (the best this CPU runs).  Written
 * at start (see cpu.h); atomic so that a test's cpu_isa_force races nothing
 * an engine thread reads. */
static atomic_int forced = -1;

int cpu_isa_force(cpu_isa isa, gpt2d_error *err)
{
    const cpu_isa best = cpu_isa_supported();
    if (!cpu_isa_runs(isa))
        return error_set(err,
                         "this CPU cannot run the %s kernels (it runs "
                         "%s)",
                         cpu_isa_name(isa), cpu_isa_name(best));
    atomic_store_explicit(&forced, (int)isa, memory_order_relaxed);
    return 0;
}

cpu_isa cpu_isa_choose(void)
{
    const int isa = atomic_load_explicit(&forced, memory_order_relaxed);
    return isa >= 0 ? (cpu_isa)isa : cpu_isa_supported();
}
