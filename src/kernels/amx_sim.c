/*
 * The `amxsim` tier: the AMX kernels of x86/amx_gemm.h and x86/amx_attn.h with every tile
 * operation run by the portable tile model (tile_model.c) and the attention's vector operations by the
 * portable lane model (lane_model.h). Plain C without ISA flags, so the AMX kernels' packing,
 * blocking and accumulation are tested on any CPU (slowly: a test tier, never chosen by itself).
 * x86/amx_sim512.c includes this file with the AVX-512 lanes of the `amx` build instead (the
 * `amxsim512` tier), so the tests hold the hardware build's vector code to this model.
 */
#ifndef AMX_SIM_OVERRIDE
#include "kernels/lane_model.h"
#define AMX_SIM_OVERRIDE kn_amxsim_override
#define AMX_SIM_NAME "amx (tile model)"
#define AMX_ACT32_QUANTIZE kn_act32_quantize_c
#endif
#include "kernels/tile_model.h"

#define TL_CONFIG(c) kn_tm_config(c)
#define TL_RELEASE() kn_tm_release()
#define TL_ZERO(t) kn_tm_zero(t)
#define TL_LOAD(t, p, s) kn_tm_load(t, p, s)
#define TL_STORE(t, p, s) kn_tm_store(t, p, s)
#define TL_DPBF16(c, a, b) kn_tm_dpbf16ps(c, a, b)
#define TL_DPBSSD(c, a, b) kn_tm_dpbssd(c, a, b)
#define TL_DPBSUD(c, a, b) kn_tm_dpbsud(c, a, b)

#include "kernels/x86/amx_attn.h"
#include "kernels/x86/amx_gemm.h"

void AMX_SIM_OVERRIDE(kn_ops *ops) {
  amx_install(ops, AMX_SIM_NAME);
  amx_attn_install(ops, AMX_SIM_NAME);
}
