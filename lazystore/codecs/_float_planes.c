/* Codec 4's float planes (docs/format.md §9.5; docs/design/29-exponent-coder.md §4): a
   chunk's elements into planes and back, and the Huffman encoder's entry.

   float_decode decodes each Huffman plane a block of BLOCK symbols per
   stream at a time into a small scratch (L1-sized), then merges that block
   with the other planes' bytes straight into whole elements: the exponent
   never exists as a plane-sized buffer. A 1-plane dtype (fp8) decodes
   straight into the output, which is the plane. Given the chunk's plane
   modes, it takes a Huffman plane as stored and parses its header and
   table itself (parse_huffman), with the Python parser's refusals.

   As in _kernels.c, every buffer is taken before the GIL is let go (asking
   for one can run Python code), the items are held in tuples of our own,
   and an output that shares a byte with any input is refused. */

#include "_huffman.h"

#define LAYOUT_PLAIN 0 /* plane j is byte j of the element */
#define LAYOUT_BF16 1  /* sign beside the mantissa, the exponent whole (format §9.5) */
#define LAYOUT_FP32 2  /* the same on the high half; planes 0, 1 the low bytes */
#define MAX_FLOAT_PLANES 8
#define BLOCK 1024
/* Symbols a stream may decode past its block, kept for the next one. */
#define SLACK 64
#define MAX_VIEWS (MAX_FLOAT_PLANES * (2 + HUFF_MAX_STREAMS))

static int check_layout(long layout, Py_ssize_t planes) {
    int ok = layout == LAYOUT_PLAIN   ? planes >= 1 && planes <= MAX_FLOAT_PLANES
             : layout == LAYOUT_BF16 ? planes == 2
             : layout == LAYOUT_FP32 ? planes == 4
                                     : -1;
    if (ok == -1) PyErr_Format(PyExc_ValueError, "no float layout %ld", layout);
    else if (!ok) PyErr_Format(PyExc_ValueError, "float layout %ld has no %zd planes", layout, planes);
    return ok == 1 ? 0 : -1;
}

/* ---- the planes of elements, and back ---- */

KERNEL static void split_bf16(const uint8_t *in, size_t m, uint8_t *out) {
    uint8_t *a = out, *b = out + m;
    for (size_t i = 0; i < m; i++) {
        uint16_t x = load16(in + 2 * i);
        a[i] = (uint8_t)((x & 0x7f) | ((x >> 8) & 0x80));
        b[i] = (uint8_t)(x >> 7);
    }
}

KERNEL static void split_fp32(const uint8_t *in, size_t m, uint8_t *out) {
    uint8_t *a = out, *b = out + m, *c = out + 2 * m, *d = out + 3 * m;
    for (size_t i = 0; i < m; i++) {
        uint32_t x = load32(in + 4 * i);
        a[i] = (uint8_t)x;
        b[i] = (uint8_t)(x >> 8);
        c[i] = (uint8_t)(((x >> 16) & 0x7f) | ((x >> 24) & 0x80));
        d[i] = (uint8_t)(x >> 23);
    }
}

KERNEL static void split_plain_2(const uint8_t *in, size_t m, uint8_t *out) {
    uint8_t *a = out, *b = out + m;
    for (size_t i = 0; i < m; i++) {
        uint16_t x = load16(in + 2 * i);
        a[i] = (uint8_t)x;
        b[i] = (uint8_t)(x >> 8);
    }
}

static void split_plain(const uint8_t *in, int p, size_t m, uint8_t *out) {
    for (int j = 0; j < p; j++)
        for (size_t i = 0; i < m; i++) out[(size_t)j * m + i] = in[i * (size_t)p + j];
}

/* The merges compute each output byte (the element's high half: the low
   exponent bit beside 7 mantissa bits, then the sign beside 7 exponent
   bits) and store bytes, which gcc vectorises as byte interleaves; whole
   words built from widened bytes took twice as long. */
