#ifndef GPT2__PART_MODEL_GGUF_H
#define GPT2__PART_MODEL_GGUF_H
#include "../common.h"

/* GGUF reader: parses and validates the whole header of a file held in memory. Nothing is
   trusted: every count, length, shape and offset is checked against the bytes that exist. */

enum gpt2__gguf_type : uint32_t {
    GPT2__GGUF_UINT8 = 0, GPT2__GGUF_INT8, GPT2__GGUF_UINT16, GPT2__GGUF_INT16, GPT2__GGUF_UINT32,
    GPT2__GGUF_INT32, GPT2__GGUF_FLOAT32, GPT2__GGUF_BOOL, GPT2__GGUF_STRING, GPT2__GGUF_ARRAY,
    GPT2__GGUF_UINT64, GPT2__GGUF_INT64, GPT2__GGUF_FLOAT64, GPT2__GGUF_TYPE_COUNT
};

static const char* gpt2__gguf_type_name(uint32_t type) {
    static const char* names[] = {"uint8", "int8", "uint16", "int16", "uint32", "int32", "float32",
                                  "bool", "string", "array", "uint64", "int64", "float64"};
    return type < GPT2__GGUF_TYPE_COUNT ? names[type] : "unknown";
}

/* Bytes of one scalar value; 0 for string and array. */
static size_t gpt2__gguf_scalar_size(uint32_t type) {
    switch (type) {
    case GPT2__GGUF_UINT8: case GPT2__GGUF_INT8: case GPT2__GGUF_BOOL: return 1;
    case GPT2__GGUF_UINT16: case GPT2__GGUF_INT16: return 2;
    case GPT2__GGUF_UINT32: case GPT2__GGUF_INT32: case GPT2__GGUF_FLOAT32: return 4;
    case GPT2__GGUF_UINT64: case GPT2__GGUF_INT64: case GPT2__GGUF_FLOAT64: return 8;
    default: return 0;
    }
}

struct gpt2__gguf_kv {
    std::string_view key;
    uint32_t type;          /* gpt2__gguf_type */
    uint32_t array_type;    /* element type when type is ARRAY */
    uint64_t array_count;
    const uint8_t* value;   /* the value's bytes (for arrays: the first element) */
    size_t value_size;      /* bytes from `value` to the end of the value */
};

struct gpt2__gguf_tensor {
    std::string_view name;
    uint32_t n_dims;
    uint64_t ne[4];         /* ne[0] is the row length (fastest dimension) */
    uint32_t type;          /* gpt2_type numbering (GGUF's ggml_type) */
    uint64_t offset;        /* from the start of the data section */
    uint64_t n_bytes;       /* 0 when the type is unknown to us */
    const uint8_t* data;
};

struct gpt2__gguf {
    uint32_t version;
    uint64_t alignment;
    gpt2__vector<gpt2__gguf_kv> kvs;
    gpt2__vector<gpt2__gguf_tensor> tensors;
};

/* A q8_0 block: one f16 scale, then 32 signed bytes (gpt2__block_q8_0 in cpu/kernels/contract.h). */
static const int gpt2__q8_block_values = 32, gpt2__q8_block_bytes = 34;
/* A q4_0 block: one f16 scale, then 16 bytes of two 4-bit values each (gpt2__block_q4_0). */
static const int gpt2__q4_block_values = 32, gpt2__q4_block_bytes = 18;

/* Size in bytes of `n_elements` of a weight type, laid out in rows of `row_length`; false when
   the type is unknown or the row length does not fit its blocks. */
static bool gpt2__type_row_bytes(uint32_t type, uint64_t row_length, uint64_t* out) {
    switch (type) {
    case GPT2_TYPE_F32: *out = row_length * 4; return true;
    case GPT2_TYPE_F16: case GPT2_TYPE_BF16: *out = row_length * 2; return true;
    case GPT2_TYPE_Q8_0:
        if (row_length % gpt2__q8_block_values != 0) return false;
        *out = row_length / gpt2__q8_block_values * gpt2__q8_block_bytes;
        return true;
    case GPT2_TYPE_Q4_0:
        if (row_length % gpt2__q4_block_values != 0) return false;
        *out = row_length / gpt2__q4_block_values * gpt2__q4_block_bytes;
        return true;
    default: return false;
    }
}

