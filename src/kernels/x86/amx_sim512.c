/*
 * The `amxsim512` test tier: the AMX kernels on the portable tile model, as in amx_sim.c, but with
 * the AVX-512 vector operations (lanes512.h) the `amx` build runs, compiled with the AVX-512 BF16
 * flags. On any AVX-512 BF16 CPU it tests the hardware build's vector code, and the tests hold it
 * bit for bit to `amxsim` (the portable lane model).
 */
#if defined(__x86_64__)

#include "kernels/x86/lanes512.h"

#define AMX_SIM_OVERRIDE kn_amxsim512_override
#define AMX_SIM_NAME "amx (tile model, AVX-512 lanes)"
#define AMX_ACT32_QUANTIZE kn_avx512_act32_quantize
#include "kernels/amx_sim.c"

#endif
