#include "pig/app/kernels.h"

#ifdef PIG_HAVE_GENERATED_KERNELS
#include "pig/runtime/generated_kernels.h"
#endif

namespace pig::app {

int RegisterKernels() {
#ifdef PIG_HAVE_GENERATED_KERNELS
  return pig_register_generated_kernels();
#else
  return 0;
#endif
}

} // namespace pig::app