KERNEL static void merge_bf16(const uint8_t *const *s, size_t n, uint8_t *restrict out) {
    const uint8_t *restrict a = s[0], *restrict b = s[1];
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = (uint8_t)((a[i] & 0x7f) | (b[i] << 7));
        out[2 * i + 1] = (uint8_t)((a[i] & 0x80) | (b[i] >> 1));
    }
}

KERNEL static void merge_fp32(const uint8_t *const *s, size_t n, uint8_t *restrict out) {
    const uint8_t *restrict a = s[0], *restrict b = s[1], *restrict c = s[2], *restrict d = s[3];
    for (size_t i = 0; i < n; i++) {
        out[4 * i] = a[i];
        out[4 * i + 1] = b[i];
        out[4 * i + 2] = (uint8_t)((c[i] & 0x7f) | (d[i] << 7));
        out[4 * i + 3] = (uint8_t)((c[i] & 0x80) | (d[i] >> 1));
    }
}

static void merge(int layout, int p, const uint8_t *const *s, size_t n, uint8_t *out) {
    if (layout == LAYOUT_BF16) merge_bf16(s, n, out);
    else if (layout == LAYOUT_FP32) merge_fp32(s, n, out);
    else unshuffle_planes(s, p, n, out);
}

PyObject *float_split(PyObject *Py_UNUSED(self), PyObject *args) {
    Py_buffer in, out;
    long layout;
    Py_ssize_t p;
    if (!PyArg_ParseTuple(args, "y*lnw*", &in, &layout, &p, &out)) return NULL;
    PyObject *result = NULL;
    if (check_layout(layout, p) < 0) goto done;
    if (in.len % p != 0 || out.len != in.len) {
        PyErr_Format(PyExc_ValueError, "cannot split %zd bytes into %zd planes in %zd bytes", in.len, p, out.len);
        goto done;
    }
    if (overlaps(&in, &out)) {
        PyErr_SetString(PyExc_ValueError, "the output overlaps the chunk: it would be overwritten while read");
        goto done;
    }
    size_t m = (size_t)(in.len / p);
    const uint8_t *src = in.buf;
    uint8_t *dst = out.buf;
    Py_BEGIN_ALLOW_THREADS
    if (layout == LAYOUT_BF16) split_bf16(src, m, dst);
    else if (layout == LAYOUT_FP32) split_fp32(src, m, dst);
    else if (p == 1) memcpy(dst, src, m);
    else if (p == 2) split_plain_2(src, m, dst);
    else split_plain(src, (int)p, m, dst);
    Py_END_ALLOW_THREADS
    result = Py_None;
    Py_INCREF(result);
done:
    PyBuffer_Release(&in);
    PyBuffer_Release(&out);
    return result;
}

/* ---- the Huffman encoder ---- */

/* The counts of each byte value, into eight tables in turn so that a run
   of one value (the exponent plane is mostly a few) does not make each
   increment wait for the last one's store; u32 counts, added up into the
   u64 ones every 2^29 bytes (each table counts an eighth). */
KERNEL static void count_bytes(const uint8_t *src, size_t n, uint64_t counts[256]) {
    uint32_t part[8][256];
    memset(counts, 0, 256 * sizeof *counts);
    while (n > 0) {
        size_t block = n < ((size_t)1 << 29) ? n : (size_t)1 << 29, i = 0;
        memset(part, 0, sizeof part);
        for (; i + 8 <= block; i += 8) {
            uint64_t w = load64(src + i);
            part[0][w & 0xff]++;
            part[1][(w >> 8) & 0xff]++;
            part[2][(w >> 16) & 0xff]++;
            part[3][(w >> 24) & 0xff]++;
            part[4][(w >> 32) & 0xff]++;
            part[5][(w >> 40) & 0xff]++;
            part[6][(w >> 48) & 0xff]++;
            part[7][w >> 56]++;
        }
        for (; i < block; i++) part[0][src[i]]++;
        for (int v = 0; v < 256; v++)
            for (int t = 0; t < 8; t++) counts[v] += part[t][v];
        src += block;
        n -= block;
    }
}

