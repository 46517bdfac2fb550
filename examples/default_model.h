/* default_model.h - where the gpt2 program and the examples find the model the repo ships.
   C and C++. The build defines GPT2_INSTALLED_MODELS_DIR and GPT2_SOURCE_MODELS_DIR. */
#ifndef GPT2_EXAMPLES_DEFAULT_MODEL_H
#define GPT2_EXAMPLES_DEFAULT_MODEL_H
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__linux__)
#include <unistd.h>
#endif

#ifndef GPT2_DEFAULT_MODEL_NAME
#define GPT2_DEFAULT_MODEL_NAME "shakespeare_char_medium.gguf"
#endif

static inline int example_file_exists(const char* path) {
    FILE* f = fopen(path, "rb");
    if (f) fclose(f);
    return f != NULL;
}

/* The shipped model, looked for beside the program once installed (BIN/../share/gpt2/models),
   in the install prefix it was built for, then in the source tree it was built from.
   Returns NULL when none of them has it. */
static inline const char* example_default_model(const char* argv0) {
    static char path[4096];
    char exe[4096];
    snprintf(exe, sizeof exe, "%s", argv0 ? argv0 : "");
#if defined(__linux__)
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1); /* right even when run from PATH */
    if (n > 0) exe[n] = 0;
#endif
    const char* slash = strrchr(exe, '/');
    const char* backslash = strrchr(exe, '\\');
    if (backslash > slash) slash = backslash;
    snprintf(path, sizeof path, "%.*s/../share/gpt2/models/%s", slash ? (int)(slash - exe) : 1,
             slash ? exe : ".", GPT2_DEFAULT_MODEL_NAME);
    if (example_file_exists(path)) return path;
#ifdef GPT2_INSTALLED_MODELS_DIR
    if (example_file_exists(GPT2_INSTALLED_MODELS_DIR "/" GPT2_DEFAULT_MODEL_NAME))
        return GPT2_INSTALLED_MODELS_DIR "/" GPT2_DEFAULT_MODEL_NAME;
#endif
#ifdef GPT2_SOURCE_MODELS_DIR
    if (example_file_exists(GPT2_SOURCE_MODELS_DIR "/" GPT2_DEFAULT_MODEL_NAME))
        return GPT2_SOURCE_MODELS_DIR "/" GPT2_DEFAULT_MODEL_NAME;
#endif
    return NULL;
}

/* argv[1] when given, else the shipped model (NULL when not found). The examples take nothing
   else: -h or --help prints their usage and exits, another option is refused (before, `npc
   --help` tried to open a model file named "--help"). */
static inline const char* example_model_path(int argc, char** argv) {
    if (argc > 1 && argv[1][0] == '-') {
        const int help = strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0;
        if (!help) fprintf(stderr, "unknown option '%s'\n", argv[1]);
        fprintf(help ? stdout : stderr, "usage: %s [MODEL.gguf]\n  MODEL.gguf  the model to run (default: the one the repo ships)\n", argv[0]);
        exit(help ? 0 : 2);
    }
    return argc > 1 ? argv[1] : example_default_model(argv[0]);
}
#endif
