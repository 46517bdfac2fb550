// Bad input of every kind gets an error code and a message naming the problem, never a crash.
// Malformed model files are made with tests/gguf_builder.h from a valid tiny model, one field
// broken at a time; docs/ERRORS.md lists what the caller sees for each case.
#include "gguf_builder.h"
#include "helpers.h"
#include <doctest/doctest.h>
#include <climits>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

namespace fs = std::filesystem;

// The error of loading `g`; fails the test if the file loads.
static gpt2_error load_error(const GgufBuilder& g) {
    Loaded l(g.build());
    CHECK_MESSAGE(l.result != GPT2_OK, "the broken file loaded");
    CHECK(l.result == l.err.code);
    return l.err;
}

struct TinySession {
    Loaded loaded;
    gpt2_session* session = nullptr;
    explicit TinySession(const TinyModelShape& shape = TinyModelShape(), int n_ctx = 0) : loaded(tiny_model(shape).build()) {
        REQUIRE_MESSAGE(loaded.model, loaded.err.message);
        gpt2_session_params p = gpt2_session_default_params();
        p.n_threads = 1;
        p.n_ctx = n_ctx;
        gpt2_error err;
        REQUIRE(gpt2_session_create(loaded.model, &p, &session, &err) == GPT2_OK);
    }
    ~TinySession() { gpt2_session_free(session); }
};

// A fresh folder under the test output, removed at the end of the test.
struct TempDir {
    fs::path path;
    TempDir() {
        // mkdtemp is POSIX only: create_directory says false when the name is taken (a test
        // process running beside this one), and the next name is tried.
        const unsigned start = std::random_device{}();
        for (unsigned i = 0; i < 1000; i++) {
            std::error_code ec;
            const fs::path candidate = fs::path(GPT2_TEST_OUT) / ("bad_input." + std::to_string(start + i));
            if (fs::create_directory(candidate, ec)) {
                path = candidate;
                return;
            }
            REQUIRE_MESSAGE(!ec, candidate.string() << ": " << ec.message());
        }
        FAIL("no free folder name under " << GPT2_TEST_OUT);
    }
    ~TempDir() {
        std::error_code ec;
        fs::remove_all(path, ec);
    }
    std::string write(const std::string& name, const std::vector<uint8_t>& bytes) const {
        std::ofstream(path / name, std::ios::binary).write((const char*)bytes.data(), (std::streamsize)bytes.size());
        return (path / name).string();
    }
};

static gpt2_error load_file_error(const char* path) {
    gpt2_model* model = (gpt2_model*)&model; // must be overwritten with NULL
    gpt2_error err{};
    gpt2_result r = gpt2_model_load_file(path, nullptr, &model, &err);
    CHECK(r != GPT2_OK);
    CHECK(r == err.code);
    CHECK(model == nullptr);
    return err;
}

// ---- the builder itself -------------------------------------------------------------------

TEST_CASE("the tiny test model built by gguf_builder.h loads and generates") {
    TinySession t;
    gpt2_model_info info = gpt2_model_get_info(t.loaded.model);
    CHECK(info.n_layer == 2);
    CHECK(info.n_embd == 8);
    CHECK(info.n_vocab == 10);
    CHECK(info.n_ctx == 16);
    std::vector<int32_t> out = generate(t.session, {1, 2, 3}, 5, 1.0f, 0, 42);
    CHECK(out.size() == 5);
}

// ---- paths ----------------------------------------------------------------------------------

TEST_CASE("a NULL or empty model path is an invalid argument") {
    CHECK_ERROR(load_file_error(nullptr), GPT2_ERROR_INVALID_ARGUMENT, "model path is NULL");
    CHECK_ERROR(load_file_error(""), GPT2_ERROR_INVALID_ARGUMENT, "model path is empty");
}

TEST_CASE("a path that does not exist is an I/O error naming the path and the reason") {
    TempDir dir;
    const std::string path = (dir.path / "missing.gguf").string();
    gpt2_error e = load_file_error(path.c_str());
    CHECK_ERROR(e, GPT2_ERROR_IO, path.c_str());
    CHECK(has(e, "No such file"));
}

TEST_CASE("a directory given as the model path is an I/O error") {
    TempDir dir;
    CHECK_ERROR(load_file_error(dir.path.string().c_str()), GPT2_ERROR_IO, "not a regular file");
}

TEST_CASE("a file of zero bytes is a bad file") {
    TempDir dir;
    const std::string path = dir.write("empty.gguf", {});
    gpt2_error e = load_file_error(path.c_str());
    CHECK_ERROR(e, GPT2_ERROR_BAD_FILE, "empty (0 bytes)");
    CHECK(has(e, path.c_str()));
}

TEST_CASE("a bad file loaded by path has the path in front of the message") {
    GgufBuilder g = tiny_model();
    g.magic = 0x12345678;
    TempDir dir;
    const std::string path = dir.write("bad.gguf", g.build());
    for (int no_mmap : {0, 1}) {
        gpt2_model_params params = gpt2_model_default_params();
        params.no_mmap = no_mmap;
        gpt2_model* model = nullptr;
        gpt2_error e{};
        CHECK(gpt2_model_load_file(path.c_str(), &params, &model, &e) == GPT2_ERROR_BAD_FILE);
        CHECK_ERROR(e, GPT2_ERROR_BAD_FILE, (path + ": not a GGUF file").c_str());
    }
}

TEST_CASE("a path with characters outside ASCII loads: paths are UTF-8, on Windows too") {
    TempDir dir;
    // u8path: on Windows a plain std::string would be read in the ANSI code page.
    const fs::path file = dir.path / fs::u8path("mod\xC3\xA8le \xE6\xA8\xA1\xE5\x9E\x8B.gguf"); // "modèle 模型.gguf"
    const std::vector<uint8_t> bytes = tiny_model().build();
    std::ofstream(file, std::ios::binary).write((const char*)bytes.data(), (std::streamsize)bytes.size());
    REQUIRE(fs::file_size(file) == bytes.size());
    for (int no_mmap : {0, 1}) {
        gpt2_model_params params = gpt2_model_default_params();
        params.no_mmap = no_mmap;
        Model m(file.u8string(), params);
        CHECK_MESSAGE(m.model, m.err.message);
    }
}

