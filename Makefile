# Thin wrapper over CMake. `make` builds, `make test` builds and runs every test (and says why
# any were skipped), `make train` trains a small model on the embedded default data on the CPU.
BUILD_DIR ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: all build configure test train clean

all: build

configure:
	cmake -S . -B $(BUILD_DIR) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)

build: configure
	cmake --build $(BUILD_DIR) -j $(JOBS)

# Ends with one line per reason tests were skipped (no GPU, no mpirun, ...), and ctest's status.
test: build
	cd $(BUILD_DIR) && status=0; ctest --output-on-failure -j $(JOBS) || status=$$?; \
	  $(CURDIR)/tools/skipped_tests.sh Testing/Temporary/LastTest.log; exit $$status

train: build
	$(BUILD_DIR)/gpt2-train --device cpu --model d2 --batch-size 8 --seq-len 64 --steps 60 \
	  --lr 1e-3 --warmup-steps 5 --val-every 20 --val-steps 4 --sample-every 0 --out out/make-train \
	  --overwrite

clean:
	rm -rf $(BUILD_DIR)
