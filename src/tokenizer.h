/* PLACEHOLDER until the tokenizer branch lands: character vocabularies only. */
struct gpt2__tokenizer {
    gpt2_tokenizer_kind kind = GPT2_TOKENIZER_NONE;
    int32_t eos = -1;
    gpt2__vector<std::string_view> tokens;
};
static gpt2_result gpt2__tokenizer_init_char(gpt2__tokenizer* tok, const std::string_view* chars, size_t n, gpt2_error*) {
    tok->kind = GPT2_TOKENIZER_CHAR;
    tok->tokens.assign(chars, chars + n);
    return GPT2_OK;
}
static gpt2_result gpt2__tokenizer_init_bpe(gpt2__tokenizer*, const std::string_view*, size_t, const std::string_view*, size_t, int32_t, gpt2_error* err) {
    return gpt2__fail(err, GPT2_ERROR_UNSUPPORTED, "BPE not yet");
}
static void gpt2__tokenizer_free(gpt2__tokenizer*) {}
static gpt2_result gpt2__tokenizer_encode(const gpt2__tokenizer* tok, const char* text, size_t len, bool, gpt2__vector<int32_t>* out, gpt2_error* err) {
    for (size_t i = 0; i < len; i++) {
        bool found = false;
        for (size_t id = 0; id < tok->tokens.size(); id++)
            if (tok->tokens[id] == std::string_view(text + i, 1)) { out->push_back((int32_t)id); found = true; break; }
        if (!found) return gpt2__fail(err, GPT2_ERROR_BAD_TEXT, "char not in vocab");
    }
    return GPT2_OK;
}
static std::string_view gpt2__tokenizer_token_bytes(const gpt2__tokenizer* tok, int32_t id) { return tok->tokens[(size_t)id]; }
static size_t gpt2__tokenizer_size(const gpt2__tokenizer* tok) { return tok->tokens.size(); }
struct gpt2__utf8_stream { gpt2__string held; };
static void gpt2__utf8_stream_push(gpt2__utf8_stream*, std::string_view bytes, gpt2__string* out) { out->append(bytes.data(), bytes.size()); }
static void gpt2__utf8_stream_flush(gpt2__utf8_stream*, gpt2__string*) {}