PyObject *byte_counts(PyObject *Py_UNUSED(self), PyObject *args) {
    Py_buffer plane, out;
    if (!PyArg_ParseTuple(args, "y*w*", &plane, &out)) return NULL;
    PyObject *result = NULL;
    if (out.len != 256 * 8) {
        PyErr_Format(PyExc_ValueError, "the counts are 256 u64 (2048 bytes), not %zd bytes", out.len);
        goto done;
    }
    if (overlaps(&plane, &out)) {
        PyErr_SetString(PyExc_ValueError, "the counts overlap the plane: it would be overwritten while read");
        goto done;
    }
    uint64_t counts[256];
    Py_BEGIN_ALLOW_THREADS
    count_bytes(plane.buf, (size_t)plane.len, counts);
    Py_END_ALLOW_THREADS
    memcpy(out.buf, counts, sizeof counts);
    result = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&plane);
    PyBuffer_Release(&out);
    return result;
}


PyObject *huffman_encode(PyObject *Py_UNUSED(self), PyObject *args) {
    Py_buffer plane, lens;
    int nstreams;
    if (!PyArg_ParseTuple(args, "y*y*i", &plane, &lens, &nstreams)) return NULL;
    PyObject *result = NULL;
    const char *why = NULL;
    unsigned lmax = 0;
    size_t n = (size_t)plane.len, q = 0, bytes[HUFF_MAX_STREAMS];
    uint32_t codes[256], seen = 0;
    const uint8_t *src = plane.buf, *lengths = lens.buf;
    if (lens.len != 256) {
        PyErr_Format(PyExc_ValueError, "the code lengths are 256 bytes, not %zd", lens.len);
        goto done;
    }
    if (nstreams < 1 || nstreams > HUFF_MAX_STREAMS) {
        PyErr_Format(PyExc_ValueError, "a Huffman plane has 1 to 8 streams, not %d", nstreams);
        goto done;
    }
    q = n / (size_t)nstreams + (n % (size_t)nstreams != 0);
    if ((size_t)(nstreams - 1) * q >= n) {
        PyErr_Format(PyExc_ValueError, "%d streams of %zu symbols leave a stream without symbols", nstreams, n);
        goto done;
    }
    if ((why = huff_check_lengths(lengths, &lmax)) != NULL) {
        PyErr_SetString(PyExc_ValueError, why);
        goto done;
    }
    /* Room for the longest codes everywhere (the streams go back to back,
       each after the last one's end), 8 bytes for the word stores past the
       end, and the buffer cut to what was written. */
    size_t head = 4 * (size_t)(nstreams - 1), room = n / 8 * lmax + lmax + (size_t)nstreams + 8;
    if (n > (size_t)PY_SSIZE_T_MAX / 16 - head) {
        PyErr_SetString(PyExc_OverflowError, "the Huffman streams are more bytes than a buffer holds");
        goto done;
    }
    result = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(head + room));
    if (result == NULL) goto done;
    uint8_t *dst = (uint8_t *)PyBytes_AS_STRING(result), *at = dst + head;
    huff_code_table(lengths, codes);
    Py_BEGIN_ALLOW_THREADS
    for (int s = 0; s < nstreams; s++) {
        size_t count = s + 1 < nstreams ? q : n - (size_t)s * q;
        bytes[s] = huff_encode_stream(src + (size_t)s * q, count, codes, at, &seen);
        at += bytes[s];
    }
    Py_END_ALLOW_THREADS
    if (seen & HUFF_NO_CODE) {
        for (size_t i = 0; i < n; i++) {
            if (codes[src[i]] == HUFF_NO_CODE) {
                PyErr_Format(PyExc_ValueError, "symbol %d is in the plane but has no code", src[i]);
                break;
            }
        }
        Py_CLEAR(result);
        goto done;
    }
    for (int s = 0; s + 1 < nstreams; s++) {
        if (bytes[s] > UINT32_MAX) {
            PyErr_Format(PyExc_ValueError, "Huffman stream %d is %zu bytes, over a u32", s, bytes[s]);
            Py_CLEAR(result);
            goto done;
        }
        store32(dst + 4 * s, (uint32_t)bytes[s]);
    }
    if (_PyBytes_Resize(&result, (Py_ssize_t)(at - dst)) < 0) result = NULL;
