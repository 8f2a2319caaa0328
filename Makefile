# redco - `make demo` sets up, builds and runs the main job; `make test` runs every test.
BUILD ?= build
ASAN_BUILD ?= build-asan
FUZZ_BUILD ?= build-fuzz
FUZZ_SECONDS ?= 60
JOBS ?= $(shell nproc)
# the CUDA backend: AUTO (built when the CUDA toolkit's headers are found), ON or OFF
REDCO_CUDA ?= AUTO
# `make install`: where (PREFIX) and under which staging root (DESTDIR) it installs
PREFIX ?= /usr/local
DESTDIR ?=

.PHONY: all setup build install demo test sanitize fuzz bench bench-hosts clean

all: build

setup:
	@bash scripts/setup.sh

$(BUILD)/Makefile: CMakeLists.txt
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DREDCO_CUDA=$(REDCO_CUDA) >/dev/null

build: setup $(BUILD)/Makefile
	cmake --build $(BUILD) -j $(JOBS)

# headers, libredco.a, libredco.so, the program redco, lib/pkgconfig/redco.pc and the CMake
# package lib/cmake/redco (README, "Build your own program")
install: build
	DESTDIR=$(DESTDIR) cmake --install $(BUILD) --prefix $(PREFIX)

demo: build
	bash scripts/demo.sh

test: build
	@bash scripts/pyref.sh
	cd $(BUILD) && ctest --output-on-failure -j 1

# The tests under AddressSanitizer and UndefinedBehaviorSanitizer.
sanitize: setup
	@bash scripts/pyref.sh
	cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DREDCO_SANITIZE=ON >/dev/null
	cmake --build $(ASAN_BUILD) -j $(JOBS)
	cd $(ASAN_BUILD) && ASAN_OPTIONS=detect_leaks=1 LSAN_OPTIONS=suppressions=$(CURDIR)/tests/kit/lsan.supp ctest --output-on-failure -j 1

# The parsers of untrusted files under libFuzzer with ASan and UBSan (clang; fuzz/README.md):
# each harness runs FUZZ_SECONDS from its seed corpus; FUZZ=NAME runs one. A crash fails.
fuzz: setup
	cmake -S . -B $(FUZZ_BUILD) -DCMAKE_BUILD_TYPE=Debug -DREDCO_FUZZ=ON \
	  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ >/dev/null
	cmake --build $(FUZZ_BUILD) -j $(JOBS) --target fuzzers
	bash fuzz/run.sh $(FUZZ_BUILD) $(FUZZ_SECONDS) $(FUZZ)

# bench_tp also runs on 2 processes: data parallelism (mp 1) against tensor parallelism (mp 2).
# bench_comm runs on 2 processes: blocking MPI_Allreduce against redco's watched allreduce.
# bench_zero runs on 2 processes: a GPT-2 step's time and bytes sent at ZeRO stages 0, 1, 2.
# bench_gpt2 and bench_generate also run on the first OpenCL device (PoCL here: a small model).
MPIRUN = OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpiexec --oversubscribe -n 2
# Each bench prints JSON lines on stdout; a failure prints one line naming the call on stderr.
bench: build
	@for b in $(BUILD)/bench_*; do OMP_NUM_THREADS=$(JOBS) $$b || { echo "make bench: $$b failed" >&2; exit 1; }; done
	@for mp in 1 2; do $(MPIRUN) $(BUILD)/bench_tp --mp $$mp || { echo "make bench: bench_tp --mp $$mp on 2 processes failed" >&2; exit 1; }; done
	@$(MPIRUN) $(BUILD)/bench_comm || { echo "make bench: bench_comm on 2 processes failed" >&2; exit 1; }
	@$(MPIRUN) $(BUILD)/bench_zero || { echo "make bench: bench_zero on 2 processes failed" >&2; exit 1; }
	@OMP_NUM_THREADS=$(JOBS) $(BUILD)/bench_gpt2 --device opencl 3 gpt2-mini 4 64 || { echo "make bench: bench_gpt2 --device opencl failed" >&2; exit 1; }
	@OMP_NUM_THREADS=$(JOBS) $(BUILD)/bench_generate --device opencl tiny-gpt2 gpt2-mini || { echo "make bench: bench_generate --device opencl failed" >&2; exit 1; }

# bench_comm's all-reduce on 2 ranks: on one host (shared memory, TCP) and across two test
# hosts (network namespaces, TCP over veth; root needed): scripts/bench_hosts.sh.
bench-hosts: build
	@bash scripts/bench_hosts.sh $(BUILD)

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(FUZZ_BUILD)
