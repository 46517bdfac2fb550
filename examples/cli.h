// Pieces of the gpt2 program: argument parsing, JSON output, finding the shipped model, the REPL.
#pragma once
#include "gpt2.h"
#include "default_model.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#if defined(_WIN32)
#include <io.h>
#define cli_isatty _isatty
#define cli_fileno _fileno
#else
#include <unistd.h>
#define cli_isatty isatty
#define cli_fileno fileno
#endif

struct CliModel {
    gpt2_model* model;
    ~CliModel() { gpt2_model_free(model); }
};
struct CliSession {
    gpt2_session* session;
    ~CliSession() { gpt2_session_free(session); }
};
struct CliGrammar {
    gpt2_grammar* grammar = nullptr;
    ~CliGrammar() { gpt2_grammar_free(grammar); }
};

enum class CliGrammarKind { gbnf, json_schema };

// Makes *out (freed first) from a GBNF grammar or a JSON Schema (`kind`; `compact`: no whitespace
// between JSON's tokens): the text, or the file at `path` when text is NULL; returns "" or what
// went wrong (*out unchanged then).
inline std::string cli_make_grammar(const gpt2_model* model, CliGrammarKind kind, const char* text, const std::string& path, gpt2_grammar** out,
                                    bool compact = false) {
    std::string source;
    if (text) {
        source = text;
    } else {
        FILE* f = std::fopen(path.c_str(), "rb");
        if (!f) return (kind == CliGrammarKind::gbnf ? "cannot open grammar file " : "cannot open JSON Schema file ") + path;
        char buffer[4096];
        for (size_t n; (n = std::fread(buffer, 1, sizeof buffer, f)) > 0;) source.append(buffer, n);
        std::fclose(f);
    }
    gpt2_grammar* grammar = nullptr;
    gpt2_error err;
    gpt2_json_schema_params schema = gpt2_json_schema_default_params();
    schema.compact = compact;
    const gpt2_result made = kind == CliGrammarKind::gbnf ? gpt2_grammar_from_gbnf(model, source.c_str(), nullptr, &grammar, &err)
                                                          : gpt2_grammar_from_json_schema(model, source.data(), source.size(), &schema, &grammar, &err);
    if (made != GPT2_OK) return (text ? "" : path + ": ") + err.message;
    gpt2_grammar_free(*out);
    *out = grammar;
    return "";
}

inline bool cli_parse_int(const std::string& s, long min, long max, int* out) {
    char* end = nullptr;
    errno = 0;
    long v = std::strtol(s.c_str(), &end, 10);
    if (s.empty() || *end || errno || v < min || v > max) return false;
    *out = (int)v;
    return true;
}

inline bool cli_parse_u64(const std::string& s, uint64_t* out) {
    char* end = nullptr;
    errno = 0;
    unsigned long long v = std::strtoull(s.c_str(), &end, 10);
    if (s.empty() || s[0] == '-' || *end || errno) return false;
    *out = v;
    return true;
}

// --choose's options (and the web page's): the text split at each '|'. An empty option between
// two bars is kept, so that gpt2_choose names it.
inline std::vector<std::string> cli_split_options(const std::string& text) {
    std::vector<std::string> options;
    for (size_t start = 0;;) {
        const size_t bar = text.find('|', start);
        options.push_back(text.substr(start, bar == std::string::npos ? std::string::npos : bar - start));
        if (bar == std::string::npos) return options;
        start = bar + 1;
    }
}

// Any number parses; the library itself rejects NaN, infinities and negatives with its own message.
inline bool cli_parse_float(const std::string& s, float* out) {
    char* end = nullptr;
    float v = std::strtof(s.c_str(), &end);
    if (s.empty() || *end) return false;
    *out = v;
    return true;
}

// A finite number from min to max.
inline bool cli_parse_float_in(const std::string& s, float min, float max, float* out) {
    float v;
    if (!cli_parse_float(s, &v) || !std::isfinite(v) || v < min || v > max) return false;
    *out = v;
    return true;
}

inline bool cli_parse_ids(const std::string& s, std::vector<int32_t>* out) {
    size_t start = 0;
    while (start <= s.size()) {
        size_t comma = s.find(',', start);
        std::string item = s.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
        int v;
        if (!cli_parse_int(item, INT32_MIN, INT32_MAX, &v)) return false;
        out->push_back(v);
        if (comma == std::string::npos) break;
        start = comma + 1;
    }
    return !out->empty();
}