done:
    PyBuffer_Release(&plane);
    PyBuffer_Release(&lens);
    return result;
}

/* ---- float_decode ---- */

typedef struct {
    int huffman;
    const uint8_t *bytes; /* a plane of m bytes, when not Huffman */
    huff_code code;       /* a Huffman plane's */
} plane_in;

typedef struct {
    Py_buffer views[MAX_VIEWS];
    int count;
} view_set;

static int take(view_set *v, PyObject *obj, const uint8_t **ptr, size_t *len) {
    if (PyObject_GetBuffer(obj, &v->views[v->count], PyBUF_C_CONTIGUOUS) < 0) return -1;
    Py_buffer *b = &v->views[v->count++];
    *ptr = b->buf;
    *len = (size_t)b->len;
    return 0;
}

/* A stored Huffman plane of m symbols, parsed (huff_parse_stored); its
   refusal as a ValueError naming plane j. */
static int parse_huffman(const uint8_t *b, size_t len, size_t m, Py_ssize_t j, plane_in *in) {
    char msg[200];
    in->huffman = 1;
    if (huff_parse_stored(b, len, m, &in->code, msg, sizeof msg) < 0) {
        PyErr_Format(PyExc_ValueError, "Huffman plane %zd: %s", j, msg);
        return -1;
    }
    return 0;
}

/* Item j: m bytes, or a Huffman plane: (symbols, lengths, lmax, streams),
   or with modes given and modes[j] == 2, the plane as stored. */
static int take_plane(view_set *v, PyObject *item, size_t m, Py_ssize_t j, int stored_huffman, plane_in *in) {
    size_t len;
    if (stored_huffman) {
        const uint8_t *b;
        if (take(v, item, &b, &len) < 0) return -1;
        return parse_huffman(b, len, m, j, in);
    }
    if (!PyTuple_Check(item)) {
        in->huffman = 0;
        if (take(v, item, &in->bytes, &len) < 0) return -1;
        if (len != m) {
            PyErr_Format(PyExc_ValueError, "plane %zd is %zu bytes, not the chunk's %zu", j, len, m);
            return -1;
        }
        return 0;
    }
    PyObject *symbols, *lengths, *streams;
    huff_code *c = &in->code;
    in->huffman = 1;
    if (!PyArg_ParseTuple(item, "OOlO;a Huffman plane is (symbols, lengths, lmax, streams)", &symbols, &lengths,
                          &c->lmax, &streams))
        return -1;
    if (take(v, symbols, &c->symbols, &c->k) < 0 || take(v, lengths, &c->lengths, &len) < 0) return -1;
    if (len != c->k) {
        PyErr_Format(PyExc_ValueError, "plane %zd: %zu symbols but %zu code lengths", j, c->k, len);
        return -1;
    }
    PyObject *seq = PySequence_Tuple(streams); /* ours: no __buffer__ can change it */
    if (seq == NULL) return -1;
    Py_ssize_t s = PyTuple_GET_SIZE(seq);
    int ok = s >= 1 && s <= HUFF_MAX_STREAMS;
    if (!ok) PyErr_Format(PyExc_ValueError, "plane %zd has %zd streams, not 1 to 8", j, s);
    for (Py_ssize_t i = 0; ok && i < s; i++)
        ok = take(v, PyTuple_GET_ITEM(seq, i), &c->streams[i], &c->stream_len[i]) == 0;
    c->nstreams = (int)s;
    Py_DECREF(seq);
    return ok ? 0 : -1;
}

typedef struct {
    huff_table table;
    huff_plane plane;
    uint8_t *scratch; /* BLOCK + SLACK symbols a stream; or, off the lead's streams, the whole plane */
    size_t carry[HUFF_MAX_STREAMS]; /* symbols decoded past the last block, at the start of the stream's scratch */
} huff_state;

