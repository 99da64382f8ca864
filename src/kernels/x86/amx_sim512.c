/*
 * The `amxsim512` test tier: the AMX kernels built for the portable tile model with the AVX-512
 * vector code of the `amx` build (AMX_TARGET_SIM512). On any AVX-512 BF16 CPU it tests the hardware
 * build's vector code, and the tests hold it bit for bit to `amxsim` (the portable lane model).
 */
#if defined(__x86_64__)

#include "kernels/kernels_impl.h"

void kn_amxsim512_override(kn_ops *ops) {
  kn_amx_gemm_install_sim512(ops, "amx (tile model, AVX-512 lanes)");
  kn_amx_attn_install_sim512(ops, "amx (tile model, AVX-512 lanes)");
}

#endif
