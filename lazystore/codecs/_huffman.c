/* Codec 4's canonical Huffman coder (docs/format.md §9.5
   for the bytes, docs/design/29-exponent-coder.md §4 and §9 for this design).

   Decoding: one table lookup gives up to 4 symbols (entry bytes, see
   _huffman.h), and the plane's S streams are read in lockstep, so their
   lookups, independent of one another, overlap in the CPU. A stream is a
   bit position: 4 lookups decode from one unaligned 8-byte load at it
   (Giesen's bit-position reader) while 8 bytes remain; nearer the end the
   remaining bytes are copied into a zeroed word, so no read passes a
   stream's end and the stream reads as zeros after it. Bits taken past the
   end are caught afterwards: a stream that used more bits than it has ends
   early, one with a whole byte or non-zero bits left after its last symbol
   ends late.

   Encoding: codes are written MSB-first into an LSB-first bit stream
   (deflate's order), so each code is stored bit-reversed and ORed in at the
   buffer's bit count; four codes (at most 48 bits) between word stores. */

#include "_huffman.h"

static unsigned reverse_bits(unsigned v, unsigned n) {
    unsigned r = 0;
    for (unsigned i = 0; i < n; i++) r |= ((v >> i) & 1u) << (n - 1 - i);
    return r;
}

/* Deflate's canonical codes: by (length, symbol), consecutive integers,
   shifted left when the length grows. first[L]: the first code of length L. */
static void first_codes(const unsigned *per_length, int lmax, unsigned *first) {
    unsigned code = 0;
    first[0] = 0;
    for (int len = 1; len <= lmax; len++) {
        code = (code + per_length[len - 1]) << 1;
        first[len] = code;
    }
}

/* per_length: 13 counts, filled when the code is valid. */
static const char *check_code(const uint8_t *symbols, const uint8_t *lengths, size_t k, long lmax,
                              unsigned *per_length) {
    if (lmax < 1 || lmax > HUFF_MAX_LENGTH) return "Lmax outside 1..12";
    if (k < 2 || k > 256) return "a Huffman code needs 2 to 256 symbols";
    memset(per_length, 0, (HUFF_MAX_LENGTH + 1) * sizeof *per_length);
    uint32_t kraft = 0;
    for (size_t i = 0; i < k; i++) {
        if (i > 0 && symbols[i] <= symbols[i - 1]) return "the code's symbols are not strictly ascending";
        if (lengths[i] < 1 || lengths[i] > lmax) return "a code length outside 1..Lmax";
        per_length[lengths[i]]++;
        kraft += 1u << (lmax - lengths[i]);
    }
    if (kraft != 1u << lmax) return "the code lengths break Kraft's equality (the code is not complete)";
    if (per_length[lmax] == 0) return "no code is Lmax bits long";
    return NULL;
}

const char *huff_check_code(const uint8_t *symbols, const uint8_t *lengths, size_t k, long lmax) {
    unsigned per_length[HUFF_MAX_LENGTH + 1];
    return check_code(symbols, lengths, k, lmax, per_length);
}

const char *huff_build_table(huff_table *t, const uint8_t *symbols, const uint8_t *lengths, size_t k, long lmax) {
    unsigned per_length[HUFF_MAX_LENGTH + 1];
    const char *why = check_code(symbols, lengths, k, lmax, per_length);
    if (why != NULL) return why;

    unsigned first[HUFF_MAX_LENGTH + 1];
    first_codes(per_length, (int)lmax, first);
    /* The table looks at 11 bits at least (the writer's limit), so that the
       decoder has 2 table widths to specialise on, not 12; a shorter code
       just repeats in it, and its entries hold more symbols. */
    unsigned window = lmax < HUFF_WINDOW ? HUFF_WINDOW : (unsigned)lmax;
    size_t size = (size_t)1 << window;
    uint8_t sym_at[1 << HUFF_MAX_LENGTH], len_at[1 << HUFF_MAX_LENGTH];
    /* Kraft's equality makes the canonical code complete: every index is
       filled exactly once; the memset only keeps a bug from reading garbage. */
    memset(len_at, 0, sizeof len_at);
    memset(sym_at, 0, sizeof sym_at);
    for (size_t i = 0; i < k; i++) {
        unsigned len = lengths[i], r = reverse_bits(first[len]++, len);
        for (size_t idx = r; idx < size; idx += (size_t)1 << len) {
            sym_at[idx] = symbols[i];
            len_at[idx] = (uint8_t)len;
        }
    }
    t->window = (int)window;
    for (size_t idx = 0; idx < size; idx++) {
        /* Whole codes, greedily, as long as each fits in the Lmax bits (the
           bits above `used` are zeros here, so a longer code is not real). */
        uint64_t e = 0;
        unsigned used = 0, n = 0;
        while (n < 4) {
            size_t rest = idx >> used;
            unsigned len = len_at[rest];
            if (len == 0 || len > window - used) break;
            e |= (uint64_t)sym_at[rest] << (8 * n);
            n++;
            used += len;
        }
        t->entry[idx] = used | e << 8 | (uint64_t)len_at[idx] << 40 | (uint64_t)n << 56;
    }
    return NULL;
}