TEST_CASE("a valid file loads by path with and without mmap") {
    TempDir dir;
    const std::string path = dir.write("tiny.gguf", tiny_model().build());
    for (int no_mmap : {0, 1}) {
        gpt2_model_params params = gpt2_model_default_params();
        params.no_mmap = no_mmap;
        Model m(path, params);
        CHECK_MESSAGE(m.model, m.err.message);
    }
}

TEST_CASE("an empty or NULL memory buffer is an invalid argument") {
    gpt2_model* model = nullptr;
    gpt2_error e{};
    const uint8_t byte = 0;
    CHECK(gpt2_model_load_memory(nullptr, 100, nullptr, &model, &e) == GPT2_ERROR_INVALID_ARGUMENT);
    CHECK(has(e, "NULL"));
    CHECK(gpt2_model_load_memory(&byte, 0, nullptr, &model, &e) == GPT2_ERROR_INVALID_ARGUMENT);
    CHECK(has(e, "empty"));
    CHECK(model == nullptr);
}

// ---- the GGUF container ---------------------------------------------------------------------

TEST_CASE("a file that is not GGUF is refused by its magic") {
    GgufBuilder g = tiny_model();
    g.magic = 0x464c457f; // "\x7fELF"
    CHECK_ERROR(load_error(g), GPT2_ERROR_BAD_FILE, "not a GGUF file: magic is 0x464c457f");
}

TEST_CASE("a PyTorch checkpoint given as the model says to convert it first") {
    GgufBuilder g = tiny_model();
    g.magic = 0x04034b50; // "PK\3\4": a zip, as torch.save writes
    CHECK_ERROR(load_error(g), GPT2_ERROR_BAD_FILE, "tools/convert.py");
}

TEST_CASE("GGUF versions other than 2 and 3 are unsupported") {
    for (uint32_t version : {0u, 1u, 4u, 0xffffffffu}) {
        CAPTURE(version);
        GgufBuilder g = tiny_model();
        g.version = version;
        CHECK_ERROR(load_error(g), GPT2_ERROR_UNSUPPORTED, ("GGUF version " + std::to_string(version) + " is not supported").c_str());
    }
}

TEST_CASE("an architecture other than gpt2 is unsupported") {
    GgufBuilder g = tiny_model();
    g.set_string("general.architecture", "llama");
    CHECK_ERROR(load_error(g), GPT2_ERROR_UNSUPPORTED, "general.architecture is 'llama', expected 'gpt2'");
}

TEST_CASE("a file without general.architecture names the missing key") {
    GgufBuilder g = tiny_model();
    g.remove_key("general.architecture");
    CHECK_ERROR(load_error(g), GPT2_ERROR_BAD_FILE, "missing key 'general.architecture'");
}

TEST_CASE("a missing required key is named, for every required key of the key table") {
    int checked = 0;
    for (const GgufKeyInfo& key : gguf_keys) {
        if (key.use != GGUF_REQUIRED || !tiny_model().key(key.name)) continue; // tokenizer.ggml.*: BPE models only
        CAPTURE(key.name);
        GgufBuilder g = tiny_model();
        g.remove_key(key.name);
        CHECK_ERROR(load_error(g), GPT2_ERROR_BAD_FILE, (std::string("missing key '") + key.name + "'").c_str());
        checked++;
    }
    CHECK(checked == 6); // general.architecture, the 4 hyper-parameters, gpt2h.tokenizer.chars
}

TEST_CASE("tokenizer.ggml.model: 'none' and 'no_vocab' (llama.cpp's no vocabulary) mean token ids only, a character kind wins, others are refused") {
    for (const char* none : {"none", "no_vocab"}) {
        CAPTURE(none);
        GgufBuilder ids = tiny_model(), chars = tiny_model();
        ids.remove_key("gpt2h.tokenizer.kind");
        ids.set_string("tokenizer.ggml.model", none);
        chars.set_string("tokenizer.ggml.model", none); // what tools/convert.py writes for llama.cpp
        Loaded a(ids.build()), b(chars.build());
        REQUIRE_MESSAGE(a.model, a.err.message);
        REQUIRE_MESSAGE(b.model, b.err.message);
        CHECK(gpt2_model_get_info(a.model).tokenizer == GPT2_TOKENIZER_NONE);
        CHECK(gpt2_model_get_info(b.model).tokenizer == GPT2_TOKENIZER_CHAR);
    }
    GgufBuilder g = tiny_model();
    g.remove_key("gpt2h.tokenizer.kind");
    g.set_string("tokenizer.ggml.model", "llama");
    CHECK_ERROR(load_error(g), GPT2_ERROR_UNSUPPORTED, "tokenizer.ggml.model is 'llama', expected 'gpt2' or 'none'");
}

TEST_CASE("without its optional keys a model loads with the defaults docs/FORMAT.md gives") {
    GgufBuilder bare = tiny_model();
    for (const GgufKeyInfo& key : gguf_keys)
        if (key.use == GGUF_OPTIONAL) bare.remove_key(key.name);
    REQUIRE(bare.keys.size() == 6); // general.architecture, the 4 hyper-parameters, gpt2h.tokenizer.chars (unused without a kind)
    GgufBuilder defaults = tiny_model(); // already n_ff = 4 n_embd and epsilon 1e-5
    defaults.set("gpt2h.gelu", "tanh");
    defaults.remove_key("gpt2h.tokenizer.kind");
    Loaded a(bare.build()), b(defaults.build());
    REQUIRE_MESSAGE(a.model, a.err.message);
    REQUIRE_MESSAGE(b.model, b.err.message);
    CHECK(std::string(gpt2_model_get_info(a.model).name) == "");
    CHECK(gpt2_model_get_info(a.model).tokenizer == GPT2_TOKENIZER_NONE);
    Session sa(a.model, 1), sb(b.model, 1);
    const int32_t ids[] = {1, 2, 3};
    REQUIRE(gpt2_session_eval(sa.session, ids, 3, nullptr) == GPT2_OK);
    REQUIRE(gpt2_session_eval(sb.session, ids, 3, nullptr) == GPT2_OK);
    CHECK(max_abs_diff(gpt2_session_logits(sa.session), gpt2_session_logits(sb.session), 10) == 0.0f);
}

