#ifndef GPT2__PART_MODEL_TOKENIZER_H
#define GPT2__PART_MODEL_TOKENIZER_H
#include "../common.h"
#include "unicode_tables.h"

/* Tokenizers: GPT-2's byte-level BPE (exactly OpenAI's encoder.py / tiktoken "gpt2") and nanoGPT's
   character vocabulary (meta.pkl). See docs/TOKENIZER.md.

   BPE encoding is encoder.py's algorithm:
     1. split the text with the pattern
          's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
        (matched by hand below, with the regex's exact leftmost-alternative semantics);
     2. map each word's UTF-8 bytes to their single-byte tokens;
     3. repeatedly take the adjacent pair with the lowest merge rank and merge all its
        occurrences left to right, until no pair has a rank.
   Text that is not valid UTF-8 is still encoded: each byte that does not start a valid
   sequence counts as one character of class OTHER (punctuation-like), so any bytes round-trip. */

/* ---- UTF-8 ------------------------------------------------------------------------------ */
#define GPT2__INVALID_CP 0xFFFFFFFFu

/* Decodes the code point at s[0..n) (n >= 1) into *cp and returns its length in bytes. A byte that
   does not begin a valid, complete, shortest-form sequence (no surrogates, <= U+10FFFF) gives
   GPT2__INVALID_CP and length 1. Never reads past s[n-1]. */
static inline size_t gpt2__utf8_decode(const unsigned char* s, size_t n, uint32_t* cp) {
    unsigned b0 = s[0];
    if (b0 < 0x80) {
        *cp = b0;
        return 1;
    }
    size_t len;
    unsigned lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
    uint32_t c;
    if (b0 >= 0xC2 && b0 <= 0xDF) {
        len = 2;
        c = b0 & 0x1F;
    } else if (b0 >= 0xE0 && b0 <= 0xEF) {
        len = 3;
        c = b0 & 0x0F;
        if (b0 == 0xE0) lo = 0xA0;      /* overlong */
        else if (b0 == 0xED) hi = 0x9F; /* surrogates */
    } else if (b0 >= 0xF0 && b0 <= 0xF4) {
        len = 4;
        c = b0 & 0x07;
        if (b0 == 0xF0) lo = 0x90;      /* overlong */
        else if (b0 == 0xF4) hi = 0x8F; /* > U+10FFFF */
    } else {
        *cp = GPT2__INVALID_CP;
        return 1;
    }
    if (n < len || s[1] < lo || s[1] > hi) {
        *cp = GPT2__INVALID_CP;
        return 1;
    }
    c = (c << 6) | (s[1] & 0x3F);
    for (size_t k = 2; k < len; k++) {
        if ((s[k] & 0xC0) != 0x80) {
            *cp = GPT2__INVALID_CP;
            return 1;
        }
        c = (c << 6) | (s[k] & 0x3F);
    }
    *cp = c;
    return len;
}

/* Class of a code point for the pre-tokenizer (GPT2__CC_*); invalid bytes are OTHER. */
static inline int gpt2__char_class(uint32_t cp) {
    if (cp < 128) return gpt2__ascii_class[cp];
    if (cp > 0x10FFFF) return GPT2__CC_OTHER;
    const uint32_t* end = gpt2__unicode_ranges + sizeof gpt2__unicode_ranges / sizeof gpt2__unicode_ranges[0];
    const uint32_t* r = std::upper_bound(gpt2__unicode_ranges, end, (cp << 2) | 3u);
    return (int)(r[-1] & 3u);
}

/* Streaming decoder: bytes in, complete UTF-8 characters out. */
struct gpt2__utf8_stream {
    unsigned char held[4] = {0, 0, 0, 0};
    size_t n_held = 0;
};

/* Length of the incomplete-but-valid character at the end of b[0..m) (0..3), i.e. the bytes that
   a later byte could still complete. */
