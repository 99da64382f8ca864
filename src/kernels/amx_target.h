/*
 * The target the AMX kernels (amx_gemm.c, amx_attn.c) are compiled for, chosen by the build with
 * one -D per object (Makefile, "AMX kernels"):
 *   AMX_TARGET_HW      the hardware's tiles and AVX-512 lanes (the `amx` tier; x86-64 only)
 *   AMX_TARGET_SIM     the portable tile model and lane model (the `amxsim` test tier, any CPU)
 *   AMX_TARGET_SIM512  the tile model with the AVX-512 lanes of the hardware build (`amxsim512`;
 *                      x86-64 only)
 * It maps the TL_* tile operations and the l16_* lanes, names the act32 quantizer the int8 kernels
 * use, and suffixes the kernels' entry points (AMX_SYM) so the three objects link side by side.
 * AMX_TARGET_BUILT is defined when this target exists on the machine being built for (the x86
 * targets compile to nothing elsewhere).
 */
#ifndef QVL_KERNELS_AMX_TARGET_H
#define QVL_KERNELS_AMX_TARGET_H

#include <string.h>

#include "kernels/kernels_impl.h"
#include "kernels/tile_model.h"

#if defined(AMX_TARGET_HW) && defined(__x86_64__)
#include <immintrin.h>
#define TL_CONFIG(c) _tile_loadconfig(c)
#define TL_RELEASE() _tile_release()
#define TL_ZERO(t) _tile_zero(t)
#define TL_LOAD(t, p, s) _tile_loadd(t, p, (long)(s))
#define TL_STORE(t, p, s) _tile_stored(t, p, (long)(s))
#define TL_DPBF16(c, a, b) _tile_dpbf16ps(c, a, b)
#define TL_DPBSSD(c, a, b) _tile_dpbssd(c, a, b)
#define TL_DPBSUD(c, a, b) _tile_dpbsud(c, a, b)
#include "kernels/x86/lanes512.h"
#define AMX_ACT32_QUANTIZE kn_avx512_act32_quantize
#define AMX_SYM(name) name##_hw
#define AMX_TARGET_BUILT 1
#elif defined(AMX_TARGET_SIM) || (defined(AMX_TARGET_SIM512) && defined(__x86_64__))
#define TL_CONFIG(c) kn_tm_config(c)
#define TL_RELEASE() kn_tm_release()
#define TL_ZERO(t) kn_tm_zero(t)
#define TL_LOAD(t, p, s) kn_tm_load(t, p, s)
#define TL_STORE(t, p, s) kn_tm_store(t, p, s)
#define TL_DPBF16(c, a, b) kn_tm_dpbf16ps(c, a, b)
#define TL_DPBSSD(c, a, b) kn_tm_dpbssd(c, a, b)
#define TL_DPBSUD(c, a, b) kn_tm_dpbsud(c, a, b)
#ifdef AMX_TARGET_SIM
#include "kernels/lane_model.h"
#define AMX_ACT32_QUANTIZE kn_act32_quantize_c
#define AMX_SYM(name) name##_sim
#else
#include "kernels/x86/lanes512.h"
#define AMX_ACT32_QUANTIZE kn_avx512_act32_quantize
#define AMX_SYM(name) name##_sim512
#endif
#define AMX_TARGET_BUILT 1
#elif !defined(AMX_TARGET_HW) && !defined(AMX_TARGET_SIM512)
#error "amx_target.h: compile the AMX kernels with -DAMX_TARGET_HW, -DAMX_TARGET_SIM or -DAMX_TARGET_SIM512"
#endif

#ifdef AMX_TARGET_BUILT
/* Palette 1: C0..C3 16 x 64 bytes, A4, A5 16 x a_colsb, B6, B7 b_rows x 64 (both kernels' layout). */
static inline void amx_cfg(kn_tilecfg *c, int a_colsb, int b_rows) {
  memset(c, 0, sizeof *c);
  c->palette = 1;
  for (int t = 0; t < 8; t++) {
    c->rows[t] = (uint8_t)(t < 6 ? 16 : b_rows);
    c->colsb[t] = (uint16_t)(t == 4 || t == 5 ? a_colsb : 64);
  }
}
#endif

#endif
