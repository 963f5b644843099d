/* cpu.c — the kernels' instruction set (see cpu.h). */
#include "config.h"

#include "core/cpu.h"

#include <stdlib.h>
#include <string.h>

#include "core/half.h"

cpu_isa cpu_isa_supported(void)
{
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")
        && half_uses_f16c())
        /* libgcc also asks the OS (XGETBV) whether it saves zmm state */
        return __builtin_cpu_supports("avx512f") ? CPU_ISA_AVX512
                                                 : CPU_ISA_AVX2;
#endif
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
    case CPU_ISA_AVX2: return "avx2";
    case CPU_ISA_AVX512: return "avx512";
    default: return "portable";
    }
}

int cpu_isa_choose(cpu_isa *out, gpt2d_error *err)
{
    const cpu_isa best = cpu_isa_supported();
    const char *forced = getenv("GPT2D_ISA");
    *out = best;
    if (forced == NULL || forced[0] == '\0')
        return 0;
    cpu_isa isa;
    if (cpu_isa_parse(forced, &isa) != 0)
        return error_set(err, "GPT2D_ISA: '%s' is not portable, avx2 or avx512",
                         forced);
    if (isa > best)
        return error_set(err, "GPT2D_ISA: this CPU cannot run the %s "
                         "kernels (it runs %s)", forced, cpu_isa_name(best));
    *out = isa;
    return 0;
}
