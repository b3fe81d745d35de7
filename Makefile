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

.PHONY: all setup deps root lib test test-swift test-bun test-neon test-fuzz fuzz clean shaders metallib FORCE
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

test: setup lib test-swift test-bun test-neon test-fuzz

# GPU kernels and the Vulkan backend are tested on lavapipe (Mesa's CPU Vulkan driver) unless
# VK_DRIVER_FILES already names a driver.
export VK_DRIVER_FILES ?= /usr/share/vulkan/icd.d/lvp_icd.json

test-swift: shaders
	$(IN_ROOT) swift test -c release -Xswiftc -enable-testing --scratch-path $(TEST_SCRATCH)

# Bun 1.4 ignores a timeout in bunfig.toml: without the flag every test gets 5 s, and tests that
# pass alone fail on a busy machine. Tests that need more give their own limit.
# The llama.cpp reference (node-llama-cpp) is installed on the host first: npm and the registry
# are there, not in the build root where the tests run.
# the TypeScript type-checked first (tsconfig.json: src, cli, tests, bench; no output), then bun test
test-bun:
	bench/setup-llamacpp.sh
	$(IN_ROOT) $(BUN) node_modules/typescript/bin/tsc -p .
	@# no import circle in src/ or cli/ (dpdm; -T: type-only imports, which vanish at run time, left out)
	$(IN_ROOT) $(BUN) node_modules/dpdm/lib/bin/dpdm.js --no-warning --no-tree -T --exit-code circular:1 "src/**/*.ts" "cli/**/*.ts"
	$(IN_ROOT) $(BUN) test --timeout 120000

# libFuzzer on the C ABI (fuzz/run.sh), against a coverage-instrumented library (.build-fuzz): a
# few seconds of each harness, every saved crash replayed, 20 whole-file mutants; `make fuzz`
# runs each harness to FUZZ_RUNS executions (default 1,000,000) or FUZZ_SECONDS (default 7200)
# with kept corpora, then 1000 mutants.
test-fuzz:
	fuzz/run.sh short

fuzz:
	fuzz/run.sh long $${FUZZ_SECONDS:-7200}

# The arm64 NEON kernels (CKernels), built for aarch64 with clang and checked against the scalar
# ones under qemu-aarch64 (natively on arm64 and macOS machines); the build root carries the
# cross tools. scripts/neon-check.sh
test-neon:
	$(IN_ROOT) sh scripts/neon-check.sh

# ---- GPU kernels: shaders/*.comp -> SPIR-V (C arrays in the CShaders target) and MSL ----
# Weight kernels are built once per weight type (-DWTYPE_<TYPE>), named <kernel>_<type>.
WTYPES := f32 f16 bf16 q4_0 q4_1 q5_0 q5_1 q8_0 q4_k q5_k q6_k q2_k q3_k iq4_nl iq4_xs mxfp4
WEIGHT_KERNELS := get_rows matvec matmul matmul_coop
PLAIN_KERNELS := rms_norm add_rms_norm add_rms_norm_q8 rope kv_store rope_store attention attention_tiled attention_combine swiglu swiglu_pairs add add_bias add_bias_id softcap argmax_rows quantize_q8 to_f16 sum_splits moe_route moe_combine deltanet_conv deltanet_recur split_query sigmoid_gate scale per_layer_inputs per_layer_gate copy_rows
# mixture-of-experts products over a stacked expert tensor, indexed by moe_route's output:
# <kernel>.comp built with -DEXPERTS once per weight type, named <kernel>_id_<type> (Metal: the
# shapes below; matmul_coop_id, on tensor cores, Vulkan only)
ID_KERNELS := matvec matmul matmul_coop
ID_VARIANTS := $(foreach k,$(ID_KERNELS),$(addprefix $(k)_id_,$(WTYPES)))
# matvec with 8-bit activations and integer dot products, for the types it supports (and its
# expert-indexed build, -DEXPERTS, named matvec_dot_id_<type>; matvec_dot_batch_<type> for decode
# batches of 2..16 rows; matvec_dot_rope_<type>[_f16_f16], -DROPE_KV, a decode token's Q|K|V product
# with rope_store's work, for f32 and f16 caches; matvec_dot_q8out_<type>, a decode token's O, down
# and gate/up products writing the next product's 8-bit input themselves)
DOT_TYPES := q4_0 q4_1 q5_0 q5_1 q8_0 q4_k q5_k q6_k mxfp4
DOT_VARIANTS := $(addprefix matvec_dot_,$(DOT_TYPES)) $(addprefix matvec_dot_id_,$(DOT_TYPES)) $(addprefix matvec_dot_batch_,$(DOT_TYPES)) \
  $(addprefix matvec_dot_rope_,$(DOT_TYPES)) $(addsuffix _f16_f16,$(addprefix matvec_dot_rope_,$(DOT_TYPES))) \
  $(addprefix matvec_dot_q8out_,$(DOT_TYPES))