static inline size_t gpt2__utf8_incomplete_tail(const unsigned char* b, size_t m) {
    for (size_t back = 1; back <= 3 && back <= m; back++) {
        unsigned c = b[m - back];
        if ((c & 0xC0) == 0x80) continue; /* continuation: keep looking for the lead byte */
        size_t need = (c >= 0xC2 && c <= 0xDF) ? 2 : (c >= 0xE0 && c <= 0xEF) ? 3 : (c >= 0xF0 && c <= 0xF4) ? 4 : 0;
        if (need <= back) return 0; /* ASCII, invalid lead, or a complete/overlong sequence */
        if (back >= 2) {
            unsigned s1 = b[m - back + 1];
            unsigned lo = c == 0xE0 ? 0xA0 : c == 0xF0 ? 0x90 : 0x80;
            unsigned hi = c == 0xED ? 0x9F : c == 0xF4 ? 0x8F : 0xBF;
            if (s1 < lo || s1 > hi) return 0; /* can never become valid: pass it through */
        }
        return back; /* the bytes after the lead are continuations (checked by the loop) */
    }
    return 0;
}

/* Appends the complete UTF-8 prefix of (held bytes + bytes) to *out and holds an incomplete valid
   tail (at most 3 bytes). Invalid sequences are passed through as they are. */
static inline void gpt2__utf8_stream_push(gpt2__utf8_stream* s, std::string_view bytes, gpt2__string* out) {
    size_t start = out->size();
    out->append(reinterpret_cast<const char*>(s->held), s->n_held);
    out->append(bytes.data(), bytes.size());
    const unsigned char* b = reinterpret_cast<const unsigned char*>(out->data()) + start;
    size_t m = out->size() - start;
    size_t tail = gpt2__utf8_incomplete_tail(b, m);
    std::memcpy(s->held, b + m - tail, tail);
    s->n_held = tail;
    out->resize(out->size() - tail);
}

/* End of the stream: emits whatever is held. */
static inline void gpt2__utf8_stream_flush(gpt2__utf8_stream* s, gpt2__string* out) {
    out->append(reinterpret_cast<const char*>(s->held), s->n_held);
    s->n_held = 0;
}

/* ---- Pre-tokenizer ---------------------------------------------------------------------- */
/* End of the pre-token (regex match) that starts at s[i] (i < n). */
static inline size_t gpt2__pretoken_end(const unsigned char* s, size_t n, size_t i) {
    /* 's|'t|'re|'ve|'m|'ll|'d  (case-sensitive) */
    if (s[i] == '\'' && i + 1 < n) {
        unsigned char a = s[i + 1];
        if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
        if (i + 2 < n) {
            unsigned char b = s[i + 2];
            if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return i + 3;
        }
    }
    uint32_t cp;
    size_t j = i + gpt2__utf8_decode(s + i, n - i, &cp);
    int cls = gpt2__char_class(cp);
    if (cp == ' ' && j < n) {
        /* ' ?\p{L}+' , ' ?\p{N}+' , ' ?[^\s\p{L}\p{N}]+' with the optional space */
        uint32_t cp2;
        size_t j2 = j + gpt2__utf8_decode(s + j, n - j, &cp2);
        int cls2 = gpt2__char_class(cp2);
        if (cls2 != GPT2__CC_SPACE) {
            cls = cls2;
            j = j2;
        }
    }
    if (cls != GPT2__CC_SPACE) {
        while (j < n) {
            size_t l;
            if (s[j] < 128) {
                if (gpt2__ascii_class[s[j]] != cls) break;
                l = 1;
            } else {
                l = gpt2__utf8_decode(s + j, n - j, &cp);
                if (gpt2__char_class(cp) != cls) break;
            }
            j += l;
        }
        return j;
    }
    /* A run of whitespace. '\s+(?!\S)': at the end of the text, all of it; before a non-space,
       all but its last character (which then joins the next word, e.g. " world"), unless that
       leaves nothing, in which case '\s+' takes the single character. */
    size_t last = i;
    while (j < n) {
        size_t l = gpt2__utf8_decode(s + j, n - j, &cp);
        if (gpt2__char_class(cp) != GPT2__CC_SPACE) break;
        last = j;
        j += l;
    }
    if (j == n || last == i) return j;
    return last;
}

/* ---- Tokenizer -------------------------------------------------------------------------- */
/* One slot of the merge table: open addressing keyed by the pair of token ids. */
struct gpt2__merge_slot {
    uint64_t key; /* (left << 32) | right, or GPT2__EMPTY_PAIR */
    int32_t rank;
    int32_t result;
};
#define GPT2__EMPTY_PAIR 0xFFFFFFFFFFFFFFFFull