TEST_CASE("a missing tensor is named") {
    for (const char* name : {"token_embd.weight", "position_embd.weight", "blk.1.ffn_up.weight", "blk.0.attn_norm.weight", "output_norm.weight"}) {
        CAPTURE(name);
        GgufBuilder g = tiny_model();
        g.remove_tensor(name);
        CHECK_ERROR(load_error(g), GPT2_ERROR_BAD_FILE, (std::string("missing tensor '") + name + "'").c_str());
    }
}

TEST_CASE("a layer beyond the file's tensors (block_count too large) names the first missing tensor") {
    GgufBuilder g = tiny_model();
    g.set_u32("gpt2.block_count", 3);
    CHECK_ERROR(load_error(g), GPT2_ERROR_BAD_FILE, "missing tensor 'blk.2.attn_norm.weight'");
}

TEST_CASE("a tensor that appears twice is refused") {
    GgufBuilder g = tiny_model();
    g.tensors.push_back(*g.tensor("blk.0.attn_qkv.weight"));
    CHECK_ERROR(load_error(g), GPT2_ERROR_BAD_FILE, "tensor 'blk.0.attn_qkv.weight' appears twice");
}

TEST_CASE("a key that appears twice is refused") {
    GgufBuilder g = tiny_model();
    GgufBuilder::Key copy = *g.key("gpt2.block_count");
    g.add_raw(copy.name, copy.type, copy.value);
    CHECK_ERROR(load_error(g), GPT2_ERROR_BAD_FILE, "key 'gpt2.block_count' appears twice");
}

TEST_CASE("a matrix of the wrong shape names the tensor, its shape and the expected one") {
    GgufBuilder g = tiny_model();
    GgufBuilder::Tensor* t = g.tensor("blk.0.attn_qkv.weight");
    t->ne = {8, 20};
    t->data.resize(8 * 20 * 4);
    CHECK_ERROR(load_error(g), GPT2_ERROR_BAD_FILE, "blk.0.attn_qkv.weight: shape [8, 20] expected [8, 24]");
}

TEST_CASE("a transposed matrix is refused with both shapes") {
    GgufBuilder g = tiny_model();
    g.tensor("blk.1.ffn_up.weight")->ne = {32, 8};
    CHECK_ERROR(load_error(g), GPT2_ERROR_BAD_FILE, "blk.1.ffn_up.weight: shape [32, 8] expected [8, 32]");
}

TEST_CASE("a vector of the wrong length or with two dimensions is refused") {
    GgufBuilder g = tiny_model();
    g.tensor("output_norm.weight")->ne = {4, 2};
    CHECK_ERROR(load_error(g), GPT2_ERROR_BAD_FILE, "output_norm.weight: shape [4, ...] expected [8]");
    GgufBuilder h = tiny_model();
    GgufBuilder::Tensor* t = h.tensor("blk.0.attn_qkv.bias");
    t->ne = {23};
    t->data.resize(23 * 4);
    CHECK_ERROR(load_error(h), GPT2_ERROR_BAD_FILE, "blk.0.attn_qkv.bias: shape [23] expected [24]");
}

TEST_CASE("a LayerNorm weight stored in f16 is refused: vectors are f32") {
    GgufBuilder g = tiny_model();
    GgufBuilder::Tensor* t = g.tensor("blk.0.attn_norm.weight");
    t->type = GPT2_TYPE_F16;
    t->data.assign(8 * 2, 0);
    CHECK_ERROR(load_error(g), GPT2_ERROR_UNSUPPORTED, "blk.0.attn_norm.weight: type f16, expected f32");
}

TEST_CASE("a matrix of a type this build cannot run is unsupported") {
    GgufBuilder g = tiny_model();
    g.tensor("blk.1.attn_output.weight")->type = 3; // GGML q4_1
    CHECK_ERROR(load_error(g), GPT2_ERROR_UNSUPPORTED, "blk.1.attn_output.weight: tensor type 3 is not supported");
}

TEST_CASE("a q4_0 or q8_0 matrix whose rows are not whole blocks of 32 is refused") {
    const struct { uint32_t type; const char* message; } cases[] = {
        {GPT2_TYPE_Q4_0, "blk.0.attn_qkv.weight: rows of 8 values are not whole q4_0 blocks of 32"},
        {GPT2_TYPE_Q8_0, "blk.0.attn_qkv.weight: rows of 8 values are not whole q8_0 blocks of 32"}};
    for (const auto& c : cases) {
        GgufBuilder g = tiny_model(); // rows of n_embd = 8 values
        g.tensor("blk.0.attn_qkv.weight")->type = c.type;
        CHECK_ERROR(load_error(g), GPT2_ERROR_BAD_FILE, c.message);
    }
}

TEST_CASE("an integer key given as a string names the key and both types") {
    GgufBuilder g = tiny_model();
    g.set_string("gpt2.block_count", "2");
    CHECK_ERROR(load_error(g), GPT2_ERROR_BAD_FILE, "key 'gpt2.block_count' has type string, expected an integer");
}

