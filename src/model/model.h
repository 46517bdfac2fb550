#ifndef GPT2__PART_MODEL_MODEL_H
#define GPT2__PART_MODEL_MODEL_H
#include "gguf.h"
#include "token_trie.h"

/* The model: hyper-parameters, weights bound to the tensors of a GGUF file, and the vocabulary.
   Immutable once loaded, so any number of sessions and threads may share it. */

#if defined(_WIN32)
#ifndef WIN32_LEAN_AND_MEAN
#define WIN32_LEAN_AND_MEAN
#endif
/* MSVC's windows.h defines min and max as macros, which would break every std::min( and
   std::max( below (MinGW's does not in C++, so only an MSVC build would show it). A file that
   includes windows.h before the implementation must define NOMINMAX itself. */
#ifndef NOMINMAX
#define NOMINMAX
#endif
#include <windows.h>
#else
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#endif

/* A matrix of `rows` rows of `cols` values each, row-major, in any weight type. nn.Linear's
   (out, in) weight is rows = out, cols = in. */
struct gpt2__weight {
    const uint8_t* data = nullptr;
    uint32_t type = GPT2_TYPE_F32;
    int64_t rows = 0, cols = 0;
    size_t row_bytes = 0;
    const uint8_t* lanes = nullptr; /* q8_0 rows packed at load for the CPU's kernels, or NULL (src/cpu/kernels/contract.h) */
};

struct gpt2__layer {
    const float *ln_1_weight, *ln_1_bias;       /* bias NULL when the model has none */
    gpt2__weight c_attn;  const float* c_attn_bias;   /* (3 n_embd, n_embd): q, k, v */
    gpt2__weight c_proj;  const float* c_proj_bias;   /* (n_embd, n_embd) */
    const float *ln_2_weight, *ln_2_bias;
    gpt2__weight c_fc;    const float* c_fc_bias;     /* (n_ff, n_embd) */
    gpt2__weight mlp_proj; const float* mlp_proj_bias; /* (n_embd, n_ff) */
};

/* The bytes of the model file: mapped, read into memory, or the caller's buffer. */
struct gpt2__file {
    const uint8_t* data = nullptr;
    size_t size = 0;
    void* owned = nullptr; /* GPT2_MALLOC'd copy */
    bool mapped = false;
#if defined(_WIN32)
    HANDLE mapping = nullptr;
#endif
};

struct gpt2_model {
    gpt2_model_params params;
    gpt2__tag tag{GPT2__TAG_MODEL}; /* GPT2__TAG_FREED from gpt2_model_free on, while its sessions and grammars keep it */
    gpt2__file file;
    gpt2__gguf gguf;
    gpt2__string name;
    int n_vocab = 0, n_vocab_rows = 0, n_ctx = 0, n_embd = 0, n_layer = 0, n_head = 0, n_ff = 0;
    float layer_norm_eps = 1e-5f;
    bool gelu_tanh = false; /* false: exact erf GELU (nanoGPT's nn.GELU()) */
    gpt2__weight wte, wpe, lm_head; /* lm_head is wte when the head is tied */
    const float *ln_f_weight = nullptr, *ln_f_bias = nullptr;
    gpt2__vector<gpt2__layer> layers;
    gpt2__tokenizer tokenizer;
    gpt2_type weight_type = GPT2_TYPE_F32;
    size_t weight_bytes = 0;
    mutable std::atomic<int> n_refs{1}; /* the caller's until gpt2_model_free, and one for each session and grammar of it */
    struct gpt2__kv_pool* kv_pool = nullptr; /* the CPU sessions' KV cache blocks (src/cpu/kv_cache.h), made by its model_attach */
    const struct gpt2__backend* backend = nullptr; /* the device its sessions run on (src/backend.h) */
    void* device_weights = nullptr;          /* the backend's copy of the weights, if it keeps one */
    mutable std::once_flag fingerprint_once; /* gpt2__model_fingerprint (src/state.h), computed once */
    mutable uint64_t fingerprint = 0;
    mutable std::once_flag token_trie_once; /* the vocabulary's trie, built for the first grammar */
    mutable gpt2__token_trie token_trie;
};