static inline uint64_t gpt2__mix64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return x;
}

/* Word -> ids cache, shared by every thread encoding with one tokenizer. Sharded by hash, each
   shard behind its own mutex; a full shard is simply emptied (words repeat, so it refills with
   the common ones). Only short words are cached. */
#define GPT2__CACHE_SHARDS 16
#define GPT2__CACHE_SLOTS 8192 /* per shard; at most half are used */
#define GPT2__CACHE_MAX_WORD 64

struct gpt2__cache_entry {
    uint64_t hash;
    uint32_t key_offset, ids_offset;
    uint16_t key_len, n_ids;
};

struct gpt2__cache_shard {
    std::mutex mutex;
    gpt2__vector<uint32_t> slots; /* entry index + 1, or 0 */
    gpt2__vector<gpt2__cache_entry> entries;
    gpt2__string keys;
    gpt2__vector<int32_t> ids;
};

struct gpt2__bpe_cache {
    gpt2__cache_shard shards[GPT2__CACHE_SHARDS];
};

static inline uint64_t gpt2__hash_bytes(const unsigned char* s, size_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ull ^ n;
    while (n >= 8) {
        uint64_t w;
        std::memcpy(&w, s, 8);
        h = gpt2__mix64(h ^ w) * 0x9E3779B97F4A7C15ull;
        s += 8;
        n -= 8;
    }
    uint64_t w = 0;
    std::memcpy(&w, s, n);
    return gpt2__mix64(h ^ w ^ ((uint64_t)n << 56)); /* uint64_t: size_t is 32 bits on wasm32 */
}

struct gpt2__tokenizer {
    gpt2_tokenizer_kind kind = GPT2_TOKENIZER_NONE;
    int32_t eos = -1;
    gpt2__string bytes;             /* every token's bytes, concatenated */
    gpt2__vector<uint32_t> offsets; /* token i is bytes[offsets[i], offsets[i + 1]) */
    /* char vocabulary */
    int32_t ascii_id[128];
    gpt2__vector<uint64_t> char_ids; /* (code point << 32) | id for code points >= 128, sorted */
    /* BPE */
    int32_t byte_id[256];                 /* token of each single byte */
    gpt2__vector<gpt2__merge_slot> merges; /* power-of-two size */
    gpt2__bpe_cache* cache = nullptr;
    bool use_cache = true; /* the benchmark turns it off to measure what it brings */

    gpt2__tokenizer() { reset_tables(); }
    ~gpt2__tokenizer();
    gpt2__tokenizer(const gpt2__tokenizer&) = delete;
    gpt2__tokenizer& operator=(const gpt2__tokenizer&) = delete;
    gpt2__tokenizer(gpt2__tokenizer&& o) noexcept { *this = std::move(o); }
    gpt2__tokenizer& operator=(gpt2__tokenizer&& o) noexcept;
    void reset_tables() {
        for (int32_t& v : ascii_id) v = -1;
        for (int32_t& v : byte_id) v = -1;
    }
};

static inline void gpt2__tokenizer_free(gpt2__tokenizer* tok) {
    if (tok->cache) {
        tok->cache->~gpt2__bpe_cache();
        GPT2_FREE(tok->cache);
    }
    tok->cache = nullptr;
    tok->kind = GPT2_TOKENIZER_NONE;
    tok->eos = -1;
    tok->bytes = gpt2__string();
    tok->offsets = gpt2__vector<uint32_t>();
    tok->char_ids = gpt2__vector<uint64_t>();
    tok->merges = gpt2__vector<gpt2__merge_slot>();
    tok->reset_tables();
}

inline gpt2__tokenizer::~gpt2__tokenizer() { gpt2__tokenizer_free(this); }

