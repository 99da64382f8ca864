/*
 * The `amx` tier: the AMX kernels of amx_gemm.h (matmul) and amx_attn.h (vision attention) on the
 * hardware's tiles (compiled with the AVX-512 BF16 flags plus -mamx-tile -mamx-int8 -mamx-bf16,
 * and nothing else uses them). The
 * dispatcher obtained the tile permission (arch_prctl ARCH_REQ_XCOMP_PERM) before installing it;
 * each tile call configures the tiles on its pool thread and releases them at its end.
 */
#if defined(__x86_64__)

#include <immintrin.h>

#define AMX_ACT32_QUANTIZE kn_avx512_act32_quantize
#define TL_CONFIG(c) _tile_loadconfig(c)
#define TL_RELEASE() _tile_release()
#define TL_ZERO(t) _tile_zero(t)
#define TL_LOAD(t, p, s) _tile_loadd(t, p, (long)(s))
#define TL_STORE(t, p, s) _tile_stored(t, p, (long)(s))
#define TL_DPBF16(c, a, b) _tile_dpbf16ps(c, a, b)
#define TL_DPBSSD(c, a, b) _tile_dpbssd(c, a, b)
#define TL_DPBSUD(c, a, b) _tile_dpbsud(c, a, b)

#include "kernels/x86/lanes512.h"

#include "kernels/x86/amx_attn.h"
#include "kernels/x86/amx_gemm.h"

void kn_amx_override(kn_ops *ops) {
  amx_install(ops, "amx");
  amx_attn_install(ops, "amx");
}

#endif