static void gpt2__log(const gpt2_model_params& params, gpt2_log_level level, const char* fmt, ...) GPT2__PRINTF_LIKE(3, 4);
static void gpt2__log(const gpt2_model_params& params, gpt2_log_level level, const char* fmt, ...) {
    if (!params.log) return;
    char message[1024];
    va_list args;
    va_start(args, fmt);
    std::vsnprintf(message, sizeof message, fmt, args);
    va_end(args);
    params.log(params.log_user, level, message);
}

static void gpt2__file_close(gpt2__file* f) {
#if defined(_WIN32)
    if (f->mapped) UnmapViewOfFile(f->data);
    if (f->mapping) CloseHandle(f->mapping);
#else
    if (f->mapped) munmap((void*)f->data, f->size);
#endif
    if (f->owned) GPT2_FREE(f->owned);
    *f = gpt2__file();
}

/* Reads the f->size bytes of an open file that is not mapped into memory of its own: read_some(into,
   most) reads up to `most` bytes and returns how many, 0 or less when it fails. The caller closes
   the file. */
template <class ReadSome>
static gpt2_result gpt2__file_read_whole(gpt2__file* f, const char* path, ReadSome read_some, gpt2_error* err) {
    f->owned = GPT2_MALLOC(f->size);
    if (!f->owned) return gpt2__fail(err, GPT2_ERROR_OUT_OF_MEMORY, "%s: cannot allocate %zu bytes to read it", path, f->size);
    size_t done = 0;
    while (done < f->size) {
        const int64_t got = read_some((uint8_t*)f->owned + done, f->size - done);
        if (got <= 0) {
            gpt2__file_close(f);
            return gpt2__fail(err, GPT2_ERROR_IO, "%s: read failed after %zu bytes", path, done);
        }
        done += (size_t)got;
    }
    f->data = (const uint8_t*)f->owned;
    return GPT2_OK;
}

/* Hands the whole pages of [p, p + bytes) of a mapped file back to the OS: the process stops
   holding them, and a later read maps them again from the file. For weights that have a copy
   of their own (the CPU's lanes). Windows keeps them until it needs the memory. */
static void gpt2__file_release_pages(const gpt2__file& f, const uint8_t* p, size_t bytes) {
#if defined(_WIN32) || !defined(MADV_DONTNEED)
    (void)f;
    (void)p;
    (void)bytes;
#else
    if (!f.mapped || p < f.data || p + bytes > f.data + f.size) return;
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    const uintptr_t begin = ((uintptr_t)p + page - 1) & ~(page - 1), end = ((uintptr_t)p + bytes) & ~(page - 1);
    if (end > begin) madvise((void*)begin, end - begin, MADV_DONTNEED);
#endif
}

#if defined(_WIN32)
/* Why a Windows call failed, in the words docs/ERRORS.md gives for POSIX where those exist. */
static void gpt2__windows_reason(DWORD code, char* out, size_t size) {
    if (code == ERROR_FILE_NOT_FOUND || code == ERROR_PATH_NOT_FOUND) {
        std::snprintf(out, size, "No such file or directory");
        return;
    }
    DWORD n = FormatMessageA(FORMAT_MESSAGE_FROM_SYSTEM | FORMAT_MESSAGE_IGNORE_INSERTS, nullptr, code, 0, out, (DWORD)size, nullptr);
    while (n > 0 && (out[n - 1] == '\r' || out[n - 1] == '\n' || out[n - 1] == '.')) out[--n] = '\0';
    if (n == 0) std::snprintf(out, size, "error %lu", (unsigned long)code);
}

/* Paths are UTF-8, as everywhere else in the API; the ANSI code page is the fallback for a path
   that is not valid UTF-8. */