static const char* gpt2__type_name(uint32_t type) {
    switch (type) {
    case GPT2_TYPE_F32: return "f32";
    case GPT2_TYPE_F16: return "f16";
    case GPT2_TYPE_BF16: return "bf16";
    case GPT2_TYPE_Q8_0: return "q8_0";
    case GPT2_TYPE_Q4_0: return "q4_0";
    default: return "unknown";
    }
}

struct gpt2__reader {
    const uint8_t* data;
    size_t size;
    size_t pos;
    bool need(uint64_t n) const { return n <= size - pos; }
};

static bool gpt2__read_u32(gpt2__reader* r, uint32_t* v) {
    if (!r->need(4)) return false;
    std::memcpy(v, r->data + r->pos, 4);
    r->pos += 4;
    return true;
}
static bool gpt2__read_u64(gpt2__reader* r, uint64_t* v) {
    if (!r->need(8)) return false;
    std::memcpy(v, r->data + r->pos, 8);
    r->pos += 8;
    return true;
}
static bool gpt2__read_string(gpt2__reader* r, std::string_view* s) {
    uint64_t len;
    if (!gpt2__read_u64(r, &len) || !r->need(len)) return false;
    *s = std::string_view((const char*)r->data + r->pos, (size_t)len);
    r->pos += (size_t)len;
    return true;
}

/* Skips over one value of `type`, checking that it lies inside the buffer. */
static gpt2_result gpt2__gguf_skip_value(gpt2__reader* r, uint32_t type, std::string_view key, gpt2_error* err) {
    size_t scalar = gpt2__gguf_scalar_size(type);
    if (scalar) {
        if (!r->need(scalar)) return gpt2__fail(err, GPT2_ERROR_BAD_FILE, "key '%.*s': value runs past the end of the file", (int)key.size(), key.data());
        r->pos += scalar;
        return GPT2_OK;
    }
    if (type == GPT2__GGUF_STRING) {
        std::string_view s;
        if (!gpt2__read_string(r, &s)) return gpt2__fail(err, GPT2_ERROR_BAD_FILE, "key '%.*s': string runs past the end of the file", (int)key.size(), key.data());
        return GPT2_OK;
    }
    return gpt2__fail(err, GPT2_ERROR_BAD_FILE, "key '%.*s': unknown value type %u", (int)key.size(), key.data(), type);
}

/* "key 'K' has type T, expected E": the one wording for a key of the wrong type. */
static gpt2_result gpt2__gguf_wrong_type(const gpt2__gguf_kv* kv, const char* expected, gpt2_error* err) {
    const int len = (int)std::min<size_t>(kv->key.size(), 200);
    if (kv->type == GPT2__GGUF_ARRAY)
        return gpt2__fail(err, GPT2_ERROR_BAD_FILE, "key '%.*s' has type array of %s, expected %s", len, kv->key.data(), gpt2__gguf_type_name(kv->array_type), expected);
    return gpt2__fail(err, GPT2_ERROR_BAD_FILE, "key '%.*s' has type %s, expected %s", len, kv->key.data(), gpt2__gguf_type_name(kv->type), expected);
}

