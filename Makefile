# molprop - build, test and run.
#
#   make            build build/molprop (CLI), build/libmolprop.a and
#                   build/libmolprop.so (the library; include/molprop.h)
#   make install PREFIX=/usr/local   the CLI, both libraries, the header and
#                   lib/pkgconfig/molprop.pc (DESTDIR is honoured)
#   make examples   build/examples/*: the programs in examples/, built
#                   against build/libmolprop.so
#   make check      install missing packages, build, run the tests, then run
#                   them again under AddressSanitizer + UBSan (the CI command)
#   make test       the tests once, normal build
#   make test-san   the tests once, sanitizer build (build-san/)
#   make demo       the main job: fetch ESOL and run molprop on it
#   make CUDA=0     build without the CUDA backend even where nvcc exists
#   make MPI=0      build without MPI even where Open MPI is installed
#   make NCCL=1     build the CUDA backend's NCCL all-reduce (default: 1 when
#                   nccl.h is found in the CUDA toolkit or /usr/include)
#
# Dependencies are Debian 12 packages; scripts/deps.sh installs any that are
# missing (as root) or prints the apt-get command to run.

CC       ?= gcc
CXX      ?= g++
NVCC     ?= $(shell command -v nvcc 2>/dev/null || (test -x /usr/local/cuda/bin/nvcc && echo /usr/local/cuda/bin/nvcc))
CUDA_HOME ?= $(if $(NVCC),$(patsubst %/bin/nvcc,%,$(NVCC)),/usr/local/cuda)
ifeq ($(NVCC),)
CUDA     ?= 0
else
CUDA     ?= 1
endif

# oneDNN (Debian's libdnnl-dev) for the cpu backend's bf16 products
# (cpu:bf16, src/backend/cpu_dnnl.c); without it those run in fp32 sgemm.
DNNL     ?= $(shell test -f /usr/include/oneapi/dnnl/dnnl.h && echo 1 || echo 0)
# MPI (src/core/dist.c): Open MPI found through pkg-config (Debian's
# libopenmpi-dev); without it the build runs one process and says so.
MPI      ?= $(shell pkg-config --exists ompi-c 2>/dev/null && echo 1 || echo 0)

SAN      ?= 0
FUZZ     ?= 0
# jemalloc (Debian's libjemalloc2) as the CLI's allocator: RDKit's SMILES
# parsing allocates per atom and bond, and with glibc's malloc a 2-thread
# `molprop predict` of hiv spends ~14% of its CPU time in malloc and free
# (bench/RESULTS.md, "On a quiet AMX machine").  Only the molprop program
# links it, never libmolprop (a library does not choose its caller's
# allocator); sanitizer builds keep ASan's.
JEMALLOC ?= $(shell test -f /usr/lib/x86_64-linux-gnu/libjemalloc.so.2 && echo 1 || echo 0)
ifeq ($(FUZZ),1)
# `make fuzz` (below): the library instrumented for libFuzzer, with ASan+UBSan
BUILD    ?= build-fuzz
SANFLAGS := -fsanitize=fuzzer-no-link,address,undefined -fno-omit-frame-pointer \
            -fno-sanitize-recover=undefined
OPT      := -O1 -g
else ifeq ($(SAN),1)
BUILD    ?= build-san
SANFLAGS := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
OPT      := -O1 -g
else
BUILD    ?= build
SANFLAGS :=
OPT      ?= -O2 -g
endif

WARN     := -Wall -Wextra -Wshadow -Wno-unused-parameter
CPPFLAGS += -Iinclude -Isrc -isystem /usr/include/rdkit -DMP_HAVE_CUDA=$(CUDA) -DMP_HAVE_DNNL=$(DNNL)
CFLAGS   += -std=gnu11 $(OPT) $(WARN) -fopenmp $(SANFLAGS) -MMD -MP
CXXFLAGS += -std=c++17 $(OPT) $(WARN) -fopenmp $(SANFLAGS) -MMD -MP \
            -Wno-deprecated-declarations
# The library's objects go into the archive and the shared library alike:
# position-independent, and calls between our own functions bound inside it.
PICFLAGS := -fPIC -fno-semantic-interposition
# The command line sees the public header only (include/molprop.h).
CLI_CPPFLAGS := -Iinclude
VERSION  := $(shell sed -n 's/^\#define MP_VERSION "\(.*\)"/\1/p' include/molprop.h)
SOVER    := $(firstword $(subst ., ,$(VERSION)))