static HANDLE gpt2__windows_open(const char* path, DWORD* attributes) {
    wchar_t wide[4096];
    if (MultiByteToWideChar(CP_UTF8, MB_ERR_INVALID_CHARS, path, -1, wide, 4096) > 0) {
        *attributes = GetFileAttributesW(wide);
        return CreateFileW(wide, GENERIC_READ, FILE_SHARE_READ, nullptr, OPEN_EXISTING, FILE_ATTRIBUTE_NORMAL, nullptr);
    }
    *attributes = GetFileAttributesA(path);
    return CreateFileA(path, GENERIC_READ, FILE_SHARE_READ, nullptr, OPEN_EXISTING, FILE_ATTRIBUTE_NORMAL, nullptr);
}
#endif

static gpt2_result gpt2__file_open(const char* path, bool use_mmap, gpt2__file* f, gpt2_error* err) {
#if defined(_WIN32)
    DWORD attributes = INVALID_FILE_ATTRIBUTES;
    HANDLE h = gpt2__windows_open(path, &attributes);
    if (h == INVALID_HANDLE_VALUE) {
        const DWORD code = GetLastError();
        /* a directory cannot be opened as a file: say what it is, as on POSIX */
        if (attributes != INVALID_FILE_ATTRIBUTES && (attributes & FILE_ATTRIBUTE_DIRECTORY)) return gpt2__fail(err, GPT2_ERROR_IO, "%s: not a regular file", path);
        char reason[256];
        gpt2__windows_reason(code, reason, sizeof reason);
        return gpt2__fail(err, GPT2_ERROR_IO, "%s: cannot open: %s", path, reason);
    }
    LARGE_INTEGER size;
    if (GetFileType(h) != FILE_TYPE_DISK || !GetFileSizeEx(h, &size)) {
        CloseHandle(h);
        return gpt2__fail(err, GPT2_ERROR_IO, "%s: not a regular file", path);
    }
    if (size.QuadPart == 0) {
        CloseHandle(h);
        return gpt2__fail(err, GPT2_ERROR_BAD_FILE, "%s: file is empty (0 bytes)", path);
    }
    if ((unsigned long long)size.QuadPart > (unsigned long long)SIZE_MAX) {
        CloseHandle(h);
        return gpt2__fail(err, GPT2_ERROR_OUT_OF_MEMORY, "%s: %llu bytes do not fit in this process's address space", path, (unsigned long long)size.QuadPart);
    }
    f->size = (size_t)size.QuadPart;
    if (use_mmap) {
        f->mapping = CreateFileMappingA(h, nullptr, PAGE_READONLY, 0, 0, nullptr);
        if (f->mapping) f->data = (const uint8_t*)MapViewOfFile(f->mapping, FILE_MAP_READ, 0, 0, 0);
        if (f->data) {
            CloseHandle(h);
            f->mapped = true;
            return GPT2_OK;
        }
        if (f->mapping) CloseHandle(f->mapping); /* as on POSIX, a file that cannot be mapped is read */
        f->mapping = nullptr;
    }
    const gpt2_result result = gpt2__file_read_whole(f, path, [h](uint8_t* into, size_t most) -> int64_t {
        DWORD got = 0;
        return ReadFile(h, into, (DWORD)std::min<size_t>(most, (size_t)1 << 30), &got, nullptr) ? (int64_t)got : -1;
    }, err);
    CloseHandle(h);
    return result;
#else
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return gpt2__fail(err, GPT2_ERROR_IO, "%s: cannot open: %s", path, std::strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return gpt2__fail(err, GPT2_ERROR_IO, "%s: not a regular file", path);
    }
    if (st.st_size == 0) {
        close(fd);
        return gpt2__fail(err, GPT2_ERROR_BAD_FILE, "%s: file is empty (0 bytes)", path);
    }
    f->size = (size_t)st.st_size;
    if (use_mmap) {
        void* p = mmap(nullptr, f->size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p != MAP_FAILED) {
            close(fd);
            f->data = (const uint8_t*)p;
            f->mapped = true;
            return GPT2_OK;
        }
    }
    const gpt2_result result = gpt2__file_read_whole(f, path, [fd](uint8_t* into, size_t most) -> int64_t { return (int64_t)read(fd, into, most); }, err);
    close(fd);
    return result;
#endif
}