TEST_CASE("keys of the wrong type are refused: string, float, string array") {
    GgufBuilder g = tiny_model();
    g.set_u32("general.architecture", 2);
    CHECK_ERROR(load_error(g), GPT2_ERROR_BAD_FILE, "key 'general.architecture' has type uint32, expected string");
    GgufBuilder h = tiny_model();
    h.set_string("gpt2.attention.layer_norm_epsilon", "1e-5");
    CHECK_ERROR(load_error(h), GPT2_ERROR_BAD_FILE, "key 'gpt2.attention.layer_norm_epsilon' has type string, expected float32");
    GgufBuilder k = tiny_model();
    k.set_string("gpt2h.tokenizer.chars", "abcdefghij");
    CHECK_ERROR(load_error(k), GPT2_ERROR_BAD_FILE, "key 'gpt2h.tokenizer.chars' has type string, expected an array of strings");
    GgufBuilder a = tiny_model();
    std::vector<uint8_t> no_ints;
    GgufBuilder::put_u32(no_ints, GGUF_INT32);
    GgufBuilder::put_u64(no_ints, 0);
    a.set_raw("gpt2h.tokenizer.chars", GGUF_ARRAY, no_ints);
    CHECK_ERROR(load_error(a), GPT2_ERROR_BAD_FILE, "key 'gpt2h.tokenizer.chars' has type array of int32, expected an array of strings");
}

TEST_CASE("hyper-parameters out of range name the key, the value and the range") {
    GgufBuilder g = tiny_model();
    g.set_u32("gpt2.context_length", 0);
    CHECK_ERROR(load_error(g), GPT2_ERROR_BAD_FILE, "key 'gpt2.context_length' is 0, expected 1 to");
    GgufBuilder h = tiny_model();
    h.set_i32("gpt2.block_count", -2);
    CHECK_ERROR(load_error(h), GPT2_ERROR_BAD_FILE, "key 'gpt2.block_count' is -2, expected 1 to 1024");
    GgufBuilder k = tiny_model();
    k.set_u64("gpt2.embedding_length", UINT64_MAX);
    CHECK_ERROR(load_error(k), GPT2_ERROR_BAD_FILE, "key 'gpt2.embedding_length' is");
    GgufBuilder e = tiny_model();
    e.set_f32("gpt2.attention.layer_norm_epsilon", NAN);
    CHECK_ERROR(load_error(e), GPT2_ERROR_BAD_FILE, "layer_norm_epsilon is nan");
}

TEST_CASE("n_head that does not divide n_embd is refused") {
    GgufBuilder g = tiny_model();
    g.set_u32("gpt2.attention.head_count", 3);
    CHECK_ERROR(load_error(g), GPT2_ERROR_BAD_FILE, "gpt2.attention.head_count 3 does not divide gpt2.embedding_length 8");
}

TEST_CASE("a tensor offset near 2^64 is refused without overflow") {
    GgufBuilder g = tiny_model();
    GgufBuilder::Tensor* t = g.tensor("output_norm.bias");
    t->has_offset = true;
    t->offset = UINT64_MAX & ~(uint64_t)31;
    CHECK_ERROR(load_error(g), GPT2_ERROR_BAD_FILE, "tensor 'output_norm.bias': data at offset 18446744073709551584");
    CHECK(has(load_error(g), "runs past the end of the file"));
}

TEST_CASE("a tensor offset that is not a multiple of the alignment is refused") {
    GgufBuilder g = tiny_model();
    GgufBuilder::Tensor* t = g.tensor("output_norm.bias");
    t->has_offset = true;
    t->offset = 4;
    CHECK_ERROR(load_error(g), GPT2_ERROR_BAD_FILE, "tensor 'output_norm.bias': offset 4 is not a multiple of the alignment 32");
}

TEST_CASE("tensor dimensions whose product overflows are refused") {
    GgufBuilder g = tiny_model();
    g.tensor("token_embd.weight")->ne = {(uint64_t)1 << 30, (uint64_t)1 << 30};
    CHECK_ERROR(load_error(g), GPT2_ERROR_BAD_FILE, "tensor 'token_embd.weight': dimension 1 is 1073741824, out of range");
    GgufBuilder h = tiny_model();
    h.tensor("token_embd.weight")->ne = {8, UINT64_MAX};
    CHECK_ERROR(load_error(h), GPT2_ERROR_BAD_FILE, "dimension 1 is 18446744073709551615, out of range");
    GgufBuilder k = tiny_model();
    k.tensor("token_embd.weight")->ne = {8, 0};
    CHECK_ERROR(load_error(k), GPT2_ERROR_BAD_FILE, "dimension 1 is 0, out of range");
}

TEST_CASE("a tensor whose data would run past the end of the file is refused") {
    GgufBuilder g = tiny_model();
    g.tensor("output_norm.bias")->ne = {64}; // 256 bytes claimed, 32 present
    CHECK_ERROR(load_error(g), GPT2_ERROR_BAD_FILE, "tensor 'output_norm.bias': data at offset");
}

TEST_CASE("too many dimensions are refused") {
    GgufBuilder g = tiny_model();
    g.tensor("output_norm.bias")->ne = {8, 1, 1, 1, 1};
    CHECK_ERROR(load_error(g), GPT2_ERROR_BAD_FILE, "tensor 'output_norm.bias': 5 dimensions, expected 1 to 4");
}

TEST_CASE("counts of keys and tensors larger than the file can hold are refused before allocating") {
    GgufBuilder g = tiny_model();
    g.override_counts = true;
    g.n_tensors = g.tensors.size();
    g.n_keys = (uint64_t)1 << 62;
    CHECK_ERROR(load_error(g), GPT2_ERROR_BAD_FILE, "header claims 4611686018427387904 keys");
    g.n_keys = g.keys.size();
    g.n_tensors = UINT64_MAX;
    CHECK_ERROR(load_error(g), GPT2_ERROR_BAD_FILE, "header claims 18446744073709551615 tensors");
}