static gpt2_result gpt2__gguf_parse(const uint8_t* data, size_t size, gpt2__gguf* out, gpt2_error* err) {
    gpt2__reader r{data, size, 0};
    uint32_t magic;
    if (!gpt2__read_u32(&r, &magic)) return gpt2__fail(err, GPT2_ERROR_BAD_FILE, "file is %zu bytes, too short for a GGUF header", size);
    if (magic == 0x04034b50u) /* "PK\3\4": a zip, as torch.save writes checkpoints */
        return gpt2__fail(err, GPT2_ERROR_BAD_FILE, "not a GGUF file: this is a zip archive, probably a PyTorch checkpoint; convert it with tools/convert.py");
    if (magic != 0x46554747u) /* "GGUF" */
        return gpt2__fail(err, GPT2_ERROR_BAD_FILE, "not a GGUF file: magic is 0x%08x, expected 0x46554747 (\"GGUF\")", magic);
    uint64_t n_tensors, n_kv;
    if (!gpt2__read_u32(&r, &out->version) || !gpt2__read_u64(&r, &n_tensors) || !gpt2__read_u64(&r, &n_kv))
        return gpt2__fail(err, GPT2_ERROR_BAD_FILE, "GGUF header truncated: file is %zu bytes", size);
    if (out->version != 2 && out->version != 3)
        return gpt2__fail(err, GPT2_ERROR_UNSUPPORTED, "GGUF version %u is not supported (versions 2 and 3 are)", out->version);
    /* Each key-value needs at least 12 bytes and each tensor info 24: reject absurd counts before looping. */
    if (n_kv > (size - r.pos) / 12) return gpt2__fail(err, GPT2_ERROR_BAD_FILE, "header claims %llu keys, more than the file of %zu bytes can hold", (unsigned long long)n_kv, size);
    if (n_tensors > (size - r.pos) / 24) return gpt2__fail(err, GPT2_ERROR_BAD_FILE, "header claims %llu tensors, more than the file of %zu bytes can hold", (unsigned long long)n_tensors, size);

    out->alignment = 32;
    out->kvs.reserve((size_t)n_kv);
    for (uint64_t i = 0; i < n_kv; i++) {
        gpt2__gguf_kv kv{};
        if (!gpt2__read_string(&r, &kv.key)) return gpt2__fail(err, GPT2_ERROR_BAD_FILE, "key %llu: name runs past the end of the file", (unsigned long long)i);
        if (!gpt2__read_u32(&r, &kv.type)) return gpt2__fail(err, GPT2_ERROR_BAD_FILE, "key '%.*s': type runs past the end of the file", (int)kv.key.size(), kv.key.data());
        for (const gpt2__gguf_kv& other : out->kvs)
            if (other.key == kv.key) return gpt2__fail(err, GPT2_ERROR_BAD_FILE, "key '%.*s' appears twice", (int)kv.key.size(), kv.key.data());
        if (kv.type == GPT2__GGUF_ARRAY) {
            if (!gpt2__read_u32(&r, &kv.array_type) || !gpt2__read_u64(&r, &kv.array_count))
                return gpt2__fail(err, GPT2_ERROR_BAD_FILE, "key '%.*s': array header runs past the end of the file", (int)kv.key.size(), kv.key.data());
            if (kv.array_type == GPT2__GGUF_ARRAY || kv.array_type >= GPT2__GGUF_TYPE_COUNT)
                return gpt2__fail(err, GPT2_ERROR_BAD_FILE, "key '%.*s': arrays of type %u are not supported", (int)kv.key.size(), kv.key.data(), kv.array_type);
            size_t min_size = kv.array_type == GPT2__GGUF_STRING ? 8 : gpt2__gguf_scalar_size(kv.array_type);
            if (kv.array_count > (size - r.pos) / min_size)
                return gpt2__fail(err, GPT2_ERROR_BAD_FILE, "key '%.*s': array of %llu elements runs past the end of the file", (int)kv.key.size(), kv.key.data(), (unsigned long long)kv.array_count);
            kv.value = data + r.pos;
            if (kv.array_type == GPT2__GGUF_STRING) {
                for (uint64_t j = 0; j < kv.array_count; j++) {
                    gpt2_result res = gpt2__gguf_skip_value(&r, GPT2__GGUF_STRING, kv.key, err);
                    if (res != GPT2_OK) return res;
                }
            } else {
                r.pos += (size_t)(kv.array_count * min_size);
            }
        } else {
            kv.value = data + r.pos;
            gpt2_result res = gpt2__gguf_skip_value(&r, kv.type, kv.key, err);
            if (res != GPT2_OK) return res;
        }
        kv.value_size = (size_t)(data + r.pos - kv.value);
        if (kv.key == "general.alignment") {
            uint32_t alignment;
            if (kv.type != GPT2__GGUF_UINT32) return gpt2__gguf_wrong_type(&kv, "uint32", err);
            std::memcpy(&alignment, kv.value, 4);
            /* at least 4: float tensors are read in place, and an offset that is a multiple of 1 or 2 could misalign them */
            if (alignment < 4 || (alignment & (alignment - 1)) != 0 || alignment > 65536)
                return gpt2__fail(err, GPT2_ERROR_BAD_FILE, "general.alignment is %u, expected a power of two from 4 to 65536", alignment);
            out->alignment = alignment;
        }
        out->kvs.push_back(kv);
    }

    out->tensors.reserve((size_t)n_tensors);
    for (uint64_t i = 0; i < n_tensors; i++) {
        gpt2__gguf_tensor t{};
        if (!gpt2__read_string(&r, &t.name)) return gpt2__fail(err, GPT2_ERROR_BAD_FILE, "tensor %llu: name runs past the end of the file", (unsigned long long)i);
        const int name_len = (int)std::min<size_t>(t.name.size(), 200);
        if (!gpt2__read_u32(&r, &t.n_dims)) return gpt2__fail(err, GPT2_ERROR_BAD_FILE, "tensor '%.*s': header truncated", name_len, t.name.data());
        if (t.n_dims == 0 || t.n_dims > 4) return gpt2__fail(err, GPT2_ERROR_BAD_FILE, "tensor '%.*s': %u dimensions, expected 1 to 4", name_len, t.name.data(), t.n_dims);
        uint64_t n_elements = 1;
        for (uint32_t d = 0; d < 4; d++) t.ne[d] = 1;
        for (uint32_t d = 0; d < t.n_dims; d++) {
            if (!gpt2__read_u64(&r, &t.ne[d])) return gpt2__fail(err, GPT2_ERROR_BAD_FILE, "tensor '%.*s': header truncated", name_len, t.name.data());
            if (t.ne[d] == 0 || t.ne[d] > (uint64_t)1 << 40 || n_elements > ((uint64_t)1 << 50) / t.ne[d])
                return gpt2__fail(err, GPT2_ERROR_BAD_FILE, "tensor '%.*s': dimension %u is %llu, out of range", name_len, t.name.data(), d, (unsigned long long)t.ne[d]);
            n_elements *= t.ne[d];
        }
        if (!gpt2__read_u32(&r, &t.type) || !gpt2__read_u64(&r, &t.offset))
            return gpt2__fail(err, GPT2_ERROR_BAD_FILE, "tensor '%.*s': header truncated", name_len, t.name.data());
        uint64_t row_bytes;
        if (gpt2__type_row_bytes(t.type, t.ne[0], &row_bytes)) t.n_bytes = row_bytes * (n_elements / t.ne[0]);
        for (const gpt2__gguf_tensor& other : out->tensors)
            if (other.name == t.name) return gpt2__fail(err, GPT2_ERROR_BAD_FILE, "tensor '%.*s' appears twice", name_len, t.name.data());
        out->tensors.push_back(t);
    }

    uint64_t data_start = (r.pos + out->alignment - 1) / out->alignment * out->alignment;
    if (data_start > size) data_start = size;
    const uint64_t data_size = size - data_start;
    for (gpt2__gguf_tensor& t : out->tensors) {
        const int name_len = (int)std::min<size_t>(t.name.size(), 200);
        if (t.offset % out->alignment != 0)
            return gpt2__fail(err, GPT2_ERROR_BAD_FILE, "tensor '%.*s': offset %llu is not a multiple of the alignment %llu", name_len, t.name.data(), (unsigned long long)t.offset, (unsigned long long)out->alignment);
        if (t.offset > data_size || t.n_bytes > data_size - t.offset)
            return gpt2__fail(err, GPT2_ERROR_BAD_FILE, "tensor '%.*s': data at offset %llu + %llu bytes runs past the end of the file (%llu bytes of tensor data)", name_len, t.name.data(),
                              (unsigned long long)t.offset, (unsigned long long)t.n_bytes, (unsigned long long)data_size);
        t.data = data + data_start + t.offset;
    }
    return GPT2_OK;
}

