/* AVX2 + FMA + F16C variant. Compiled with only -mavx2 -mfma -mf16c. */
#include "kernels/kernels_impl.h"

void kn_avx2_override(kn_ops *ops) { (void)ops; }
