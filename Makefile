# Velo build. `make` sets everything up and builds the library; `make test` runs every test.
# On Linux hosts without Swift 6 (Debian 12), each step runs inside the project's Debian 13
# build root (scripts/toolchain.sh), made once per machine.
UNAME := $(shell uname -s)
IN_ROOT := $(shell scripts/toolchain.sh needed && echo scripts/toolchain.sh run)

ifeq ($(UNAME),Darwin)
LIB_EXT := dylib
SWIFT_FLAGS := -c release -Xlinker -exported_symbols_list -Xlinker $(CURDIR)/swift/exports.darwin
else
LIB_EXT := so
# Static Swift runtime: the .so needs nothing but libc/libstdc++ at run time.
SWIFT_FLAGS := -c release -Xswiftc -static-stdlib -Xlinker --version-script=$(CURDIR)/swift/exports.map
endif
LIB := .build/release/libVelo.$(LIB_EXT)
# Tests build separately (debug flags differ); sharing .build would force full rebuilds.
TEST_SCRATCH := .build-test
BUN := node_modules/bun/bin/bun.exe

.PHONY: all setup deps root lib test test-swift test-bun clean shaders metallib FORCE
all: setup lib

setup: deps root

deps: node_modules/.installed
node_modules/.installed: package.json package-lock.json
	npm ci --no-audit --no-fund
	@touch $@

root: deps
ifneq ($(IN_ROOT),)
	scripts/toolchain.sh setup
endif

lib: deps shaders
	$(IN_ROOT) swift build $(SWIFT_FLAGS)
ifeq ($(UNAME),Darwin)
	$(MAKE) metallib
	cp $(METAL_DIR)/velo.metallib .build/release/velo.metallib
endif
	@ls -l $(LIB)

# macOS: the Metal kernels, wherever the library is loaded from (tests load it from .build-test)
ifeq ($(UNAME),Darwin)
export VELO_METALLIB ?= $(CURDIR)/gen/metal/velo.metallib
test-swift: metallib
endif

test: setup lib test-swift test-bun

# GPU kernels and the Vulkan backend are tested on lavapipe (Mesa's CPU Vulkan driver) unless
# VK_DRIVER_FILES already names a driver.
export VK_DRIVER_FILES ?= /usr/share/vulkan/icd.d/lvp_icd.json

test-swift: shaders
	$(IN_ROOT) swift test -c release -Xswiftc -enable-testing --scratch-path $(TEST_SCRATCH)

test-bun:
	$(IN_ROOT) $(BUN) test

# ---- GPU kernels: shaders/*.comp -> SPIR-V (C arrays in the CShaders target) and MSL ----
# Weight kernels are built once per weight type (-DWTYPE_<TYPE>), named <kernel>_<type>.
WTYPES := f32 f16 bf16 q4_0 q4_1 q5_0 q5_1 q8_0 q4_k q5_k q6_k
WEIGHT_KERNELS := get_rows matvec matmul matmul_coop
PLAIN_KERNELS := rms_norm add_rms_norm rope kv_store rope_store attention attention_tiled attention_combine swiglu swiglu_pairs add add_bias softcap quantize_q8 to_f16 sum_splits
# matvec with 8-bit activations and integer dot products, for the types it supports
DOT_TYPES := q4_0 q4_1 q5_0 q5_1 q8_0
# producers that also write their output as 8-bit blocks for matvec_dot (-DQ8), named <kernel>_q8
Q8_KERNELS := add_rms_norm attention_combine
SHADERS := $(foreach k,$(WEIGHT_KERNELS),$(addprefix $(k)_,$(WTYPES))) $(addprefix matvec_dot_,$(DOT_TYPES)) $(PLAIN_KERNELS) $(addsuffix _q8,$(Q8_KERNELS)) \
  attention_coop
# Vulkan-only kernels (extensions spirv-cross cannot translate: cooperative matrices): no MSL
VULKAN_ONLY := $(addprefix matmul_coop_,$(WTYPES)) attention_coop
MSL_SHADERS := $(filter-out $(VULKAN_ONLY),$(SHADERS))
SPV_ENV := vulkan1.2
MSL_VER := 20400
SHADER_C := swift/Sources/CShaders/generated
SHADER_GEN := gen/shaders
METAL_DIR := gen/metal
SHADER_ENV := SPV_ENV=$(SPV_ENV) MSL_VER=$(MSL_VER) SHADER_C=$(SHADER_C) SHADER_GEN=$(SHADER_GEN) METAL_DIR=$(METAL_DIR)
SHADER_BUILD := $(IN_ROOT) env $(SHADER_ENV) sh shaders/build.sh
upper = $(subst b,B,$(subst f,F,$(subst k,K,$(subst q,Q,$(1)))))

shaders: $(SHADERS:%=$(SHADER_C)/%.c) $(SHADER_C)/registry.c $(MSL_SHADERS:%=$(METAL_DIR)/%.metal)

# $(1) name, $(2) source, $(3) glslc flags
define shader_rules
$(SHADER_C)/$(1).c: $(2) shaders/build.sh
	$(SHADER_BUILD) spirv $(1) $(2) $(3)
$(METAL_DIR)/$(1).metal: $(2) shaders/build.sh
	$(SHADER_BUILD) msl $(1) $(2) $(3)
endef
$(foreach k,$(WEIGHT_KERNELS),$(foreach t,$(WTYPES),\
  $(eval $(call shader_rules,$(k)_$(t),shaders/$(k).comp,-DWTYPE_$(call upper,$(t))))))
$(foreach t,$(DOT_TYPES),$(eval $(call shader_rules,matvec_dot_$(t),shaders/matvec_dot.comp,-DWTYPE_$(call upper,$(t)))))
$(eval $(call shader_rules,attention_coop,shaders/attention_coop.comp,))
$(foreach k,$(PLAIN_KERNELS),$(eval $(call shader_rules,$(k),shaders/$(k).comp,)))
$(foreach k,$(Q8_KERNELS),$(eval $(call shader_rules,$(k)_q8,shaders/$(k).comp,-DQ8)))
-include $(wildcard $(SHADER_GEN)/*.d)

# the list of shaders, rewritten only when it changes, so the registry follows it
$(SHADER_GEN)/names.txt: FORCE
	@mkdir -p $(@D)
	@echo '$(SHADERS)' > $@.tmp
	@if cmp -s $@.tmp $@; then rm -f $@.tmp; else mv $@.tmp $@; fi
$(SHADER_C)/registry.c: $(SHADER_GEN)/names.txt shaders/build.sh
	env $(SHADER_ENV) sh shaders/build.sh registry $(SHADERS)

# macOS: every kernel in one library (each MSL kernel function is named after its shader)
METALLIB := $(METAL_DIR)/velo.metallib
metallib: $(METALLIB)
$(METALLIB): $(MSL_SHADERS:%=$(METAL_DIR)/%.air)
	xcrun -sdk macosx metallib -o $@ $^
$(METAL_DIR)/%.air: $(METAL_DIR)/%.metal
	xcrun -sdk macosx metal -std=macos-metal2.4 -fno-fast-math -c -o $@ $<

clean:
	rm -rf .build $(TEST_SCRATCH) gen $(SHADER_C)