inline gpt2__tokenizer& gpt2__tokenizer::operator=(gpt2__tokenizer&& o) noexcept {
    if (this != &o) {
        gpt2__tokenizer_free(this);
        kind = o.kind;
        eos = o.eos;
        bytes = std::move(o.bytes);
        offsets = std::move(o.offsets);
        std::memcpy(ascii_id, o.ascii_id, sizeof ascii_id);
        char_ids = std::move(o.char_ids);
        std::memcpy(byte_id, o.byte_id, sizeof byte_id);
        merges = std::move(o.merges);
        cache = o.cache;
        use_cache = o.use_cache;
        o.cache = nullptr;
        gpt2__tokenizer_free(&o);
    }
    return *this;
}

static inline size_t gpt2__tokenizer_size(const gpt2__tokenizer* tok) {
    return tok->offsets.empty() ? 0 : tok->offsets.size() - 1;
}

/* Exact bytes of token `id` (0 <= id < size). */
static inline std::string_view gpt2__tokenizer_token_bytes(const gpt2__tokenizer* tok, int32_t id) {
    GPT2_ASSERT(id >= 0 && (size_t)id < gpt2__tokenizer_size(tok));
    uint32_t a = tok->offsets[(size_t)id], b = tok->offsets[(size_t)id + 1];
    return std::string_view(tok->bytes.data() + a, b - a);
}

/* A printable, shortened rendering of an init entry for error messages. */
#define GPT2__SHOW(sv) (int)((sv).size() < 40 ? (sv).size() : 40), (sv).data()

/* ---- Character vocabulary --------------------------------------------------------------- */
static inline gpt2_result gpt2__tokenizer_init_char(gpt2__tokenizer* tok, const std::string_view* chars, size_t n,
                                             gpt2_error* err) {
    gpt2__tokenizer_free(tok);
    if (n == 0 || n > (size_t)INT32_MAX) {
        return gpt2__fail(err, GPT2_ERROR_BAD_FILE, "character vocabulary: %zu entries (expected 1 to %d)", n,
                          INT32_MAX);
    }
    gpt2__tokenizer t;
    t.kind = GPT2_TOKENIZER_CHAR;
    t.offsets.reserve(n + 1);
    t.offsets.push_back(0);
    for (size_t i = 0; i < n; i++) {
        std::string_view c = chars[i];
        uint32_t cp = GPT2__INVALID_CP;
        size_t len = c.empty() ? 0 : gpt2__utf8_decode(reinterpret_cast<const unsigned char*>(c.data()), c.size(), &cp);
        if (c.empty() || cp == GPT2__INVALID_CP || len != c.size()) {
            return gpt2__fail(err, GPT2_ERROR_BAD_FILE,
                              "character vocabulary entry %zu (\"%.*s\", %zu bytes) is not one UTF-8 character", i,
                              GPT2__SHOW(c), c.size());
        }
        if (cp < 128) {
            if (t.ascii_id[cp] >= 0) {
                return gpt2__fail(err, GPT2_ERROR_BAD_FILE,
                                  "character vocabulary entry %zu (U+%04X) duplicates entry %d", i, (unsigned)cp,
                                  (int)t.ascii_id[cp]);
            }
            t.ascii_id[cp] = (int32_t)i;
        } else {
            t.char_ids.push_back(((uint64_t)cp << 32) | (uint64_t)i);
        }
        t.bytes.append(c.data(), c.size());
        t.offsets.push_back((uint32_t)t.bytes.size());
    }
    std::sort(t.char_ids.begin(), t.char_ids.end());
    for (size_t k = 1; k < t.char_ids.size(); k++) {
        if ((t.char_ids[k] >> 32) == (t.char_ids[k - 1] >> 32)) {
            return gpt2__fail(err, GPT2_ERROR_BAD_FILE, "character vocabulary entry %u (U+%04X) duplicates entry %u",
                              (unsigned)(uint32_t)t.char_ids[k], (unsigned)(t.char_ids[k] >> 32),
                              (unsigned)(uint32_t)t.char_ids[k - 1]);
        }
    }
    *tok = std::move(t);
    return gpt2__ok(err);
}