TEST_CASE("string and array lengths near 2^64 are refused without overflow") {
    GgufBuilder g = tiny_model();
    std::vector<uint8_t> huge_string;
    GgufBuilder::put_u64(huge_string, UINT64_MAX);
    g.add_raw("general.description", GGUF_STRING, huge_string);
    CHECK_ERROR(load_error(g), GPT2_ERROR_BAD_FILE, "key 'general.description': string runs past the end of the file");

    GgufBuilder h = tiny_model();
    std::vector<uint8_t> huge_array;
    GgufBuilder::put_u32(huge_array, GGUF_UINT64);
    GgufBuilder::put_u64(huge_array, UINT64_MAX / 4);
    h.add_raw("general.huge", GGUF_ARRAY, huge_array);
    CHECK_ERROR(load_error(h), GPT2_ERROR_BAD_FILE, "key 'general.huge': array of 4611686018427387903 elements runs past the end of the file");

    GgufBuilder k = tiny_model();
    std::vector<uint8_t> huge_name;
    GgufBuilder::put_u64(huge_name, UINT64_MAX - 3);
    k.tensors.clear();
    k.keys.clear();
    k.alignment = 8; // no padding after the 24-byte header: the key's name length follows it
    k.override_counts = true;
    k.n_keys = 1;
    std::vector<uint8_t> bytes = k.build();
    bytes.insert(bytes.end(), huge_name.begin(), huge_name.end());
    bytes.resize(bytes.size() + 16, 0);
    Loaded l(bytes);
    CHECK_ERROR(l.err, GPT2_ERROR_BAD_FILE, "key 0: name runs past the end of the file");
}

TEST_CASE("unknown key types and nested arrays are refused") {
    GgufBuilder g = tiny_model();
    g.add_raw("general.odd", 13, {0, 0, 0, 0});
    CHECK_ERROR(load_error(g), GPT2_ERROR_BAD_FILE, "key 'general.odd': unknown value type 13");
    GgufBuilder h = tiny_model();
    std::vector<uint8_t> nested;
    GgufBuilder::put_u32(nested, GGUF_ARRAY);
    GgufBuilder::put_u64(nested, 0);
    h.add_raw("general.nested", GGUF_ARRAY, nested);
    CHECK_ERROR(load_error(h), GPT2_ERROR_BAD_FILE, "key 'general.nested': arrays of type 9 are not supported");
}

TEST_CASE("general.alignment must be a power of two of at least 4") {
    GgufBuilder g = tiny_model();
    g.set_u32("general.alignment", 24);
    CHECK_ERROR(load_error(g), GPT2_ERROR_BAD_FILE, "general.alignment is 24, expected a power of two");
    GgufBuilder h = tiny_model();
    h.set_u64("general.alignment", 32);
    CHECK_ERROR(load_error(h), GPT2_ERROR_BAD_FILE, "key 'general.alignment' has type uint64, expected uint32");
    GgufBuilder small = tiny_model(); // would let an f32 tensor start at an odd byte (found by fuzz_gguf under UBSan)
    small.set_u32("general.alignment", 2);
    CHECK_ERROR(load_error(small), GPT2_ERROR_BAD_FILE, "general.alignment is 2, expected a power of two from 4 to 65536");
}

TEST_CASE("every truncation of a valid file fails cleanly") {
    const std::vector<uint8_t> whole = tiny_model().build();
    {
        Loaded ok(whole);
        REQUIRE_MESSAGE(ok.model, ok.err.message);
    }
    int refused = 0;
    for (size_t cut = 1; cut < whole.size(); cut++) {
        // An exactly-sized heap copy: under ASan any read past the cut is reported.
        Loaded l(std::vector<uint8_t>(whole.begin(), whole.begin() + (long)cut));
        if (l.result == GPT2_ERROR_BAD_FILE && l.model == nullptr && l.err.message[0] != '\0') refused++;
        else FAIL_CHECK("cut at " << cut << " of " << whole.size() << " bytes: result " << l.result << ", " << l.err.message);
    }
    CHECK(refused == (int)whole.size() - 1);
}

// ---- vocabulary -------------------------------------------------------------------------------

TEST_CASE("a vocabulary larger than the embedding rows is refused") {
    TinyModelShape shape;
    shape.n_vocab = 12;
    shape.n_vocab_rows = 10;
    CHECK_ERROR(load_error(tiny_model(shape)), GPT2_ERROR_BAD_FILE, "the vocabulary has 12 tokens but token_embd.weight only 10 rows");
}

TEST_CASE("an empty vocabulary is refused") {
    GgufBuilder g = tiny_model();
    g.set_strings("gpt2h.tokenizer.chars", {});
    CHECK_ERROR(load_error(g), GPT2_ERROR_BAD_FILE, "character vocabulary: 0 entries");
}

TEST_CASE("a vocabulary smaller than the embedding rows leaves padding rows that are never sampled") {
    TinyModelShape shape;
    shape.n_vocab = 7;
    shape.n_vocab_rows = 10;
    TinySession t(shape);
    gpt2_model_info info = gpt2_model_get_info(t.loaded.model);
    CHECK(info.n_vocab == 7);
    CHECK(info.n_vocab_rows == 10);
    std::vector<int32_t> out = generate(t.session, {0}, 200, 5.0f, 0, 7);
    REQUIRE(out.size() == 200);
    for (int32_t id : out) CHECK((id >= 0 && id < 7));
    const int32_t padding_row = 8;
    gpt2_error e{};
    CHECK(gpt2_session_eval(t.session, &padding_row, 1, &e) == GPT2_ERROR_BAD_TOKEN);
    CHECK(has(e, "token 0 is 8, outside the vocabulary [0, 7)"));
}

// ---- sessions and generation ----------------------------------------------------------------

TEST_CASE("token ids out of range are refused by every function that takes ids") {
    TinySession t;
    gpt2_error e{};
    const int32_t negative[] = {1, -1}, too_big[] = {10};
    CHECK(gpt2_session_eval(t.session, negative, 2, &e) == GPT2_ERROR_BAD_TOKEN);
    CHECK_ERROR(e, GPT2_ERROR_BAD_TOKEN, "token 1 is -1, outside the vocabulary [0, 10)");
    CHECK(gpt2_session_eval(t.session, too_big, 1, &e) == GPT2_ERROR_BAD_TOKEN);
    CHECK_ERROR(e, GPT2_ERROR_BAD_TOKEN, "token 0 is 10, outside the vocabulary [0, 10)");
    CHECK(gpt2_session_n_tokens(t.session) == 0); // nothing was appended
    gpt2_generate_params p = gpt2_generate_default_params();
    CHECK(gpt2_generate(t.session, too_big, 1, &p, nullptr, 0, nullptr, &e) == GPT2_ERROR_BAD_TOKEN);
    double logprob;
    CHECK(gpt2_score(t.session, negative, 2, &logprob, &e) == GPT2_ERROR_BAD_TOKEN);
    char text[8];
    size_t n_bytes;
    CHECK(gpt2_detokenize(t.loaded.model, too_big, 1, text, sizeof text, &n_bytes, &e) == GPT2_ERROR_BAD_TOKEN);
}

