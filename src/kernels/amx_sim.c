/*
 * The `amxsim` tier: the AMX kernels of x86/amx_gemm.h and x86/amx_attn.h with every tile
 * operation run by the portable tile model (tile_model.c). Plain C without ISA flags, so the AMX kernels' packing,
 * blocking and accumulation are tested on any CPU (slowly: a test tier, never chosen by itself).
 */
#include "kernels/tile_model.h"

#define TL_CONFIG(c) kn_tm_config(c)
#define TL_RELEASE() kn_tm_release()
#define TL_ZERO(t) kn_tm_zero(t)
#define TL_LOAD(t, p, s) kn_tm_load(t, p, s)
#define TL_STORE(t, p, s) kn_tm_store(t, p, s)
#define TL_DPBF16(c, a, b) kn_tm_dpbf16ps(c, a, b)
#define TL_DPBSSD(c, a, b) kn_tm_dpbssd(c, a, b)

#include "kernels/x86/amx_attn.h"
#include "kernels/x86/amx_gemm.h"

void kn_amxsim_override(kn_ops *ops) {
  amx_install(ops, "amx (tile model)");
  amx_attn_install(ops, "amx (tile model)");
}
