/*
 * A portable C model of the AMX tile instructions the AMX kernels use (tile configuration, TILELOADD,
 * TILESTORED, TILEZERO, TDPBF16PS, TDPBSSD, TDPBUSD, TDPBSUD, TILERELEASE), with the architectural limits of
 * palette 1 checked on every use: 8 tiles of at most 16 rows x 64 bytes, K = a.colsb / 4 = b.rows,
 * c.rows = a.rows, c.colsb = b.colsb. Arithmetic follows the SDM pseudo-code: TDPBF16PS adds the
 * even then the odd bf16 product of each pair to the fp32 accumulator, in k order, with bf16 inputs
 * of zero exponent read as zero (DAZ) and denormal results flushed to zero (FTZ), round to nearest
 * even; the int8 forms add the four exact products of a group to the int32 accumulator (wrapping).
 *
 * One tile state per thread (like the hardware's). The AMX kernels are written against the TL_*
 * macros of amx_target.h, which map to these functions in the simulated targets (`amxsim`,
 * `amxsim512`, any CPU) and to the intrinsics in the hardware one, so the tests run the kernels'
 * packing, blocking and accumulation logic here even without AMX. A violated limit is a fault: counted (kn_tm_faults),
 * logged once, and the instruction does nothing.
 */
#ifndef QVL_KERNELS_TILE_MODEL_H
#define QVL_KERNELS_TILE_MODEL_H

#include <stddef.h>
#include <stdint.h>

/* The 64-byte tile configuration of LDTILECFG (palette 1). */
typedef struct kn_tilecfg {
  uint8_t palette;
  uint8_t start_row;
  uint8_t reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
} kn_tilecfg;

#define KN_TM_TILES 8
#define KN_TM_ROWS 16
#define KN_TM_COLSB 64

void kn_tm_config(const kn_tilecfg *cfg);
void kn_tm_release(void);
void kn_tm_zero(int t);
void kn_tm_load(int t, const void *base, size_t stride);
void kn_tm_store(int t, void *base, size_t stride);
void kn_tm_dpbf16ps(int c, int a, int b);
void kn_tm_dpbssd(int c, int a, int b);
void kn_tm_dpbusd(int c, int a, int b);
void kn_tm_dpbsud(int c, int a, int b);
/* Contract violations seen so far, all threads. */
uint64_t kn_tm_faults(void);
/* Dot-product instructions (TDPBF16PS, TDPBSSD, TDPBUSD, TDPBSUD) executed so far, all threads: lets a test
 * see that a kernel really ran on tiles, and how many products its blocking costs. */
uint64_t kn_tm_dot_products(void);

#endif
