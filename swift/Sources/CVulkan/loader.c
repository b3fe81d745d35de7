#include "cvulkan.h"
#if VELO_HAVE_VULKAN
#include <dlfcn.h>
#include <stdio.h>

#define VK_GLOBAL(name) PFN_##name name;
#define VK_INSTANCE(name) PFN_##name name;
#define VK_DEVICE(name) PFN_##name name;
#include "vk_functions.h"
#undef VK_GLOBAL
#undef VK_INSTANCE
#undef VK_DEVICE

static void *loader_handle;
static PFN_vkGetInstanceProcAddr get_instance_proc;
static char error_text[256];

const char *velo_vk_error(void) { return error_text; }

int velo_vk_load(void) {
    if (get_instance_proc) return 0;
    const char *names[] = {"libvulkan.so.1", "libvulkan.so", "libvulkan.1.dylib", "libMoltenVK.dylib"};
    for (unsigned i = 0; i < sizeof names / sizeof names[0] && !loader_handle; i++)
        loader_handle = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!loader_handle) {
        snprintf(error_text, sizeof error_text, "no Vulkan loader (libvulkan.so.1) on this machine");
        return -1;
    }
    get_instance_proc = (PFN_vkGetInstanceProcAddr)dlsym(loader_handle, "vkGetInstanceProcAddr");
    if (!get_instance_proc) {
        snprintf(error_text, sizeof error_text, "the Vulkan loader has no vkGetInstanceProcAddr");
        return -1;
    }
#define VK_GLOBAL(name) name = (PFN_##name)get_instance_proc(NULL, #name);
#define VK_INSTANCE(name)
#define VK_DEVICE(name)
#include "vk_functions.h"
#undef VK_GLOBAL
#undef VK_INSTANCE
#undef VK_DEVICE
    if (!vkCreateInstance) {
        snprintf(error_text, sizeof error_text, "the Vulkan loader has no vkCreateInstance");
        return -1;
    }
    return 0;
}

int velo_vk_load_instance(VkInstance instance) {
#define VK_GLOBAL(name)
#define VK_INSTANCE(name) name = (PFN_##name)get_instance_proc(instance, #name);
#define VK_DEVICE(name)
#include "vk_functions.h"
#undef VK_GLOBAL
#undef VK_INSTANCE
#undef VK_DEVICE
    return vkCreateDevice && vkGetDeviceProcAddr ? 0 : -1;
}

int velo_vk_load_device(VkDevice device) {
    int missing = 0;
#define VK_GLOBAL(name)
#define VK_INSTANCE(name)
#define VK_DEVICE(name) name = (PFN_##name)vkGetDeviceProcAddr(device, #name); \
    if (!name) { snprintf(error_text, sizeof error_text, "the Vulkan device lacks %s", #name); missing = 1; }
#include "vk_functions.h"
#undef VK_GLOBAL
#undef VK_INSTANCE
#undef VK_DEVICE
    return missing ? -1 : 0;
}
#else
/* no Vulkan headers (macOS): nothing to load; an empty translation unit is not ISO C */
typedef int velo_vk_unavailable;
#endif