/* Binds a tensor that must exist with the given shape (ne[0] = row length). 1-D tensors are
   float32; matrices may be any supported weight type. */
static gpt2_result gpt2__bind_matrix(const gpt2_model* m, const char* name, int64_t rows, int64_t cols, gpt2__weight* out, gpt2_error* err) {
    const gpt2__gguf_tensor* t = gpt2__gguf_find_tensor(&m->gguf, name);
    if (!t) return gpt2__fail(err, GPT2_ERROR_BAD_FILE, "missing tensor '%s'", name);
    if (t->n_dims != 2 || (int64_t)t->ne[0] != cols || (int64_t)t->ne[1] != rows)
        return gpt2__fail(err, GPT2_ERROR_BAD_FILE, "%s: shape [%llu, %llu%s] expected [%lld, %lld]", name, (unsigned long long)t->ne[0],
                          (unsigned long long)t->ne[1], t->n_dims > 2 ? ", ..." : "", (long long)cols, (long long)rows);
    if (t->n_bytes == 0 && std::strcmp(gpt2__type_name(t->type), "unknown") != 0) /* a block type, rows not whole blocks */
        return gpt2__fail(err, GPT2_ERROR_BAD_FILE, "%s: rows of %llu values are not whole %s blocks of 32", name, (unsigned long long)t->ne[0], gpt2__type_name(t->type));
    if (t->n_bytes == 0)
        return gpt2__fail(err, GPT2_ERROR_UNSUPPORTED, "%s: tensor type %u is not supported (f32, f16, bf16, q8_0, q4_0 are)", name, t->type);
    out->data = t->data;
    out->type = t->type;
    out->rows = rows;
    out->cols = cols;
    out->row_bytes = (size_t)(t->n_bytes / (uint64_t)rows);
    return GPT2_OK;
}

static gpt2_result gpt2__bind_vector(const gpt2_model* m, const char* name, int64_t n, bool required, const float** out, gpt2_error* err) {
    const gpt2__gguf_tensor* t = gpt2__gguf_find_tensor(&m->gguf, name);
    *out = nullptr;
    if (!t) return required ? gpt2__fail(err, GPT2_ERROR_BAD_FILE, "missing tensor '%s'", name) : GPT2_OK;
    if (t->n_dims != 1 || (int64_t)t->ne[0] != n)
        return gpt2__fail(err, GPT2_ERROR_BAD_FILE, "%s: shape [%llu%s] expected [%lld]", name, (unsigned long long)t->ne[0], t->n_dims > 1 ? ", ..." : "", (long long)n);
    if (t->type != GPT2_TYPE_F32) return gpt2__fail(err, GPT2_ERROR_UNSUPPORTED, "%s: type %s, expected f32 for a vector", name, gpt2__type_name(t->type));
    *out = (const float*)t->data;
    return GPT2_OK;
}

#define GPT2__TRY(expr)                          \
    do {                                         \
        gpt2_result gpt2__res = (expr);          \
        if (gpt2__res != GPT2_OK) return gpt2__res; \
    } while (0)

