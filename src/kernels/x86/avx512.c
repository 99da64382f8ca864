/* AVX-512 (F/BW/VL/DQ + VNNI + BF16) variant. Compiled with only its own -m flags. */
#include "kernels/kernels_impl.h"

void kn_avx512_override(kn_ops *ops) { (void)ops; }
