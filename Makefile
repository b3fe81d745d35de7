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

.PHONY: all setup deps root lib test test-swift test-bun clean
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

lib: deps
	$(IN_ROOT) swift build $(SWIFT_FLAGS)
	@ls -l $(LIB)

test: setup lib test-swift test-bun

test-swift:
	$(IN_ROOT) swift test -c release --scratch-path $(TEST_SCRATCH)

test-bun:
	$(IN_ROOT) $(BUN) test

clean:
	rm -rf .build $(TEST_SCRATCH)
