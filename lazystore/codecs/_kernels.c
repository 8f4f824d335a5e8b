/* Byte planes back into elements, in one pass over memory.

   Decoding a compressed chunk interleaves its byte planes (plane j holds
   byte j of every element) back into elements; a delta chunk (codec 2)
   then adds the zigzag-decoded words to the base's bytes. Without this
   module that takes three passes through Blosc (planes copied into a Blosc
   frame, Blosc copies the frame, then un-shuffles) and five numpy passes for
   the zigzag addition; one pass here takes about half Blosc's time and a
   third of Blosc plus numpy's (the figures: docs/benchmarks.md, "Figures
   behind the code").

   The module also holds codec 4's kernels (float planes and their Huffman
   coder), in _float_planes.c and _huffman.c beside this file; this file
   keeps the module's definition and its method table.

   Every function releases the GIL: chunks are decoded on a thread pool.
   The module is optional (setup.py builds it where a C compiler is found);
   lazystore/codecs/unshuffle.py falls back to Blosc and numpy without it.

   Safe by construction, whatever Python hands in: the planes are copied
   into a tuple before any buffer is asked for (asking can run Python code,
   which could shrink or refill a list under a borrowed reference); lengths
   are multiplied only after checking they cannot overflow; and an output
   that overlaps any plane is refused, since the loops read the planes
   while writing the output. */

#include "_kernels.h"

#define MAX_PLANES 255

KERNEL static void unshuffle_2(const uint8_t *const *s, size_t n, uint8_t *out) {
    const uint8_t *a = s[0], *b = s[1];
    for (size_t i = 0; i < n; i++) store16(out + 2 * i, (uint16_t)(a[i] | (b[i] << 8)));
}

KERNEL static void unshuffle_4(const uint8_t *const *s, size_t n, uint8_t *out) {
    const uint8_t *a = s[0], *b = s[1], *c = s[2], *d = s[3];
    for (size_t i = 0; i < n; i++)
        store32(out + 4 * i, (uint32_t)a[i] | ((uint32_t)b[i] << 8) | ((uint32_t)c[i] << 16) | ((uint32_t)d[i] << 24));
}

KERNEL static void unshuffle_8(const uint8_t *const *s, size_t n, uint8_t *out) {
    for (size_t i = 0; i < n; i++) {
        uint64_t w = 0;
        for (int j = 0; j < 8; j++) w |= (uint64_t)s[j][i] << (8 * j);
        store64(out + 8 * i, w);
    }
}

static void unshuffle_any(const uint8_t *const *s, int p, size_t n, uint8_t *out) {
    for (int j = 0; j < p; j++) {
        const uint8_t *plane = s[j];
        for (size_t i = 0; i < n; i++) out[i * p + j] = plane[i];
    }
}

void unshuffle_planes(const uint8_t *const *s, int p, size_t n, uint8_t *out) {
    if (p == 1) memcpy(out, s[0], n);
    else if (p == 2) unshuffle_2(s, n, out);
    else if (p == 4) unshuffle_4(s, n, out);
    else if (p == 8) unshuffle_8(s, n, out);
    else unshuffle_any(s, p, n, out);
}

/* out word += unzigzag(word of the planes), modulo 2^bits (codec 2). */
KERNEL static void add_unzigzag_2(const uint8_t *const *s, size_t n, uint8_t *out) {
    const uint8_t *a = s[0], *b = s[1];
    for (size_t i = 0; i < n; i++) {
        uint16_t z = (uint16_t)(a[i] | (b[i] << 8));
        store16(out + 2 * i, (uint16_t)(load16(out + 2 * i) + ((z >> 1) ^ (uint16_t)(0u - (z & 1u)))));
    }
}

KERNEL static void add_unzigzag_4(const uint8_t *const *s, size_t n, uint8_t *out) {
    const uint8_t *a = s[0], *b = s[1], *c = s[2], *d = s[3];
    for (size_t i = 0; i < n; i++) {
        uint32_t z = (uint32_t)a[i] | ((uint32_t)b[i] << 8) | ((uint32_t)c[i] << 16) | ((uint32_t)d[i] << 24);
        store32(out + 4 * i, load32(out + 4 * i) + ((z >> 1) ^ (0u - (z & 1u))));
    }
}