const char *huff_plane_start(huff_plane *p, const huff_table *t, const uint8_t *const *streams, const size_t *lens,
                             int nstreams, size_t n) {
    if (nstreams < 1 || nstreams > HUFF_MAX_STREAMS) return "a Huffman plane has 1 to 8 streams";
    size_t q = n / (size_t)nstreams + (n % (size_t)nstreams != 0);
    if ((size_t)(nstreams - 1) * q >= n) return "the stream count leaves a stream without symbols";
    p->table = t;
    p->nstreams = nstreams;
    p->q = q;
    for (int s = 0; s < nstreams; s++) {
        p->count[s] = s + 1 < nstreams ? q : n - (size_t)s * q;
        p->stream[s] = (huff_reader){streams[s], lens[s], 0};
    }
    return NULL;
}

/* The stream's next bits, at least 57 of them: one unaligned load while 8
   bytes remain from the next bit's byte, else the bytes left copied into a
   zeroed word (nothing is read past the stream, which reads as zeros). */
static inline uint64_t peek(const huff_reader *r) {
    size_t at = r->bit >> 3; /* at most a few bytes past len: no wrap */
    uint64_t v = 0;
    if (at + 8 <= r->len) v = load64(r->data + at);
    else if (at < r->len) memcpy(&v, r->data + at, r->len - at);
    return v >> (r->bit & 7);
}

/* One stream's last symbols of a block, alone: whole entries (4 bytes
   stored, `count` kept) while 4 or more are wanted, then one at a time. */
static void finish_stream(huff_reader *r, const uint64_t *table, uint64_t mask, uint8_t *dst, size_t want) {
    size_t at = 0;
    while (at < want) {
        uint64_t e = table[peek(r) & mask];
        if (want - at >= 4) {
            store32(dst + at, (uint32_t)(e >> 8));
            at += e >> 56;
            r->bit += e & 0xff;
        } else {
            dst[at++] = (uint8_t)(e >> 8);
            r->bit += (e >> 40) & 0xff;
        }
    }
}

/* S constant in each call (the switch below), so that after unrolling each
   stream's state (bit address, output pointer) is two registers.
   A round is one load of 8 bytes and 4 lookups (at most 48 <= 57 bits) per
   stream; `rounds` is computed so that no round reads past a stream's end
   nor writes past its block (16 symbols a round at most, the last 4-byte
   store included), so the rounds have no branch but the loop's own. */