/* The work itself, without the GIL. Returns 0, or -1 with msg filled. */
static int decode_chunk(int layout, int p, const plane_in *in, huff_state *st, size_t m, uint8_t *out, char *msg,
                        size_t size) {
    const char *why;
    int lead = -1;
    for (int j = 0; j < p; j++) {
        if (!in[j].huffman) continue;
        const huff_code *c = &in[j].code;
        if ((why = huff_build_table(&st[j].table, c->symbols, c->lengths, c->k, c->lmax)) != NULL ||
            (why = huff_plane_start(&st[j].plane, &st[j].table, c->streams, c->stream_len, c->nstreams, m)) != NULL) {
            snprintf(msg, size, "plane %d: %s", j, why);
            return -1;
        }
        if (lead < 0) lead = j;
    }
    const uint8_t *src[MAX_FLOAT_PLANES];
    uint8_t *dst[HUFF_MAX_STREAMS];
    size_t got[HUFF_MAX_STREAMS];
    if (p == 1 && lead == 0) { /* the output is the plane */
        for (int s = 0; s < st[0].plane.nstreams; s++) dst[s] = out + (size_t)s * st[0].plane.q;
        huff_decode(&st[0].plane, st[0].plane.count, st[0].plane.count, dst, got);
        return huff_plane_finish(&st[0].plane, msg, size);
    }
    /* A Huffman plane whose streams split the chunk unlike the lead's (the
       writer never makes one) is decoded whole first: blocks of different
       streams would not cover the same elements. */
    for (int j = 0; j < p; j++) {
        src[j] = in[j].bytes;
        if (!in[j].huffman || j == lead || st[j].plane.nstreams == st[lead].plane.nstreams) continue;
        for (int s = 0; s < st[j].plane.nstreams; s++) dst[s] = st[j].scratch + (size_t)s * st[j].plane.q;
        huff_decode(&st[j].plane, st[j].plane.count, st[j].plane.count, dst, got);
        src[j] = st[j].scratch;
    }
    if (lead < 0) {
        merge(layout, p, src, m, out);
        return 0;
    }
    const huff_plane *geometry = &st[lead].plane;
    const int streams = geometry->nstreams;
    const size_t stride = BLOCK + SLACK;
    for (int j = 0; j < p; j++)
        for (int s = 0; s < streams; s++) st[j].carry[s] = 0;
    for (size_t done = 0; done < geometry->q; done += BLOCK) {
        /* Each stream's next BLOCK symbols (fewer at its end) are wanted;
           it may decode SLACK more, never past its own last symbol. */
        size_t block[HUFF_MAX_STREAMS], left[HUFF_MAX_STREAMS];
        for (int s = 0; s < streams; s++) {
            left[s] = geometry->count[s] > done ? geometry->count[s] - done : 0;
            block[s] = left[s] < BLOCK ? left[s] : BLOCK;
        }
        for (int j = 0; j < p; j++) {
            if (!in[j].huffman || st[j].plane.nstreams != streams) continue;
            size_t want[HUFF_MAX_STREAMS], room[HUFF_MAX_STREAMS];
            for (int s = 0; s < streams; s++) {
                size_t carry = st[j].carry[s]; /* <= SLACK and <= left[s] */
                want[s] = block[s] - (carry < block[s] ? carry : block[s]);
                room[s] = (left[s] < stride ? left[s] : stride) - carry;
                dst[s] = st[j].scratch + (size_t)s * stride + carry;
            }
            huff_decode(&st[j].plane, want, room, dst, got);
            for (int s = 0; s < streams; s++) st[j].carry[s] += got[s];
        }
        for (int s = 0; s < streams; s++) {
            size_t first = (size_t)s * geometry->q + done;
            const uint8_t *from[MAX_FLOAT_PLANES];
            for (int j = 0; j < p; j++)
                from[j] = in[j].huffman && st[j].plane.nstreams == streams ? st[j].scratch + (size_t)s * stride
                                                                           : src[j] + first;
            if (block[s]) merge(layout, p, from, block[s], out + first * (size_t)p);
        }
        for (int j = 0; j < p; j++) {
            if (!in[j].huffman || st[j].plane.nstreams != streams) continue;
            for (int s = 0; s < streams; s++) { /* the symbols past the block to its scratch's start */
                uint8_t *scratch = st[j].scratch + (size_t)s * stride;
                st[j].carry[s] -= block[s];
                memmove(scratch, scratch + block[s], st[j].carry[s]);
            }
        }
    }
    for (int j = 0; j < p; j++) {
        if (in[j].huffman && huff_plane_finish(&st[j].plane, msg, size) < 0) {
            size_t at = strlen(msg);
            snprintf(msg + at, size - at, " (plane %d)", j);
            return -1;
        }
    }
    return 0;
}