static const gpt2__gguf_kv* gpt2__gguf_find_kv(const gpt2__gguf* g, std::string_view key) {
    for (const gpt2__gguf_kv& kv : g->kvs)
        if (kv.key == key) return &kv;
    return nullptr;
}

static const gpt2__gguf_tensor* gpt2__gguf_find_tensor(const gpt2__gguf* g, std::string_view name) {
    for (const gpt2__gguf_tensor& t : g->tensors)
        if (t.name == name) return &t;
    return nullptr;
}

/* The key getters share one convention. gpt2__gguf_get_X(g, key, required, [range,] out, err):
   - the key is present with the expected type: *out = its value, GPT2_OK;
   - absent and required: GPT2_ERROR_BAD_FILE "missing key 'K'";
   - absent and optional: GPT2_OK with *out untouched, so the caller's initial value is the default;
   - present with another type: GPT2_ERROR_BAD_FILE "key 'K' has type T, expected E".
   Strings are views into the file. */

/* *kv = the key, or NULL when it is absent and optional. */
static gpt2_result gpt2__gguf_lookup(const gpt2__gguf* g, const char* key, bool required, const gpt2__gguf_kv** kv, gpt2_error* err) {
    *kv = gpt2__gguf_find_kv(g, key);
    if (!*kv && required) return gpt2__fail(err, GPT2_ERROR_BAD_FILE, "missing key '%s'", key);
    return GPT2_OK;
}

