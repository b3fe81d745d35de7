/* cshaders.h — the GPU kernels of shaders/ as SPIR-V (Vulkan 1.2), embedded in the library.
 * `make shaders` compiles them into generated/ (one C array per kernel, plus the registry
 * that implements these functions). Names are the kernel names of shaders/README.md,
 * e.g. "matvec_q4_0", "rms_norm". */
#ifndef VELO_CSHADERS_H
#define VELO_CSHADERS_H

#include <stddef.h>
#include <stdint.h>

/* Number of kernels, and the name of kernel i (0 <= i < count; NULL otherwise). */
int velo_shader_count(void);
const char *velo_shader_name(int i);

/* SPIR-V words of the named kernel and their count in *word_count (when not NULL);
 * NULL (and a count of 0) for an unknown name. */
const uint32_t *velo_shader_spirv(const char *name, size_t *word_count);

#endif