static inline gpt2_result gpt2__encode_char(const gpt2__tokenizer* tok, const unsigned char* s, size_t n,
                                     gpt2__vector<int32_t>* out, gpt2_error* err) {
    size_t i = 0;
    while (i < n) {
        uint32_t cp;
        size_t len = gpt2__utf8_decode(s + i, n - i, &cp);
        int32_t id = -1;
        if (cp == GPT2__INVALID_CP) {
            return gpt2__fail(err, GPT2_ERROR_BAD_TEXT, "invalid UTF-8 byte 0x%02X at byte offset %zu", (unsigned)s[i],
                              i);
        } else if (cp < 128) {
            id = tok->ascii_id[cp];
        } else {
            auto it = std::lower_bound(tok->char_ids.begin(), tok->char_ids.end(), (uint64_t)cp << 32);
            if (it != tok->char_ids.end() && (*it >> 32) == cp) id = (int32_t)(uint32_t)*it;
        }
        if (id < 0) {
            return gpt2__fail(err, GPT2_ERROR_BAD_TEXT,
                              "character U+%04X (\"%.*s\") at byte offset %zu is not in the model's vocabulary",
                              (unsigned)cp, (int)len, reinterpret_cast<const char*>(s + i), i);
        }
        out->push_back(id);
        i += len;
    }
    return GPT2_OK;
}

/* ---- Byte-level BPE --------------------------------------------------------------------- */
/* encoder.py's bytes_to_unicode(): byte b is written as code point byte_char[b]. */
static inline void gpt2__bytes_to_unicode(uint32_t byte_char[256]) {
    uint32_t extra = 0;
    for (uint32_t b = 0; b < 256; b++) {
        bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        byte_char[b] = printable ? b : 256 + extra++;
    }
}

static inline const gpt2__merge_slot* gpt2__find_merge(const gpt2__tokenizer* tok, int32_t a, int32_t b) {
    uint64_t key = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
    size_t mask = tok->merges.size() - 1;
    for (size_t k = (size_t)gpt2__mix64(key) & mask;; k = (k + 1) & mask) {
        const gpt2__merge_slot* slot = &tok->merges[k];
        if (slot->key == key) return slot;
        if (slot->key == GPT2__EMPTY_PAIR) return nullptr;
    }
}