inline std::string cli_json_ints(const std::vector<int32_t>& v) {
    std::string s = "[";
    for (size_t i = 0; i < v.size(); i++) s += (i ? "," : "") + std::to_string(v[i]);
    return s + "]";
}

// %.9g round-trips every float32 exactly.
inline std::string cli_json_floats(const std::vector<float>& v) {
    std::string s = "[";
    char buf[32];
    for (size_t i = 0; i < v.size(); i++) {
        std::snprintf(buf, sizeof buf, "%s%.9g", i ? "," : "", (double)v[i]);
        s += buf;
    }
    return s + "]";
}

// Length of the valid UTF-8 sequence at s[i], or 0 if it is not valid.
inline size_t cli_utf8_length(const std::string& s, size_t i) {
    const unsigned char c = (unsigned char)s[i];
    size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return 0;
    uint32_t cp = n == 1 ? c : c & (0x7f >> n);
    for (size_t k = 1; k < n; k++) {
        const unsigned char cc = (unsigned char)s[i + k];
        if ((cc & 0xc0) != 0x80) return 0;
        cp = (cp << 6) | (cc & 0x3f);
    }
    static const uint32_t min_cp[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min_cp[n] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
    return n;
}

// A JSON string; bytes that are not valid UTF-8 become U+FFFD (JSON text must be Unicode).
inline std::string cli_json_string(const std::string& s) {
    std::string out = "\"";
    for (size_t i = 0; i < s.size();) {
        const unsigned char c = (unsigned char)s[i];
        size_t n = cli_utf8_length(s, i);
        if (n == 0) {
            out += "\\ufffd";
            i++;
            continue;
        }
        if (c == '"') out += "\\\"";
        else if (c == '\\') out += "\\\\";
        else if (c == '\n') out += "\\n";
        else if (c == '\t') out += "\\t";
        else if (c == '\r') out += "\\r";
        else if (c < 0x20) {
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\u%04x", c);
            out += buf;
        } else {
            out.append(s, i, n);
        }
        i += n;
    }
    return out + "\"";
}

// The shipped model's path, or "" when it is not found.
inline std::string cli_default_model(const char* argv0) {
    const char* path = example_default_model(argv0);
    return path ? path : "";
}

// Writes the session's state (gpt2_session_save) to `path`. Returns "" or the complaint, naming the file.
inline std::string cli_save_state(const gpt2_session* session, const std::string& path) {
    gpt2_error err;
    size_t n = 0;
    if (gpt2_session_save(session, nullptr, 0, &n, &err) != GPT2_OK) return path + ": " + err.message;
    std::vector<char> bytes(n);
    if (gpt2_session_save(session, bytes.data(), bytes.size(), &n, &err) != GPT2_OK) return path + ": " + err.message;
    std::ofstream f(path, std::ios::binary);
    if (!f) return "cannot write " + path + ": " + std::strerror(errno);
    f.write(bytes.data(), (std::streamsize)n);
    f.close();
    if (!f) return "cannot write " + path;
    return "";
}

// Loads a state written by cli_save_state. Returns "" or the complaint, naming the file; on
// failure the session is as it was (gpt2_session_load checks everything first).
inline std::string cli_load_state(gpt2_session* session, const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) return "cannot open " + path + ": " + std::strerror(errno);
    std::vector<char> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    if (f.bad()) return "cannot read " + path;
    if (bytes.empty()) return path + ": the file is empty, not a saved session state";
    gpt2_error err;
    if (gpt2_session_load(session, bytes.data(), bytes.size(), &err) != GPT2_OK) return path + ": " + err.message;
    return "";
}

inline bool cli_stdin_is_terminal() { return cli_isatty(cli_fileno(stdin)) != 0; }

// The names of the .gguf files in folder `dir`, sorted; false when it cannot be read.
inline bool cli_list_gguf(const std::string& dir, std::vector<std::string>* names) {
    std::error_code error;
    std::filesystem::directory_iterator it(dir, error), end;
    if (error) return false;
    for (; it != end; it.increment(error)) {
        if (error) return false;
        if (it->path().extension() == ".gguf") names->push_back(it->path().filename().string());
    }
    std::sort(names->begin(), names->end());
    return true;
}

// n_ctx: the session's context (--ctx, or the model's).
int cli_repl(gpt2_model* model, gpt2_session* session, gpt2_generate_params params, int n_ctx);
