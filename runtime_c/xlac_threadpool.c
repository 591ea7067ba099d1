/* xlac runtime: an optional pthreads pool for NAME_run_parallel. C99 + POSIX threads.
 *
 * Kept apart from xlac_runtime.c so builds without threads (bare-metal targets) never
 * see it: compile it with -pthread where a program wants the pool. Any other
 * parallel-for (pthreadpool, OpenMP, a task system) serves as well: fill an
 * xlac_threadpool with it (xlac_runtime.h).
 *
 * The caller's thread takes part in every parallel_for: a pool of N threads starts
 * N - 1 workers. Tasks are claimed one at a time under the pool's lock; the object
 * splits a step into at most ``threads`` coarse tasks, so the lock is taken a few
 * times per step, not per element.
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>

#include "xlac_runtime.h"

/* A model's steps follow one another within microseconds to a millisecond, so a
   thread that ran out of tasks first polls (yielding the core each time) for the next
   job or the job's end before it sleeps on a condition variable: a wake-up through
   the kernel costs tens of microseconds per step. The polls read the counters with
   the GCC/Clang atomic builtins; other compilers go straight to sleep. */
#if defined(__GNUC__) || defined(__clang__)
#define XLAC_POLLS 2000
#define XLAC_READ(x) __atomic_load_n(&(x), __ATOMIC_ACQUIRE)
#define XLAC_WRITE(x, v) __atomic_store_n(&(x), (v), __ATOMIC_RELEASE)
#else
#define XLAC_POLLS 0
#define XLAC_READ(x) (x)
#define XLAC_WRITE(x, v) ((x) = (v))
#endif

typedef struct xlac_pthreads_pool {
  xlac_threadpool api;        /* first: the public struct's address is the pool's */
  pthread_mutex_t call;       /* one parallel_for at a time */
  pthread_mutex_t lock;       /* guards the fields below */
  pthread_cond_t start;       /* a new job was posted, or the pool stops */
  pthread_cond_t finished;    /* the job's last task ended */
  void (*task)(void *, size_t);
  void *task_ctx;
  size_t n, next;             /* tasks of the job, the next to claim */
  unsigned long done;         /* tasks of the job that ended */
  unsigned long job;          /* counts jobs: a worker runs each job at most once */
  unsigned long stop;
  size_t workers;
  pthread_t *threads;
} xlac_pthreads_pool;

/* Claims and runs tasks of the current job until none is left; called and returns with
   the lock held. */
static void run_tasks(xlac_pthreads_pool *p) {
  while (p->next < p->n) {
    size_t i = p->next++;
    pthread_mutex_unlock(&p->lock);
    p->task(p->task_ctx, i);
    pthread_mutex_lock(&p->lock);
    XLAC_WRITE(p->done, p->done + 1);
    if (p->done == p->n) pthread_cond_signal(&p->finished);
  }
}

/* Polls, at most XLAC_POLLS times, until a job after ``seen`` is posted or the pool
   stops; called without the lock. */
static void poll_for_job(xlac_pthreads_pool *p, unsigned long seen) {
  int k;
  for (k = 0; k < XLAC_POLLS; k++) {
    if (XLAC_READ(p->job) != seen || XLAC_READ(p->stop)) return;
    sched_yield();
  }
}

static void *worker(void *arg) {
  xlac_pthreads_pool *p = (xlac_pthreads_pool *)arg;
  unsigned long seen = 0;
  pthread_mutex_lock(&p->lock);
  for (;;) {
    if (!p->stop && p->job == seen) {
      pthread_mutex_unlock(&p->lock);
      poll_for_job(p, seen);
      pthread_mutex_lock(&p->lock);
    }
    while (!p->stop && p->job == seen) pthread_cond_wait(&p->start, &p->lock);
    if (p->stop) break;
    seen = p->job;
    run_tasks(p);
  }
  pthread_mutex_unlock(&p->lock);
  return NULL;
}

static void parallel_for(void *ctx, void (*task)(void *, size_t), void *task_ctx, size_t n) {
  xlac_pthreads_pool *p = (xlac_pthreads_pool *)ctx;
  if (n == 0) return;
  if (n == 1 || p->workers == 0) {
    size_t i;
    for (i = 0; i < n; i++) task(task_ctx, i);
    return;
  }
  pthread_mutex_lock(&p->call);
  pthread_mutex_lock(&p->lock);
  p->task = task;
  p->task_ctx = task_ctx;
  p->n = n;
  p->next = 0;
  p->done = 0;
  XLAC_WRITE(p->job, p->job + 1);
  pthread_cond_broadcast(&p->start);
  run_tasks(p);
  if (p->done < p->n) {
    int k;
    pthread_mutex_unlock(&p->lock);
    for (k = 0; k < XLAC_POLLS && XLAC_READ(p->done) < p->n; k++) sched_yield();
    pthread_mutex_lock(&p->lock);
  }
  while (p->done < p->n) pthread_cond_wait(&p->finished, &p->lock);
  pthread_mutex_unlock(&p->lock);
  pthread_mutex_unlock(&p->call);
}

static void stop_workers(xlac_pthreads_pool *p, size_t started) {
  size_t k;
  pthread_mutex_lock(&p->lock);
  XLAC_WRITE(p->stop, 1);
  pthread_cond_broadcast(&p->start);
  pthread_mutex_unlock(&p->lock);
  for (k = 0; k < started; k++) pthread_join(p->threads[k], NULL);
}

xlac_threadpool *xlac_threadpool_create(size_t threads) {
  xlac_pthreads_pool *p;
  size_t k;
  if (threads == 0) return NULL;
  p = (xlac_pthreads_pool *)calloc(1, sizeof *p);
  if (p == NULL) return NULL;
  p->workers = threads - 1;
  p->threads = (pthread_t *)calloc(p->workers ? p->workers : 1, sizeof(pthread_t));
  if (p->threads == NULL) {
    free(p);
    return NULL;
  }
  pthread_mutex_init(&p->call, NULL);
  pthread_mutex_init(&p->lock, NULL);
  pthread_cond_init(&p->start, NULL);
  pthread_cond_init(&p->finished, NULL);
  p->api.parallel_for = parallel_for;
  p->api.ctx = p;
  p->api.threads = threads;
  for (k = 0; k < p->workers; k++) {
    if (pthread_create(&p->threads[k], NULL, worker, p) != 0) {
      stop_workers(p, k);
      p->workers = 0;
      xlac_threadpool_destroy(&p->api);
      return NULL;
    }
  }
  return &p->api;
}

void xlac_threadpool_destroy(xlac_threadpool *pool) {
  xlac_pthreads_pool *p = (xlac_pthreads_pool *)pool;
  if (p == NULL) return;
  stop_workers(p, p->workers);
  pthread_cond_destroy(&p->finished);
  pthread_cond_destroy(&p->start);
  pthread_mutex_destroy(&p->lock);
  pthread_mutex_destroy(&p->call);
  free(p->threads);
  free(p);
}
