/*
 * The `amx` tier: the AMX kernels (amx_gemm.c, amx_attn.c) built for the hardware's tiles
 * (AMX_TARGET_HW: the AVX-512 BF16 flags plus -mamx-tile -mamx-int8 -mamx-bf16, and nothing else
 * uses them). The dispatcher obtained the tile permission (arch_prctl ARCH_REQ_XCOMP_PERM) before
 * installing it; each tile call configures the tiles on its pool thread and releases them at its end.
 */
#if defined(__x86_64__)

#include "kernels/kernels_impl.h"

void kn_amx_override(kn_ops *ops) {
  kn_amx_gemm_install_hw(ops, "amx");
  kn_amx_attn_install_hw(ops, "amx");
}

#endif