static inline __attribute__((always_inline)) void decode_streams(huff_reader *r, const int S, const unsigned W,
                                                                   const uint64_t *table, const size_t *want,
                                                                   const size_t *room, uint8_t *const *dst,
                                                                   size_t *got) {
    const uint64_t mask = ((uint64_t)1 << W) - 1;
    /* A stream's bit address: its byte address times 8 plus the bit, one
       register (a 64-bit host's addresses are under 2^57: no wrap; a
       32-bit host's fit 35 bits). */
    uint64_t at[HUFF_MAX_STREAMS];
    uint8_t *d[HUFF_MAX_STREAMS];
    for (int s = 0; s < S; s++) {
        at[s] = (uint64_t)(uintptr_t)r[s].data * 8 + r[s].bit;
        d[s] = dst[s];
    }
    const size_t round_bits = 4 * (size_t)W;
    for (;;) {
        size_t rounds = SIZE_MAX;
        int wanting = 0;
        for (int s = 0; s < S; s++) {
            wanting |= (size_t)(d[s] - dst[s]) < want[s];
            size_t by_symbols = (room[s] - (size_t)(d[s] - dst[s])) / 16;
            size_t bit = (size_t)(at[s] - (uint64_t)(uintptr_t)r[s].data * 8);
            size_t last = r[s].len >= 8 ? 8 * (r[s].len - 8) : 0;
            size_t by_bytes = r[s].len < 8 || bit > last ? 0 : (last - bit) / round_bits + 1;
            size_t n = by_symbols < by_bytes ? by_symbols : by_bytes;
            rounds = n < rounds ? n : rounds;
        }
        if (rounds == 0 || !wanting) break;
        do {
#pragma GCC unroll 8 /* gcc keeps S = 8's state in memory otherwise */
            for (int s = 0; s < S; s++) {
                uint64_t buf = load64((const uint8_t *)(uintptr_t)(at[s] >> 3)) >> (at[s] & 7), e, sum = 0;
#define TAKE                                                                                                           \
    e = table[buf & mask];                                                                                             \
    store32(d[s], (uint32_t)(e >> 8));                                                                                 \
    d[s] += e >> 56;                                                                                                   \
    buf >>= e & 63;                                                                                                    \
    sum += e;
                TAKE TAKE TAKE TAKE
#undef TAKE
                at[s] += sum & 0xff;
            }
        } while (--rounds);
    }
    for (int s = 0; s < S; s++) {
        r[s].bit = (size_t)(at[s] - (uint64_t)(uintptr_t)r[s].data * 8);
        size_t done = (size_t)(d[s] - dst[s]);
        if (done < want[s]) finish_stream(&r[s], table, mask, d[s], want[s] - done);
        got[s] = done < want[s] ? want[s] : done;
    }
}

#define DECODE(S)                                                                                                      \
    case S:                                                                                                            \
        if (p->table->window == HUFF_WINDOW) decode_streams(p->stream, S, HUFF_WINDOW, table, want, room, dst, got);             \
        else decode_streams(p->stream, S, HUFF_MAX_LENGTH, table, want, room, dst, got);                                          \
        break;

/* S and the table's width constant in each decode_streams (mask and all). */
void huff_decode(huff_plane *p, const size_t *want, const size_t *room, uint8_t *const *dst, size_t *got) {
    const uint64_t *table = p->table->entry;
    switch (p->nstreams) {
        DECODE(1) DECODE(2) DECODE(3) DECODE(4) DECODE(5) DECODE(6) DECODE(7) DECODE(8)
    }
}

int huff_plane_finish(const huff_plane *p, char *msg, size_t size) {
    for (int s = 0; s < p->nstreams; s++) {
        const huff_reader *r = &p->stream[s];
        uint64_t used = r->bit, have = (uint64_t)r->len * 8;
        if (used > have) {
            snprintf(msg, size, "Huffman stream %d ends early: its %zu symbols need more than its %zu bytes", s,
                     p->count[s], r->len);
            return -1;
        }
        if (have - used >= 8) {
            snprintf(msg, size, "Huffman stream %d ends late: %llu bits are left after its %zu symbols", s,
                     (unsigned long long)(have - used), p->count[s]);
            return -1;
        }
        /* The pad bits: the last byte's bits from `used` on. */
        if (have > used && r->data[r->len - 1] >> (used & 7)) {
            snprintf(msg, size, "Huffman stream %d ends late: non-zero pad bits after its last symbol", s);
            return -1;
        }
    }
    return 0;
}