static inline gpt2_result gpt2__tokenizer_init_bpe(gpt2__tokenizer* tok, const std::string_view* tokens, size_t n_tokens,
                                            const std::string_view* merges, size_t n_merges, int32_t eos,
                                            gpt2_error* err) {
    gpt2__tokenizer_free(tok);
    if (n_tokens < 256 || n_tokens > (size_t)INT32_MAX || n_merges > (size_t)INT32_MAX) {
        return gpt2__fail(err, GPT2_ERROR_BAD_FILE, "BPE vocabulary: %zu tokens and %zu merges (expected 256 or more tokens)",
                          n_tokens, n_merges);
    }
    if (eos < -1 || (eos >= 0 && (size_t)eos >= n_tokens)) {
        return gpt2__fail(err, GPT2_ERROR_BAD_FILE, "BPE vocabulary: end-of-text token %d outside 0..%zu", (int)eos,
                          n_tokens - 1);
    }
    uint32_t byte_char[256];
    gpt2__bytes_to_unicode(byte_char);
    int16_t char_byte[324]; /* inverse of byte_char; the alphabet ends at U+0143 */
    for (int16_t& v : char_byte) v = -1;
    for (int b = 0; b < 256; b++) char_byte[byte_char[b]] = (int16_t)b;

    gpt2__tokenizer t;
    t.kind = GPT2_TOKENIZER_BPE;
    t.eos = eos;
    t.offsets.reserve(n_tokens + 1);
    t.offsets.push_back(0);
    using map_alloc = gpt2__allocator<std::pair<const std::string_view, int32_t>>;
    std::unordered_map<std::string_view, int32_t, std::hash<std::string_view>, std::equal_to<std::string_view>,
                       map_alloc>
        ids;
    ids.reserve(n_tokens);
    for (size_t i = 0; i < n_tokens; i++) {
        std::string_view s = tokens[i];
        const unsigned char* u = reinterpret_cast<const unsigned char*>(s.data());
        if (s.empty()) return gpt2__fail(err, GPT2_ERROR_BAD_FILE, "BPE token %zu is empty", i);
        size_t start = t.bytes.size();
        for (size_t k = 0; k < s.size();) {
            uint32_t cp;
            k += gpt2__utf8_decode(u + k, s.size() - k, &cp);
            if (cp >= 324 || char_byte[cp] < 0) {
                return gpt2__fail(err, GPT2_ERROR_BAD_FILE,
                                  "BPE token %zu (\"%.*s\") has a character outside GPT-2's byte alphabet", i,
                                  GPT2__SHOW(s));
            }
            t.bytes.push_back((char)char_byte[cp]);
        }
        if (t.bytes.size() - start == 1) {
            unsigned char b = (unsigned char)t.bytes[start];
            if (t.byte_id[b] < 0) t.byte_id[b] = (int32_t)i;
        }
        t.offsets.push_back((uint32_t)t.bytes.size());
        auto ins = ids.emplace(s, (int32_t)i);
        if (!ins.second) {
            return gpt2__fail(err, GPT2_ERROR_BAD_FILE, "BPE token %zu (\"%.*s\") duplicates token %d", i,
                              GPT2__SHOW(s), (int)ins.first->second);
        }
    }
    for (int b = 0; b < 256; b++) {
        if (t.byte_id[b] < 0) {
            return gpt2__fail(err, GPT2_ERROR_BAD_FILE, "BPE vocabulary has no token for the single byte 0x%02X", b);
        }
    }
    size_t cap = 16;
    while (cap < 2 * n_merges) cap *= 2;
    t.merges.assign(cap, gpt2__merge_slot{GPT2__EMPTY_PAIR, 0, 0});
    gpt2__string joined;
    for (size_t r = 0; r < n_merges; r++) {
        std::string_view m = merges[r];
        size_t sp = m.find(' ');
        if (sp == std::string_view::npos || sp == 0 || sp + 1 == m.size() ||
            m.find(' ', sp + 1) != std::string_view::npos) {
            return gpt2__fail(err, GPT2_ERROR_BAD_FILE, "BPE merge %zu (\"%.*s\") is not two tokens separated by a space",
                              r, GPT2__SHOW(m));
        }
        std::string_view a = m.substr(0, sp), b = m.substr(sp + 1);
        joined.assign(a.data(), a.size());
        joined.append(b.data(), b.size());
        auto ia = ids.find(a), ib = ids.find(b), iab = ids.find(std::string_view(joined.data(), joined.size()));
        if (ia == ids.end() || ib == ids.end()) {
            return gpt2__fail(err, GPT2_ERROR_BAD_FILE, "BPE merge %zu (\"%.*s\"): \"%.*s\" is not a token", r,
                              GPT2__SHOW(m), GPT2__SHOW(ia == ids.end() ? a : b));
        }
        if (iab == ids.end()) {
            return gpt2__fail(err, GPT2_ERROR_BAD_FILE, "BPE merge %zu (\"%.*s\"): the result is not a token", r,
                              GPT2__SHOW(m));
        }
        uint64_t key = ((uint64_t)(uint32_t)ia->second << 32) | (uint32_t)ib->second;
        size_t mask = cap - 1;
        size_t k = (size_t)gpt2__mix64(key) & mask;
        while (t.merges[k].key != GPT2__EMPTY_PAIR && t.merges[k].key != key) k = (k + 1) & mask;
        if (t.merges[k].key == key) {
            return gpt2__fail(err, GPT2_ERROR_BAD_FILE, "BPE merge %zu (\"%.*s\") duplicates merge %d", r, GPT2__SHOW(m),
                              (int)t.merges[k].rank);
        }
        t.merges[k] = gpt2__merge_slot{key, (int32_t)r, iab->second};
    }
    void* mem = GPT2_MALLOC(sizeof(gpt2__bpe_cache));
    if (!mem) return gpt2__fail(err, GPT2_ERROR_OUT_OF_MEMORY, "out of memory for the BPE cache");
    t.cache = new (mem) gpt2__bpe_cache();
    for (gpt2__cache_shard& shard : t.cache->shards) shard.slots.assign(GPT2__CACHE_SLOTS, 0);
    *tok = std::move(t);
    return gpt2__ok(err);
}

/* Scratch memory of one encode call, reused for every word. */
struct gpt2__bpe_scratch {
    gpt2__vector<int32_t> sym;  /* token of each symbol, by original byte position */
    gpt2__vector<int32_t> next; /* linked list of live symbols; -1 ends it */
    gpt2__vector<int32_t> prev;
    gpt2__vector<uint64_t> heap;  /* (rank << 32) | left position; min-heap */
    gpt2__vector<uint32_t> batch; /* positions of the pair being merged */
};