/* An integer of any integer type, within [min, max]. */
static gpt2_result gpt2__gguf_get_int(const gpt2__gguf* g, const char* key, bool required, int64_t min, int64_t max, int64_t* out, gpt2_error* err) {
    const gpt2__gguf_kv* kv;
    gpt2_result res = gpt2__gguf_lookup(g, key, required, &kv, err);
    if (res != GPT2_OK || !kv) return res;
    int64_t v;
    switch (kv->type) {
    case GPT2__GGUF_UINT8: v = kv->value[0]; break;
    case GPT2__GGUF_INT8: v = (int8_t)kv->value[0]; break;
    case GPT2__GGUF_UINT16: { uint16_t x; std::memcpy(&x, kv->value, 2); v = x; break; }
    case GPT2__GGUF_INT16: { int16_t x; std::memcpy(&x, kv->value, 2); v = x; break; }
    case GPT2__GGUF_UINT32: { uint32_t x; std::memcpy(&x, kv->value, 4); v = x; break; }
    case GPT2__GGUF_INT32: { int32_t x; std::memcpy(&x, kv->value, 4); v = x; break; }
    case GPT2__GGUF_UINT64: { uint64_t x; std::memcpy(&x, kv->value, 8); v = x > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)x; break; }
    case GPT2__GGUF_INT64: std::memcpy(&v, kv->value, 8); break;
    default: return gpt2__gguf_wrong_type(kv, "an integer", err);
    }
    if (v < min || v > max)
        return gpt2__fail(err, GPT2_ERROR_BAD_FILE, "key '%s' is %lld, expected %lld to %lld", key, (long long)v, (long long)min, (long long)max);
    *out = v;
    return GPT2_OK;
}

/* float32 (float64 is narrowed). */
static gpt2_result gpt2__gguf_get_float(const gpt2__gguf* g, const char* key, bool required, float* out, gpt2_error* err) {
    const gpt2__gguf_kv* kv;
    gpt2_result res = gpt2__gguf_lookup(g, key, required, &kv, err);
    if (res != GPT2_OK || !kv) return res;
    if (kv->type == GPT2__GGUF_FLOAT32) {
        std::memcpy(out, kv->value, 4);
    } else if (kv->type == GPT2__GGUF_FLOAT64) {
        double d;
        std::memcpy(&d, kv->value, 8);
        *out = (float)d;
    } else {
        return gpt2__gguf_wrong_type(kv, "float32", err);
    }
    return GPT2_OK;
}

static gpt2_result gpt2__gguf_get_string(const gpt2__gguf* g, const char* key, bool required, std::string_view* out, gpt2_error* err) {
    const gpt2__gguf_kv* kv;
    gpt2_result res = gpt2__gguf_lookup(g, key, required, &kv, err);
    if (res != GPT2_OK || !kv) return res;
    if (kv->type != GPT2__GGUF_STRING) return gpt2__gguf_wrong_type(kv, "string", err);
    gpt2__reader r{kv->value, kv->value_size, 0};
    gpt2__read_string(&r, out);
    return GPT2_OK;
}

/* An array of strings. */
static gpt2_result gpt2__gguf_get_strings(const gpt2__gguf* g, const char* key, bool required, gpt2__vector<std::string_view>* out, gpt2_error* err) {
    const gpt2__gguf_kv* kv;
    gpt2_result res = gpt2__gguf_lookup(g, key, required, &kv, err);
    if (res != GPT2_OK || !kv) return res;
    if (kv->type != GPT2__GGUF_ARRAY || kv->array_type != GPT2__GGUF_STRING) return gpt2__gguf_wrong_type(kv, "an array of strings", err);
    out->resize((size_t)kv->array_count);
    gpt2__reader r{kv->value, kv->value_size, 0};
    for (std::string_view& s : *out) gpt2__read_string(&r, &s);
    return GPT2_OK;
}

#endif /* GPT2__PART_MODEL_GGUF_H */
