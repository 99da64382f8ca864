/*
 * The `amxsim` tier: the AMX kernels (amx_gemm.c, amx_attn.c) built for the portable tile model
 * (tile_model.c) and lane model (lane_model.h): plain C without ISA flags, so the AMX kernels'
 * packing, blocking and accumulation are tested on any CPU (slowly: a test tier, never chosen by
 * itself).
 */
#include "kernels/kernels_impl.h"

void kn_amxsim_override(kn_ops *ops) {
  kn_amx_gemm_install_sim(ops, "amx (tile model)");
  kn_amx_attn_install_sim(ops, "amx (tile model)");
}