static inline bool gpt2__cache_get(const gpt2__tokenizer* tok, const unsigned char* w, size_t n, uint64_t h,
                            gpt2__vector<int32_t>* out) {
    gpt2__cache_shard& shard = tok->cache->shards[h % GPT2__CACHE_SHARDS];
    std::lock_guard<std::mutex> lock(shard.mutex);
    const size_t mask = GPT2__CACHE_SLOTS - 1;
    for (size_t k = (size_t)(h >> 8) & mask;; k = (k + 1) & mask) {
        uint32_t e = shard.slots[k];
        if (e == 0) return false;
        const gpt2__cache_entry& entry = shard.entries[e - 1];
        if (entry.hash == h && entry.key_len == n && std::memcmp(shard.keys.data() + entry.key_offset, w, n) == 0) {
            const int32_t* ids = shard.ids.data() + entry.ids_offset;
            out->insert(out->end(), ids, ids + entry.n_ids);
            return true;
        }
    }
}

static inline void gpt2__cache_put(const gpt2__tokenizer* tok, const unsigned char* w, size_t n, uint64_t h,
                            const int32_t* ids, size_t n_ids) {
    gpt2__cache_shard& shard = tok->cache->shards[h % GPT2__CACHE_SHARDS];
    std::lock_guard<std::mutex> lock(shard.mutex);
    if (shard.entries.size() >= GPT2__CACHE_SLOTS / 2) { /* full: start over */
        std::fill(shard.slots.begin(), shard.slots.end(), 0u);
        shard.entries.clear();
        shard.keys.clear();
        shard.ids.clear();
    }
    const size_t mask = GPT2__CACHE_SLOTS - 1;
    size_t k = (size_t)(h >> 8) & mask;
    for (;; k = (k + 1) & mask) {
        uint32_t e = shard.slots[k];
        if (e == 0) break;
        const gpt2__cache_entry& entry = shard.entries[e - 1];
        if (entry.hash == h && entry.key_len == n && std::memcmp(shard.keys.data() + entry.key_offset, w, n) == 0) {
            return; /* another thread got there first */
        }
    }
    gpt2__cache_entry entry{h, (uint32_t)shard.keys.size(), (uint32_t)shard.ids.size(), (uint16_t)n, (uint16_t)n_ids};
    shard.keys.append(reinterpret_cast<const char*>(w), n);
    shard.ids.insert(shard.ids.end(), ids, ids + n_ids);
    shard.entries.push_back(entry);
    shard.slots[k] = (uint32_t)shard.entries.size();
}

