/* Kernel dispatch: the one place that decides which implementation runs on this CPU. */

typedef void (*gpt2__matmul_fn)(float* y, const float* x, const gpt2__weight* W, const float* bias, int T, int64_t o_begin, int64_t o_end);

struct gpt2__kernels {
    const char* name;
    gpt2__matmul_fn matmul;
};

static gpt2__kernels gpt2__select_kernels() {
    return gpt2__kernels{"scalar", gpt2__matmul_scalar};
}

/* Chosen once per process; constant afterwards (thread-safe static initialisation). */
static const gpt2__kernels& gpt2__cpu_kernels() {
    static const gpt2__kernels kernels = gpt2__select_kernels();
    return kernels;
}