TEST_CASE("an empty prompt on an empty session is an invalid argument") {
    TinySession t;
    gpt2_error e{};
    gpt2_generate_params p = gpt2_generate_default_params();
    CHECK(gpt2_generate(t.session, nullptr, 0, &p, nullptr, 0, nullptr, &e) == GPT2_ERROR_INVALID_ARGUMENT);
    CHECK_ERROR(e, GPT2_ERROR_INVALID_ARGUMENT, "empty prompt");
    CHECK(gpt2_generate_text(t.session, "", &p, &e) == GPT2_ERROR_INVALID_ARGUMENT);
    CHECK_ERROR(e, GPT2_ERROR_INVALID_ARGUMENT, "empty prompt");
    const int32_t id = 0;
    CHECK(gpt2_session_eval(t.session, &id, 0, &e) == GPT2_ERROR_INVALID_ARGUMENT);
    CHECK_ERROR(e, GPT2_ERROR_INVALID_ARGUMENT, "no tokens to evaluate");
}

TEST_CASE("a prompt longer than the context is cropped to its last n_ctx tokens, as nanoGPT crops its input") {
    TinySession t(TinyModelShape(), 8);
    std::vector<int32_t> prompt;
    for (int32_t i = 0; i < 9; i++) prompt.push_back(i % 4);
    gpt2_error e{};
    REQUIRE(gpt2_session_eval(t.session, prompt.data(), prompt.size(), &e) == GPT2_OK);
    CHECK(std::vector<int32_t>(gpt2_session_tokens(t.session), gpt2_session_tokens(t.session) + gpt2_session_n_tokens(t.session)) ==
          std::vector<int32_t>(prompt.begin() + 1, prompt.end()));
    gpt2_session_reset(t.session);
    CHECK(generate(t.session, prompt, 20, 1.0f, 0, 1).size() == 20); // a long prompt, then past n_ctx while generating
    CHECK(gpt2_session_n_tokens(t.session) == 8);
}

TEST_CASE("a negative max_new_tokens or one beyond the limit is an invalid argument") {
    TinySession t;
    for (int n : {-1, INT_MIN, (1 << 24) + 1, INT_MAX}) {
        CAPTURE(n);
        gpt2_generate_params p = gpt2_generate_default_params();
        p.max_new_tokens = n;
        const int32_t prompt[] = {1};
        gpt2_error e{};
        CHECK(gpt2_generate(t.session, prompt, 1, &p, nullptr, 0, nullptr, &e) == GPT2_ERROR_INVALID_ARGUMENT);
        CHECK_ERROR(e, GPT2_ERROR_INVALID_ARGUMENT, ("max_new_tokens is " + std::to_string(n) + "; expected 0 (only evaluate the prompt) to 16777216").c_str());
    }
    CHECK(gpt2_session_n_tokens(t.session) == 0);
}

TEST_CASE("a negative top_k is an invalid argument") {
    TinySession t;
    gpt2_generate_params p = gpt2_generate_default_params();
    p.top_k = -1;
    const int32_t prompt[] = {1};
    gpt2_error e{};
    CHECK(gpt2_generate(t.session, prompt, 1, &p, nullptr, 0, nullptr, &e) == GPT2_ERROR_INVALID_ARGUMENT);
    CHECK_ERROR(e, GPT2_ERROR_INVALID_ARGUMENT, "top_k is -1");
    const float logits[3] = {0, 1, 2};
    uint64_t rng = 1;
    int32_t token;
    CHECK(gpt2_sample(logits, 3, 1.0f, -5, &rng, &token, &e) == GPT2_ERROR_INVALID_ARGUMENT);
    CHECK_ERROR(e, GPT2_ERROR_INVALID_ARGUMENT, "top_k is -5");
}

TEST_CASE("top_k larger than the vocabulary behaves as top_k = vocabulary size (nanoGPT's min(top_k, vocab_size))") {
    TinySession t;
    const std::vector<int32_t> with_default = generate(t.session, {3}, 50, 1.0f, 200, 99); // default top_k 200 > 10 tokens
    gpt2_session_reset(t.session);
    const std::vector<int32_t> with_vocab = generate(t.session, {3}, 50, 1.0f, 10, 99);
    gpt2_session_reset(t.session);
    const std::vector<int32_t> unlimited = generate(t.session, {3}, 50, 1.0f, 0, 99);
    gpt2_session_reset(t.session);
    const std::vector<int32_t> top_3 = generate(t.session, {3}, 50, 1.0f, 3, 99);
    REQUIRE(with_default.size() == 50);
    CHECK(with_default == with_vocab);
    CHECK(with_default == unlimited);
    CHECK(with_default != top_3); // the comparison above can tell top_k settings apart
    CHECK(gpt2_generate_default_params().top_k == 200);
}

TEST_CASE("temperature that is negative, NaN or infinite is an invalid argument; NaN of either sign reads NaN") {
    TinySession t;
    for (float temperature : {-1.0f, -0.0001f, NAN, -NAN, INFINITY, -INFINITY}) {
        CAPTURE(temperature);
        gpt2_generate_params p = gpt2_generate_default_params();
        p.temperature = temperature;
        const int32_t prompt[] = {1};
        gpt2_error e{};
        CHECK(gpt2_generate(t.session, prompt, 1, &p, nullptr, 0, nullptr, &e) == GPT2_ERROR_INVALID_ARGUMENT);
        CHECK_ERROR(e, GPT2_ERROR_INVALID_ARGUMENT, std::isnan(temperature) ? "temperature is NaN;" : "temperature is");
        CHECK(has(e, "expected a finite number >= 0"));
        const float logits[2] = {0, 1};
        uint64_t rng = 1;
        int32_t token;
        CHECK(gpt2_sample(logits, 2, temperature, 0, &rng, &token, &e) == GPT2_ERROR_INVALID_ARGUMENT);
    }
    CHECK(gpt2_session_n_tokens(t.session) == 0);
}