/* BPE of one pre-token `w` (n >= 1 bytes): appends its ids to *out. */
static inline void gpt2__bpe_word(const gpt2__tokenizer* tok, const unsigned char* w, size_t n, gpt2__bpe_scratch* s,
                           gpt2__vector<int32_t>* out) {
    if (n == 1) {
        out->push_back(tok->byte_id[w[0]]);
        return;
    }
    bool cacheable = tok->use_cache && tok->cache && n <= GPT2__CACHE_MAX_WORD;
    uint64_t h = 0;
    if (cacheable) {
        h = gpt2__hash_bytes(w, n);
        if (gpt2__cache_get(tok, w, n, h, out)) return;
    }
    s->sym.resize(n);
    s->next.resize(n);
    s->prev.resize(n);
    s->heap.clear();
    for (size_t i = 0; i < n; i++) {
        s->sym[i] = tok->byte_id[w[i]];
        s->next[i] = i + 1 < n ? (int32_t)(i + 1) : -1;
        s->prev[i] = (int32_t)i - 1;
    }
    auto push_pair = [&](int32_t left) {
        if (left < 0) return;
        int32_t right = s->next[(size_t)left];
        if (right < 0) return;
        const gpt2__merge_slot* m = gpt2__find_merge(tok, s->sym[(size_t)left], s->sym[(size_t)right]);
        if (!m) return;
        s->heap.push_back(((uint64_t)(uint32_t)m->rank << 32) | (uint32_t)left);
        std::push_heap(s->heap.begin(), s->heap.end(), std::greater<uint64_t>());
    };
    for (size_t i = 0; i + 1 < n; i++) push_pair((int32_t)i);
    while (!s->heap.empty()) {
        /* All queued occurrences of the lowest-ranked pair, merged left to right in one pass as
           encoder.py does (pairs created by this pass wait for the next one). */
        uint32_t rank = (uint32_t)(s->heap.front() >> 32);
        s->batch.clear();
        while (!s->heap.empty() && (uint32_t)(s->heap.front() >> 32) == rank) {
            s->batch.push_back((uint32_t)s->heap.front());
            std::pop_heap(s->heap.begin(), s->heap.end(), std::greater<uint64_t>());
            s->heap.pop_back();
        }
        std::sort(s->batch.begin(), s->batch.end());
        for (uint32_t left : s->batch) {
            int32_t right = s->next[left];
            if (s->sym[left] < 0 || right < 0) continue; /* consumed or last */
            const gpt2__merge_slot* m = gpt2__find_merge(tok, s->sym[left], s->sym[(size_t)right]);
            if (!m || (uint32_t)m->rank != rank) continue; /* stale: the pair has changed */
            s->sym[left] = m->result;
            s->sym[(size_t)right] = -1;
            int32_t after = s->next[(size_t)right];
            s->next[left] = after;
            if (after >= 0) s->prev[(size_t)after] = (int32_t)left;
            push_pair(s->prev[left]);
            push_pair((int32_t)left);
        }
    }
    size_t first = out->size();
    for (int32_t i = 0; i >= 0; i = s->next[(size_t)i]) out->push_back(s->sym[(size_t)i]);
    if (cacheable) gpt2__cache_put(tok, w, n, h, out->data() + first, out->size() - first);
}

static inline void gpt2__encode_bpe_text(const gpt2__tokenizer* tok, const unsigned char* s, size_t n, gpt2__bpe_scratch* scratch,
                                  gpt2__vector<int32_t>* out) {
    for (size_t i = 0; i < n;) {
        size_t end = gpt2__pretoken_end(s, n, i);
        gpt2__bpe_word(tok, s + i, end - i, scratch, out);
        i = end;
    }
}

/* Appends the ids of text[0..len) to *out (nothing on failure). Thread-safe on a const tokenizer.
   With allow_special, "<|endoftext|>" becomes the end-of-text token (BPE with an eos only). */
static inline gpt2_result gpt2__tokenizer_encode(const gpt2__tokenizer* tok, const char* text, size_t len, bool allow_special,
                                          gpt2__vector<int32_t>* out, gpt2_error* err) {
    const unsigned char* s = reinterpret_cast<const unsigned char*>(text);
    if (len > 0 && !text) return gpt2__fail(err, GPT2_ERROR_INVALID_ARGUMENT, "text is NULL");
    size_t start = out->size();
    if (tok->kind == GPT2_TOKENIZER_CHAR) {
        gpt2_result r = gpt2__encode_char(tok, s, len, out, err);
        if (r != GPT2_OK) {
            out->resize(start);
            return r;
        }
        return gpt2__ok(err);
    }
    if (tok->kind != GPT2_TOKENIZER_BPE) {
        return gpt2__fail(err, GPT2_ERROR_NO_VOCABULARY, "the model has no tokenizer; give token ids");
    }
    gpt2__bpe_scratch scratch;
    if (allow_special && tok->eos >= 0) {
        static const char special[] = "<|endoftext|>";
        std::string_view all(text, len);
        size_t i = 0;
        for (;;) {
            size_t at = all.find(special, i, sizeof special - 1);
            size_t seg_end = at == std::string_view::npos ? len : at;
            gpt2__encode_bpe_text(tok, s + i, seg_end - i, &scratch, out);
            if (at == std::string_view::npos) break;
            out->push_back(tok->eos);
            i = at + sizeof special - 1;
        }
    } else {
        gpt2__encode_bpe_text(tok, s, len, &scratch, out);
    }
    return gpt2__ok(err);
}

#endif /* GPT2__PART_MODEL_TOKENIZER_H */