# producers that also write their output as 8-bit blocks for matvec_dot (-DQ8), named <kernel>_q8
Q8_KERNELS := attention_combine
# kernels that also write their output as to_f16's float16 rows (-DF16_OUT), for the prefill
# products on tensor cores: <kernel>_f16, Vulkan only
F16_OUT_KERNELS := add_rms_norm swiglu_pairs
# K/V page kernels, once per (K type, V type) of the KV cache (-DKT_<K> -DVT_<V>, kv_types.glsl),
# named <kernel>_<k>_<v>; f32/f32 keeps the plain name (kv_store, attention, ... in PLAIN_KERNELS)
KV_TYPES := f32 f16 q8_0 q4_0
KV_KERNELS := kv_store rope_store attention attention_tiled attention_coop
KV_PAIRS := $(filter-out f32_f32,$(foreach k,$(KV_TYPES),$(addprefix $(k)_,$(KV_TYPES))))
KV_VARIANTS := $(foreach k,$(KV_KERNELS),$(addprefix $(k)_,$(KV_PAIRS)))
# decode attention that also writes its output as 8-bit blocks, merging up to 16 splits itself
# (-DQ8), for every pair of cache types: attention_q8, attention_q8_<k>_<v>
ATTN_Q8 := attention_q8 $(addprefix attention_q8_,$(KV_PAIRS)) attention_q8_staged_f16_f16
# decode attention that also writes its output as to_f16's float16 rows, merging up to 16 splits
# itself (-DF16OUT), for decode batches whose O product runs on tensor cores: attention_x16,
# attention_x16_<k>_<v>, Vulkan only
ATTN_X16 := attention_x16 $(addprefix attention_x16_,$(KV_PAIRS))
# decode attention over long caches, f16 K and V: whole tiles' loads in flight at once (-DSTAGED)
ATTN_STAGED := attention_staged_f16_f16
# tensor-core products through VK_NV_cooperative_matrix2 (SPIR-V 1.6, so vulkan1.3), for the
# weight types it decodes
CM2_TYPES := q4_0 q8_0 q4_k q5_k q6_k
CM2_VARIANTS := $(addprefix matmul_cm2_,$(CM2_TYPES)) $(addprefix matmul_cm2h_,$(CM2_TYPES))
# long-context prefill attention on the same extension, over kv_gather's contiguous K/V copy
CM2_ATTN := attention_cm2 kv_gather
# tensor-core products for decode batches (9 or 17 to 32 rows: GPUKernels.matvecMaxRows(device:model:)), Q4_0 and Q8_0
COOP_BATCH_TYPES := q4_0 q8_0
COOP_BATCH_VARIANTS := $(addprefix matmul_coop_batch_,$(COOP_BATCH_TYPES))
SHADERS := $(foreach k,$(WEIGHT_KERNELS),$(addprefix $(k)_,$(WTYPES))) $(DOT_VARIANTS) $(PLAIN_KERNELS) $(addsuffix _q8,$(Q8_KERNELS)) $(addsuffix _f16,$(F16_OUT_KERNELS)) \
  attention_coop $(KV_VARIANTS) $(ATTN_Q8) $(ATTN_X16) $(ATTN_STAGED) $(ID_VARIANTS) $(CM2_VARIANTS) $(CM2_ATTN) $(COOP_BATCH_VARIANTS)