static gpt2_result gpt2__load_hparams(gpt2_model* m, gpt2_error* err) {
    const gpt2__gguf* g = &m->gguf;
    std::string_view arch;
    GPT2__TRY(gpt2__gguf_get_string(g, "general.architecture", true, &arch, err));
    if (arch != "gpt2")
        return gpt2__fail(err, GPT2_ERROR_UNSUPPORTED, "general.architecture is '%.*s', expected 'gpt2'", (int)std::min<size_t>(arch.size(), 64), arch.data());
    std::string_view name;
    GPT2__TRY(gpt2__gguf_get_string(g, "general.name", false, &name, err));
    m->name.assign(name.data(), name.size());
    int64_t v;
    GPT2__TRY(gpt2__gguf_get_int(g, "gpt2.context_length", true, 1, 1 << 20, &v, err)); m->n_ctx = (int)v;
    GPT2__TRY(gpt2__gguf_get_int(g, "gpt2.embedding_length", true, 1, 1 << 16, &v, err)); m->n_embd = (int)v;
    GPT2__TRY(gpt2__gguf_get_int(g, "gpt2.block_count", true, 1, 1024, &v, err)); m->n_layer = (int)v;
    GPT2__TRY(gpt2__gguf_get_int(g, "gpt2.attention.head_count", true, 1, 1024, &v, err)); m->n_head = (int)v;
    v = 4 * (int64_t)m->n_embd; /* absent: nanoGPT's 4 n_embd */
    GPT2__TRY(gpt2__gguf_get_int(g, "gpt2.feed_forward_length", false, 1, 1 << 18, &v, err)); m->n_ff = (int)v;
    GPT2__TRY(gpt2__gguf_get_float(g, "gpt2.attention.layer_norm_epsilon", false, &m->layer_norm_eps, err));
    if (!(m->layer_norm_eps > 0.0f && m->layer_norm_eps < 1.0f))
        return gpt2__fail(err, GPT2_ERROR_BAD_FILE, "gpt2.attention.layer_norm_epsilon is %g, expected a small positive number", (double)m->layer_norm_eps);
    if (m->n_embd % m->n_head != 0)
        return gpt2__fail(err, GPT2_ERROR_BAD_FILE, "gpt2.attention.head_count %d does not divide gpt2.embedding_length %d", m->n_head, m->n_embd);
    /* GPT-2 files from other converters carry no gpt2h.gelu: OpenAI's GPT-2 uses the tanh form. */
    std::string_view gelu = "tanh";
    GPT2__TRY(gpt2__gguf_get_string(g, "gpt2h.gelu", false, &gelu, err));
    if (gelu != "erf" && gelu != "tanh")
        return gpt2__fail(err, GPT2_ERROR_BAD_FILE, "gpt2h.gelu is '%.*s', expected 'erf' or 'tanh'", (int)std::min<size_t>(gelu.size(), 64), gelu.data());
    m->gelu_tanh = gelu == "tanh";
    return GPT2_OK;
}

