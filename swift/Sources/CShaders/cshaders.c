/* The kernels' SPIR-V and the registry behind cshaders.h are generated into generated/ by
 * `make shaders` (see shaders/README.md); this file only keeps the target non-empty. */
#include "cshaders.h"