# Kernels Metal never runs, left out of the MSL and the metallib: cooperative matrices (no MSL
# translation) and the 8-bit-activation decode path (GPUKernels.integerDot is Vulkan-only;
# add_rms_norm_q8 is one of them).
VULKAN_ONLY := add_rms_norm_q8 $(addprefix matmul_coop_,$(WTYPES)) $(CM2_VARIANTS) $(CM2_ATTN) $(COOP_BATCH_VARIANTS) attention_coop $(addprefix attention_coop_,$(KV_PAIRS)) $(DOT_VARIANTS) \
  $(addsuffix _q8,$(Q8_KERNELS)) $(addsuffix _f16,$(F16_OUT_KERNELS)) quantize_q8 $(ATTN_Q8) $(ATTN_X16)
# Specialization constants that size shared arrays (matvec's NCOLS and ROWS, matmul's BM and BN)
# are preprocessor macros in spirv-cross's MSL, not Metal function constants, so Metal gets one
# function per shape the host uses, named <kernel>_s<constant 1>x<constant 2>
# (MetalDevice.functionName): matvec for 1, 2, 4, 8 and 16 activation rows at
# GPUKernels.matvecRowsPerGroup weight rows and at 1 (GPUKernels.matvecRows: small N), matmul at GPUKernels.matmulBM x matmulBN. A shape
# missing here is a clear error on the Mac (a VELO_GPU_MATVEC override, for one), never a
# kernel silently run at another shape.
METAL_MATVEC_NCOLS := 1 2 4 8 16
METAL_MATVEC_ROWS := 4
METAL_MATVEC_ROWS_SMALL := 1
METAL_MATMUL_BM := 64
METAL_MATMUL_BN := 64
METAL_MATVEC := $(foreach t,$(WTYPES),$(foreach c,$(METAL_MATVEC_NCOLS),$(foreach r,$(METAL_MATVEC_ROWS) $(METAL_MATVEC_ROWS_SMALL),matvec_$(t)_s$(c)x$(r))))
METAL_MATMUL := $(foreach t,$(WTYPES),matmul_$(t)_s$(METAL_MATMUL_BM)x$(METAL_MATMUL_BN))
# the expert-indexed ones: matvec_id one activation row a group, matmul_id matmul's tile
METAL_ID := $(foreach t,$(WTYPES),matvec_id_$(t)_s1x$(METAL_MATVEC_ROWS) matmul_id_$(t)_s$(METAL_MATMUL_BM)x$(METAL_MATMUL_BN))
MSL_SHADERS := $(filter-out $(VULKAN_ONLY) $(addprefix matvec_,$(WTYPES)) $(addprefix matmul_,$(WTYPES)) $(ID_VARIANTS),$(SHADERS)) \
  $(METAL_MATVEC) $(METAL_MATMUL) $(METAL_ID)
MSL_FILES = $(MSL_SHADERS:%=$(METAL_DIR)/%.metal)
SPV_ENV := vulkan1.2
MSL_VER := 20400
SHADER_C := swift/Sources/CShaders/generated
SHADER_GEN := gen/shaders
METAL_DIR := gen/metal
SHADER_ENV := SPV_ENV=$(SPV_ENV) MSL_VER=$(MSL_VER) SHADER_C=$(SHADER_C) SHADER_GEN=$(SHADER_GEN) METAL_DIR=$(METAL_DIR)
SHADER_BUILD := $(IN_ROOT) env $(SHADER_ENV) sh shaders/build.sh
upper = $(subst m,M,$(subst p,P,$(subst b,B,$(subst f,F,$(subst k,K,$(subst q,Q,$(subst i,I,$(subst n,N,$(subst l,L,$(subst x,X,$(subst s,S,$(1))))))))))))