RDKIT_LIBS := -lRDKitDescriptors -lRDKitPartialCharges -lRDKitFingerprints \
              -lRDKitChemTransforms -lRDKitSubstructMatch -lRDKitSmilesParse -lRDKitGraphMol \
              -lRDKitDataStructs -lRDKitRDGeometryLib -lRDKitRDGeneral
LDLIBS   := $(RDKIT_LIBS) -lopenblas -lcsv -lz -lcjson -linih -lcrypto -lcurl -lm
ifeq ($(DNNL),1)
LDLIBS   += -ldnnl
endif
LDFLAGS  += -fopenmp $(SANFLAGS)

ifeq ($(MPI),1)
MPI_CFLAGS := $(shell pkg-config --cflags ompi-c)
LDLIBS     += $(shell pkg-config --libs ompi-c)
endif

# NCCL (src/gpu/nccl_cuda.cu): the data-parallel gradient sum on the GPUs;
# found in the CUDA toolkit (or /usr/include).  Without it the sum goes
# through the host and MPI.
NCCL     ?= $(if $(filter 1,$(CUDA)),$(if $(wildcard $(CUDA_HOME)/include/nccl.h /usr/include/nccl.h),1,0),0)

ifeq ($(CUDA),1)
NVCCFLAGS := -O2 -std=c++17 -Iinclude -Isrc -DMP_HAVE_CUDA=1 \
             -gencode=arch=compute_90a,code=sm_90a -gencode=arch=compute_90,code=compute_90 \
             -Xcompiler -Wall,-Wextra,-Wno-unused-parameter,-fPIC -MMD -MP
# cuBLAS and cuBLASLt are not linked: src/gpu/blas_dl.cu loads them when a
# GPU backend first opens (linked, their static initializers cost every
# process ~45 ms and ~210 MB); the run path below is where it looks first.
LDLIBS    += -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcudart
ifeq ($(NCCL),1)
LDLIBS    += -lnccl
endif
endif

