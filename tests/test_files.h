// Reading the tests' data files without exceptions (shared by the tests, the fuzz targets and
// the benchmarks): whole files, UTF-8 encoding, and GPT-2's encoder.json + vocab.bpe.
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

inline bool read_whole_file(const std::string& path, std::string* out) {
    FILE* f = std::fopen(path.c_str(), "rb");
    if (!f) return false;
    char buf[65536];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out->append(buf, n);
    std::fclose(f);
    return true;
}

inline void append_utf8(std::string* out, uint32_t cp) {
    if (cp < 0x80) {
        out->push_back((char)cp);
    } else if (cp < 0x800) {
        out->push_back((char)(0xC0 | (cp >> 6)));
        out->push_back((char)(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
        out->push_back((char)(0xE0 | (cp >> 12)));
        out->push_back((char)(0x80 | ((cp >> 6) & 0x3F)));
        out->push_back((char)(0x80 | (cp & 0x3F)));
    } else {
        out->push_back((char)(0xF0 | (cp >> 18)));
        out->push_back((char)(0x80 | ((cp >> 12) & 0x3F)));
        out->push_back((char)(0x80 | ((cp >> 6) & 0x3F)));
        out->push_back((char)(0x80 | (cp & 0x3F)));
    }
}

// GPT-2's vocabulary (tokens[id], byte-level alphabet) and merges (rank order) from OpenAI's
// files. encoder.json is one flat object {"token": id, ...} whose escapes are \" \\ \/ and \uXXXX.
inline bool load_gpt2_bpe_files(const std::string& dir, std::vector<std::string>* tokens, std::vector<std::string>* merges) {
    std::string json, bpe;
    if (!read_whole_file(dir + "/encoder.json", &json) || !read_whole_file(dir + "/vocab.bpe", &bpe)) return false;
    for (size_t i = json.find('"'); i != std::string::npos && i < json.size(); i = json.find('"', i)) {
        std::string key;
        for (i++; json[i] != '"'; i++) {
            if (json[i] != '\\') {
                key.push_back(json[i]);
            } else if (json[++i] == 'u') {
                append_utf8(&key, (uint32_t)std::stoul(json.substr(i + 1, 4), nullptr, 16));
                i += 4;
            } else {
                key.push_back(json[i]);
            }
        }
        size_t colon = json.find(':', i);
        size_t id = (size_t)std::stoul(json.substr(colon + 1, 12));
        if (tokens->size() <= id) tokens->resize(id + 1);
        (*tokens)[id] = key;
        i = json.find_first_of(",}", colon);
    }
    size_t pos = bpe.find('\n') + 1; // skip "#version: 0.2"
    while (pos < bpe.size()) {
        size_t end = bpe.find('\n', pos);
        if (end == std::string::npos) end = bpe.size();
        if (end > pos) merges->push_back(bpe.substr(pos, end - pos));
        pos = end + 1;
    }
    return true;
}
