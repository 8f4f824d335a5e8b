/* Codec 4's canonical Huffman coder (docs/format.md §9.5;
   docs/design/29-exponent-coder.md §4), in plain C: no Python object is touched, so _float_planes.c runs it
   without the GIL. Errors come back as a message (NULL: none). */

#ifndef LAZYSTORE_HUFFMAN_H
#define LAZYSTORE_HUFFMAN_H

#include "_kernels.h"

#define HUFF_MAX_LENGTH 12
#define HUFF_MAX_STREAMS 8

/* The decode table: entry i is what the next `window` stream bits (as an
   LSB-first integer) decode to. Byte 0: the bits its symbols take (the
   low byte, so that a shift by the entry shifts by it); bytes 1-4: up to 4
   symbols; byte 5: the first symbol's length (alone, for a stream's last
   symbols); byte 7: the symbol count (1..4), on top so one shift gives it. */
#define HUFF_WINDOW 11 /* the fewest bits a table looks at */
typedef struct {
    int window; /* the bits a lookup looks at: max(Lmax, HUFF_WINDOW) */
    uint64_t entry[1 << HUFF_MAX_LENGTH];
} huff_table;

/* One stream being read: bit `bit` (LSB-first from data[0]) is the next
   one to decode; beyond len bytes the stream reads as zeros. */
typedef struct {
    const uint8_t *data;
    size_t len, bit;
} huff_reader;

typedef struct {
    const huff_table *table;
    int nstreams;
    size_t q;                               /* symbols a stream, the last one's fewer */
    size_t count[HUFF_MAX_STREAMS];         /* symbols of each stream */
    huff_reader stream[HUFF_MAX_STREAMS];
} huff_plane;

/* A Huffman plane's code and streams, as a chunk stores them (parsed by
   huff_parse_stored) or as the caller hands them over. */
typedef struct {
    const uint8_t *symbols, *lengths; /* k of each; lengths point into unpacked when parsed */
    size_t k;
    long lmax;
    int nstreams;
    const uint8_t *streams[HUFF_MAX_STREAMS];
    size_t stream_len[HUFF_MAX_STREAMS];
    uint8_t unpacked[256]; /* the lengths, when parsed from their nibbles */
} huff_code;

/* A stored Huffman plane of m symbols (docs/format.md §9.5), len bytes at
   b, split into its code and streams with every refusal of
   huffman_code.parse_plane (the Python parser of the numpy path): msg
   receives the refusal; returns 0 when there is none. */
INTERNAL int huff_parse_stored(const uint8_t *b, size_t len, size_t m, huff_code *c, char *msg, size_t size);

/* The checks of huff_build_table alone (NULL: the code is valid). */
INTERNAL const char *huff_check_code(const uint8_t *symbols, const uint8_t *lengths, size_t k, long lmax);

/* Validates the code (k symbols ascending, 1 <= length <= lmax <= 12, some
   length lmax, Kraft's equality) and builds its table. */
INTERNAL const char *huff_build_table(huff_table *t, const uint8_t *symbols, const uint8_t *lengths, size_t k,
                                      long lmax);

/* Readers over the plane's streams for n symbols; refuses a stream count
   that leaves a stream empty. */
INTERNAL const char *huff_plane_start(huff_plane *p, const huff_table *t, const uint8_t *const *streams,
                                      const size_t *lens, int nstreams, size_t n);

/* The next want[s] to room[s] symbols of each stream s into dst[s] (room
   >= want; stores stay below dst[s] + room[s]), streams in lockstep; got[s]
   receives how many. Lockstep rounds stop where one stream's room runs out,
   so some room to spare keeps the streams from finishing one by one. */
INTERNAL void huff_decode(huff_plane *p, const size_t *want, const size_t *room, uint8_t *const *dst,
                          size_t *got);

/* After the last symbol: each stream used all of its bytes and its pad
   bits are zero. msg receives the refusal; returns 0 when there is none. */
INTERNAL int huff_plane_finish(const huff_plane *p, char *msg, size_t size);

/* The encoder: a complete code from 256 lengths (0: absent), then each
   code bit-reversed, so that it is written LSB-first as deflate writes it. */
INTERNAL const char *huff_check_lengths(const uint8_t lengths[256], unsigned *lmax);
/* codes[v]: v's code bit-reversed | its length << 16, or HUFF_NO_CODE. */
#define HUFF_NO_CODE 0x80000000u
INTERNAL void huff_code_table(const uint8_t lengths[256], uint32_t codes[256]);

/* n symbols into out, which has ceil(n * lmax / 8) + 8 bytes of room
   (stores are whole words); returns the bytes the stream takes. A symbol
   without a code sets HUFF_NO_CODE in *seen. */
INTERNAL size_t huff_encode_stream(const uint8_t *src, size_t n, const uint32_t *codes, uint8_t *out,
                                   uint32_t *seen);

#endif