int huff_parse_stored(const uint8_t *b, size_t len, size_t m, huff_code *c, char *msg, size_t size) {
    if (len < 3) {
        snprintf(msg, size, "%zu bytes, shorter than its 3-byte header", len);
        return -1;
    }
    int s = b[0];
    size_t k = (size_t)b[2] + 1;
    c->lmax = b[1];
    c->nstreams = s;
    const char *why = s < 1 || s > HUFF_MAX_STREAMS     ? "its stream count is not 1..8"
                      : c->lmax < 1 || c->lmax > 12 ? "its Lmax is not 1..12"
                      : k < 2                         ? "it codes fewer than 2 symbols"
                                                      : NULL;
    if (why != NULL) {
        snprintf(msg, size, "%s", why);
        return -1;
    }
    size_t table_end = 3 + k + (k + 1) / 2, body = table_end + 4 * (size_t)(s - 1);
    if (len < body) {
        snprintf(msg, size, "%zu bytes, shorter than its table of %zu symbols and %d streams", len, k, s);
        return -1;
    }
    c->k = k;
    c->symbols = b + 3;
    for (size_t i = 0; i < k; i++) c->unpacked[i] = (uint8_t)(b[3 + k + i / 2] >> (4 * (i % 2)) & 0x0f);
    c->lengths = c->unpacked;
    if (k % 2 && b[table_end - 1] >> 4) {
        snprintf(msg, size, "the pad nibble after its code lengths is not 0");
        return -1;
    }
    /* The code itself: huff_build_table's refusals, before any decoding. */
    if ((why = huff_check_code(c->symbols, c->lengths, k, c->lmax)) != NULL) {
        snprintf(msg, size, "%s", why);
        return -1;
    }
    size_t q = m / (size_t)s + (m % (size_t)s != 0);
    if ((size_t)(s - 1) * q >= m) {
        snprintf(msg, size, "%d streams leave one empty for %zu symbols", s, m);
        return -1;
    }
    size_t at = body;
    for (int i = 0; i < s; i++) {
        size_t slen = i + 1 < s ? load32(b + table_end + 4 * (size_t)i) : len - at;
        if (slen > len - at) {
            snprintf(msg, size, "its stream lengths overrun its %zu bytes", len);
            return -1;
        }
        c->streams[i] = b + at;
        c->stream_len[i] = slen;
        at += slen;
    }
    return 0;
}


const char *huff_check_lengths(const uint8_t lengths[256], unsigned *longest) {
    unsigned lmax = 0, k = 0;
    for (int i = 0; i < 256; i++) {
        if (lengths[i] > HUFF_MAX_LENGTH) return "a code length above 12";
        if (lengths[i] > lmax) lmax = lengths[i];
        k += lengths[i] != 0;
    }
    if (k < 2) return "a Huffman code needs at least 2 symbols";
    uint32_t kraft = 0;
    for (int i = 0; i < 256; i++)
        if (lengths[i]) kraft += 1u << (lmax - lengths[i]);
    if (kraft != 1u << lmax) return "the code lengths break Kraft's equality (the code is not complete)";
    *longest = lmax;
    return NULL;
}

void huff_code_table(const uint8_t lengths[256], uint32_t codes[256]) {
    unsigned per_length[HUFF_MAX_LENGTH + 1] = {0}, first[HUFF_MAX_LENGTH + 1];
    for (int i = 0; i < 256; i++) per_length[lengths[i]]++;
    per_length[0] = 0;
    first_codes(per_length, HUFF_MAX_LENGTH, first);
    for (int i = 0; i < 256; i++)
        codes[i] = lengths[i] ? reverse_bits(first[lengths[i]]++, lengths[i]) | (uint32_t)lengths[i] << 16
                              : HUFF_NO_CODE;
}

/* One symbol's code ORed in at the buffer's bit count (a symbol without a
   code adds no bits, and its flag to *flags). */
#define PUT(c)                                                                                                         \
    do {                                                                                                               \
        uint32_t c_ = (c);                                                                                             \
        flags |= c_;                                                                                                   \
        buf |= (uint64_t)(c_ & 0xffff) << cnt;                                                                         \
        cnt += (c_ >> 16) & 0xff;                                                                                      \
    } while (0)

size_t huff_encode_stream(const uint8_t *src, size_t n, const uint32_t *codes, uint8_t *out, uint32_t *seen) {
    uint8_t *o = out;
    uint64_t buf = 0;
    unsigned cnt = 0;
    uint32_t flags = 0;
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
        PUT(codes[src[i]]);
        PUT(codes[src[i + 1]]);
        PUT(codes[src[i + 2]]);
        PUT(codes[src[i + 3]]);
        store64(o, buf);
        o += cnt >> 3;
        buf >>= cnt & ~7u;
        cnt &= 7;
    }
    for (; i < n; i++) PUT(codes[src[i]]);
    /* The last bits (under 32 of them), and zero pad bits to the byte. */
    store64(o, buf);
    *seen |= flags;
    return (size_t)(o - out) + (cnt + 7) / 8;
}
