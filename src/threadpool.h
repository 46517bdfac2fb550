/* Worker threads of one session. Threads sleep on a condition variable between jobs, so an idle
   session costs the host application nothing; the calling thread does a share of every job. */

struct gpt2__pool {
    typedef void (*job_fn)(void* context, int thread_index, int n_threads);
    int n_threads = 1;
    std::vector<std::thread> workers;
    std::mutex mutex;
    std::condition_variable wake, done;
    uint64_t generation = 0; /* bumped for each job */
    int busy = 0;            /* workers still running the current job */
    bool stopping = false;
    job_fn job = nullptr;
    void* context = nullptr;
};

static void gpt2__pool_worker(gpt2__pool* pool, int index) {
    uint64_t seen = 0;
    for (;;) {
        gpt2__pool::job_fn job;
        void* context;
        {
            std::unique_lock<std::mutex> lock(pool->mutex);
            pool->wake.wait(lock, [&] { return pool->stopping || pool->generation != seen; });
            if (pool->stopping) return;
            seen = pool->generation;
            job = pool->job;
            context = pool->context;
        }
        job(context, index, pool->n_threads);
        std::lock_guard<std::mutex> lock(pool->mutex);
        if (--pool->busy == 0) pool->done.notify_one();
    }
}

/* Returns false when threads could not be started (the pool then runs everything inline). */
static bool gpt2__pool_start(gpt2__pool* pool, int n_threads) {
    pool->n_threads = 1;
#if defined(__cpp_exceptions)
    try {
#endif
        for (int i = 1; i < n_threads; i++) {
            pool->workers.emplace_back(gpt2__pool_worker, pool, i);
            pool->n_threads = i + 1;
        }
#if defined(__cpp_exceptions)
    } catch (...) {
        return false;
    }
#endif
    return true;
}

static void gpt2__pool_stop(gpt2__pool* pool) {
    {
        std::lock_guard<std::mutex> lock(pool->mutex);
        pool->stopping = true;
    }
    pool->wake.notify_all();
    for (std::thread& t : pool->workers) t.join();
    pool->workers.clear();
}

/* Runs job(context, i, n) on every thread i of the pool and returns when all are done. */
static void gpt2__pool_run(gpt2__pool* pool, gpt2__pool::job_fn job, void* context) {
    if (pool->n_threads > 1) {
        {
            std::lock_guard<std::mutex> lock(pool->mutex);
            pool->job = job;
            pool->context = context;
            pool->busy = pool->n_threads - 1;
            pool->generation++;
        }
        pool->wake.notify_all();
    }
    job(context, 0, pool->n_threads);
    if (pool->n_threads > 1) {
        std::unique_lock<std::mutex> lock(pool->mutex);
        pool->done.wait(lock, [&] { return pool->busy == 0; });
    }
}

/* Splits [0, n) into one contiguous range per thread and calls body(begin, end) on each. */
template <class Body>
static void gpt2__parallel_for(gpt2__pool* pool, int64_t n, const Body& body) {
    struct Job {
        const Body* body;
        int64_t n;
        static void run(void* context, int index, int n_threads) {
            const Job* job = (const Job*)context;
            const int64_t begin = job->n * index / n_threads, end = job->n * (index + 1) / n_threads;
            if (begin < end) (*job->body)(begin, end);
        }
    };
    Job job{&body, n};
    gpt2__pool_run(pool, Job::run, &job);
}