static gpt2_result gpt2__load_weights(gpt2_model* m, gpt2_error* err) {
    const gpt2__gguf_tensor* wte = gpt2__gguf_find_tensor(&m->gguf, "token_embd.weight");
    if (!wte) return gpt2__fail(err, GPT2_ERROR_BAD_FILE, "missing tensor 'token_embd.weight'");
    if (wte->n_dims != 2 || wte->ne[1] > (1u << 24))
        return gpt2__fail(err, GPT2_ERROR_BAD_FILE, "token_embd.weight: expected 2 dimensions with at most 16777216 rows");
    m->n_vocab_rows = (int)wte->ne[1];
    const int64_t C = m->n_embd;
    GPT2__TRY(gpt2__bind_matrix(m, "token_embd.weight", m->n_vocab_rows, C, &m->wte, err));
    GPT2__TRY(gpt2__bind_matrix(m, "position_embd.weight", m->n_ctx, C, &m->wpe, err));
    m->lm_head = m->wte;
    if (gpt2__gguf_find_tensor(&m->gguf, "output.weight")) GPT2__TRY(gpt2__bind_matrix(m, "output.weight", m->n_vocab_rows, C, &m->lm_head, err));
    GPT2__TRY(gpt2__bind_vector(m, "output_norm.weight", C, true, &m->ln_f_weight, err));
    GPT2__TRY(gpt2__bind_vector(m, "output_norm.bias", C, false, &m->ln_f_bias, err));
    m->layers.resize((size_t)m->n_layer);
    m->weight_type = (gpt2_type)m->wte.type;
    for (int i = 0; i < m->n_layer; i++) {
        gpt2__layer& L = m->layers[(size_t)i];
        char name[96];
        auto tensor = [&](const char* suffix) {
            std::snprintf(name, sizeof name, "blk.%d.%s", i, suffix);
            return name;
        };
        GPT2__TRY(gpt2__bind_vector(m, tensor("attn_norm.weight"), C, true, &L.ln_1_weight, err));
        GPT2__TRY(gpt2__bind_vector(m, tensor("attn_norm.bias"), C, false, &L.ln_1_bias, err));
        GPT2__TRY(gpt2__bind_matrix(m, tensor("attn_qkv.weight"), 3 * C, C, &L.c_attn, err));
        GPT2__TRY(gpt2__bind_vector(m, tensor("attn_qkv.bias"), 3 * C, false, &L.c_attn_bias, err));
        GPT2__TRY(gpt2__bind_matrix(m, tensor("attn_output.weight"), C, C, &L.c_proj, err));
        GPT2__TRY(gpt2__bind_vector(m, tensor("attn_output.bias"), C, false, &L.c_proj_bias, err));
        GPT2__TRY(gpt2__bind_vector(m, tensor("ffn_norm.weight"), C, true, &L.ln_2_weight, err));
        GPT2__TRY(gpt2__bind_vector(m, tensor("ffn_norm.bias"), C, false, &L.ln_2_bias, err));
        GPT2__TRY(gpt2__bind_matrix(m, tensor("ffn_up.weight"), m->n_ff, C, &L.c_fc, err));
        GPT2__TRY(gpt2__bind_vector(m, tensor("ffn_up.bias"), m->n_ff, false, &L.c_fc_bias, err));
        GPT2__TRY(gpt2__bind_matrix(m, tensor("ffn_down.weight"), C, m->n_ff, &L.mlp_proj, err));
        GPT2__TRY(gpt2__bind_vector(m, tensor("ffn_down.bias"), C, false, &L.mlp_proj_bias, err));
        if (L.c_attn.type != m->weight_type) m->weight_type = (gpt2_type)L.c_attn.type;
    }
    for (const gpt2__gguf_tensor& t : m->gguf.tensors) m->weight_bytes += (size_t)t.n_bytes;
    return GPT2_OK;
}