struct StopAfter {
    int limit;
    int calls = 0;
    static int on_token(void* user, int32_t, const char*, size_t) {
        StopAfter* s = (StopAfter*)user;
        return ++s->calls >= s->limit;
    }
};

TEST_CASE("a callback that stops at the first token gets one call, and the token stays in the context") {
    TinySession t;
    StopAfter stop{1};
    gpt2_generate_params p = gpt2_generate_default_params();
    p.on_token = StopAfter::on_token;
    p.user = &stop;
    const int32_t prompt[] = {1, 2, 3};
    int32_t out[100];
    size_t n = 0;
    gpt2_error e{};
    CHECK(gpt2_generate(t.session, prompt, 3, &p, out, 100, &n, &e) == GPT2_OK);
    CHECK(stop.calls == 1);
    CHECK(n == 1);
    CHECK(gpt2_session_n_tokens(t.session) == 4);
}

TEST_CASE("generate after a stop continues the conversation exactly") {
    TinySession t;
    // Greedy, so "1 token, stop, then 4 more" must equal "5 tokens" in one call.
    StopAfter stop{1};
    gpt2_generate_params p = gpt2_generate_default_params();
    p.temperature = 0.0f;
    p.max_new_tokens = 5;
    p.on_token = StopAfter::on_token;
    p.user = &stop;
    const int32_t prompt[] = {4, 2};
    int32_t first[5], rest[5];
    size_t n_first = 0, n_rest = 0;
    REQUIRE(gpt2_generate(t.session, prompt, 2, &p, first, 5, &n_first, nullptr) == GPT2_OK);
    REQUIRE(n_first == 1);
    p.on_token = nullptr;
    p.max_new_tokens = 4;
    REQUIRE(gpt2_generate(t.session, nullptr, 0, &p, rest, 5, &n_rest, nullptr) == GPT2_OK);
    REQUIRE(n_rest == 4);
    CHECK(gpt2_session_n_tokens(t.session) == 7);
    const std::vector<int32_t> continued = {first[0], rest[0], rest[1], rest[2], rest[3]};

    gpt2_session_reset(t.session);
    const std::vector<int32_t> at_once = generate(t.session, {4, 2}, 5, 0.0f, 0, 0);
    CHECK(continued == at_once);
}

TEST_CASE("session parameters out of range are invalid arguments") {
    Loaded l(tiny_model().build());
    REQUIRE(l.model);
    gpt2_session* s = (gpt2_session*)&s;
    gpt2_error e{};
    gpt2_session_params p = gpt2_session_default_params();
    p.n_ctx = 17;
    CHECK(gpt2_session_create(l.model, &p, &s, &e) == GPT2_ERROR_INVALID_ARGUMENT);
    CHECK_ERROR(e, GPT2_ERROR_INVALID_ARGUMENT, "n_ctx is 17; expected 0 (the model's) to the model's context length 16");
    CHECK(s == nullptr);
    p = gpt2_session_default_params();
    p.n_threads = -1;
    CHECK(gpt2_session_create(l.model, &p, &s, &e) == GPT2_ERROR_INVALID_ARGUMENT);
    CHECK_ERROR(e, GPT2_ERROR_INVALID_ARGUMENT, "n_threads is -1");
}

TEST_CASE("a CUDA device in a CPU-only build is unsupported") {
    const std::vector<uint8_t> bytes = tiny_model().build();
    gpt2_model_params params = gpt2_model_default_params();
    params.device = GPT2_DEVICE_CUDA;
    gpt2_model* model = nullptr;
    gpt2_error e{};
    CHECK(gpt2_model_load_memory(bytes.data(), bytes.size(), &params, &model, &e) == GPT2_ERROR_UNSUPPORTED);
    CHECK(has(e, "device 1 is not available"));
}

TEST_CASE("text with a character outside a character vocabulary is BAD_TEXT naming the character") {
    TinySession t;
    gpt2_error e{};
    CHECK(gpt2_generate_text(t.session, "abz", nullptr, &e) == GPT2_ERROR_BAD_TEXT);
    CHECK_ERROR(e, GPT2_ERROR_BAD_TEXT, "character U+007A (\"z\") at byte offset 2 is not in the model's vocabulary");
    CHECK(gpt2_session_n_tokens(t.session) == 0);
}

TEST_CASE("a model without vocabulary refuses text with NO_VOCABULARY but takes ids") {
    TinyModelShape shape;
    shape.vocabulary = false;
    TinySession t(shape);
    gpt2_error e{};
    CHECK(gpt2_generate_text(t.session, "abc", nullptr, &e) == GPT2_ERROR_NO_VOCABULARY);
    CHECK(has(e, "no vocabulary"));
    int32_t ids[4];
    size_t n;
    CHECK(gpt2_tokenize(t.loaded.model, "abc", 3, 0, ids, 4, &n, &e) == GPT2_ERROR_NO_VOCABULARY);
    CHECK(generate(t.session, {1}, 3, 1.0f, 0, 1).size() == 3);
}

// ---- NULL pointers ----------------------------------------------------------------------------