PyObject *float_decode(PyObject *Py_UNUSED(self), PyObject *args) {
    PyObject *out_obj, *planes;
    long layout;
    Py_buffer modes = {.buf = NULL, .len = 0};
    if (!PyArg_ParseTuple(args, "OlO|y*", &out_obj, &layout, &planes, &modes)) return NULL;
    PyObject *items = PySequence_Tuple(planes);
    if (items == NULL) {
        PyBuffer_Release(&modes);
        return NULL;
    }
    Py_ssize_t p = PyTuple_GET_SIZE(items);
    const uint8_t *mode = modes.buf;
    view_set views = {.count = 0};
    plane_in in[MAX_FLOAT_PLANES];
    huff_state *st = NULL;
    Py_buffer out;
    int have_out = 0, failed = 0;
    PyObject *result = NULL;
    char msg[200] = "";
    if (check_layout(layout, p) < 0) goto done;
    if (PyObject_GetBuffer(out_obj, &out, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0) goto done;
    have_out = 1;
    if (out.len % p != 0) {
        PyErr_Format(PyExc_ValueError, "%zd bytes are not whole elements of %zd bytes", out.len, p);
        goto done;
    }
    if (mode != NULL && modes.len != p) {
        PyErr_Format(PyExc_ValueError, "%zd plane modes for %zd planes", modes.len, p);
        goto done;
    }
    size_t m = (size_t)(out.len / p);
    for (Py_ssize_t j = 0; j < p; j++)
        if (take_plane(&views, PyTuple_GET_ITEM(items, j), m, j, mode != NULL && mode[j] == 2, &in[j]) < 0)
            goto done;
    for (int i = 0; i < views.count; i++) {
        if (overlaps(&out, &views.views[i])) {
            PyErr_SetString(PyExc_ValueError, "the output overlaps an input plane: it would be overwritten while read");
            goto done;
        }
    }
    /* Not zeroed: 33 KB a plane, and each part is written before it is read. */
    st = PyMem_Malloc((size_t)p * sizeof *st);
    if (st == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t j = 0; j < p; j++) st[j].scratch = NULL;
    int lead = -1;
    for (Py_ssize_t j = 0; j < p; j++) {
        if (!in[j].huffman || p == 1) continue;
        if (lead < 0) lead = (int)j;
        /* A block a stream; the whole plane when its streams are not the lead's. */
        int nstreams = in[j].code.nstreams;
        size_t bytes = nstreams == in[lead].code.nstreams ? (size_t)nstreams * (BLOCK + SLACK) : m;
        if ((st[j].scratch = PyMem_Malloc(bytes)) == NULL) {
            PyErr_NoMemory();
            goto done;
        }
    }
    Py_BEGIN_ALLOW_THREADS
    failed = decode_chunk((int)layout, (int)p, in, st, m, out.buf, msg, sizeof msg);
    Py_END_ALLOW_THREADS
    if (failed) PyErr_SetString(PyExc_ValueError, msg);
    else result = Py_NewRef(Py_None);
done:
    if (st != NULL)
        for (Py_ssize_t j = 0; j < p; j++) PyMem_Free(st[j].scratch);
    PyMem_Free(st);
    for (int i = 0; i < views.count; i++) PyBuffer_Release(&views.views[i]);
    if (have_out) PyBuffer_Release(&out);
    PyBuffer_Release(&modes);
    Py_DECREF(items);
    return result;
}