shaders: $(SHADERS:%=$(SHADER_C)/%.c) $(SHADER_C)/registry.c $(MSL_FILES) $(METAL_DIR)/.checked

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
$(foreach t,$(DOT_TYPES),$(eval $(call shader_rules,matvec_dot_id_$(t),shaders/matvec_dot.comp,-DEXPERTS -DWTYPE_$(call upper,$(t)))))
$(foreach t,$(DOT_TYPES),$(eval $(call shader_rules,matvec_dot_batch_$(t),shaders/matvec_dot_batch.comp,-DWTYPE_$(call upper,$(t)))))
$(foreach t,$(DOT_TYPES),$(eval $(call shader_rules,matvec_dot_rope_$(t),shaders/matvec_dot.comp,-DROPE_KV -DWTYPE_$(call upper,$(t)))))
$(foreach t,$(DOT_TYPES),$(eval $(call shader_rules,matvec_dot_q8out_$(t),shaders/matvec_dot_q8out.comp,-DWTYPE_$(call upper,$(t)))))
$(foreach t,$(DOT_TYPES),$(eval $(call shader_rules,matvec_dot_rope_$(t)_f16_f16,shaders/matvec_dot.comp,-DROPE_KV -DKT_F16 -DVT_F16 -DWTYPE_$(call upper,$(t)))))
$(foreach t,$(CM2_TYPES),$(eval $(SHADER_C)/matmul_cm2_$(t).c: shaders/matmul_cm2.comp shaders/build.sh ; \
  $(IN_ROOT) env $(SHADER_ENV) SPV_ENV=vulkan1.3 sh shaders/build.sh spirv matmul_cm2_$(t) shaders/matmul_cm2.comp -DWTYPE_$(call upper,$(t))))
$(foreach t,$(CM2_TYPES),$(eval $(SHADER_C)/matmul_cm2h_$(t).c: shaders/matmul_cm2.comp shaders/build.sh ; \
  $(IN_ROOT) env $(SHADER_ENV) SPV_ENV=vulkan1.3 sh shaders/build.sh spirv matmul_cm2h_$(t) shaders/matmul_cm2.comp -DACC_F16 -DWTYPE_$(call upper,$(t))))
$(foreach t,$(COOP_BATCH_TYPES),$(eval $(call shader_rules,matmul_coop_batch_$(t),shaders/matmul_coop_batch.comp,-DWTYPE_$(call upper,$(t)))))
$(foreach k,$(ID_KERNELS),$(foreach t,$(WTYPES),\
  $(eval $(call shader_rules,$(k)_id_$(t),shaders/$(k).comp,-DEXPERTS -DWTYPE_$(call upper,$(t))))))
$(eval $(call shader_rules,attention_coop,shaders/attention_coop.comp,))
$(foreach k,$(CM2_ATTN),$(eval $(SHADER_C)/$(k).c: shaders/$(k).comp shaders/build.sh ; \
  $(IN_ROOT) env $(SHADER_ENV) SPV_ENV=vulkan1.3 sh shaders/build.sh spirv $(k) shaders/$(k).comp))
$(foreach k,$(PLAIN_KERNELS),$(eval $(call shader_rules,$(k),shaders/$(k).comp,)))
$(foreach k,$(Q8_KERNELS),$(eval $(call shader_rules,$(k)_q8,shaders/$(k).comp,-DQ8)))
$(foreach k,$(F16_OUT_KERNELS),$(eval $(call shader_rules,$(k)_f16,shaders/$(k).comp,-DF16_OUT)))
kv_flags = -DKT_$(call upper,$(firstword $(subst _, ,$(subst q8_0,q8x0,$(subst q4_0,q4x0,$(1)))))) \
  -DVT_$(call upper,$(lastword $(subst _, ,$(subst q8_0,q8x0,$(subst q4_0,q4x0,$(1))))))
$(foreach k,$(KV_KERNELS),$(foreach pr,$(KV_PAIRS),\
  $(eval $(call shader_rules,$(k)_$(pr),shaders/$(k).comp,$(subst X,_,$(call kv_flags,$(pr)))))))