MODULES  := core data graph featurize backend models run api bench hpopt
LIB_C    := $(foreach m,$(MODULES),$(wildcard src/$(m)/*.c))
LIB_CXX  := $(wildcard src/featurize/*.cpp)
LIB_CU   := $(if $(filter 1,$(CUDA)),$(wildcard src/gpu/*.cu),)
LIB_C    += $(if $(filter 1,$(CUDA)),,$(wildcard src/gpu/*_nocuda.c))
LIB_C    += $(wildcard src/gpu/*_host.c)
CLI_C    := $(wildcard src/cli/*.c)
TEST_C   := $(wildcard tests/*.c)

LIB_OBJ  := $(LIB_C:%.c=$(BUILD)/%.o) $(LIB_CXX:%.cpp=$(BUILD)/%.o) $(LIB_CU:%.cu=$(BUILD)/%.o)
CLI_OBJ  := $(CLI_C:%.c=$(BUILD)/%.o)
TEST_OBJ := $(TEST_C:%.c=$(BUILD)/%.o)

.PHONY: all deps test test-san test-gpu bench-gpu check demo bench benches clean install examples fuzz
all: $(BUILD)/molprop $(BUILD)/libmolprop.a $(BUILD)/libmolprop.so

deps:
	@sh scripts/deps.sh

# The archive is rebuilt whenever the CUDA setting changes (a CUDA=0 build
# after a CUDA=1 one in the same directory must not keep the .cu objects).
$(BUILD)/cuda.stamp: FORCE
	@mkdir -p $(dir $@)
	@echo "CUDA=$(CUDA)" | cmp -s - $@ || echo "CUDA=$(CUDA)" > $@

$(BUILD)/mpi.stamp: FORCE
	@mkdir -p $(dir $@)
	@echo "MPI=$(MPI)" | cmp -s - $@ || echo "MPI=$(MPI)" > $@
$(BUILD)/src/core/dist.o: $(BUILD)/mpi.stamp
$(BUILD)/nccl.stamp: FORCE
	@mkdir -p $(dir $@)
	@echo "NCCL=$(NCCL)" | cmp -s - $@ || echo "NCCL=$(NCCL)" > $@
$(BUILD)/src/gpu/nccl_cuda.o: $(BUILD)/nccl.stamp
$(BUILD)/src/gpu/nccl_cuda.o: NVCCFLAGS += -DMP_HAVE_NCCL=$(NCCL)
$(BUILD)/src/core/dist.o: CPPFLAGS += -DMP_HAVE_MPI=$(MPI) $(MPI_CFLAGS)

$(BUILD)/libmolprop.a: $(LIB_OBJ) $(BUILD)/cuda.stamp
	@rm -f $@
	ar rcs $@ $(LIB_OBJ)

# The shared library exports the public API only (src/libmolprop.map lists
# it; tests/install_example.sh checks the list against molprop.h).
$(BUILD)/libmolprop.so: $(LIB_OBJ) $(BUILD)/cuda.stamp src/libmolprop.map
	$(CXX) -shared -Wl,-soname,libmolprop.so.$(SOVER) -Wl,--version-script=src/libmolprop.map \
	    $(LDFLAGS) -o $@ $(LIB_OBJ) $(LDLIBS)
	ln -sf libmolprop.so $(BUILD)/libmolprop.so.$(SOVER)

ifeq ($(JEMALLOC)$(SAN)$(FUZZ),100)
CLI_MALLOC := -l:libjemalloc.so.2
endif
# relinked when the choice changes
$(BUILD)/malloc.stamp: FORCE
	@mkdir -p $(dir $@)
	@echo "CLI_MALLOC=$(CLI_MALLOC)" | cmp -s - $@ || echo "CLI_MALLOC=$(CLI_MALLOC)" > $@
$(BUILD)/molprop: $(CLI_OBJ) $(BUILD)/libmolprop.a $(BUILD)/malloc.stamp
	$(CXX) $(LDFLAGS) -o $@ $(CLI_OBJ) $(BUILD)/libmolprop.a $(LDLIBS) $(CLI_MALLOC)

$(BUILD)/run_tests: $(TEST_OBJ) $(BUILD)/libmolprop.a
	$(CXX) $(LDFLAGS) -o $@ -Wl,--whole-archive $(TEST_OBJ) -Wl,--no-whole-archive \
	    $(BUILD)/libmolprop.a $(LDLIBS)

# The cpu kernels vectorize only without errno semantics (sqrtf in Adam) and
# without trapping-math (selects like "y > 0 ? dy * s : 0" stay branches
# otherwise, and mispredict on every other element).
$(BUILD)/src/backend/cpu.o $(BUILD)/src/backend/cpu_graph.o: CFLAGS += -fno-math-errno -fno-trapping-math

# The normalization table is embedded (.incbin) into this object.
$(BUILD)/src/featurize/norm_table.o: data/rdkit2d_normalization.tsv

# The sparse label store at ChEMBL's shape (bench/sparse_labels.c).
$(BUILD)/bench_sparse_labels: $(BUILD)/bench/sparse_labels.o $(BUILD)/libmolprop.a
	$(CXX) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# Model microbenchmark (bench/train_step.c): D-MPNN training steps on the cpu.
$(BUILD)/bench_train_step: $(BUILD)/bench/train_step.o $(BUILD)/libmolprop.a
	$(CXX) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/src/cli/%.o: src/cli/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CLI_CPPFLAGS) $(CFLAGS) -c $< -o $@

$(BUILD)/src/%.o: src/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(PICFLAGS) -c $< -o $@

$(BUILD)/src/%.o: src/%.cpp
	@mkdir -p $(dir $@)
	$(CXX) $(CPPFLAGS) $(CXXFLAGS) $(PICFLAGS) -c $< -o $@

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -c $< -o $@

$(BUILD)/%.o: %.cpp
	@mkdir -p $(dir $@)
	$(CXX) $(CPPFLAGS) $(CXXFLAGS) -c $< -o $@

$(BUILD)/%.o: %.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -c $< -o $@

# The tests find the shared fixtures and the dataset mirror beside the checkout
# unless told otherwise.
MOLPROP_SHARED      ?= $(abspath ../shared)
MOLPROP_DATA_MIRROR ?= $(MOLPROP_SHARED)/datasets
export MOLPROP_SHARED MOLPROP_DATA_MIRROR

# tests/install_example.sh (run by tests/test_install.c) installs this build
# into a scratch prefix with these make variables and builds examples/
# against it through pkg-config.
# tests/test_dist.c launches this one alone and under mpirun.
$(BUILD)/dist_train: $(BUILD)/tests/workers/dist_train.o $(BUILD)/libmolprop.a
	$(CXX) $(LDFLAGS) -o $@ $< $(BUILD)/libmolprop.a $(LDLIBS)

test: $(BUILD)/run_tests $(BUILD)/molprop $(BUILD)/libmolprop.so $(BUILD)/dist_train
	MOLPROP_DIST_TRAIN=$(abspath $(BUILD)/dist_train) \
	MOLPROP_BIN=$(abspath $(BUILD)/molprop) MOLPROP_MAKEVARS="SAN=$(SAN) CUDA=$(CUDA) MPI=$(MPI) NCCL=$(NCCL) BUILD=$(BUILD)" \
	    MOLPROP_MPI=$(MPI) \
	    MOLPROP_EXAMPLE_CFLAGS="$(SANFLAGS)" ./$(BUILD)/run_tests $(T)

test-san:
	$(MAKE) SAN=1 test

# The GPU tests alone (tests/test_gpu_ops.c, names gpu_*); here a skip (no
# GPU) is a failure.
test-gpu: $(BUILD)/run_tests $(BUILD)/molprop
	MOLPROP_BIN=$(abspath $(BUILD)/molprop) MOLPROP_REQUIRE_GPU=1 ./$(BUILD)/run_tests gpu

# The GPU microbenchmark (bench/gpu_ops.c): per-op times and a D-MPNN step.
# --as-needed keeps RDKit off its list of shared libraries (it calls none).
$(BUILD)/bench/%.o: CPPFLAGS += -isystem $(CUDA_HOME)/include
$(BUILD)/gpu_ops: $(BUILD)/bench/gpu_ops.o $(BUILD)/libmolprop.a
	$(CXX) $(LDFLAGS) -Wl,--as-needed -o $@ $< $(BUILD)/libmolprop.a $(LDLIBS)
$(BUILD)/gpu_infer: $(BUILD)/bench/gpu_infer.o $(BUILD)/libmolprop.a
	$(CXX) $(LDFLAGS) -Wl,--as-needed -o $@ $< $(BUILD)/libmolprop.a $(LDLIBS)
# The cuBLASLt configuration search (bench/lt_search.cu): standalone.
$(BUILD)/lt_search: bench/lt_search.cu
	@mkdir -p $(dir $@)
	$(NVCC) -O2 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -o $@ $< -lcublasLt

$(BUILD)/gpu_predict: $(BUILD)/bench/gpu_predict.o $(BUILD)/libmolprop.a
	$(CXX) $(LDFLAGS) -o $@ $< $(BUILD)/libmolprop.a $(LDLIBS)
ifeq ($(CUDA),1)
bench-gpu: $(BUILD)/gpu_ops $(BUILD)/gpu_infer $(BUILD)/gpu_predict
else
bench-gpu:
	@echo "bench-gpu needs the CUDA build (nvcc on the PATH, CUDA=1)" >&2; exit 1
endif

check: deps
	$(MAKE) all
	$(MAKE) benches
	$(MAKE) test
	ASAN_OPTIONS=detect_leaks=1 LSAN_OPTIONS=suppressions=$(abspath tests/lsan.supp) \
	    UBSAN_OPTIONS=print_stacktrace=1 $(MAKE) test-san

demo: deps all
	sh scripts/demo.sh

# Featurization benchmarks (bench/featurize.sh runs them and prints medians).
bench: $(BUILD)/bench/parse_rate $(BUILD)/bench/featurize_rate $(BUILD)/bench/desc_rate

# Every benchmark program, built (none is run): check builds them so that an
# API change cannot leave one behind.
benches: bench $(BUILD)/bench_sparse_labels $(BUILD)/bench_train_step \
	$(if $(filter 1,$(CUDA)),bench-gpu)

$(BUILD)/bench/parse_rate: bench/parse_rate.cpp
	@mkdir -p $(dir $@)
	$(CXX) $(CPPFLAGS) $(CXXFLAGS) -o $@ $< $(LDFLAGS) $(LDLIBS)

$(BUILD)/bench/featurize_rate: bench/featurize_rate.c $(BUILD)/libmolprop.a
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -o $@ $< $(LDFLAGS) $(BUILD)/libmolprop.a $(LDLIBS) -lstdc++

# Fuzz harnesses (tests/fuzz/README.md): clang's libFuzzer with ASan and
# UBSan (Debian: clang, libclang-rt-dev, libomp-dev), the library built
# without CUDA into build-fuzz/.  Run one: build-fuzz/fuzz_csv
# tests/fuzz/corpus/csv (a copy of the corpus to grow: see the README).  The
# test suite replays the corpora without clang (tests/test_robust_fuzz.c).
FUZZ_HARNESSES := csv smiles modelfile cache config cli
fuzz:
	@command -v clang >/dev/null 2>&1 || { echo "make fuzz needs clang: apt-get install clang libclang-rt-dev libomp-dev" >&2; exit 1; }
	$(MAKE) FUZZ=1 CC=clang CXX=clang++ CUDA=0 $(FUZZ_HARNESSES:%=build-fuzz/fuzz_%)

ifeq ($(FUZZ),1)
# linked by clang++: the C++ half of UBSan's runtime (vptr checks in RDKit's headers)
$(BUILD)/fuzz_%: tests/fuzz/fuzz_%.c tests/fuzz/fuzz.h $(BUILD)/libmolprop.a
	$(CC) $(CPPFLAGS) $(CFLAGS) -DMP_FUZZ_MAIN -c -o $@.o $<
	$(CXX) $(LDFLAGS) -fsanitize=fuzzer -o $@ $@.o $(BUILD)/libmolprop.a $(LDLIBS)
endif

# ---------------------------------------------------------------------
# Install: bin/molprop, lib/libmolprop.{a,so}, include/molprop.h,
# lib/pkgconfig/molprop.pc and share/molprop/datasets.tsv (the registry the
# installed binary and library find beside themselves: data/registry.c).
# Libs.private lists what a static link needs (pkg-config --static); the
# shared library records its own dependencies.
PREFIX  ?= /usr/local
LIBDIR  ?= $(PREFIX)/lib
INCDIR  ?= $(PREFIX)/include
BINDIR  ?= $(PREFIX)/bin
PC_LIBS_PRIVATE := $(LDLIBS) -lstdc++ -lgomp -lpthread

$(BUILD)/molprop.pc: molprop.pc.in FORCE
	@mkdir -p $(dir $@)
	@sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@LIBDIR@|$(LIBDIR)|' -e 's|@INCDIR@|$(INCDIR)|' \
	    -e 's|@VERSION@|$(VERSION)|' -e 's|@LIBS_PRIVATE@|$(PC_LIBS_PRIVATE)|' $< > $@.tmp
	@mv $@.tmp $@

install: all $(BUILD)/molprop.pc
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(LIBDIR)/pkgconfig $(DESTDIR)$(INCDIR)
	install -m 755 $(BUILD)/molprop $(DESTDIR)$(BINDIR)/molprop
	install -m 644 $(BUILD)/libmolprop.a $(DESTDIR)$(LIBDIR)/libmolprop.a
	install -m 755 $(BUILD)/libmolprop.so $(DESTDIR)$(LIBDIR)/libmolprop.so.$(VERSION)
	ln -sf libmolprop.so.$(VERSION) $(DESTDIR)$(LIBDIR)/libmolprop.so.$(SOVER)
	ln -sf libmolprop.so.$(SOVER) $(DESTDIR)$(LIBDIR)/libmolprop.so
	install -m 644 include/molprop.h $(DESTDIR)$(INCDIR)/molprop.h
	install -m 644 $(BUILD)/molprop.pc $(DESTDIR)$(LIBDIR)/pkgconfig/molprop.pc
	install -d $(DESTDIR)$(PREFIX)/share/molprop
	install -m 644 data/datasets.tsv $(DESTDIR)$(PREFIX)/share/molprop/datasets.tsv

# The example programs, against the shared library of this build.
EXAMPLES := $(patsubst examples/%.c,$(BUILD)/examples/%,$(wildcard examples/*.c))
examples: $(EXAMPLES)
$(BUILD)/examples/%: examples/%.c $(BUILD)/libmolprop.so include/molprop.h
	@mkdir -p $(dir $@)
	$(CC) -std=c11 -Wall -Wextra $(OPT) $(SANFLAGS) -Iinclude -o $@ $< -L$(BUILD) -lmolprop \
	    -Wl,-rpath,$(abspath $(BUILD))

# Chemprop's descriptor sets beside descriptastorus (bench/descriptors.sh).
$(BUILD)/bench/desc_rate: bench/desc_rate.c $(BUILD)/libmolprop.a
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -o $@ $< $(LDFLAGS) $(BUILD)/libmolprop.a $(LDLIBS) -lstdc++

clean:
	rm -rf build build-san build-nocuda build-fuzz

-include $(LIB_OBJ:.o=.d) $(CLI_OBJ:.o=.d) $(TEST_OBJ:.o=.d) $(BUILD)/tests/workers/dist_train.d $(BUILD)/bench/gpu_ops.d $(BUILD)/bench/gpu_predict.d

FORCE:
