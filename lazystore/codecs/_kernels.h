/* What lazystore's C kernels share across their files (_kernels.c: the
   module and the byte un-shuffle; _float_planes.c: codec 4's planes;
   _huffman.c: its Huffman coder): little-endian word access, the
   target_clones switch, and the overlap test. */

#ifndef LAZYSTORE_KERNELS_H
#define LAZYSTORE_KERNELS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* Words are assembled and stored little-endian, lazystore's byte order,
   through the host's own: a big-endian host does not build the module. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#error "lazystore's kernels need a little-endian host (without them lazystore uses Blosc and numpy)"
#endif

/* gcc makes an AVX2 copy of each loop beside the baseline one and picks
   one at load time, so a build runs on any x86-64. The pick is an ifunc, a
   GNU indirect function resolved by the dynamic loader: glibc's loader has
   them, musl's (Alpine) and other C libraries' do not, and there gcc
   refuses target_clones outright. __GLIBC__ comes from <features.h>, which
   Python.h has included by now; elsewhere the loops are plain functions
   (the baseline, still vectorised for SSE2 at -O3). `dispatch` in the
   module (lazystore.show_config() prints it) says which was built. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__GLIBC__)
#define KERNEL __attribute__((target_clones("avx2", "default")))
#define DISPATCH "AVX2 or baseline x86-64 loops, picked at load by gcc's target_clones"
#else
#define KERNEL
#define DISPATCH "loops built for this target only, no target_clones"
#endif

/* Functions one file of the module calls in another: not exported from
   the shared object. */
#if defined(__GNUC__)
#define INTERNAL __attribute__((visibility("hidden")))
#else
#define INTERNAL
#endif

static inline void store32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }
static inline void store16(uint8_t *p, uint16_t v) { memcpy(p, &v, 2); }
static inline void store64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }
static inline uint32_t load32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static inline uint16_t load16(const uint8_t *p) { uint16_t v; memcpy(&v, p, 2); return v; }
static inline uint64_t load64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }

/* Whether two buffers share a byte. Written with differences, not ends,
   so no address + length can wrap; an empty buffer shares nothing. */
static inline int overlaps(const Py_buffer *a, const Py_buffer *b) {
    if (a->len == 0 || b->len == 0) return 0;
    uintptr_t x = (uintptr_t)a->buf, y = (uintptr_t)b->buf;
    return x >= y ? x - y < (uintptr_t)b->len : y - x < (uintptr_t)a->len;
}

/* _kernels.c: plane j (byte j of each element) back into n elements. */
INTERNAL void unshuffle_planes(const uint8_t *const *s, int p, size_t n, uint8_t *out);

/* _float_planes.c: codec 4's functions, in _kernels.c's method table. */
INTERNAL PyObject *huffman_encode(PyObject *self, PyObject *args);
INTERNAL PyObject *byte_counts(PyObject *self, PyObject *args);
INTERNAL PyObject *float_split(PyObject *self, PyObject *args);
INTERNAL PyObject *float_decode(PyObject *self, PyObject *args);

#endif