static gpt2_result gpt2__load_vocabulary(gpt2_model* m, gpt2_error* err) {
    const gpt2__gguf* g = &m->gguf;
    std::string_view kind, bpe_model;
    GPT2__TRY(gpt2__gguf_get_string(g, "gpt2h.tokenizer.kind", false, &kind, err));
    GPT2__TRY(gpt2__gguf_get_string(g, "tokenizer.ggml.model", false, &bpe_model, err));
    if (kind == "char") {
        gpt2__vector<std::string_view> chars;
        GPT2__TRY(gpt2__gguf_get_strings(g, "gpt2h.tokenizer.chars", true, &chars, err));
        GPT2__TRY(gpt2__tokenizer_init_char(&m->tokenizer, chars.data(), chars.size(), err));
    } else if (!kind.empty()) {
        return gpt2__fail(err, GPT2_ERROR_UNSUPPORTED, "gpt2h.tokenizer.kind is '%.*s', expected 'char'", (int)std::min<size_t>(kind.size(), 64), kind.data());
    } else if (bpe_model == "gpt2") {
        gpt2__vector<std::string_view> tokens, merges;
        GPT2__TRY(gpt2__gguf_get_strings(g, "tokenizer.ggml.tokens", true, &tokens, err));
        GPT2__TRY(gpt2__gguf_get_strings(g, "tokenizer.ggml.merges", true, &merges, err));
        int64_t eos = -1;
        GPT2__TRY(gpt2__gguf_get_int(g, "tokenizer.ggml.eos_token_id", false, 0, (int64_t)tokens.size() - 1, &eos, err));
        GPT2__TRY(gpt2__tokenizer_init_bpe(&m->tokenizer, tokens.data(), tokens.size(), merges.data(), merges.size(), (int32_t)eos, err));
    } else if (!bpe_model.empty() && bpe_model != "none" && bpe_model != "no_vocab") { /* llama.cpp's names for no vocabulary: token ids only */
        return gpt2__fail(err, GPT2_ERROR_UNSUPPORTED, "tokenizer.ggml.model is '%.*s', expected 'gpt2' or 'none'", (int)std::min<size_t>(bpe_model.size(), 64), bpe_model.data());
    }
    m->n_vocab = m->n_vocab_rows;
    if (m->tokenizer.kind != GPT2_TOKENIZER_NONE) {
        size_t n = gpt2__tokenizer_size(&m->tokenizer);
        if (n > (size_t)m->n_vocab_rows)
            return gpt2__fail(err, GPT2_ERROR_BAD_FILE, "the vocabulary has %zu tokens but token_embd.weight only %d rows", n, m->n_vocab_rows);
        m->n_vocab = (int)n; /* rows past the vocabulary are padding: never fed, never sampled */
    }
    return GPT2_OK;
}

static gpt2_result gpt2__model_init(gpt2_model* m, gpt2_error* err) {
    GPT2__TRY(gpt2__gguf_parse(m->file.data, m->file.size, &m->gguf, err));
    GPT2__TRY(gpt2__load_hparams(m, err));
    GPT2__TRY(gpt2__load_weights(m, err));
    GPT2__TRY(gpt2__load_vocabulary(m, err));
    gpt2__log(m->params, GPT2_LOG_INFO, "loaded '%s': %d layers, %d heads, n_embd %d, n_ctx %d, vocabulary %d, %s weights, %zu bytes",
              m->name.c_str(), m->n_layer, m->n_head, m->n_embd, m->n_ctx, m->n_vocab, gpt2__type_name(m->weight_type), m->weight_bytes);
#if defined(GPT2__UNOPTIMISED) && !defined(GPT2_UNOPTIMISED_OK)
    gpt2__log(m->params, GPT2_LOG_WARNING, "this program's copy of gpt2.h was compiled without optimisation and runs about 10x slower: compile it with -O2");
#endif
    return GPT2_OK;
}

static void gpt2__model_destroy(gpt2_model* m) {
    gpt2__file_close(&m->file);
    m->~gpt2_model();
    GPT2_FREE(m);
}

static gpt2_result gpt2__check_model(const gpt2_model* m, gpt2_error* err) {
    return gpt2__check_tag(m, GPT2__TAG_MODEL, "model", "gpt2_model_load_file or gpt2_model_load_memory", "gpt2_model_free", err);
}

/* The model that `what` (a live session, grammar or stage) holds was not freed before it. */
static gpt2_result gpt2__check_model_of(const gpt2_model* m, const char* what, gpt2_error* err) {
    if (m->tag.load(std::memory_order_relaxed) == GPT2__TAG_MODEL) return GPT2_OK;
    return gpt2__fail(err, GPT2_ERROR_INVALID_ARGUMENT,
                      "%s's model was freed (gpt2_model_free) before it: free a model's sessions, grammars and stages first (their own free still works)", what);
}

static gpt2_model* gpt2__model_new(const gpt2_model_params* params) {
    void* memory = GPT2_MALLOC(sizeof(gpt2_model));
    if (!memory) return nullptr;
    gpt2_model* m = new (memory) gpt2_model();
    m->params = params ? *params : gpt2_model_default_params();
    return m;
}

#endif /* GPT2__PART_MODEL_MODEL_H */