$(eval $(call shader_rules,attention_q8,shaders/attention.comp,-DQ8))
$(foreach pr,$(KV_PAIRS),$(eval $(call shader_rules,attention_q8_$(pr),shaders/attention.comp,-DQ8 $(subst X,_,$(call kv_flags,$(pr))))))
$(eval $(call shader_rules,attention_staged_f16_f16,shaders/attention.comp,-DSTAGED -DKT_F16 -DVT_F16))
$(eval $(call shader_rules,attention_x16,shaders/attention.comp,-DF16OUT))
$(foreach pr,$(KV_PAIRS),$(eval $(call shader_rules,attention_x16_$(pr),shaders/attention.comp,-DF16OUT $(subst X,_,$(call kv_flags,$(pr))))))
$(eval $(call shader_rules,attention_q8_staged_f16_f16,shaders/attention.comp,-DQ8 -DSTAGED -DKT_F16 -DVT_F16))
# $(1) name, $(2) source, $(3) glslc flags, $(4) constants 1, 2, ... baked into the MSL
define msl_shape_rule
$(METAL_DIR)/$(1).metal: $(2) shaders/build.sh
	$(IN_ROOT) env $(SHADER_ENV) MSL_CONSTANTS="$(4)" sh shaders/build.sh msl $(1) $(2) $(3)
endef
$(foreach t,$(WTYPES),$(foreach c,$(METAL_MATVEC_NCOLS),$(foreach r,$(METAL_MATVEC_ROWS) $(METAL_MATVEC_ROWS_SMALL),\
  $(eval $(call msl_shape_rule,matvec_$(t)_s$(c)x$(r),shaders/matvec.comp,-DWTYPE_$(call upper,$(t)),$(c) $(r))))))
$(foreach t,$(WTYPES),$(eval $(call msl_shape_rule,matmul_$(t)_s$(METAL_MATMUL_BM)x$(METAL_MATMUL_BN),\
  shaders/matmul.comp,-DWTYPE_$(call upper,$(t)),$(METAL_MATMUL_BM) $(METAL_MATMUL_BN))))
$(foreach t,$(WTYPES),$(eval $(call msl_shape_rule,matvec_id_$(t)_s1x$(METAL_MATVEC_ROWS),\
  shaders/matvec.comp,-DEXPERTS -DWTYPE_$(call upper,$(t)),1 $(METAL_MATVEC_ROWS))))
$(foreach t,$(WTYPES),$(eval $(call msl_shape_rule,matmul_id_$(t)_s$(METAL_MATMUL_BM)x$(METAL_MATMUL_BN),\
  shaders/matmul.comp,-DEXPERTS -DWTYPE_$(call upper,$(t)),$(METAL_MATMUL_BM) $(METAL_MATMUL_BN))))
-include $(wildcard $(SHADER_GEN)/*.d)

# the list of shaders, rewritten only when it changes, so the registry follows it
$(SHADER_GEN)/names.txt: FORCE
	@mkdir -p $(@D)
	@echo '$(SHADERS)' > $@.tmp
	@if cmp -s $@.tmp $@; then rm -f $@.tmp; else mv $@.tmp $@; fi
$(SHADER_C)/registry.c: $(SHADER_GEN)/names.txt shaders/build.sh
	env $(SHADER_ENV) sh shaders/build.sh registry $(SHADERS)

# Every Metal kernel checked before it is compiled (here too, on Linux): named after its file,
# threadgroup memory within Apple GPUs' 32 KiB, only constant 0 a function constant.
$(METAL_DIR)/.checked: $(MSL_FILES) scripts/msl-check.ts | deps
	$(IN_ROOT) $(BUN) scripts/msl-check.ts $(MSL_FILES)
	@touch $@

# macOS: every kernel in one library (each MSL kernel function is named after its file)
METALLIB := $(METAL_DIR)/velo.metallib
metallib: $(METALLIB)
$(METALLIB): $(MSL_SHADERS:%=$(METAL_DIR)/%.air) $(METAL_DIR)/.checked
	xcrun -sdk macosx metallib -o $@ $(filter %.air,$^)
$(METAL_DIR)/%.air: $(METAL_DIR)/%.metal
	xcrun -sdk macosx metal -std=macos-metal2.4 -fno-fast-math -c -o $@ $<

clean:
	rm -rf .build $(TEST_SCRATCH) gen $(SHADER_C)