KERNEL static void add_unzigzag_8(const uint8_t *const *s, size_t n, uint8_t *out) {
    for (size_t i = 0; i < n; i++) {
        uint64_t z = 0;
        for (int j = 0; j < 8; j++) z |= (uint64_t)s[j][i] << (8 * j);
        store64(out + 8 * i, load64(out + 8 * i) + ((z >> 1) ^ (0ull - (z & 1ull))));
    }
}

static void release(Py_buffer *views, int count) {
    for (int j = 0; j < count; j++) PyBuffer_Release(&views[j]);
}

/* The planes' buffers (each n bytes) and the output (n * planes bytes,
   writable, sharing no byte with a plane). On success the caller releases
   every view; on failure none is held. */
static int take_buffers(PyObject *planes, PyObject *out, Py_buffer *views, int *count, Py_buffer *outview,
                        size_t *n) {
    /* A tuple of our own, not the caller's list: PySequence_Fast would hand
       back the list itself, and PyObject_GetBuffer can run Python code (a
       __buffer__ method, a buffer-providing C type's callback) that shrinks
       or refills that list while we index it. The tuple holds a strong
       reference to every plane, and each view holds its exporter after. */
    PyObject *seq = PySequence_Tuple(planes);
    if (seq == NULL) return -1;
    Py_ssize_t p = PyTuple_GET_SIZE(seq);
    *count = 0;
    if (p < 1 || p > MAX_PLANES) {
        PyErr_Format(PyExc_ValueError, "cannot un-shuffle %zd planes", p);
        goto fail;
    }
    for (Py_ssize_t j = 0; j < p; j++) {
        if (PyObject_GetBuffer(PyTuple_GET_ITEM(seq, j), &views[j], PyBUF_C_CONTIGUOUS) < 0) goto fail;
        *count = (int)(j + 1);
        if (views[j].len != views[0].len) {
            PyErr_SetString(PyExc_ValueError, "planes differ in length");
            goto fail;
        }
    }
    if (views[0].len > PY_SSIZE_T_MAX / p) {
        PyErr_Format(PyExc_OverflowError, "%zd planes of %zd bytes are more bytes than a buffer holds", p,
                     views[0].len);
        goto fail;
    }
    if (PyObject_GetBuffer(out, outview, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0) goto fail;
    if (outview->len != views[0].len * p) {
        PyErr_Format(PyExc_ValueError, "cannot un-shuffle %zd planes of %zd bytes into %zd bytes", p, views[0].len,
                     outview->len);
        goto fail_out;
    }
    for (Py_ssize_t j = 0; j < p; j++) {
        if (overlaps(outview, &views[j])) {
            PyErr_Format(PyExc_ValueError, "the output overlaps plane %zd: it would be overwritten while read", j);
            goto fail_out;
        }
    }
    *n = (size_t)views[0].len;
    Py_DECREF(seq);
    return 0;
fail_out:
    PyBuffer_Release(outview);
fail:
    release(views, *count);
    *count = 0;
    Py_DECREF(seq);
    return -1;
}

static PyObject *run(PyObject *args, int zigzag) {
    PyObject *planes, *out;
    if (!PyArg_ParseTuple(args, "OO", &planes, &out)) return NULL;
    Py_buffer views[MAX_PLANES], outview;
    const uint8_t *ptrs[MAX_PLANES];
    int p;
    size_t n;
    if (take_buffers(planes, out, views, &p, &outview, &n) < 0) return NULL;
    if (zigzag && p != 2 && p != 4 && p != 8) {
        release(views, p);
        PyBuffer_Release(&outview);
        return PyErr_Format(PyExc_ValueError, "no zigzag addition over %d-byte words", p);
    }
    for (int j = 0; j < p; j++) ptrs[j] = (const uint8_t *)views[j].buf;
    uint8_t *dst = (uint8_t *)outview.buf;
    Py_BEGIN_ALLOW_THREADS
    if (zigzag) {
        if (p == 2) add_unzigzag_2(ptrs, n, dst);
        else if (p == 4) add_unzigzag_4(ptrs, n, dst);
        else add_unzigzag_8(ptrs, n, dst);
    } else {
        unshuffle_planes(ptrs, p, n, dst);
    }
    Py_END_ALLOW_THREADS
    release(views, p);
    PyBuffer_Release(&outview);
    Py_RETURN_NONE;
}

static PyObject *unshuffle(PyObject *Py_UNUSED(self), PyObject *args) { return run(args, 0); }
static PyObject *add_unzigzag(PyObject *Py_UNUSED(self), PyObject *args) { return run(args, 1); }

static PyMethodDef methods[] = {
    {"unshuffle", unshuffle, METH_VARARGS,
     "unshuffle(planes, out): interleave equal-length byte planes (plane j: byte j of every element) into out."},
    {"add_unzigzag", add_unzigzag, METH_VARARGS,
     "add_unzigzag(planes, out): out's little-endian words (2, 4 or 8 bytes: one per plane) += the zigzag-decoded "
     "words the planes interleave into, modulo 2^bits."},
    {"huffman_encode", huffman_encode, METH_VARARGS,
     "huffman_encode(plane, lengths, nstreams) -> bytes: the plane's symbols in nstreams canonical Huffman streams "
     "(codec 4's Huffman plane from byte T on: the u32 lengths of all streams but the last, then the streams); "
     "lengths: 256 bytes, the code length of each symbol (0: absent)."},
    {"byte_counts", byte_counts, METH_VARARGS,
     "byte_counts(plane, out): out (256 little-endian u64, e.g. numpy uint64) = how many bytes of the plane have each "
     "value; the Huffman encoder's histogram."},
    {"float_split", float_split, METH_VARARGS,
     "float_split(chunk, layout, planes, out): the chunk's elements into codec 4's planes (plane j at j * m in out)."},
    {"float_decode", float_decode, METH_VARARGS,
     "float_decode(out, layout, planes, modes=None): codec 4's planes back into elements; a plane is m bytes, or a "
     "Huffman plane as (symbols, lengths, lmax, streams), or, where modes (one byte a plane, as a chunk stores them) "
     "says 2, a Huffman plane as stored, parsed here; decoded block by block into the elements."},
    {NULL, NULL, 0, NULL},
};

/* What lazystore/codecs/compiled.py expects of this module (the refusals
   above, `dispatch`; from 3, codec 4's functions; from 4, byte_counts and
   float_decode's modes): bumped with it when the
   kernels' behaviour changes, so an in-place build left over from an older
   checkout is not used. */
#define INTERFACE 4

static int exec_module(PyObject *m) {
    if (PyModule_AddIntConstant(m, "INTERFACE", INTERFACE) < 0) return -1;
    return PyModule_AddStringConstant(m, "dispatch", DISPATCH);
}

/* Multi-phase initialisation (PEP 489): the module keeps no state, so it
   says so to the interpreters that ask. Without Py_mod_gil a free-threaded
   Python (3.13t) re-enables the GIL for the whole process on import; the
   kernels only read their planes and write their own output, holding the
   views of both, so they need no lock. Each slot exists from the version
   that guards it (PY_VERSION_HEX), so 3.10 and 3.11 build without them. */
static PyModuleDef_Slot slots[] = {
    {Py_mod_exec, exec_module},
#if PY_VERSION_HEX >= 0x030C0000
    {Py_mod_multiple_interpreters, Py_MOD_PER_INTERPRETER_GIL_SUPPORTED},
#endif
#if PY_VERSION_HEX >= 0x030D0000
    {Py_mod_gil, Py_MOD_GIL_NOT_USED},
#endif
    {0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_kernels", "lazystore's optional decoding kernels (lazystore/codecs/_kernels.c).", 0,
    methods, slots, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__kernels(void) { return PyModuleDef_Init(&module); }