TEST_CASE("NULL pointers to every API function are refused or ignored, never dereferenced") {
    Loaded l(tiny_model().build());
    REQUIRE(l.model);
    gpt2_session* s = nullptr;
    REQUIRE(gpt2_session_create(l.model, nullptr, &s, nullptr) == GPT2_OK);
    gpt2_error e{};
    const int32_t ids[] = {1, 2};
    int32_t out[4];
    size_t n = 0;
    double d;
    uint64_t rng = 0;
    const float logits[2] = {0, 1};
    char text[8];

    CHECK(std::string(gpt2_result_string(GPT2_ERROR_BAD_STATE)) == "bad session state");
    CHECK(std::string(gpt2_result_string((gpt2_result)16)) == "unknown result"); // a code from a newer version
    gpt2_model* m = nullptr;
    CHECK(gpt2_model_load_file("x.gguf", nullptr, nullptr, &e) == GPT2_ERROR_INVALID_ARGUMENT);
    CHECK(has(e, "out_model is NULL"));
    CHECK(gpt2_model_load_file(nullptr, nullptr, &m, nullptr) == GPT2_ERROR_INVALID_ARGUMENT); // err may be NULL
    CHECK(gpt2_model_load_memory(l.bytes.data(), l.bytes.size(), nullptr, nullptr, &e) == GPT2_ERROR_INVALID_ARGUMENT);
    CHECK(gpt2_model_load_memory(nullptr, 0, nullptr, &m, nullptr) == GPT2_ERROR_INVALID_ARGUMENT);
    gpt2_model_free(nullptr);
    CHECK(gpt2_model_get_info(nullptr).n_vocab == 0);

    CHECK(gpt2_tokenize(nullptr, "a", 1, 0, out, 4, &n, &e) == GPT2_ERROR_INVALID_ARGUMENT);
    CHECK(gpt2_tokenize(l.model, nullptr, 1, 0, out, 4, &n, &e) == GPT2_ERROR_INVALID_ARGUMENT);
    CHECK(gpt2_tokenize(l.model, "a", 1, 0, nullptr, 4, &n, &e) == GPT2_ERROR_INVALID_ARGUMENT);
    CHECK(gpt2_tokenize(l.model, "ab", 2, 0, nullptr, 0, &n, &e) == GPT2_OK); // sizing call
    CHECK(n == 2);
    CHECK(gpt2_tokenize(l.model, "", 0, 0, out, 4, &n, &e) == GPT2_OK);
    CHECK(n == 0);
    CHECK(gpt2_detokenize(nullptr, ids, 2, text, 8, &n, &e) == GPT2_ERROR_INVALID_ARGUMENT);
    CHECK(gpt2_detokenize(l.model, nullptr, 2, text, 8, &n, &e) == GPT2_ERROR_INVALID_ARGUMENT);
    CHECK(gpt2_detokenize(l.model, ids, 2, nullptr, 8, &n, &e) == GPT2_ERROR_INVALID_ARGUMENT);
    CHECK(gpt2_detokenize(l.model, ids, 2, nullptr, 0, &n, &e) == GPT2_OK); // sizing call
    CHECK(n == 2);

    gpt2_session* other = (gpt2_session*)&other;
    CHECK(gpt2_session_create(nullptr, nullptr, &other, &e) == GPT2_ERROR_INVALID_ARGUMENT);
    CHECK(other == nullptr);
    CHECK(gpt2_session_create(l.model, nullptr, nullptr, &e) == GPT2_ERROR_INVALID_ARGUMENT);
    gpt2_session_free(nullptr);
    gpt2_session_reset(nullptr);
    CHECK(gpt2_session_n_tokens(nullptr) == 0);
    CHECK(gpt2_session_logits(nullptr) == nullptr);
    CHECK(gpt2_session_logits(s) == nullptr); // before the first eval
    CHECK(gpt2_session_eval(nullptr, ids, 2, &e) == GPT2_ERROR_INVALID_ARGUMENT);
    CHECK(gpt2_session_eval(s, nullptr, 2, &e) == GPT2_ERROR_INVALID_ARGUMENT);
    CHECK(gpt2_score(nullptr, ids, 2, &d, &e) == GPT2_ERROR_INVALID_ARGUMENT);
    CHECK(gpt2_score(s, nullptr, 2, &d, &e) == GPT2_ERROR_INVALID_ARGUMENT);
    CHECK(gpt2_score(s, ids, 2, nullptr, &e) == GPT2_ERROR_INVALID_ARGUMENT);
    CHECK(gpt2_generate(nullptr, ids, 2, nullptr, out, 4, &n, &e) == GPT2_ERROR_INVALID_ARGUMENT);
    CHECK(gpt2_generate(s, nullptr, 2, nullptr, out, 4, &n, &e) == GPT2_ERROR_INVALID_ARGUMENT);
    CHECK(gpt2_generate_text(nullptr, "a", nullptr, &e) == GPT2_ERROR_INVALID_ARGUMENT);
    CHECK(gpt2_generate_text(s, nullptr, nullptr, &e) == GPT2_ERROR_INVALID_ARGUMENT);
    CHECK(gpt2_sample(nullptr, 2, 1.0f, 0, &rng, out, &e) == GPT2_ERROR_INVALID_ARGUMENT);
    CHECK(gpt2_sample(logits, 2, 1.0f, 0, nullptr, out, &e) == GPT2_ERROR_INVALID_ARGUMENT);
    CHECK(gpt2_sample(logits, 2, 1.0f, 0, &rng, nullptr, &e) == GPT2_ERROR_INVALID_ARGUMENT);
    CHECK(gpt2_sample(logits, 0, 1.0f, 0, &rng, out, &e) == GPT2_ERROR_INVALID_ARGUMENT);
    // Optional outputs may be NULL: params (defaults), out_tokens, n_generated, err.
    gpt2_generate_params p = gpt2_generate_default_params();
    p.max_new_tokens = 3;
    CHECK(gpt2_generate(s, ids, 2, &p, nullptr, 0, nullptr, nullptr) == GPT2_OK);
    CHECK(gpt2_generate(s, ids, 2, nullptr, nullptr, 0, nullptr, nullptr) == GPT2_OK);
    gpt2_session_free(s);
}

// ---- lifetime -----------------------------------------------------------------------------------

// Freeing a model before its sessions, and objects used after their free: tests/freed_objects.cpp.
