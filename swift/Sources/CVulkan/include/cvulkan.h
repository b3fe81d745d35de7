/* cvulkan.h — the Vulkan API for Velo's Vulkan backend, loaded at run time.
 *
 * The library never links libvulkan: machines without a Vulkan loader still run Velo on the
 * CPU. velo_vk_load() dlopens the loader; then every entry point Velo uses is a global
 * function pointer of the API's own name (NULL until loaded). */
#ifndef CVULKAN_H
#define CVULKAN_H
/* Only Linux builds use this module (VeloCore depends on it there alone, Package.swift), but
 * `swift build` compiles every target of the package, so macOS compiles it too, where the
 * Vulkan headers are normally not installed: there the module is empty (VELO_HAVE_VULKAN 0).
 * Linux keeps needing them (a missing header stays a clear error). */
#if defined(__APPLE__) && defined(__has_include)
#if !__has_include(<vulkan/vulkan.h>)
#define VELO_HAVE_VULKAN 0
#endif
#endif
#ifndef VELO_HAVE_VULKAN
#define VELO_HAVE_VULKAN 1
#endif

#if VELO_HAVE_VULKAN
#define VK_NO_PROTOTYPES 1
#include <vulkan/vulkan.h>

#ifdef __cplusplus
extern "C" {
#endif

#define VK_GLOBAL(name) extern PFN_##name name;
#define VK_INSTANCE(name) extern PFN_##name name;
#define VK_DEVICE(name) extern PFN_##name name;
#include "../vk_functions.h"
#undef VK_GLOBAL
#undef VK_INSTANCE
#undef VK_DEVICE

/* 0 on success; otherwise -1 and a message in velo_vk_error(). Safe to call repeatedly. */
int velo_vk_load(void);
/* Instance-level entry points (after vkCreateInstance). */
int velo_vk_load_instance(VkInstance instance);
/* Device-level entry points; 0 if every one was found. */
int velo_vk_load_device(VkDevice device);
const char *velo_vk_error(void);

#ifdef __cplusplus
}
#endif
#endif /* VELO_HAVE_VULKAN */
#endif
